#include "uv_connection.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "handed_socket.h"
#include "tensorpipe/addon_data.h"
#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {

namespace {
constexpr size_t kStagingSize = 64 * 1024;
// Bodies at least this large skip the staging buffer.
constexpr uint64_t kDirectThreshold = 16 * 1024;
// One recv() at most; larger bodies take several.
constexpr uint64_t kMaxRecv = 1ull << 30;
}  // namespace

Napi::Function UvConnection::Define(Napi::Env env) {
  return DefineConnection(env, "UvConnection", {InstanceMethod("detach", &UvConnection::Detach)});
}

UvConnection* UvConnection::Create(Napi::Env env, uv_loop_t* loop, Napi::Object* out) {
  UvConnection* c = Make(env, out);
  uv_tcp_init(loop, c->handle_.Make(c));
  return c;
}

namespace {
// Liveness without a byte of our own on the wire: TCP keepalive probes an
// idle connection (first after half the bound, then three more spread over
// the rest), and the kernel reports ETIMEDOUT once they go unanswered.
// Keepalive does not probe while bytes of ours are on their way: the
// watchdog (ArmWatchdog) covers those. Not TCP_USER_TIMEOUT: Linux also
// aborts with it a connection whose peer keeps its window shut that long
// while it answers every probe, a reader alive but busy. A failure to set
// them leaves the connection as TCP makes it.
void SetKeepalive(uv_tcp_t* handle, uint32_t ms) {
  if (ms == 0) return;
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(handle), &fd) != 0) return;
  int on = 1;
  int seconds = std::max<int>(2, static_cast<int>(ms / 1000));
  int idle = std::max<int>(1, seconds / 2);
  int interval = std::max<int>(1, (seconds - idle) / 3);
  // Fewer probes where the bound leaves no room for three: idle and probes within it.
  int count = std::clamp((seconds - idle) / interval, 1, 3);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}
}  // namespace

void UvConnection::Start(uint32_t peerTimeoutMs) {
  // Only the bytes that arrive touch its pages, so that an idle connection
  // costs the page its last frames used, not 64 KiB. Without memory for it,
  // the first read fails (ENOBUFS).
  void* m = mmap(nullptr, kStagingSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m != MAP_FAILED) {
    staging_ = std::unique_ptr<char, Unmap>(static_cast<char*>(m), Unmap{kStagingSize});
    stagingSize_ = kStagingSize;
  }
  state_ = State::kOpen;
  uv_tcp_nodelay(handle_.get(), 1);
  peerTimeoutMs_ = peerTimeoutMs;
  SetKeepalive(handle_.get(), peerTimeoutMs);
  ArmRead();
}

void UvConnection::ArmWatchdog() {
  if (peerTimeoutMs_ == 0 || state_ != State::kOpen) return;
  if (watchdog_.IsActive()) return;
  if (!watchdog_) {
    uv_timer_init(handle_->loop, watchdog_.Make(this));
    watchdog_.Unref();
  }
  // A quarter of the bound, at most 5 s: a silent peer is seen within
  // peerTimeout and one look more.
  uint64_t every = std::clamp<uint64_t>(peerTimeoutMs_ / 4, 10, 5000);
  uv_timer_start(watchdog_.get(), OnWatchdog, every, every);
}

// A peer is silent when bytes of ours wait for it and nothing came back
// for peerTimeout: with bytes on their way, no acknowledgement; with its
// window shut, no answer to TCP's last two probes of it either. A reader
// alive but busy keeps its window shut and its kernel answers the probes
// (one in two at worst: Linux answers such a probe at most every 500 ms),
// so it is waited for as long as it takes. The probes back off to one in
// 2 minutes, so a peer that dies while its window is shut is seen within
// two of them.
void UvConnection::OnWatchdog(uv_timer_t* timer) {
  auto* c = static_cast<UvConnection*>(timer->data);
  int fd = c->SocketFd();
  int queued = 0;
  if (c->state_ != State::kOpen || fd < 0 || ioctl(fd, SIOCOUTQ, &queued) != 0 ||
      (queued == 0 && c->writesInFlight_ == 0)) {
    uv_timer_stop(timer);
    return;
  }
  struct tcp_info info;
  socklen_t length = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0 || info.tcpi_last_ack_recv < c->peerTimeoutMs_) return;
  if (info.tcpi_unacked == 0 && info.tcpi_probes < 2) return;
  uv_timer_stop(timer);
  c->failSyscall_ = "send";
  c->failDetail_ = "the peer acknowledged none of the " + std::to_string(queued) + " bytes waiting for it for " +
                   std::to_string(info.tcpi_last_ack_recv) + " ms (UvTransportOptions.peerTimeout " +
                   std::to_string(c->peerTimeoutMs_) + " ms)";
  FromLoop(c->Env(), [&] { c->Broke(UV_ETIMEDOUT); });
}

