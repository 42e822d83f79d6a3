// The cuda-gdr channel's native half: InfiniBand (or RoCE) verbs through
// libibverbs loaded with dlopen (ibverbs.h). probe() lists the RDMA devices
// and their ports; an IbvNic is one opened device port with its protection
// domain and completion queue, whose completion channel is polled on
// Node's own loop (no thread of its own). Queue pairs are reliable
// connections; sends and receives go straight from and into registered GPU
// memory (GPUDirect RDMA), and the control plane (which queue pair, which
// chunk, when) lives in TypeScript.
#include <fcntl.h>
#include <napi.h>
#include <uv.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "tensorpipe/ibverbs.h"
#include "tensorpipe/napi_helpers.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {
namespace {

#if TENSORPIPE_HAVE_VERBS

// An Error for a failed verbs call: verbs calls report errno (directly or
// through errno), mirrored as Node does.
Napi::Error VerbsError(Napi::Env env, int err, const char* call) {
  return UvError(env, uv_translate_sys_error(err != 0 ? err : EIO), call);
}

const char* PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active-defer";
    default:
      return "unknown";
  }
}

const char* LinkLayerName(uint8_t l) {
  return l == IBV_LINK_LAYER_ETHERNET ? "ethernet" : l == IBV_LINK_LAYER_INFINIBAND ? "infiniband" : "unspecified";
}

// probe() -> { reason: string | null, devices: [{ name, ports: [{ port,
// state, linkLayer, lid, activeMtu, maxMsgSize }] }] }
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  Napi::Array devices = Napi::Array::New(env);
  out.Set("devices", devices);
  out.Set("reason", env.Null());
  std::string why;
  const ibv::Verbs* v = ibv::GetVerbs(&why);
  if (v == nullptr) {
    out.Set("reason", Napi::String::New(env, why));
    return out;
  }
  int count = 0;
  ibv_device** list = v->getDeviceList(&count);
  if (list == nullptr) {
    int err = errno;
    std::string why = std::string("ibv_get_device_list: ") + strerror(err);
    if (err == ENOSYS) why = "this kernel has no RDMA support (" + why + ")";
    out.Set("reason", Napi::String::New(env, why));
    return out;
  }
  for (int i = 0; i < count; i++) {
    Napi::Object d = Napi::Object::New(env);
    d.Set("name", Napi::String::New(env, v->getDeviceName(list[i])));
    Napi::Array ports = Napi::Array::New(env);
    d.Set("ports", ports);
    ibv_context* ctx = v->openDevice(list[i]);
    if (ctx == nullptr) {
      d.Set("error", Napi::String::New(env, std::string("ibv_open_device: ") + strerror(errno)));
    } else {
      // Ports are numbered from 1; the first that does not answer ends them.
      for (uint8_t p = 1; p < 255; p++) {
        ibv_port_attr attr;
        if (ibv::QueryPort(*v, ctx, p, &attr) != 0) break;
        Napi::Object o = Napi::Object::New(env);
        o.Set("port", Napi::Number::New(env, p));
        o.Set("state", Napi::String::New(env, PortStateName(attr.state)));
        o.Set("linkLayer", Napi::String::New(env, LinkLayerName(attr.link_layer)));
        o.Set("lid", Napi::Number::New(env, attr.lid));
        o.Set("activeMtu", Napi::Number::New(env, attr.active_mtu));
        o.Set("maxMsgSize", Napi::Number::New(env, attr.max_msg_sz));
        ports.Set(ports.Length(), o);
      }
      v->closeDevice(ctx);
    }
    devices.Set(devices.Length(), d);
  }
  v->freeDeviceList(list);
  return out;
}

constexpr int kPolledAtOnce = 64;

