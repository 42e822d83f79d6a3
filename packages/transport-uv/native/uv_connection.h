// A TCP connection on Node's own libuv loop that moves frames straight
// between the socket and the caller's memory: the shared connection core
// over libuv's stream reads and writes.
#pragma once

#include <napi.h>
#include <sys/mman.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tensorpipe/framed_connection.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {

class UvConnection : public FramedConnection<UvConnection> {
 public:
  static Napi::Function Define(Napi::Env env);
  // A connection object whose handle is initialised but not yet connected.
  static UvConnection* Create(Napi::Env env, uv_loop_t* loop, Napi::Object* out);

  explicit UvConnection(const Napi::CallbackInfo& info) : FramedConnection(info, "tensorpipe.UvConnection") {}

  uv_tcp_t* handle() { return handle_.get(); }
  // Called once the socket is connected or accepted. A peer that goes
  // silent fails the connection within about `peerTimeoutMs` (0: never).
  void Start(uint32_t peerTimeoutMs);
  bool closed() const { return state_ == State::kClosed; }
  void CloseAll();

 private:
  friend class FramedConnection<UvConnection>;

  struct WriteOp {
    uv_write_t req;
    UvConnection* connection = nullptr;
    std::unique_ptr<FrameWrite> frames;
    Napi::FunctionReference callback;
  };

  Napi::Value Write(const Napi::CallbackInfo& info);
  Napi::Value LocalAddress(const Napi::CallbackInfo& info);
  Napi::Value RemoteAddress(const Napi::CallbackInfo& info);
  Napi::Value Detach(const Napi::CallbackInfo& info);

  // The core's byte I/O.
  Progress Consume(FrameRead& op);
  void ArmRead();
  void StopIo();
  bool HasUnreadBytes() const { return stagingBegin_ != stagingEnd_; }
  bool HasPendingInput();
  int SocketFd();

  // While bytes of ours wait for the peer's acknowledgement, looks every
  // so often whether any came within peerTimeout (see Start()).
  void ArmWatchdog();
  static void OnWatchdog(uv_timer_t* timer);

  static void OnAlloc(uv_handle_t* handle, size_t suggested, uv_buf_t* buf);
  static void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void OnWrite(uv_write_t* req, int status);
  static void OnClosed(void* connection);

  UvHandle<uv_tcp_t> handle_;
  uint32_t peerTimeoutMs_ = 0;
  // Made at the first write, with peerTimeout set.
  UvHandle<uv_timer_t> watchdog_;
  bool reading_ = false;
  bool direct_ = false;
  // Writes handed to libuv whose callback has not run yet.
  size_t writesInFlight_ = 0;
  // Read-ahead and small frames go through here; large bodies go straight
  // into their destination.
  // Its own mapping: pages come only as bytes land, and all go back to the
  // kernel when the connection closes (a heap block would stay in the
  // heap: 1000 closed pipes left 1.1 GB of RSS).
  struct Unmap {
    size_t length;
    void operator()(char* p) const { munmap(p, length); }
  };
  std::unique_ptr<char, Unmap> staging_{nullptr, Unmap{0}};
  size_t stagingSize_ = 0;
  size_t stagingBegin_ = 0;
  size_t stagingEnd_ = 0;
};

}  // namespace tensorpipe_js
