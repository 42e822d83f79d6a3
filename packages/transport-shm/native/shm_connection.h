// A same-machine connection: one ring per direction in shared memory
// (memfd, handed over with SCM_RIGHTS on a Unix socket), and the Unix
// socket kept open for wake-ups (a byte each, watched from Node's loop) and
// so that the peer's death (even SIGKILL) is seen at once: one descriptor.
#pragma once

#include <napi.h>
#include <sys/types.h>
#include <uv.h>

#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "polling_spells.h"
#include "ring.h"
#include "ring_sweeper.h"
#include "tensorpipe/framed_connection.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {

class ShmListener;

struct ShmOptions {
  uint64_t ringSize = kDefaultRingSize;
  bool allowOtherUsers = false;
  // How long at most a waiting read polls the ring from the loop before it
  // sleeps until woken (a wake-up through the kernel costs tens of
  // microseconds); PollingSpells learns how long within that.
  uint64_t spinMicros = kDefaultSpinMicros;
};

// The shm addon's data in one environment.
struct ShmEnv : AddonData {
  explicit ShmEnv(napi_env env) : AddonData(env), sweeper(lifecycle) {}
  RingSweeper sweeper;
};

class ShmConnection : public FramedConnection<ShmConnection>, public SweptRing {
 public:
  static Napi::Function Define(Napi::Env env);
  // Takes ownership of a connected Unix socket and starts the handshake;
  // `onReady(err)` or `onReady(null, connection)` follows.
  static Napi::Object Create(Napi::Env env, int sock, const ShmOptions& options, Napi::Function onReady);

  explicit ShmConnection(const Napi::CallbackInfo& info) : FramedConnection(info, "tensorpipe.ShmConnection") {}
  ~ShmConnection() override {
    LeaveWatcher();
    if (sweeper_) sweeper_->Remove(this);
  }
  void CloseAll();

 private:
  friend class FramedConnection<ShmConnection>;
  // Bounds the handshake of the connections it accepted (watcher_ below).
  friend class ShmListener;

  struct PendingWrite {
    std::unique_ptr<FrameWrite> frames;
    Napi::FunctionReference callback;
  };

  Napi::Value Write(const Napi::CallbackInfo& info);
  Napi::Value LocalAddress(const Napi::CallbackInfo& info);
  Napi::Value RemoteAddress(const Napi::CallbackInfo& info);
  Napi::Value PeerPid(const Napi::CallbackInfo& info);

  int Begin();  // 0 or a libuv error
  // The handshake is over (done, failed or closed): the listener stops watching it.
  void LeaveWatcher();
  // Takes the peer's greeting if it is here already, without waiting for
  // the loop to say so: the handshake may finish (or fail) before this returns.
  void TryGreeting() {
    if (state_ == State::kStarting) OnSocket();
  }
  void FinishHandshake();
  void HandshakeFailed(Napi::Value error);
  // The socket is readable: the peer's hello while the handshake runs, wake-ups after.
  void OnSocket();
  void ReceiveHello();
  std::string MapOutbox(int fd, uint64_t ringSize);
  void ReceiveWakeUps();
  static void OnSocketEvent(uv_poll_t* handle, int status, int events);
  void OnReadable();
  void OnWake();
  void WakePeer();
  void WakeSelf();
  static void OnSelfWake(uv_idle_t* handle);
  static void OnSpin(uv_idle_t* handle);
  bool HasInput() const { return inbox_.header()->head.load(std::memory_order_acquire) != inboxTail_; }
  void HoldLoopForInput();
  // The spell in force and its start: see waitBegan_.
  uint64_t SpellStart() const { return answerDueSince_ != 0 ? answerDueSince_ : waitBegan_; }
  uint64_t Spell() const { return spells_.Spell(answerDueSince_ != 0 ? PollingSpells::kAnswer : PollingSpells::kNext); }
  void BeginWait();
  void AwaitAnswer(uint64_t now);
  void Sleep();
  void StartSpinning();
  void StopSpinning();
  void EndWait(bool bytesCame);
  void StopSleeping();
  static void OnHandleClosed(void* connection);
  void FreeDescriptorsAndMappings();

