// A listening TCP socket on Node's loop that hands accepted connections to JS.
#pragma once

#include <napi.h>
#include <uv.h>

#include <memory>

namespace tensorpipe_js {

class UvListener : public Napi::ObjectWrap<UvListener> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit UvListener(const Napi::CallbackInfo& info);

 private:
  Napi::Value Address(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  static void OnConnection(uv_stream_t* server, int status);
  static void OnClose(uv_handle_t* handle);

  uv_tcp_t* handle_ = nullptr;
  Napi::FunctionReference onConnection_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
};

}  // namespace tensorpipe_js
