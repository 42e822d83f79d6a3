#include "uv_listener.h"

#include <string>

#include "tensorpipe/addon_data.h"
#include "tensorpipe/descriptor_shortage.h"
#include "tensorpipe/napi_helpers.h"
#include "uv_connection.h"

namespace tensorpipe_js {

Napi::Function UvListener::Define(Napi::Env env) {
  return DefineClass(env, "UvListener",
                     {
                         InstanceMethod<&UvListener::Address>("address"),
                         InstanceMethod<&UvListener::Close>("close"),
                     });
}

// new UvListener(host: string, port: number, peerTimeoutMs: number,
// onConnection(err, connection)) binds and listens at once; bind errors
// throw with their errno code.
UvListener::UvListener(const Napi::CallbackInfo& info) : Napi::ObjectWrap<UvListener>(info) {
  Napi::Env env = info.Env();
  std::string host = info[0].As<Napi::String>();
  int port = info[1].As<Napi::Number>().Int32Value();
  struct sockaddr_storage addr;
  int r = ParseIpAddress(host, port, &addr);
  if (r < 0) throw UvError(env, r, "listen (address)");
  peerTimeoutMs_ = info[2].As<Napi::Number>().Uint32Value();
  onConnection_ = Napi::Persistent(info[3].As<Napi::Function>());
  asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.UvListener", info.This().As<Napi::Object>());
  uv_tcp_init(GetAddonData(env)->loop(), handle_.Make(this));
  r = uv_tcp_bind(handle_.get(), reinterpret_cast<struct sockaddr*>(&addr), 0);
  if (r == 0) r = uv_listen(handle_.stream(), SOMAXCONN, OnConnection);
  if (r < 0) {
    handle_.Close();
    throw UvError(env, r, "listen");
  }
  Ref();
  LifecycleOf(env).Own(this);
}

void UvListener::OnConnection(uv_stream_t* server, int status) {
  auto* self = static_cast<UvListener*>(server->data);
  Napi::Env env = self->Env();
  FromLoop(env, [&] {
    if (status < 0) {
      InvokeCallback(self->onConnection_, *self->asyncContext_, {UvError(env, status, "accept").Value()});
      return;
    }
    Napi::Object object;
    UvConnection* connection = UvConnection::Create(env, server->loop, &object);
    int r = uv_accept(server, reinterpret_cast<uv_stream_t*>(connection->handle()));
    if (r < 0) {
      connection->CloseAll();
      InvokeCallback(self->onConnection_, *self->asyncContext_, {UvError(env, r, "accept").Value()});
      return;
    }
    connection->Start(self->peerTimeoutMs_);
    // Out of descriptors, libuv turns the next connections away without a
    // word (its EMFILE trick): say so once, from the accept that took the
    // last one, as the shm listener does.
    uv_os_fd_t fd;
    int shortage = uv_fileno(reinterpret_cast<uv_handle_t*>(server), &fd) == 0 ? DescriptorShortage(fd) : 0;
    bool announce = shortage != 0 && !self->outOfDescriptors_;
    self->outOfDescriptors_ = shortage != 0;
    InvokeCallback(self->onConnection_, *self->asyncContext_, {env.Null(), object});
    if (announce && CanCallIntoJs(env)) {
      Napi::Error err = UvError(env, uv_translate_sys_error(shortage), "accept");
      err.Set("message",
              Napi::String::New(env, std::string("this process is out of file descriptors (") +
                                         (shortage == EMFILE ? "EMFILE" : "ENFILE") +
                                         "): connections are turned away until some close; raise `ulimit -n`"));
      InvokeCallback(self->onConnection_, *self->asyncContext_, {err.Value()});
    }
  });
}

Napi::Value UvListener::Address(const Napi::CallbackInfo& info) {
  struct sockaddr_storage addr;
  int len = sizeof(addr);
  if (!handle_) return info.Env().Null();
  int r = uv_tcp_getsockname(handle_.get(), reinterpret_cast<struct sockaddr*>(&addr), &len);
  if (r < 0) throw UvError(info.Env(), r, "getsockname");
  return Napi::String::New(info.Env(), SockaddrToString(addr));
}

Napi::Value UvListener::Close(const Napi::CallbackInfo& info) {
  CloseHandle();
  return info.Env().Undefined();
}

void UvListener::CloseHandle() { handle_.Close(OnClosed, this); }

void UvListener::OnClosed(void* listener) {
  auto* self = static_cast<UvListener*>(listener);
  LifecycleOf(self->Env()).Released(self);
  self->Unref();
}

}  // namespace tensorpipe_js
