// A listening TCP socket on Node's loop that hands accepted connections to JS.
#pragma once

#include <napi.h>
#include <uv.h>

#include <memory>

#include "tensorpipe/env_lifecycle.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {

class UvListener : public Napi::ObjectWrap<UvListener>, public EnvResource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit UvListener(const Napi::CallbackInfo& info);
  void Teardown() override { CloseHandle(); }

 private:
  Napi::Value Address(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  void CloseHandle();
  static void OnConnection(uv_stream_t* server, int status);
  static void OnClosed(void* listener);

  UvHandle<uv_tcp_t> handle_;
  uint32_t peerTimeoutMs_ = 0;
  // The last accept found the process out of descriptors (reported once).
  bool outOfDescriptors_ = false;
  Napi::FunctionReference onConnection_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
};

}  // namespace tensorpipe_js
