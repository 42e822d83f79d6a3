// A TCP connection on Node's own libuv loop that moves frames straight
// between the socket and the caller's memory.
#pragma once

#include <napi.h>
#include <uv.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "tensorpipe/env_lifecycle.h"
#include "tensorpipe/frame_io.h"

namespace tensorpipe_js {

class UvConnection : public Napi::ObjectWrap<UvConnection>, public EnvResource {
 public:
  static Napi::Function Define(Napi::Env env);
  // A connection object whose handle is initialised but not yet connected.
  static UvConnection* Create(Napi::Env env, uv_loop_t* loop, Napi::Object* out);

  explicit UvConnection(const Napi::CallbackInfo& info);

  uv_tcp_t* handle() { return handle_; }
  // Called once the socket is connected or accepted. A peer that goes
  // silent fails the connection within about `peerTimeoutMs` (0: never).
  void Start(uint32_t peerTimeoutMs);
  void CloseHandle();
  bool closed() const { return state_ == State::kClosed; }
  void Teardown() override { CloseHandle(); }

 private:
  enum class State { kIdle, kOpen, kFailed, kClosed };
  using Progress = FrameRead::Progress;

  struct WriteOp {
    uv_write_t req;
    UvConnection* connection = nullptr;
    std::unique_ptr<FrameWrite> frames;
    Napi::FunctionReference callback;
  };

  Napi::Value Write(const Napi::CallbackInfo& info);
  Napi::Value Read(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value LocalAddress(const Napi::CallbackInfo& info);
  Napi::Value RemoteAddress(const Napi::CallbackInfo& info);
  Napi::Value OnFailure(const Napi::CallbackInfo& info);
  Napi::Value Detach(const Napi::CallbackInfo& info);

  Progress Consume(FrameRead& op);
  void Pump();
  void UpdateReading();
  Napi::Value Fail(const FrameRead* op, int status);
  Napi::Value FailureFor(const FrameRead& op);
  void FailFront(Napi::Value error);

  static void OnAlloc(uv_handle_t* handle, size_t suggested, uv_buf_t* buf);
  static void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void OnWrite(uv_write_t* req, int status);
  static void OnClose(uv_handle_t* handle);

  uv_tcp_t* handle_ = nullptr;
  State state_ = State::kIdle;
  bool reading_ = false;
  bool pumping_ = false;
  bool direct_ = false;
  // Writes handed to libuv whose callback has not run yet.
  size_t writesInFlight_ = 0;
  std::deque<std::unique_ptr<FrameRead>> reads_;
  // Read-ahead and small frames go through here; large bodies go straight
  // into their destination.
  std::vector<char> staging_;
  size_t stagingBegin_ = 0;
  size_t stagingEnd_ = 0;
  // Why reading ended: a protocol violation, else a libuv status (UV_EOF...).
  std::string protocolError_;
  int failStatus_ = 0;
  // Told when the connection fails while nothing waits on it and nothing
  // is left to read, so that an idle peer's death is not missed.
  Napi::FunctionReference onFailure_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
};

}  // namespace tensorpipe_js