void UvConnection::CloseAll() {
  if (state_ == State::kClosed) return;
  DropPending();
  if (reading_) uv_read_stop(handle_.stream());
  reading_ = false;
  // Freed now, not when the JS object is collected: closed connections
  // must not hold native memory the garbage collector cannot see.
  staging_.reset();
  stagingSize_ = 0;
  stagingBegin_ = stagingEnd_ = 0;
  watchdog_.Close();
  if (!handle_.Close(OnClosed, this)) Released();
}

void UvConnection::OnClosed(void* connection) { static_cast<UvConnection*>(connection)->Released(); }

// write(frames: ArrayBufferView[], callback(err)) -> true when every byte
// was written at once (the callback is then never called), else false.
Napi::Value UvConnection::Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (state_ == State::kClosed || state_ == State::kStarting) {
    throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
  }
  FrameWrite& f = NextWrite(info);
  uv_stream_t* stream = handle_.stream();
  int written = uv_try_write(stream, f.bufs.data(), static_cast<unsigned int>(f.bufs.size()));
  ArmWatchdog();
  if (written >= 0 && static_cast<size_t>(written) == f.total) return Napi::Boolean::New(env, true);
  // Queue the rest; libuv keeps queued writes in order.
  if (written > 0) f.Advance(static_cast<size_t>(written));
  auto op = std::make_unique<WriteOp>();
  op->frames = TakeWrite(info);
  op->connection = this;
  op->callback = Napi::Persistent(info[1].As<Napi::Function>());
  op->req.data = op.get();
  int r =
      uv_write(&op->req, stream, f.bufs.data() + f.first, static_cast<unsigned int>(f.bufs.size() - f.first), OnWrite);
  if (r < 0) throw UvError(env, r, "write");
  op.release();
  writesInFlight_++;
  return Napi::Boolean::New(env, false);
}

void UvConnection::OnWrite(uv_write_t* req, int status) {
  std::unique_ptr<WriteOp> op(static_cast<WriteOp*>(req->data));
  UvConnection* c = op->connection;
  c->writesInFlight_--;
  if (c->state_ == State::kClosed) return;
  Napi::Env env = op->callback.Env();
  FromLoop(env, [&] {
    napi_value arg = status < 0 ? UvError(env, status, "write").Value() : env.Null();
    InvokeCallback(op->callback, *c->asyncContext_, {arg});
  });
}

UvConnection::Progress UvConnection::Consume(FrameRead& op) {
  size_t used = 0;
  Progress p = op.Feed(staging_.get() + stagingBegin_, stagingEnd_ - stagingBegin_, &used, &protocolError_);
  stagingBegin_ += used;
  if (stagingBegin_ == stagingEnd_) stagingBegin_ = stagingEnd_ = 0;
  return p;
}

// Reads ahead into the staging buffer while it has room, as node:net
// does: no epoll changes between messages, and a frame that is already
// here completes without waiting for the loop. A full buffer with nobody
// reading stops reading, which pushes back on the peer through TCP.
void UvConnection::ArmRead() {
  if (state_ != State::kOpen) return;
  bool want = !reads_.empty() || stagingEnd_ - stagingBegin_ < stagingSize_;
  uv_stream_t* stream = handle_.stream();
  if (want && !reading_) {
    int r = uv_read_start(stream, OnAlloc, OnRead);
    if (r < 0) {
      Broke(r);
      return;
    }
    reading_ = true;
  } else if (!want && reading_) {
    uv_read_stop(stream);
    reading_ = false;
  }
}

void UvConnection::StopIo() {
  if (reading_) uv_read_stop(handle_.stream());
  reading_ = false;
}

