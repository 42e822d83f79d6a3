// A socket a connection gave up (UvConnection::detach) for a channel that
// does its own I/O on it. The descriptor stays this object's until taken
// or closed: a worker terminated between the hand-over and the taker, or a
// taker that fails, would otherwise leave it open for the life of the
// process. So it is closed with its environment, or when collected.
#pragma once

#include <napi.h>

#include "tensorpipe/env_lifecycle.h"

namespace tensorpipe_js {

class HandedSocket : public Napi::ObjectWrap<HandedSocket>, public EnvResource {
 public:
  static Napi::Function Define(Napi::Env env);
  // A new HandedSocket owning `fd`, with the bytes read ahead of it.
  static Napi::Object New(Napi::Env env, int fd, Napi::Uint8Array readAhead);

  explicit HandedSocket(const Napi::CallbackInfo& info);
  ~HandedSocket() override;

 private:
  Napi::Value Take(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  void Teardown() override;
  // Lets go of the descriptor: closes it when `close` is true.
  void Let(bool close);

  int fd_ = -1;
  EnvLifecycle* lifecycle_ = nullptr;
};

}  // namespace tensorpipe_js