class IbvNic : public Napi::ObjectWrap<IbvNic>, public EnvResource {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "IbvNic",
                       {
                           InstanceMethod<&IbvNic::Address>("address"),
                           InstanceMethod<&IbvNic::CreateQueuePair>("createQueuePair"),
                           InstanceMethod<&IbvNic::ConnectQueuePair>("connectQueuePair"),
                           InstanceMethod<&IbvNic::DestroyQueuePair>("destroyQueuePair"),
                           InstanceMethod<&IbvNic::RegisterMemory>("registerMemory"),
                           InstanceMethod<&IbvNic::DeregisterMemory>("deregisterMemory"),
                           InstanceMethod<&IbvNic::PostSend>("postSend"),
                           InstanceMethod<&IbvNic::PostRecv>("postRecv"),
                           InstanceMethod<&IbvNic::StatusText>("statusText"),
                           InstanceMethod<&IbvNic::Close>("close"),
                       });
  }

  // new IbvNic(deviceName, port, gidIndex, completionQueueSize,
  //            onCompletions(wrIds: number[], statuses: number[])): status 0
  //            is success, any other an ibv_wc_status (statusText() names
  //            it). Every queue pair completes into the one queue: nic.ts
  //            keeps what is outstanding within it.
  explicit IbvNic(const Napi::CallbackInfo& info) : Napi::ObjectWrap<IbvNic>(info) {
    Napi::Env env = info.Env();
    if (info.Length() != 5 || !info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber() ||
        !info[3].IsNumber() || !info[4].IsFunction()) {
      throw Napi::TypeError::New(env, "IbvNic(deviceName, port, gidIndex, completionQueueSize, onCompletions)");
    }
    std::string why;
    v_ = ibv::GetVerbs(&why);
    if (v_ == nullptr) throw CodedError(env, "ERR_TP_NOT_VIABLE", why);
    std::string name = info[0].As<Napi::String>();
    port_ = static_cast<uint8_t>(info[1].As<Napi::Number>().Uint32Value());
    gidIndex_ = info[2].As<Napi::Number>().Int32Value();
    Open(env, name, info[3].As<Napi::Number>().Int32Value());
    onCompletions_ = Napi::Persistent(info[4].As<Napi::Function>());
    asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.cudaGdr.completions");
    uv_loop_t* loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    int r = uv_poll_init(loop, poll_.Make(this), channel_->fd);
    if (r == 0) r = uv_poll_start(poll_.get(), UV_READABLE, OnReadable);
    if (r != 0) {
      Release();
      throw UvError(env, r, "uv_poll_start");
    }
    // Pipes keep the loop alive while they have work; an idle NIC does not.
    poll_.Unref();
    Ref();
    LifecycleOf(env).Own(this);
  }

  // The device, its queue pairs and registrations, and the poll on Node's
  // loop go with the environment.
  void Teardown() override { Shutdown(); }

  ~IbvNic() override { Release(); }

 private:
  void Open(Napi::Env env, const std::string& name, int cqSize) {
    int count = 0;
    ibv_device** list = v_->getDeviceList(&count);
    if (list == nullptr) throw VerbsError(env, errno, "ibv_get_device_list");
    for (int i = 0; i < count && ctx_ == nullptr; i++) {
      if (name == v_->getDeviceName(list[i])) {
        ctx_ = v_->openDevice(list[i]);
        if (ctx_ == nullptr) {
          int err = errno;
          v_->freeDeviceList(list);
          throw VerbsError(env, err, "ibv_open_device");
        }
      }
    }
    v_->freeDeviceList(list);
    if (ctx_ == nullptr) throw CodedError(env, "ERR_TP_NOT_VIABLE", "no RDMA device named " + name);
    auto fail = [&](const char* call) {
      int err = errno;
      Release();
      throw VerbsError(env, err, call);
    };
    if (ibv::QueryPort(*v_, ctx_, port_, &portAttr_) != 0) fail("ibv_query_port");
    if (v_->queryGid(ctx_, port_, gidIndex_, &gid_) != 0) fail("ibv_query_gid");
    if ((pd_ = v_->allocPd(ctx_)) == nullptr) fail("ibv_alloc_pd");
    if ((channel_ = v_->createCompChannel(ctx_)) == nullptr) fail("ibv_create_comp_channel");
    int flags = fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) fail("fcntl");
    if ((cq_ = v_->createCq(ctx_, cqSize, nullptr, channel_, 0)) == nullptr) fail("ibv_create_cq");
    if (ibv_req_notify_cq(cq_, 0) != 0) fail("ibv_req_notify_cq");
  }

  // Frees everything in reverse order; safe to call twice.
  void Release() {
    // Closing the poll stops it.
    poll_.Close();
    for (auto& [id, qp] : qps_) {
      ibv_qp_attr attr = {};
      attr.qp_state = IBV_QPS_ERR;
      v_->modifyQp(qp, &attr, IBV_QP_STATE);
      v_->destroyQp(qp);
    }
    qps_.clear();
    for (auto& [id, mr] : mrs_) v_->deregMr(mr);
    mrs_.clear();
    if (cq_ != nullptr) {
      if (unackedEvents_ > 0) v_->ackCqEvents(cq_, unackedEvents_);
      v_->destroyCq(cq_);
      cq_ = nullptr;
    }
    if (channel_ != nullptr) v_->destroyCompChannel(channel_);
    channel_ = nullptr;
    if (pd_ != nullptr) v_->deallocPd(pd_);
    pd_ = nullptr;
    if (ctx_ != nullptr) v_->closeDevice(ctx_);
    ctx_ = nullptr;
  }

  void NeedOpen(Napi::Env env) {
    if (ctx_ == nullptr) throw CodedError(env, "ERR_TP_CLOSED", "the RDMA device was closed");
  }

  // address() -> { port, gidIndex, lid, gid: Buffer(16), mtu, maxMsgSize, linkLayer }
  Napi::Value Address(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    NeedOpen(env);
    Napi::Object o = Napi::Object::New(env);
    o.Set("port", Napi::Number::New(env, port_));
    o.Set("gidIndex", Napi::Number::New(env, gidIndex_));
    o.Set("lid", Napi::Number::New(env, portAttr_.lid));
    o.Set("gid", Napi::Buffer<uint8_t>::Copy(env, gid_.raw, sizeof(gid_.raw)));
    o.Set("mtu", Napi::Number::New(env, portAttr_.active_mtu));
    o.Set("maxMsgSize", Napi::Number::New(env, portAttr_.max_msg_sz));
    o.Set("linkLayer", Napi::String::New(env, LinkLayerName(portAttr_.link_layer)));
    return o;
  }

  ibv_qp* QpArg(const Napi::Value& v) {
    auto it = qps_.find(v.As<Napi::Number>().Uint32Value());
    if (it == qps_.end()) throw CodedError(v.Env(), "ERR_TP_INVALID_ARG", "no such queue pair");
    return it->second;
  }

  // createQueuePair(maxSends, maxRecvs) -> { id, qpn }: a reliable
  // connection in the INIT state, every send signalled.
  Napi::Value CreateQueuePair(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    NeedOpen(env);
    ibv_qp_init_attr init = {};
    init.qp_type = IBV_QPT_RC;
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.cap.max_send_wr = info[0].As<Napi::Number>().Uint32Value();
    init.cap.max_recv_wr = info[1].As<Napi::Number>().Uint32Value();
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.sq_sig_all = 1;
    ibv_qp* qp = v_->createQp(pd_, &init);
    if (qp == nullptr) throw VerbsError(env, errno, "ibv_create_qp");
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port_;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    int r = v_->modifyQp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (r != 0) {
      v_->destroyQp(qp);
      throw VerbsError(env, r, "ibv_modify_qp(INIT)");
    }
    uint32_t id = nextQp_++;
    qps_[id] = qp;
    Napi::Object o = Napi::Object::New(env);
    o.Set("id", Napi::Number::New(env, id));
    o.Set("qpn", Napi::Number::New(env, qp->qp_num));
    return o;
  }

  // connectQueuePair(id, { lid, gid: Uint8Array(16), qpn, mtu }): to
  // ready-to-receive, then ready-to-send, towards the peer's queue pair.
  // Packet sequence numbers start at 0 on both sides; retries as upstream
  // TensorPipe sets them (receiver-not-ready retried for ever).
  Napi::Value ConnectQueuePair(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    NeedOpen(env);
    ibv_qp* qp = QpArg(info[0]);
    Napi::Object remote = info[1].As<Napi::Object>();
    ByteSpan gid;
    if (!GetBytes(remote.Get("gid"), &gid) || gid.length != 16) throw Napi::TypeError::New(env, "gid must be 16 bytes");
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_RTR;
    uint16_t lid = static_cast<uint16_t>(remote.Get("lid").As<Napi::Number>().Uint32Value());
    if (lid != 0) {
      attr.ah_attr.dlid = lid;
    } else {
      // RoCE: no LIDs, routed by GID.
      attr.ah_attr.is_global = 1;
      std::memcpy(attr.ah_attr.grh.dgid.raw, gid.data, 16);
      attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gidIndex_);
      attr.ah_attr.grh.hop_limit = 1;
    }
    attr.ah_attr.port_num = port_;
    uint32_t mtu = remote.Get("mtu").As<Napi::Number>().Uint32Value();
    attr.path_mtu = static_cast<ibv_mtu>(std::min<uint32_t>(mtu, portAttr_.active_mtu));
    attr.dest_qp_num = remote.Get("qpn").As<Napi::Number>().Uint32Value();
    attr.rq_psn = 0;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 20;
    int r = v_->modifyQp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (r != 0) throw VerbsError(env, r, "ibv_modify_qp(RTR)");
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    r = v_->modifyQp(
        qp, &attr,
        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    if (r != 0) throw VerbsError(env, r, "ibv_modify_qp(RTS)");
    return env.Undefined();
  }

  // destroyQueuePair(id): to the error state (what was posted completes as
  // flushed), then gone.
  Napi::Value DestroyQueuePair(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (ctx_ == nullptr) return env.Undefined();
    auto it = qps_.find(info[0].As<Napi::Number>().Uint32Value());
    if (it == qps_.end()) return env.Undefined();
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_ERR;
    v_->modifyQp(it->second, &attr, IBV_QP_STATE);
    v_->destroyQp(it->second);
    qps_.erase(it);
    return env.Undefined();
  }

  // registerMemory(ptr: bigint, length) -> { id, lkey }: GPU memory (through
  // the nvidia-peermem kernel module) or host memory, for local writes.
  Napi::Value RegisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    NeedOpen(env);
    uint64_t ptr = BigIntArg(info[0], "ptr");
    size_t length = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
    ibv_mr* mr = v_->regMr(pd_, reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)), length, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) throw VerbsError(env, errno, "ibv_reg_mr");
    uint32_t id = nextMr_++;
    mrs_[id] = mr;
    Napi::Object o = Napi::Object::New(env);
    o.Set("id", Napi::Number::New(env, id));
    o.Set("lkey", Napi::Number::New(env, mr->lkey));
    return o;
  }

  Napi::Value DeregisterMemory(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto it = mrs_.find(info[0].As<Napi::Number>().Uint32Value());
    if (ctx_ == nullptr || it == mrs_.end()) return env.Undefined();
    int r = v_->deregMr(it->second);
    mrs_.erase(it);
    if (r != 0) throw VerbsError(env, r, "ibv_dereg_mr");
    return env.Undefined();
  }

  // postSend(qp, ptr: bigint, length, lkey, wrId)
  Napi::Value PostSend(const Napi::CallbackInfo& info) { return Post<ibv_send_wr>(info); }

  // postRecv(qp, ptr: bigint, length, lkey, wrId)
  Napi::Value PostRecv(const Napi::CallbackInfo& info) { return Post<ibv_recv_wr>(info); }

  // One work request of one scatter-gather entry, a send or a receive.
  template <typename WorkRequest>
  Napi::Value Post(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    NeedOpen(env);
    ibv_qp* qp = QpArg(info[0]);
    ibv_sge sge = {};
    sge.addr = BigIntArg(info[1], "addr");
    sge.length = info[2].As<Napi::Number>().Uint32Value();
    sge.lkey = info[3].As<Napi::Number>().Uint32Value();
    WorkRequest wr = {};
    wr.wr_id = static_cast<uint64_t>(info[4].As<Napi::Number>().DoubleValue());
    wr.sg_list = &sge;
    wr.num_sge = 1;
    WorkRequest* bad = nullptr;
    int r;
    if constexpr (std::is_same_v<WorkRequest, ibv_send_wr>) {
      wr.opcode = IBV_WR_SEND;
      r = ibv_post_send(qp, &wr, &bad);
    } else {
      r = ibv_post_recv(qp, &wr, &bad);
    }
    if (r != 0) throw VerbsError(env, r, std::is_same_v<WorkRequest, ibv_send_wr> ? "ibv_post_send" : "ibv_post_recv");
    return env.Undefined();
  }

  Napi::Value StatusText(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(),
                             v_->wcStatusStr(static_cast<ibv_wc_status>(info[0].As<Napi::Number>().Int32Value())));
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown();
    return info.Env().Undefined();
  }

  void Shutdown() {
    if (ctx_ == nullptr) return;
    Release();
    LifecycleOf(Env()).Released(this);
    Unref();
  }

  static void OnReadable(uv_poll_t* handle, int status, int events) {
    auto* self = static_cast<IbvNic*>(handle->data);
    FromLoop(self->Env(), [&] { self->Drain(); });
  }

  // A completion event: acknowledged (in batches), notification re-armed
  // before draining so that nothing that completes meanwhile is missed.
  void Drain() {
    ibv_cq* cq = nullptr;
    void* unused = nullptr;
    while (v_->getCqEvent(channel_, &cq, &unused) == 0) {
      if (++unackedEvents_ >= 64) {
        v_->ackCqEvents(cq_, unackedEvents_);
        unackedEvents_ = 0;
      }
    }
    ibv_req_notify_cq(cq_, 0);
    Napi::Env env = onCompletions_.Env();
    Napi::HandleScope scope(env);
    Napi::Array ids = Napi::Array::New(env);
    Napi::Array statuses = Napi::Array::New(env);
    ibv_wc wcs[kPolledAtOnce];
    int n;
    while ((n = ibv_poll_cq(cq_, kPolledAtOnce, wcs)) > 0) {
      for (int i = 0; i < n; i++) {
        uint32_t at = ids.Length();
        ids.Set(at, Napi::Number::New(env, static_cast<double>(wcs[i].wr_id)));
        statuses.Set(at, Napi::Number::New(env, wcs[i].status));
      }
    }
    if (ids.Length() > 0) InvokeCallback(onCompletions_, *asyncContext_, {ids, statuses});
  }

  const ibv::Verbs* v_ = nullptr;
  uint8_t port_ = 1;
  int gidIndex_ = 0;
  ibv_port_attr portAttr_ = {};
  ibv_gid gid_ = {};
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  unsigned unackedEvents_ = 0;
  UvHandle<uv_poll_t> poll_;
  std::map<uint32_t, ibv_qp*> qps_;
  std::map<uint32_t, ibv_mr*> mrs_;
  uint32_t nextQp_ = 1;
  uint32_t nextMr_ = 1;
  Napi::FunctionReference onCompletions_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
};

#else

Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string why;
  ibv::GetVerbs(&why);
  Napi::Object out = Napi::Object::New(env);
  out.Set("devices", Napi::Array::New(env));
  out.Set("reason", Napi::String::New(env, why));
  return out;
}

#endif

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  AddonEnv::Install<AddonEnv>(env);
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
#if TENSORPIPE_HAVE_VERBS
  exports.Set("IbvNic", IbvNic::Define(env));
#endif
  return exports;
}

}  // namespace
}  // namespace tensorpipe_js

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tensorpipe_js::Init(env, exports); }

NODE_API_MODULE(tensorpipe_cuda_gdr, InitAddon)
