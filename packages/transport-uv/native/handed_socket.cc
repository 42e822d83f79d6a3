#include "handed_socket.h"

#include <unistd.h>

#include "tensorpipe/napi_helpers.h"
#include "uv_addon_data.h"

namespace tensorpipe_js {

Napi::Function HandedSocket::Define(Napi::Env env) {
  return DefineClass(env, "HandedSocket",
                     {InstanceMethod<&HandedSocket::Take>("take"), InstanceMethod<&HandedSocket::Close>("close")});
}

Napi::Object HandedSocket::New(Napi::Env env, int fd, Napi::Uint8Array readAhead) {
  return GetUvAddonData(env)->handedSocketConstructor.New({Napi::Number::New(env, fd), readAhead});
}

// new HandedSocket(fd, readAhead): native code makes these, not JS.
HandedSocket::HandedSocket(const Napi::CallbackInfo& info) : Napi::ObjectWrap<HandedSocket>(info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber() || !info[1].IsTypedArray()) {
    throw Napi::TypeError::New(env, "HandedSocket is made by a connection's detach()");
  }
  fd_ = info[0].As<Napi::Number>().Int32Value();
  Napi::Object self = info.This().As<Napi::Object>();
  self.DefineProperties({
      Napi::PropertyDescriptor::Value("fd", info[0], napi_enumerable),
      Napi::PropertyDescriptor::Value("readAhead", info[1], napi_enumerable),
  });
  lifecycle_ = &LifecycleOf(env);
  lifecycle_->Own(this);
}

HandedSocket::~HandedSocket() { Let(true); }

void HandedSocket::Let(bool close) {
  if (fd_ < 0) return;
  if (close) ::close(fd_);
  fd_ = -1;
  lifecycle_->Released(this);
}

// take() -> fd: the caller owns the descriptor from here and closes it.
Napi::Value HandedSocket::Take(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (fd_ < 0) throw CodedError(env, "ERR_TP_CLOSED", "the handed-over socket was already taken or closed");
  int fd = fd_;
  Let(false);
  return Napi::Number::New(env, fd);
}

// close(): closes the descriptor unless it was taken; again, nothing.
Napi::Value HandedSocket::Close(const Napi::CallbackInfo& info) {
  Let(true);
  return info.Env().Undefined();
}

void HandedSocket::Teardown() { Let(true); }

}  // namespace tensorpipe_js