void UvConnection::OnAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* c = static_cast<UvConnection*>(handle->data);
  if (c->stagingBegin_ == c->stagingEnd_) c->stagingBegin_ = c->stagingEnd_ = 0;
  if (!c->reads_.empty() && c->stagingBegin_ == c->stagingEnd_) {
    FrameRead& op = *c->reads_.front();
    uint64_t remaining = op.BodyRemaining();
    if (remaining >= kDirectThreshold && (op.Room() > 0 || op.Reserve(kDirectThreshold))) {
      c->direct_ = true;
      *buf = MakeBuf(op.BodyCursor(), std::min(op.Room(), kMaxRecv));
      return;
    }
  }
  if (c->stagingBegin_ > 0 && c->stagingSize_ - c->stagingEnd_ < kDirectThreshold) {
    std::memmove(c->staging_.get(), c->staging_.get() + c->stagingBegin_, c->stagingEnd_ - c->stagingBegin_);
    c->stagingEnd_ -= c->stagingBegin_;
    c->stagingBegin_ = 0;
  }
  c->direct_ = false;
  *buf = MakeBuf(c->staging_.get() + c->stagingEnd_, c->stagingSize_ - c->stagingEnd_);
}

void UvConnection::OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t*) {
  auto* c = static_cast<UvConnection*>(stream->data);
  if (c->state_ != State::kOpen || nread == 0) return;
  FromLoop(c->Env(), [&] {
    if (nread > 0) {
      if (c->direct_)
        c->reads_.front()->bodyGot += static_cast<uint64_t>(nread);
      else
        c->stagingEnd_ += static_cast<size_t>(nread);
      c->PumpReads();
      return;
    }
    c->Broke(static_cast<int>(nread));
  });
}

// detach() -> HandedSocket { fd, readAhead, take(), close() }: hands the
// socket over to a caller that does its own I/O on it (mpt's lanes on their
// own threads). It gets a duplicate of the descriptor, owned by the
// HandedSocket until taken; the bytes already read ahead come with it, and
// this connection is closed without touching the socket.
Napi::Value UvConnection::Detach(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (state_ != State::kOpen) throw CodedError(env, "ERR_TP_CLOSED", "connection is closed or failed");
  if (!reads_.empty() || writesInFlight_ > 0) {
    throw CodedError(env, "ERR_TP_INVALID_ARG", "cannot hand over a connection with reads or writes in flight");
  }
  uv_os_fd_t fd;
  int r = uv_fileno(handle_.handle(), &fd);
  if (r < 0) throw UvError(env, r, "detach");
  size_t ahead = stagingEnd_ - stagingBegin_;
  Napi::Uint8Array readAhead = Napi::Uint8Array::New(env, ahead);
  if (ahead > 0) std::memcpy(readAhead.Data(), staging_.get() + stagingBegin_, ahead);
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) throw UvError(env, uv_translate_sys_error(errno), "dup");
  Napi::Object out = HandedSocket::New(env, copy, readAhead);
  CloseAll();
  return out;
}

// The socket, for provePeerProcess; -1 once closed.
int UvConnection::SocketFd() {
  uv_os_fd_t fd;
  if (!handle_ || uv_fileno(handle_.handle(), &fd) != 0) return -1;
  return fd;
}

namespace {
Napi::Value AddressOf(Napi::Env env, uv_tcp_t* handle, bool peer) {
  if (handle == nullptr) return Napi::String::New(env, "");
  struct sockaddr_storage addr;
  int len = sizeof(addr);
  int r = peer ? uv_tcp_getpeername(handle, reinterpret_cast<struct sockaddr*>(&addr), &len)
               : uv_tcp_getsockname(handle, reinterpret_cast<struct sockaddr*>(&addr), &len);
  if (r < 0) return Napi::String::New(env, "");
  return Napi::String::New(env, SockaddrToString(addr));
}
}  // namespace

Napi::Value UvConnection::LocalAddress(const Napi::CallbackInfo& info) {
  return AddressOf(info.Env(), handle_.get(), false);
}

Napi::Value UvConnection::RemoteAddress(const Napi::CallbackInfo& info) {
  return AddressOf(info.Env(), handle_.get(), true);
}

// Bytes staged here, or waiting in the kernel for the loop to read them.
bool UvConnection::HasPendingInput() {
  if (HasUnreadBytes()) return true;
  int fd = SocketFd();
  int n = 0;
  return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

}  // namespace tensorpipe_js
