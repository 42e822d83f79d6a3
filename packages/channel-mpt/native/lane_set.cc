#include "lane_set.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {

namespace {
// On the wire each chunk is two frames as the transport frames them (an
// 8-byte little-endian length, then the bytes): the 24-byte header and up
// to 63 bytes of padding, then the chunk, so that lanes without threads
// (src/frame-lanes.ts) speak the same format.
constexpr size_t kHeaderSize = 24;
constexpr size_t kMaxPad = 63;
constexpr size_t kWireHeaderSize = 8 + kHeaderSize + 8;
// Chunks are never smaller (a header and a wake-up per chunk) nor larger
// than this (a slow lane must not hold much of a tensor back).
constexpr uint64_t kMinChunk = 256 * 1024;
// Sequence numbers more than this far ahead of what the receiver has
// posted are a peer's error, not tensors to wait for.
constexpr uint64_t kMaxSeqAhead = 1ull << 20;

void PutU64(char* at, uint64_t v) {
  for (int i = 0; i < 8; i++) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetU64(const char* at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= static_cast<uint64_t>(static_cast<uint8_t>(at[i])) << (8 * i);
  return v;
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }
}  // namespace

Napi::Function LaneSet::Define(Napi::Env env) {
  return DefineClass(env, "LaneSet",
                     {
                         InstanceMethod<&LaneSet::Send>("send"),
                         InstanceMethod<&LaneSet::Recv>("recv"),
                         InstanceMethod<&LaneSet::Close>("close"),
                     });
}

// new LaneSet(fds: number[], readAhead: Uint8Array[], maxChunk: number,
//             unsentLimit: number, onEvent(id: number, err: Error | null))
// The lanes run on duplicates of `fds`: the caller closes its own.
// onEvent(id, null) says operation `id` is done; onEvent(-1, err) that the
// lanes failed (every pending and later operation is then lost).
LaneSet::LaneSet(const Napi::CallbackInfo& info) : Napi::ObjectWrap<LaneSet>(info) {
  Napi::Env env = info.Env();
  if (info.Length() != 5 || !info[0].IsArray() || !info[1].IsArray() || !info[2].IsNumber() || !info[3].IsNumber() ||
      !info[4].IsFunction()) {
    throw Napi::TypeError::New(env, "LaneSet(fds, readAhead, maxChunk, unsentLimit, onEvent)");
  }
  Napi::Array fds = info[0].As<Napi::Array>();
  Napi::Array ahead = info[1].As<Napi::Array>();
  if (fds.Length() == 0 || fds.Length() != ahead.Length())
    throw Napi::RangeError::New(env, "one read-ahead per lane, one lane at least");
  maxChunk_ = std::max<uint64_t>(kMinChunk, static_cast<uint64_t>(info[2].As<Napi::Number>().DoubleValue()));
  int unsentLimit = info[3].As<Napi::Number>().Int32Value();
  for (uint32_t i = 0; i < fds.Length(); i++) {
    auto lane = std::make_unique<Lane>();
    lane->fd = fcntl(fds.Get(i).As<Napi::Number>().Int32Value(), F_DUPFD_CLOEXEC, 0);
    if (lane->fd < 0) throw UvError(env, uv_translate_sys_error(errno), "dup");
    ByteSpan bytes;
    if (!GetBytes(ahead.Get(i), &bytes)) throw Napi::TypeError::New(env, "readAhead must hold Uint8Arrays");
    lane->readAhead.assign(bytes.data, bytes.data + bytes.length);
    // The threads block on their socket: nothing else polls it any more.
    int flags = fcntl(lane->fd, F_GETFL);
    if (flags < 0 || fcntl(lane->fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
      throw UvError(env, uv_translate_sys_error(errno), "fcntl");
    }
    if (unsentLimit > 0 && setsockopt(lane->fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &unsentLimit, sizeof unsentLimit) < 0) {
      throw UvError(env, uv_translate_sys_error(errno), "setsockopt");
    }
    lanes_.push_back(std::move(lane));
  }
  // Kept alive until the thread-safe function is done with it (after close).
  Ref();
  // Node finalizes the function when the environment goes, possibly
  // before the lifecycle's teardown, and frees it right after: the threads
  // that call it are joined first.
  tsfn_ = Napi::ThreadSafeFunction::New(env, info[4].As<Napi::Function>(), "tensorpipe.mpt.LaneSet", 0, 1, this,
                                        [](Napi::Env, LaneSet* self) {
                                          self->Stop();
                                          self->tsfnGone_ = true;
                                          self->Unref();
                                        });
  tsfn_.Unref(env);
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->sender = std::thread([this, l] { SendLoop(l); });
    l->receiver = std::thread([this, l] { RecvLoop(l); });
  }
  LifecycleOf(env).Own(this);
}

LaneSet::~LaneSet() { Stop(); }

LaneSet::Op* LaneSet::Submit(const Napi::CallbackInfo& info, uint64_t seq) {
  Napi::Env env = info.Env();
  if (stopped_) throw CodedError(env, "ERR_TP_CLOSED", "mpt lanes are closed");
  ByteSpan bytes;
  if (info.Length() != 3 || !GetBytes(info[0], &bytes) || !info[1].IsNumber() || !info[2].IsNumber()) {
    throw Napi::TypeError::New(env, "(view, length, id)");
  }
  double length = info[1].As<Napi::Number>().DoubleValue();
  if (length < 0 || length > static_cast<double>(bytes.length))
    throw Napi::RangeError::New(env, "length exceeds the view");
  auto op = std::make_unique<Op>();
  op->id = info[2].As<Napi::Number>().DoubleValue();
  op->seq = seq;
  op->data = bytes.data;
  op->length = static_cast<uint64_t>(length);
  // About two chunks per lane: a lane that finishes early takes more.
  op->chunk = std::min(maxChunk_, std::max(kMinChunk, RoundUp(op->length / (2 * lanes_.size()) + 1, 64 * 1024)));
  op->keep = Napi::Persistent(info[0]);
  Op* raw = op.get();
  ops_[op->id] = std::move(op);
  if (pending_++ == 0) tsfn_.Ref(env);
  return raw;
}

// send(view, length, id)
Napi::Value LaneSet::Send(const Napi::CallbackInfo& info) {
  Op* op = Submit(info, nextSendSeq_++);
  std::unique_lock<std::mutex> lock(mu_);
  if (op->length == 0) {
    Complete(op, lock);
  } else {
    sends_.push_back(op);
    sendable_.notify_all();
  }
  return info.Env().Undefined();
}

// recv(view, length, id)
Napi::Value LaneSet::Recv(const Napi::CallbackInfo& info) {
  Op* op = Submit(info, nextRecvSeq_++);
  std::unique_lock<std::mutex> lock(mu_);
  recvsPosted_ = op->seq + 1;
  if (op->length == 0) {
    Complete(op, lock);
  } else {
    recvs_[op->seq] = op;
    posted_.notify_all();
  }
  return info.Env().Undefined();
}

bool LaneSet::ClaimLocked(Op* op, uint64_t offset, uint64_t length) {
  if (length == 0 || offset > op->length || length > op->length - offset) return false;
  uint64_t end = offset + length;
  // Honest senders cut chunks of kMinChunk at least but the tensor's last:
  // a peer cannot make the claims long.
  if (length < kMinChunk && end != op->length) return false;
  auto next = op->claimed.upper_bound(offset);
  if (next != op->claimed.end() && next->first < end) return false;
  auto prev = next == op->claimed.begin() ? op->claimed.end() : std::prev(next);
  if (prev != op->claimed.end() && prev->second > offset) return false;
  if (next != op->claimed.end() && next->first == end) {
    end = next->second;
    op->claimed.erase(next);
  }
  if (prev != op->claimed.end() && prev->second == offset) {
    prev->second = end;
  } else {
    op->claimed.emplace(offset, end);
  }
  return true;
}

void LaneSet::SendLoop(Lane* lane) {
  char header[kWireHeaderSize + kMaxPad] = {};
  // What this thread has written. The kernel copies a thread's sends into
  // page fragments of its own, filled in order from a page boundary, and
  // this thread writes nothing else: this is where the next byte lands in
  // them, modulo 64, until the kernel starts a page over once the receiver
  // has freed it, which leaves later chunks at an arbitrary offset.
  uint64_t sent = 0;
  for (;;) {
    Op* op;
    uint64_t offset;
    uint64_t length;
    {
      std::unique_lock<std::mutex> lock(mu_);
      sendable_.wait(lock, [&] { return stopping_ || failed_ || !sends_.empty(); });
      if (stopping_ || failed_) return;
      op = sends_.front();
      offset = op->handedOut;
      length = std::min(op->chunk, op->length - offset);
      op->handedOut += length;
      if (op->handedOut == op->length) sends_.pop_front();
    }
    // Padding puts the chunk at the same offset modulo 64 in the socket's
    // pages as in the user's memory. The kernel copies with `rep movsb`,
    // which some CPUs run several times slower when the destination is 1
    // to 31 bytes past the source modulo 4 KiB (6x on this project's AMD
    // EPYC machines): where a large buffer from malloc, 16 bytes into its
    // page, stands to a page the receiver copies out of. Within a
    // machine (loopback, veth) the receiver copies out of the same pages,
    // so its copy gains too where its buffer is aligned as the sender's.
    size_t pad = (reinterpret_cast<uintptr_t>(op->data + offset) - (sent + kWireHeaderSize)) & kMaxPad;
    PutU64(header, kHeaderSize + pad);
    PutU64(header + 8, op->seq);
    PutU64(header + 16, offset);
    PutU64(header + 24, length);
    PutU64(header + 32 + pad, length);
    sent += kWireHeaderSize + pad + length;
    struct iovec iov[2] = {{header, kWireHeaderSize + pad}, {op->data + offset, length}};
    int first = 0;
    while (first < 2) {
      struct msghdr msg = {};
      msg.msg_iov = iov + first;
      msg.msg_iovlen = 2 - first;
      ssize_t n = sendmsg(lane->fd, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        std::lock_guard<std::mutex> lock(mu_);
        FailLocked({uv_translate_sys_error(errno), "send", ""});
        return;
      }
      size_t left = static_cast<size_t>(n);
      while (first < 2 && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (first < 2) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    op->moved += length;
    if (op->moved == op->length) Complete(op, lock);
  }
}

uint64_t LaneSet::ReadFull(Lane* lane, char* to, uint64_t length, int* status) {
  const uint64_t wanted = length;
  size_t ahead = std::min<uint64_t>(length, lane->readAhead.size() - lane->readAheadUsed);
  if (ahead > 0) {
    std::memcpy(to, lane->readAhead.data() + lane->readAheadUsed, ahead);
    lane->readAheadUsed += ahead;
    if (lane->readAheadUsed == lane->readAhead.size()) {
      std::vector<char>().swap(lane->readAhead);
      lane->readAheadUsed = 0;
    }
    to += ahead;
    length -= ahead;
  }
  while (length > 0) {
    ssize_t n = recv(lane->fd, to, length, 0);
    if (n > 0) {
      to += n;
      length -= static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    *status = n == 0 ? UV_EOF : uv_translate_sys_error(errno);
    break;
  }
  return wanted - length;
}

void LaneSet::RecvLoop(Lane* lane) {
  char header[kWireHeaderSize + kMaxPad];
  for (;;) {
    int status = 0;
    // The header frame's length first: a peer that sent anything else may
    // send nothing more, and waiting for 40 bytes would hang.
    uint64_t got = ReadFull(lane, header, 8, &status);
    uint64_t headerSize = got == 8 ? GetU64(header) : 0;
    bool sized = headerSize >= kHeaderSize && headerSize <= kHeaderSize + kMaxPad;
    bool framed = got == 8 && (!sized || ReadFull(lane, header + 8, headerSize + 8, &status) == headerSize + 8);
    if (!framed) {
      std::lock_guard<std::mutex> lock(mu_);
      // A peer that is done closes every lane after its last chunk, and
      // another lane may still hold chunks of a tensor: only once all have
      // ended can nothing more arrive.
      if (got == 0 && status == UV_EOF && ++lanesEnded_ < lanes_.size()) return;
      FailLocked({status, "recv", "", got == 0});
      return;
    }
    uint64_t seq = GetU64(header + 8);
    uint64_t offset = GetU64(header + 16);
    uint64_t length = GetU64(header + 24);
    Op* op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!sized || GetU64(header + 8 + headerSize) != length) {
        FailLocked(
            {0, "", "mpt lane: expected a chunk header of 24 to 87 bytes and then a frame of the chunk's length"});
        return;
      }
      if (seq >= recvsPosted_ + kMaxSeqAhead) {
        FailLocked({0, "", "mpt chunk for tensor #" + std::to_string(seq) + ", far beyond any receive posted"});
        return;
      }
      // A chunk may come before its tensor's receive is posted: the lane
      // waits (and TCP holds the sender back) until it is.
      posted_.wait(lock, [&] { return stopping_ || failed_ || seq < recvsPosted_; });
      if (stopping_ || failed_) return;
      auto it = recvs_.find(seq);
      if (it == recvs_.end() || !ClaimLocked(it->second, offset, length)) {
        FailLocked({0, "",
                    "mpt chunk [" + std::to_string(offset) + ", +" + std::to_string(length) + ") for tensor #" +
                        std::to_string(seq) +
                        " does not fit any pending receive (it overlaps another chunk, runs past the tensor, or is "
                        "under 256 KiB "
                        "without ending it)"});
        return;
      }
      op = it->second;
    }
    if (ReadFull(lane, op->data + offset, length, &status) != length) {
      std::lock_guard<std::mutex> lock(mu_);
      FailLocked({status, "recv", ""});
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    op->moved += length;
    if (op->moved == op->length) {
      recvs_.erase(op->seq);
      Complete(op, lock);
    }
  }
}

void LaneSet::Complete(Op* op, std::unique_lock<std::mutex>& lock) {
  done_.push_back(op->id);
  bool wake = ClaimSignalLocked();
  lock.unlock();
  if (wake) Signal();
}

void LaneSet::FailLocked(Failure failure) {
  // Errors that closing caused on purpose are nobody's news.
  if (failed_ || stopping_) return;
  failed_ = true;
  failure_ = std::move(failure);
  sendable_.notify_all();
  posted_.notify_all();
  // Wakes the other lanes' threads from their blocking calls.
  for (auto& lane : lanes_) shutdown(lane->fd, SHUT_RDWR);
  // A failure is rare: it may wake the JS thread under the lock.
  if (ClaimSignalLocked()) Signal();
}

bool LaneSet::ClaimSignalLocked() {
  if (signalled_ || stopping_) return false;
  signalled_ = true;
  return true;
}

void LaneSet::Signal() {
  tsfn_.NonBlockingCall([this](Napi::Env env, Napi::Function callback) { Deliver(env, callback); });
}

void LaneSet::Deliver(Napi::Env env, Napi::Function callback) {
  std::vector<double> done;
  bool fail = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    signalled_ = false;
    done.swap(done_);
    if (failed_ && !failureDelivered_) fail = failureDelivered_ = true;
  }
  if (stopped_) return;
  for (double id : done) {
    ops_.erase(id);
    if (--pending_ == 0) tsfn_.Unref(env);
  }
  FromLoop(env, [&] {
    for (double id : done) callback.Call({Napi::Number::New(env, id), env.Null()});
    if (fail) {
      Napi::Error err = failure_.protocol.empty() ? UvError(env, failure_.status, failure_.syscall)
                                                  : CodedError(env, "ERR_TP_PROTOCOL", failure_.protocol);
      if (failure_.status == UV_ECONNRESET && failure_.betweenFrames)
        err.Set("betweenFrames", Napi::Boolean::New(env, true));
      callback.Call({Napi::Number::New(env, -1), err.Value()});
    }
  });
}

void LaneSet::Stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    sendable_.notify_all();
    posted_.notify_all();
  }
  for (auto& lane : lanes_) shutdown(lane->fd, SHUT_RDWR);
  for (auto& lane : lanes_) {
    if (lane->sender.joinable()) lane->sender.join();
    if (lane->receiver.joinable()) lane->receiver.join();
    close(lane->fd);
    lane->fd = -1;
  }
}

// close(): stops the threads and closes the sockets. Operations still
// pending are never reported: the caller fails them itself.
Napi::Value LaneSet::Close(const Napi::CallbackInfo& info) {
  Shutdown();
  return info.Env().Undefined();
}

void LaneSet::Shutdown() {
  if (released_) return;
  released_ = true;
  Stop();
  ops_.clear();
  if (!tsfnGone_) {
    if (pending_ > 0) tsfn_.Unref(Env());
    tsfn_.Release();
  }
  pending_ = 0;
  LifecycleOf(Env()).Released(this);
}

}  // namespace tensorpipe_js
