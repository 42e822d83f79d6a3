#include "shm_connection.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <string>

#include "shm_listener.h"
#include "tensorpipe/addon_data.h"
#include "tensorpipe/descriptor_shortage.h"
#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {

namespace {

// Version 3: wake-ups over the Unix socket (versions 1 and 2 passed eventfds).
constexpr char kMagic[8] = {'T', 'P', 'J', 'S', 'S', 'H', 'M', '3'};
constexpr uint64_t kMinRing = 4096;
constexpr uint64_t kMaxRing = 1ull << 30;

struct Hello {
  char magic[8];
  uint64_t ringSize;
};

Napi::Error SysError(Napi::Env env, int err, const char* syscall) {
  return UvError(env, uv_translate_sys_error(err), syscall);
}

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// One recvmsg of `size` bytes into `data`, and the descriptors passed with
// them: the first in *fd, the others closed; all counted in *count, and
// the message's flags in *flags. Returns recvmsg's answer, errno as it left it.
ssize_t ReceiveWithDescriptor(int sock, void* data, size_t size, int* fd, int* count, int* flags) {
  char control[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {data, size};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  *flags = msg.msg_flags;
  for (struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    size_t nfds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfds; i++) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      if (*count == 0)
        *fd = passed;
      else
        ::close(passed);
      (*count)++;
    }
  }
  return n;
}

// What is wrong with a peer's hello of `n` bytes, `count` descriptors and
// the ring memory `fd`; "" when nothing is.
std::string HelloProblem(const Hello& hello, ssize_t n, int count, int flags, int fd) {
  if (n != static_cast<ssize_t>(sizeof(hello)) || std::memcmp(hello.magic, kMagic, sizeof(kMagic)) != 0)
    return "peer is not a tensorpipe-js shm endpoint";
  if (count != 1 || (flags & MSG_CTRUNC) != 0)
    return "shm handshake carried " + std::to_string(count) + " file descriptors instead of 1";
  if (hello.ringSize < kMinRing || hello.ringSize > kMaxRing || (hello.ringSize & (hello.ringSize - 1)) != 0)
    return "peer's ring size " + std::to_string(hello.ringSize) + " is not a power of two in [4 KiB, 1 GiB]";
  // -1 (EINVAL) for anything but a memfd: a plain file could be cut short.
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kRingSeals) != kRingSeals)
    return "peer's ring memory is not sealed against resizing (cut short, it would kill this process with SIGBUS)";
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != kRingHeaderSize + hello.ringSize)
    return "peer's ring memory does not have the size it announced";
  return "";
}

}  // namespace

Napi::Function ShmConnection::Define(Napi::Env env) {
  return DefineConnection(env, "ShmConnection", {InstanceMethod("peerPid", &ShmConnection::PeerPid)});
}

Napi::Object ShmConnection::Create(Napi::Env env, int sock, const ShmOptions& options, Napi::Function onReady) {
  Napi::Object object;
  ShmConnection* c;
  try {
    c = Make(env, &object);
  } catch (const Napi::Error&) {
    // A worker being terminated runs no constructor: the socket is still ours to close.
    ::close(sock);
    throw;
  }
  // Owned from here on: whatever fails next, closing it closes the socket.
  c->sock_ = sock;
  c->options_ = options;
  c->spells_ = PollingSpells(options.spinMicros * 1000);
  c->onReady_ = Napi::Persistent(onReady);
  int r = c->Begin();
  if (r < 0) {
    std::string message = c->protocolError_;
    c->CloseAll();
    Napi::Error err = UvError(env, r, "shm handshake");
    if (!message.empty()) err.Set("message", Napi::String::New(env, message));
    throw err;
  }
  return object;
}

