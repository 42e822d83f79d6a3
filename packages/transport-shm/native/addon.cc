// The shm transport's native half: abstract Unix sockets to meet, memfd
// rings to move bytes, the sockets to wake up, all on Node's own loop.
#include <fcntl.h>
#include <napi.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <string>

#include "shm_connection.h"
#include "shm_listener.h"
#include "tensorpipe/addon_data.h"
#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {
namespace {

// connect(name, options, callback(err, connection)): the callback follows
// the handshake. Nobody listening throws ECONNREFUSED at once.
Napi::Value Connect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name = info[0].As<Napi::String>().Utf8Value();
  struct sockaddr_un addr;
  if (name.empty() || name.size() > sizeof(addr.sun_path) - 2) {
    throw CodedError(env, "ERR_TP_INVALID_ARG", "shm address must have 1 to 106 bytes");
  }
  socklen_t len = AbstractAddress(name, &addr);
  // Everything that calls into JS comes before the socket exists: a worker
  // being terminated fails such calls, and the socket would leak.
  ShmOptions options = OptionsFrom(info[1]);
  Napi::Function onReady = info[2].As<Napi::Function>();
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (sock < 0) throw UvError(env, uv_translate_sys_error(errno), "socket");
  int r;
  do {
    r = connect(sock, reinterpret_cast<struct sockaddr*>(&addr), len);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    // A full backlog (EAGAIN) turns nobody away for good: say refused.
    int err = errno == EAGAIN ? ECONNREFUSED : errno;
    ::close(sock);
    throw UvError(env, uv_translate_sys_error(err), "connect");
  }
  return ShmConnection::Create(env, sock, options, onReady);
}

// Whether this process can make what a connection needs; the reason if not.
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = memfd_create("tensorpipe-js-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Napi::String::New(env, std::string("memfd_create failed: ") + strerror(errno));
  if (ftruncate(fd, 4096) != 0 || fcntl(fd, F_ADD_SEALS, kRingSeals) != 0) {
    int err = errno;
    ::close(fd);
    return Napi::String::New(env, std::string("cannot size and seal shared memory: ") + strerror(err));
  }
  bool mapped = [&] {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return false;
    munmap(p, 4096);
    return true;
  }();
  int err = errno;
  ::close(fd);
  if (!mapped) return Napi::String::New(env, std::string("cannot map shared memory: ") + strerror(err));
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return Napi::String::New(env, std::string("Unix sockets unavailable: ") + strerror(errno));
  ::close(sock);
  return env.Null();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  AddonData* data = AddonEnv::Install<ShmEnv>(env);
  Napi::Function connection = ShmConnection::Define(env);
  data->connectionConstructor = Napi::Persistent(connection);
  exports.Set("ShmConnection", connection);
  exports.Set("ShmListener", ShmListener::Define(env));
  exports.Set("connect", Napi::Function::New(env, Connect, "connect"));
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  return exports;
}

}  // namespace
}  // namespace tensorpipe_js

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tensorpipe_js::Init(env, exports); }

NODE_API_MODULE(tensorpipe_shm, InitAddon)
