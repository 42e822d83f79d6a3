// libibverbs, loaded with dlopen on first use, so that an addon using it
// loads on machines without RDMA and says why there is none. The types and
// the inline fast-path calls (ibv_post_send, ibv_post_recv, ibv_poll_cq,
// ibv_req_notify_cq, which go through the device's ops table) come from
// the real <infiniband/verbs.h>, so that the ABI is the library's own; an
// addon built where that header is missing still builds and reports so.
#pragma once

#include <dlfcn.h>

#include <cstring>
#include <string>

#include "tensorpipe/dynamic_library.h"

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define TENSORPIPE_HAVE_VERBS 1
#else
#define TENSORPIPE_HAVE_VERBS 0
#endif

namespace tensorpipe_js {
namespace ibv {

#if TENSORPIPE_HAVE_VERBS

struct Verbs {
  ibv_device** (*getDeviceList)(int*);
  void (*freeDeviceList)(ibv_device**);
  const char* (*getDeviceName)(ibv_device*);
  ibv_context* (*openDevice)(ibv_device*);
  int (*closeDevice)(ibv_context*);
  // The exported symbol behind verbs.h's ibv_query_port macro: it fills the
  // leading, historical part of ibv_port_attr, which is all we read.
  int (*queryPort)(ibv_context*, uint8_t, ibv_port_attr*);
  int (*queryGid)(ibv_context*, uint8_t, int, ibv_gid*);
  ibv_pd* (*allocPd)(ibv_context*);
  int (*deallocPd)(ibv_pd*);
  ibv_comp_channel* (*createCompChannel)(ibv_context*);
  int (*destroyCompChannel)(ibv_comp_channel*);
  ibv_cq* (*createCq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroyCq)(ibv_cq*);
  int (*getCqEvent)(ibv_comp_channel*, ibv_cq**, void**);
  void (*ackCqEvents)(ibv_cq*, unsigned);
  ibv_qp* (*createQp)(ibv_pd*, ibv_qp_init_attr*);
  int (*modifyQp)(ibv_qp*, ibv_qp_attr*, int);
  int (*destroyQp)(ibv_qp*);
  ibv_mr* (*regMr)(ibv_pd*, void*, size_t, int);
  int (*deregMr)(ibv_mr*);
  const char* (*wcStatusStr)(ibv_wc_status);
};

namespace detail {

template <typename F>
bool Resolve(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) *why = std::string("libibverbs.so.1 has no ") + name;
  return *out != nullptr;
}

struct Loaded {
  Verbs verbs;
  std::string why;
  bool ok = false;
};

inline Loaded Load() {
  Loaded l;
  // TENSORPIPE_IBVERBS names another build of the library.
  std::string error;
  void* lib = OpenLibrary("TENSORPIPE_IBVERBS", "libibverbs.so.1", &error);
  if (lib == nullptr) {
    l.why = "no libibverbs (rdma-core's libibverbs1 package): " + error;
    return l;
  }
  Verbs& v = l.verbs;
  std::string* w = &l.why;
  l.ok = Resolve(lib, "ibv_get_device_list", &v.getDeviceList, w) &&
         Resolve(lib, "ibv_free_device_list", &v.freeDeviceList, w) &&
         Resolve(lib, "ibv_get_device_name", &v.getDeviceName, w) &&
         Resolve(lib, "ibv_open_device", &v.openDevice, w) && Resolve(lib, "ibv_close_device", &v.closeDevice, w) &&
         Resolve(lib, "ibv_query_port", &v.queryPort, w) && Resolve(lib, "ibv_query_gid", &v.queryGid, w) &&
         Resolve(lib, "ibv_alloc_pd", &v.allocPd, w) && Resolve(lib, "ibv_dealloc_pd", &v.deallocPd, w) &&
         Resolve(lib, "ibv_create_comp_channel", &v.createCompChannel, w) &&
         Resolve(lib, "ibv_destroy_comp_channel", &v.destroyCompChannel, w) &&
         Resolve(lib, "ibv_create_cq", &v.createCq, w) && Resolve(lib, "ibv_destroy_cq", &v.destroyCq, w) &&
         Resolve(lib, "ibv_get_cq_event", &v.getCqEvent, w) && Resolve(lib, "ibv_ack_cq_events", &v.ackCqEvents, w) &&
         Resolve(lib, "ibv_create_qp", &v.createQp, w) && Resolve(lib, "ibv_modify_qp", &v.modifyQp, w) &&
         Resolve(lib, "ibv_destroy_qp", &v.destroyQp, w) && Resolve(lib, "ibv_reg_mr", &v.regMr, w) &&
         Resolve(lib, "ibv_dereg_mr", &v.deregMr, w) && Resolve(lib, "ibv_wc_status_str", &v.wcStatusStr, w);
  return l;
}

}  // namespace detail

// The library, loaded once per process; nullptr with *why set where it is
// missing or too old.
inline const Verbs* GetVerbs(std::string* why) {
  static const detail::Loaded loaded = detail::Load();
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return &loaded.verbs;
}

// What verbs.h's ibv_query_port does, without a link-time reference to the
// library: the provider's extended call where it has one.
inline int QueryPort(const Verbs& v, ibv_context* context, uint8_t port, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  verbs_context* vctx = verbs_get_ctx_op(context, query_port);
  if (vctx != nullptr) return vctx->query_port(context, port, attr, sizeof(*attr));
  return v.queryPort(context, port, attr);
}

#else

struct Verbs;

inline const Verbs* GetVerbs(std::string* why) {
  if (why) {
    *why =
        "this addon was built without <infiniband/verbs.h>: install rdma-core's headers (apt-get install "
        "libibverbs-dev) and rebuild it";
  }
  return nullptr;
}

#endif

}  // namespace ibv
}  // namespace tensorpipe_js