  // The core's byte I/O.
  Progress Consume(FrameRead& op);
  void ArmRead();
  void StopIo();
  // Frames the peer finished before it went stay readable in the ring: a
  // peer that wrote and closed is not told as gone until they are read.
  bool HasUnreadBytes() const { return inboxMap_ != nullptr && HasInput(); }
  bool HasPendingInput() const { return inboxMap_ != nullptr && HasInput(); }
  int SocketFd() const { return sock_; }

  bool CopyOut(FrameWrite& op);
  // The ring to the peer gives its pages back once it has gone idle.
  void Sweep() override;
  void FlushWrites();
  void ArmWrite();
  Napi::Value WriteFailure();
  void FailFirstWrite();

  ShmOptions options_;
  int sock_ = -1;
  pid_t peerPid_ = 0;
  uid_t peerUid_ = 0;

  // Mine to read; the peer writes. I own its tail.
  void* inboxMap_ = nullptr;
  size_t inboxMapSize_ = 0;
  RingView inbox_;
  uint64_t inboxTail_ = 0;
  int inboxMemfd_ = -1;

  // The peer's inbox: mine to write. I own its head.
  void* outboxMap_ = nullptr;
  size_t outboxMapSize_ = 0;
  RingView outbox_;
  uint64_t outboxHead_ = 0;
  uint64_t outboxTailSeen_ = 0;
  // Where the next look for an emptied ring to start over is due (RewindIfEmpty).
  uint64_t rewindLookAt_ = 0;
  // The head when the ring's pages were last given back (or at the start),
  // and at the last sweep.
  uint64_t outboxReleasedAt_ = 0;
  uint64_t outboxSweptAt_ = 0;
  // Sweeps in a row that found it unwritten.
  int outboxQuietSweeps_ = 0;
  RingSweeper* sweeper_ = nullptr;

  UvHandle<uv_poll_t> socketPoll_;
  // Runs OnWake on the loop's next turn (WakeSelf).
  UvHandle<uv_idle_t> selfWake_;
  bool selfWoken_ = false;
  UvHandle<uv_idle_t> spinIdle_;
  // The read's wait: when it began, and when it last wrote to an awake
  // peer (0: not since it began). The spell in force is the answer's from
  // then, else the next message's from the wait's start.
  PollingSpells spells_;
  bool waiting_ = false;
  uint64_t waitBegan_ = 0;
  uint64_t answerDueSince_ = 0;
  bool spinning_ = false;
  size_t spinningIndex_ = 0;  // in spinningOnThisThread_

  // This thread's connections whose reads poll their rings, and the one of
  // them that holds the loop for all of them on each turn: one, so that the
  // loop is held once per turn however many connections wait.
  static thread_local std::vector<ShmConnection*> spinningOnThisThread_;
  static thread_local ShmConnection* loopHolder_;

  // A read sleeps, a write waits for room: each looks when woken.
  bool readablePolling_ = false;
  bool writablePolling_ = false;
  // Handles closed whose close callback is still to come.
  int openHandles_ = 0;

  std::deque<std::unique_ptr<PendingWrite>> writes_;
  Napi::FunctionReference onReady_;

  // The listener that accepted this connection, while it bounds the
  // handshake (State::kStarting): its entry in the listener's list and when
  // the handshake is due. Whichever of the two goes first unlinks the other.
  ShmListener* watcher_ = nullptr;
  std::list<ShmConnection*>::iterator watchEntry_;
  uint64_t handshakeBegan_ = 0;     // uv_now() ms
  uint64_t handshakeDeadline_ = 0;  // uv_now() ms
};

}  // namespace tensorpipe_js
