// A Unix socket in the abstract namespace (no file to clean up) where
// peers on this machine come for a shared-memory connection.
#pragma once

#include <napi.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <uv.h>

#include <string>

#include "shm_connection.h"

namespace tensorpipe_js {

class ShmListener : public Napi::ObjectWrap<ShmListener>, public EnvResource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit ShmListener(const Napi::CallbackInfo& info);
  void Teardown() override { CloseSocket(); }

 private:
  Napi::Value Address(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  void CloseSocket();
  static void OnReadable(uv_poll_t* handle, int status, int events);

  int fd_ = -1;
  uv_poll_t* poll_ = nullptr;
  std::string name_;
  ShmOptions options_;
  Napi::FunctionReference onConnection_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
};

// Fills an abstract-namespace address for `name`; returns its length.
socklen_t AbstractAddress(const std::string& name, struct sockaddr_un* addr);
ShmOptions OptionsFrom(Napi::Value value);

}  // namespace tensorpipe_js