// Checks who the peer is, makes this side's inbox and sends it over.
int ShmConnection::Begin() {
  uv_loop_t* loop = GetAddonData(Env())->loop();
  uv_idle_init(loop, spinIdle_.Make(this));
  uv_idle_init(loop, selfWake_.Make(this));
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(sock_, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return uv_translate_sys_error(errno);
  peerPid_ = cred.pid;
  peerUid_ = cred.uid;
  if (!options_.allowOtherUsers && cred.uid != geteuid()) {
    protocolError_ = "peer runs as uid " + std::to_string(cred.uid) + ", this process as uid " +
                     std::to_string(geteuid()) + " (allowOtherUsers is off)";
    return UV_EACCES;
  }
  inboxMapSize_ = kRingHeaderSize + options_.ringSize;
  inboxMemfd_ = memfd_create("tensorpipe-js-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (inboxMemfd_ < 0) return uv_translate_sys_error(errno);
  if (ftruncate(inboxMemfd_, static_cast<off_t>(inboxMapSize_)) != 0) return uv_translate_sys_error(errno);
  // The peer writes here, and checks the seals (kRingSeals).
  if (fcntl(inboxMemfd_, F_ADD_SEALS, kRingSeals | F_SEAL_SEAL) != 0) return uv_translate_sys_error(errno);
  inboxMap_ = mmap(nullptr, inboxMapSize_, PROT_READ | PROT_WRITE, MAP_SHARED, inboxMemfd_, 0);
  if (inboxMap_ == MAP_FAILED) {
    inboxMap_ = nullptr;
    return uv_translate_sys_error(errno);
  }
  new (inboxMap_) RingHeader();
  inbox_ = RingView(inboxMap_, options_.ringSize);

  Hello hello;
  std::memcpy(hello.magic, kMagic, sizeof(kMagic));
  hello.ringSize = options_.ringSize;
  int fds[1] = {inboxMemfd_};
  char control[CMSG_SPACE(sizeof(fds))];
  std::memset(control, 0, sizeof(control));
  struct iovec iov = {&hello, sizeof(hello)};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(fds));
  std::memcpy(CMSG_DATA(cmsg), fds, sizeof(fds));
  ssize_t sent;
  do {
    sent = sendmsg(sock_, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(sizeof(hello))) return sent < 0 ? uv_translate_sys_error(errno) : UV_EIO;
  // The peer holds its own copy now; the mapping keeps the memory here.
  CloseFd(&inboxMemfd_);

  uv_poll_init(loop, socketPoll_.Make(this), sock_);
  return uv_poll_start(socketPoll_.get(), UV_READABLE | UV_DISCONNECT, OnSocketEvent);
}

void ShmConnection::OnSocketEvent(uv_poll_t* handle, int status, int events) {
  auto* c = static_cast<ShmConnection*>(handle->data);
  if (c->state_ == State::kClosed) return;
  FromLoop(c->Env(), [&] { c->OnSocket(); });
}

void ShmConnection::OnSocket() {
  Napi::HandleScope scope(Env());
  if (state_ == State::kStarting)
    ReceiveHello();
  else
    ReceiveWakeUps();
}

// The peer's hello: the size of its ring and, passed with it, the memfd
// that holds the ring, which this side maps as its outbox.
void ShmConnection::ReceiveHello() {
  Napi::Env env = Env();
  Hello hello;
  int received = -1;
  int count = 0;
  int flags = 0;
  ssize_t n = ReceiveWithDescriptor(sock_, &hello, sizeof(hello), &received, &count, &flags);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (n < 0) {
    HandshakeFailed(SysError(env, errno, "shm handshake").Value());
    return;
  }
  if (n > 0 && (flags & MSG_CTRUNC) != 0) {
    // Out of descriptors is this process's trouble, not the peer's fault.
    if (int err = DescriptorShortage(sock_)) {
      CloseFd(&received);
      HandshakeFailed(SysError(env, err, "recvmsg").Value());
      return;
    }
  }
  std::string problem =
      n == 0 ? "peer closed the connection during the shm handshake" : HelloProblem(hello, n, count, flags, received);
  if (problem.empty()) problem = MapOutbox(received, hello.ringSize);
  CloseFd(&received);
  if (!problem.empty()) {
    HandshakeFailed(CodedError(env, n == 0 ? "ERR_TP_PEER_CLOSED" : "ERR_TP_PROTOCOL", problem).Value());
    return;
  }
  outbox_ = RingView(outboxMap_, hello.ringSize);
  sweeper_ = &AddonEnv::Get<ShmEnv>(env)->sweeper;
  sweeper_->Add(this);
  FinishHandshake();
}

// Maps the peer's ring; what went wrong, or "".
std::string ShmConnection::MapOutbox(int fd, uint64_t ringSize) {
  outboxMapSize_ = kRingHeaderSize + ringSize;
  outboxMap_ = mmap(nullptr, outboxMapSize_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (outboxMap_ != MAP_FAILED) return "";
  outboxMap_ = nullptr;
  return std::string("cannot map the peer's ring: ") + std::strerror(errno);
}

// After the handshake the socket carries wake-ups, a byte each: the peer
// wrote for a sleeping read here, or made room for a waiting write. The
// end of the stream is the peer gone (even killed).
void ShmConnection::ReceiveWakeUps() {
  char bytes[256];
  ssize_t n;
  int err = 0;
  bool woken = false;
  for (;;) {
    do {
      n = recv(sock_, bytes, sizeof(bytes), MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) break;
    woken = true;
    // Fewer than asked for: none were left. Asking again until EAGAIN cost
    // a system call a wake-up (the poll is level-triggered: what comes
    // later, the end of the stream too, calls again).
    if (n < static_cast<ssize_t>(sizeof(bytes))) break;
  }
  // Before anything else can touch errno.
  if (n < 0) err = errno;
  if (woken) OnWake();
  if (n > 0 || (n < 0 && (err == EAGAIN || err == EWOULDBLOCK))) return;
  if (state_ != State::kOpen) return;
  // Frames the peer finished before going away still count.
  PumpReads();
  if (state_ != State::kOpen) return;
  if (!Broke(n == 0 ? UV_EOF : uv_translate_sys_error(err))) FailFirstWrite();
}

// Tells the peer to look: a byte on the socket, if there is room for one
// (a full socket buffer already holds wake-ups it has not read).
void ShmConnection::WakePeer() {
  char byte = 1;
  ssize_t n;
  do {
    n = send(sock_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
}

// What the peer told, or this side told itself, happened: each that waits looks.
void ShmConnection::OnWake() {
  if (state_ != State::kOpen) return;
  if (writablePolling_) FlushWrites();
  if (state_ == State::kOpen && readablePolling_) OnReadable();
}

// Bytes or room came between a side's last look and its saying it sleeps:
// it looks again on the loop's next turn, as a wake-up from the peer would
// have it.
void ShmConnection::WakeSelf() {
  if (!selfWoken_) uv_idle_start(selfWake_.get(), OnSelfWake);
  selfWoken_ = true;
}

void ShmConnection::OnSelfWake(uv_idle_t* handle) {
  auto* c = static_cast<ShmConnection*>(handle->data);
  uv_idle_stop(handle);
  c->selfWoken_ = false;
  if (c->state_ != State::kOpen) return;
  FromLoop(c->Env(), [&] { c->OnWake(); });
}

void ShmConnection::LeaveWatcher() {
  if (watcher_ != nullptr) watcher_->Forget(this);
}

void ShmConnection::FinishHandshake() {
  LeaveWatcher();
  state_ = State::kOpen;
  Napi::Env env = Env();
  Napi::FunctionReference ready = std::move(onReady_);
  InvokeCallback(ready, *asyncContext_, {env.Null(), Value()});
}

void ShmConnection::HandshakeFailed(Napi::Value error) {
  Napi::FunctionReference ready = std::move(onReady_);
  CloseAll();
  InvokeCallback(ready, *asyncContext_, {error});
}

// write(frames, callback) -> true when every byte went into the ring at
// once (the callback is then never called), else false.
Napi::Value ShmConnection::Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (state_ == State::kClosed || state_ == State::kStarting) {
    throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
  }
  if (state_ == State::kFailed) throw Napi::Error(env, WriteFailure());
  FrameWrite& frames = NextWrite(info);
  if (writes_.empty()) {
    if (!CopyOut(frames)) {
      Fail(0);
      throw Napi::Error(env, WriteFailure());
    }
    if (frames.Done()) return Napi::Boolean::New(env, true);
  }
  auto op = std::make_unique<PendingWrite>();
  op->frames = TakeWrite(info);
  op->callback = Napi::Persistent(info[1].As<Napi::Function>());
  writes_.push_back(std::move(op));
  ArmWrite();
  return Napi::Boolean::New(env, false);
}

// Copies as much of `op` as the peer's ring has room for. False: the peer
// moved its tail where no honest reader could.
bool ShmConnection::CopyOut(FrameWrite& op) {
  // A write that starts on an emptied ring starts at its first byte.
  if (outboxHead_ >= rewindLookAt_ && outbox_.OffsetOf(outboxHead_) >= kRewindAfter && op.Left() == op.total) {
    outbox_.RewindIfEmpty(outboxHead_, &outboxTailSeen_);
    rewindLookAt_ = outboxHead_ + kRewindEvery;
  }
  uint64_t room;
  if (!outbox_.Room(outboxHead_, op.Left(), &outboxTailSeen_, &room)) {
    protocolError_ = "peer's ring tail moved out of range";
    return false;
  }
  uint64_t before = outboxHead_;
  while (!op.Done() && room > 0) {
    uv_buf_t& b = op.bufs[op.first];
    uint64_t n = std::min<uint64_t>(b.len, room);
    outbox_.CopyIn(outboxHead_, b.base, n);
    outboxHead_ += n;
    room -= n;
    op.Advance(n);
  }
  if (outboxHead_ != before) {
    bool peerSlept = outbox_.PublishHead(outboxHead_, [this] { WakePeer(); });
    if (waiting_ && !peerSlept) AwaitAnswer(uv_hrtime());
  }
  return true;
}

void ShmConnection::Sweep() {
  if (state_ != State::kOpen) return;
  outboxQuietSweeps_ = outboxHead_ == outboxSweptAt_ ? outboxQuietSweeps_ + 1 : 0;
  outboxSweptAt_ = outboxHead_;
  if (outboxQuietSweeps_ < RingSweeper::kQuietSweeps || outboxHead_ == outboxReleasedAt_) return;
  // The peer still has bytes to read, or this side waits for room.
  if (!writes_.empty() || outbox_.header()->tail.load(std::memory_order_acquire) != outboxHead_) return;
  // Advice: where the kernel refuses, the pages stay, as they would have.
  madvise(outbox_.data(), outboxMapSize_ - kRingHeaderSize, MADV_REMOVE);
  outboxReleasedAt_ = outboxHead_;
}

void ShmConnection::FlushWrites() {
  Napi::Env env = Env();
  while (!writes_.empty() && state_ == State::kOpen) {
    PendingWrite& op = *writes_.front();
    if (!CopyOut(*op.frames)) {
      Fail(0);
      FailFirstWrite();
      return;
    }
    if (!op.frames->Done()) break;
    std::unique_ptr<PendingWrite> done = std::move(writes_.front());
    writes_.pop_front();
    Napi::HandleScope scope(env);
    InvokeCallback(done->callback, *asyncContext_, {env.Null()});
  }
  ArmWrite();
}

// Waits for room: tells the peer, then looks again so that room made in
// between is not missed.
void ShmConnection::ArmWrite() {
  if (state_ != State::kOpen) return;
  if (writes_.empty()) {
    writablePolling_ = false;
    return;
  }
  if (outbox_.WriterSleeps(outboxHead_)) WakeSelf();
  writablePolling_ = true;
}

ShmConnection::Progress ShmConnection::Consume(FrameRead& op) {
  RingHeader* h = inbox_.header();
  uint64_t head = h->head.load(std::memory_order_acquire);
  uint64_t avail = head - inboxTail_;
  if (avail > inbox_.size()) {
    protocolError_ = "peer's ring head moved out of range";
    return Progress::kError;
  }
  Progress p = Progress::kNeedMore;
  uint64_t consumed = 0;
  if (avail > 0) {
    inbox_.TakeBase();
    const char* a;
    const char* b;
    uint64_t an, bn;
    inbox_.Segments(inboxTail_, avail, &a, &an, &b, &bn);
    size_t used = 0;
    p = op.Feed(a, an, &used, &protocolError_);
    consumed = used;
    if (p == Progress::kNeedMore && bn > 0) {
      p = op.Feed(b, bn, &used, &protocolError_);
      consumed += used;
    }
  }
  if (consumed > 0) {
    inboxTail_ += consumed;
    inbox_.PublishTail(inboxTail_, [this] { WakePeer(); });
  }
  return p;
}

// Waits for data: first by polling the ring on every loop iteration for a
// spell (the loop does not block meanwhile, so other work goes on), then by
// sleeping until the peer wakes it (a byte on the socket).
void ShmConnection::ArmRead() {
  if (state_ != State::kOpen) return;
  if (reads_.empty()) {
    EndWait(false);
    StopSleeping();
    return;
  }
  if (!waiting_) {
    BeginWait();
    if (spinning_) return;
  }
  if (spinning_) {
    uint64_t spun = uv_hrtime() - SpellStart();
    if (spun < Spell()) {
      if (inbox_.ReaderShouldYield(spun)) sched_yield();
      return;
    }
    StopSpinning();
  }
  Sleep();
}

void ShmConnection::BeginWait() {
  waiting_ = true;
  waitBegan_ = uv_hrtime();
  answerDueSince_ = 0;
  if (Spell() > 0) StartSpinning();
}

// A frame went to an awake peer while the read waits: what comes next may
// be its answer, so the answer's spell starts, polling again if the read
// slept (unless the peer is already waking it). A peer that slept answers
// only after its own wake-up, and polling for that was no faster here
// (docs/performance.md), so the read then sleeps on.
void ShmConnection::AwaitAnswer(uint64_t now) {
  answerDueSince_ = now;
  if (Spell() > 0 && !spinning_ && inbox_.ReaderWakesItself()) StartSpinning();
}

// Tells the peer, then looks again so that data written in between is not
// missed (it is then signalled to ourselves).
void ShmConnection::Sleep() {
  if (inbox_.ReaderSleeps(inboxTail_)) WakeSelf();
  readablePolling_ = true;
}

void ShmConnection::OnSpin(uv_idle_t* handle) {
  auto* c = static_cast<ShmConnection*>(handle->data);
  if (c->state_ != State::kOpen) return;
  if (!c->HasInput()) c->HoldLoopForInput();
  if (!c->HasInput()) {
    c->ArmRead();
    return;
  }
  FromLoop(c->Env(), [&] {
    c->EndWait(true);
    c->PumpReads();
  });
}

// The wait is over (data came, or no read waits any more): the next wait
// starts afresh, and one that bytes ended teaches its kind's spell.
void ShmConnection::EndWait(bool bytesCame) {
  if (waiting_ && bytesCame) {
    uint64_t now = uv_hrtime();
    spells_.Learn(PollingSpells::kNext, now - waitBegan_);
    if (answerDueSince_ != 0) spells_.Learn(PollingSpells::kAnswer, now - answerDueSince_);
  }
  waiting_ = false;
  StopSpinning();
}

// The socket stays in the loop's epoll set the whole time (it tells of the
// peer's death too): a wait costs no epoll_ctl calls (taking a wake-up
// descriptor out and putting it back at every wait once cost two a
// wake-up, five a message for a 16 MiB cma stream's sender).
void ShmConnection::StopSleeping() { readablePolling_ = false; }

thread_local std::vector<ShmConnection*> ShmConnection::spinningOnThisThread_;
thread_local ShmConnection* ShmConnection::loopHolder_ = nullptr;

void ShmConnection::StartSpinning() {
  uv_idle_start(spinIdle_.get(), OnSpin);
  spinning_ = true;
  spinningIndex_ = spinningOnThisThread_.size();
  spinningOnThisThread_.push_back(this);
}

void ShmConnection::StopSpinning() {
  if (!spinning_) return;
  uv_idle_stop(spinIdle_.get());
  spinning_ = false;
  ShmConnection* last = spinningOnThisThread_.back();
  spinningOnThisThread_[spinningIndex_] = last;
  last->spinningIndex_ = spinningIndex_;
  spinningOnThisThread_.pop_back();
  if (loopHolder_ == this) loopHolder_ = nullptr;
}

// Polls every waiting ring of this thread until one has bytes, for at most
// kHoldLoopNanos: bytes that come meanwhile are seen at once, not a turn of
// the loop later. Only the thread's holder does it, only in the first
// kYieldAfterNanos of its wait (a holder past them hands the role on), and
// not while a peer last ran on this core (that peer needs the core).
void ShmConnection::HoldLoopForInput() {
  uint64_t start = uv_hrtime();
  auto young = [start](const ShmConnection* c) { return start - c->SpellStart() < kYieldAfterNanos; };
  if (loopHolder_ != nullptr && loopHolder_ != this && young(loopHolder_)) return;
  loopHolder_ = this;
  if (!young(this)) return;
  const uint32_t core = CurrentCore();
  for (ShmConnection* c : spinningOnThisThread_) {
    if (c->inbox_.WriterLastOn(core)) return;
  }
  do {
    for (int i = 0; i < 64; i++) {
      for (ShmConnection* c : spinningOnThisThread_) {
        if (c->HasInput()) return;
      }
      CpuRelax();
    }
  } while (uv_hrtime() - start < kHoldLoopNanos);
}

void ShmConnection::OnReadable() {
  // A wake-up with nothing to read (a peer that only signals, or one that
  // made room for a write): the wait sleeps on, and polls for nothing; each
  // would cost a spell of polling.
  if (!HasInput() && waiting_) {
    if (!spinning_) Sleep();
    return;
  }
  FromLoop(Env(), [&] {
    EndWait(HasInput());
    PumpReads();
  });
}

void ShmConnection::StopIo() {
  if (socketPoll_.IsActive()) uv_poll_stop(socketPoll_.get());
  if (selfWoken_) uv_idle_stop(selfWake_.get());
  readablePolling_ = writablePolling_ = selfWoken_ = false;
  StopSpinning();
}

Napi::Value ShmConnection::WriteFailure() {
  Napi::Env env = Env();
  if (!protocolError_.empty()) return CodedError(env, "ERR_TP_PROTOCOL", protocolError_).Value();
  return UvError(env, failStatus_ == UV_EOF ? UV_EPIPE : failStatus_, "write").Value();
}

// A write waiting for room learns of a failure nobody else was told of;
// JS then closes the connection, which rejects everything else.
void ShmConnection::FailFirstWrite() {
  if (writes_.empty() || state_ == State::kClosed) return;
  Napi::HandleScope scope(Env());
  std::unique_ptr<PendingWrite> op = std::move(writes_.front());
  writes_.pop_front();
  InvokeCallback(op->callback, *asyncContext_, {WriteFailure()});
}

void ShmConnection::CloseAll() {
  LeaveWatcher();
  if (state_ == State::kClosed) return;
  DropPending();
  writes_.clear();
  onReady_.Reset();
  StopSpinning();
  int closing = 0;
  for (bool later : {socketPoll_.Close(OnHandleClosed, this), spinIdle_.Close(OnHandleClosed, this),
                     selfWake_.Close(OnHandleClosed, this)}) {
    closing += later ? 1 : 0;
  }
  openHandles_ = closing;
  // Closing a poll takes its descriptor out of the loop's epoll set at
  // once: descriptors and mappings go now, so that close() leaves none.
  FreeDescriptorsAndMappings();
  if (closing == 0) Released();
}

void ShmConnection::OnHandleClosed(void* connection) {
  auto* c = static_cast<ShmConnection*>(connection);
  if (--c->openHandles_ == 0) c->Released();
}

void ShmConnection::FreeDescriptorsAndMappings() {
  if (sweeper_) sweeper_->Remove(this);
  // A Unix socket closed over bytes it has not read (the peer's wake-ups)
  // makes the peer's next read fail with ECONNRESET rather than see EOF:
  // what is queued goes first (a bounded few reads: a peer may keep sending).
  if (sock_ >= 0) {
    char sink[4096];
    for (int i = 0; i < 16 && ::recv(sock_, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
    }
  }
  for (int* fd : {&sock_, &inboxMemfd_}) {
    CloseFd(fd);
  }
  if (inboxMap_) munmap(inboxMap_, inboxMapSize_);
  if (outboxMap_) munmap(outboxMap_, outboxMapSize_);
  inboxMap_ = outboxMap_ = nullptr;
}

Napi::Value ShmConnection::LocalAddress(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), "pid " + std::to_string(getpid()));
}

// peerPid(): the peer's pid as the kernel recorded it when it connected
// (SO_PEERCRED), for core to prove that it is the process it dialled.
Napi::Value ShmConnection::PeerPid(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(peerPid_));
}

Napi::Value ShmConnection::RemoteAddress(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), "pid " + std::to_string(peerPid_) + " uid " + std::to_string(peerUid_));
}

}  // namespace tensorpipe_js
