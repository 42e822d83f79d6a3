// The bulk lanes of one mpt channel: TCP sockets taken over from the
// transport, each with a sending and a receiving thread, so that more than
// one core copies and no lane waits for another. Tensors are cut into
// chunks that whichever lane is free takes next; each chunk carries a
// header (tensor sequence number, offset, length), so the receiver lands
// it in place in the user's memory whatever lane it came on.
#pragma once

#include <napi.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tensorpipe/env_lifecycle.h"

namespace tensorpipe_js {

class LaneSet : public Napi::ObjectWrap<LaneSet>, public EnvResource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit LaneSet(const Napi::CallbackInfo& info);
  ~LaneSet() override;
  // The threads write into memory of this environment: they stop and are
  // joined before it goes.
  void Teardown() override { Shutdown(); }

 private:
  struct Op {
    double id = 0;
    uint64_t seq = 0;
    char* data = nullptr;
    uint64_t length = 0;
    uint64_t chunk = 0;
    // Sending: the next byte to hand to a lane. Both: bytes moved.
    uint64_t handedOut = 0;
    uint64_t moved = 0;
    // Receiving: the parts chunks have claimed, start to end, adjacent
    // ones merged.
    std::map<uint64_t, uint64_t> claimed;
    Napi::Reference<Napi::Value> keep;
  };

  struct Lane {
    Lane() = default;
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;
    // A lane set whose constructor fails closes the duplicates it made.
    ~Lane() {
      if (fd >= 0) close(fd);
    }
    int fd = -1;
    std::vector<char> readAhead;
    size_t readAheadUsed = 0;
    std::thread sender;
    std::thread receiver;
  };

  // Why the lanes stopped working: an errno (EOF as UV_EOF), or a protocol
  // violation by the peer.
  struct Failure {
    int status = 0;
    const char* syscall = "";
    std::string protocol;
    // The lane ended before a chunk's first byte: a reset there is the
    // peer's end, as native-common's reader marks it between frames.
    bool betweenFrames = false;
  };

  Napi::Value Send(const Napi::CallbackInfo& info);
  Napi::Value Recv(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  Op* Submit(const Napi::CallbackInfo& info, uint64_t seq);
  // Under mu_: reserves [offset, offset + length) of a receive for one
  // chunk, or refuses a chunk that overlaps another, is empty, runs past
  // the tensor or is shorter than a sender cuts one without ending the
  // tensor. Chunks that never overlap count each byte once, so a receive
  // is complete only once every byte has landed, and no lane still
  // writes into it once it is delivered.
  static bool ClaimLocked(Op* op, uint64_t offset, uint64_t length);
  void SendLoop(Lane* lane);
  void RecvLoop(Lane* lane);
  // Reads `length` bytes (read-ahead first) and returns how many it read:
  // fewer on EOF or error, with *status set (UV_EOF for EOF).
  uint64_t ReadFull(Lane* lane, char* to, uint64_t length, int* status);
  // With mu_ held by `lock`, which it lets go of before it wakes the JS
  // thread: that thread takes mu_ at once, and one woken on this core would
  // run first and wait for this thread to run again to let go of it.
  void Complete(Op* op, std::unique_lock<std::mutex>& lock);
  // Under mu_.
  void FailLocked(Failure failure);
  [[nodiscard]] bool ClaimSignalLocked();
  // Not under mu_, before Stop() has joined the lanes' threads.
  void Signal();
  // On the JS thread, from the thread-safe function.
  void Deliver(Napi::Env env, Napi::Function callback);
  void Stop();
  // Stop(), then forget every operation and let go of the thread-safe function.
  void Shutdown();

  uint64_t maxChunk_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Owned here, touched by the JS thread only; threads see raw pointers
  // to ops still in flight, which are only freed once done or once every
  // thread has been joined.
  std::map<double, std::unique_ptr<Op>> ops_;
  uint64_t nextSendSeq_ = 0;
  uint64_t nextRecvSeq_ = 0;
  size_t pending_ = 0;

  std::mutex mu_;
  std::condition_variable sendable_;
  std::condition_variable posted_;
  std::deque<Op*> sends_;
  std::map<uint64_t, Op*> recvs_;
  uint64_t recvsPosted_ = 0;
  // Lanes the peer closed between chunks.
  size_t lanesEnded_ = 0;
  std::vector<double> done_;
  bool failed_ = false;
  bool failureDelivered_ = false;
  Failure failure_;
  bool stopping_ = false;
  bool signalled_ = false;

  bool stopped_ = false;
  bool released_ = false;
  bool tsfnGone_ = false;
  Napi::ThreadSafeFunction tsfn_;
};

}  // namespace tensorpipe_js
