// A Unix socket in the abstract namespace (no file to clean up) where
// peers on this machine come for a shared-memory connection.
#pragma once

#include <napi.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <uv.h>

#include <cstdint>
#include <list>
#include <string>

#include "shm_connection.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {

// The bounds on the transport's own handshake (the memory exchange) of the
// connections a listener accepted, before JS sees them.
struct HandshakeBounds {
  uint64_t timeoutMs = 10000;  // 0: no deadline
  size_t maxPending = 128;     // 0: no bound
};

class ShmListener : public Napi::ObjectWrap<ShmListener>, public EnvResource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit ShmListener(const Napi::CallbackInfo& info);
  ~ShmListener() override;
  void Teardown() override { CloseSocket(); }

  // `c` left its handshake (done, failed, closed): no longer watched.
  void Forget(ShmConnection* c);

 private:
  Napi::Value Address(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  void CloseSocket();
  static void OnReadable(uv_poll_t* handle, int status, int events);
  static void OnTimer(uv_timer_t* handle);
  static void OnHandleClosed(void* listener);
  void Accept(Napi::Env env);
  // Out of descriptors: turns away what waits in the backlog (see the .cc).
  void ShedBacklog(Napi::Env env);
  void Watch(ShmConnection* c);
  // Closes the oldest handshake and tells JS why; false if none was left.
  bool DropOldest(Napi::Env env, const std::string& message);
  bool DropSilent(Napi::Env env);
  void PauseAccepting();
  void ArmTimer();
  void Report(Napi::Value error);

  int fd_ = -1;
  // Kept open to be closed when accept4 says EMFILE: one descriptor free to
  // accept, and close at once, what waits in the backlog (libuv's trick),
  // instead of leaving it there for the level-triggered poll to fire again.
  int reserveFd_ = -1;
  UvHandle<uv_poll_t> poll_;
  // Due at the oldest handshake's deadline, or when accepting resumes.
  UvHandle<uv_timer_t> timer_;
  int openHandles_ = 0;
  bool closed_ = false;
  // Accepting paused (out of descriptors, with no reserve to shed the
  // backlog with) until this uv_now(); 0: not paused.
  uint64_t resumeAt_ = 0;
  std::string name_;
  ShmOptions options_;
  HandshakeBounds bounds_;
  // Accepted connections still in their handshake, oldest (first due) first.
  std::list<ShmConnection*> starting_;
  Napi::FunctionReference onConnection_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
};

// Fills an abstract-namespace address for `name`; returns its length.
socklen_t AbstractAddress(const std::string& name, struct sockaddr_un* addr);
ShmOptions OptionsFrom(Napi::Value value);
HandshakeBounds BoundsFrom(Napi::Value value);

}  // namespace tensorpipe_js
