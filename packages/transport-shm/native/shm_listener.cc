#include "shm_listener.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "tensorpipe/addon_data.h"
#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {

socklen_t AbstractAddress(const std::string& name, struct sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + name.size());
}

ShmOptions OptionsFrom(Napi::Value value) {
  ShmOptions o;
  if (!value.IsObject()) return o;
  Napi::Object obj = value.As<Napi::Object>();
  if (obj.Has("ringSize")) o.ringSize = static_cast<uint64_t>(obj.Get("ringSize").As<Napi::Number>().DoubleValue());
  if (obj.Has("allowOtherUsers")) o.allowOtherUsers = obj.Get("allowOtherUsers").ToBoolean();
  if (obj.Has("spinMicros")) o.spinMicros = static_cast<uint64_t>(obj.Get("spinMicros").As<Napi::Number>().DoubleValue());
  return o;
}

Napi::Function ShmListener::Define(Napi::Env env) {
  return DefineClass(env, "ShmListener",
                     {
                         InstanceMethod<&ShmListener::Address>("address"),
                         InstanceMethod<&ShmListener::Close>("close"),
                     });
}

// new ShmListener(name, options, onConnection(err, connection))
ShmListener::ShmListener(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ShmListener>(info) {
  Napi::Env env = info.Env();
  name_ = info[0].As<Napi::String>().Utf8Value();
  options_ = OptionsFrom(info[1]);
  struct sockaddr_un addr;
  if (name_.empty() || name_.size() > sizeof(addr.sun_path) - 2) {
    throw CodedError(env, "ERR_TP_INVALID_ARG", "shm listener name must have 1 to 106 bytes");
  }
  socklen_t len = AbstractAddress(name_, &addr);
  // What may call into JS comes first: a worker being terminated fails such
  // calls, and a socket made before would leak.
  onConnection_ = Napi::Persistent(info[2].As<Napi::Function>());
  asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.ShmListener", info.This().As<Napi::Object>());
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw UvError(env, uv_translate_sys_error(errno), "socket");
  if (bind(fd_, reinterpret_cast<struct sockaddr*>(&addr), len) != 0 || listen(fd_, SOMAXCONN) != 0) {
    int err = errno;
    ::close(fd_);
    throw UvError(env, uv_translate_sys_error(err), "listen");
  }
  poll_ = new uv_poll_t;
  poll_->data = this;
  uv_poll_init(GetAddonData(env)->loop(), poll_, fd_);
  uv_poll_start(poll_, UV_READABLE, OnReadable);
  Ref();
  LifecycleOf(env).Own(this);
}

void ShmListener::OnReadable(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<ShmListener*>(handle->data);
  Napi::Env env = self->Env();
  FromLoop(env, [&] {
    for (;;) {
      int sock = accept4(self->fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (sock < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        InvokeCallback(self->onConnection_, *self->asyncContext_,
                       {UvError(env, uv_translate_sys_error(errno), "accept").Value()});
        return;
      }
      Napi::HandleScope scope(env);
      try {
        ShmConnection::Create(env, sock, self->options_, self->onConnection_.Value());
      } catch (const Napi::Error& e) {
        InvokeCallback(self->onConnection_, *self->asyncContext_, {e.Value()});
      }
      if (self->fd_ < 0 || !CanCallIntoJs(env)) return;
    }
  });
}

Napi::Value ShmListener::Address(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), name_); }

Napi::Value ShmListener::Close(const Napi::CallbackInfo& info) {
  CloseSocket();
  return info.Env().Undefined();
}

void ShmListener::CloseSocket() {
  if (poll_ == nullptr) return;
  uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) {
    auto* self = static_cast<ShmListener*>(h->data);
    delete reinterpret_cast<uv_poll_t*>(h);
    ::close(self->fd_);
    self->fd_ = -1;
    LifecycleOf(self->Env()).Released(self);
    self->Unref();
  });
  poll_ = nullptr;
}

}  // namespace tensorpipe_js
