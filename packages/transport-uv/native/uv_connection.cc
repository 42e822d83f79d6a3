#include "uv_connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "addon_data.h"
#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {

namespace {
constexpr size_t kStagingSize = 64 * 1024;
// Bodies at least this large skip the staging buffer.
constexpr uint64_t kDirectThreshold = 16 * 1024;
// One recv() at most; larger bodies take several.
constexpr uint64_t kMaxRecv = 1ull << 30;
constexpr uint64_t kSmallFrame = 4096;
constexpr size_t kSlabSize = 64 * 1024;

// uv_buf_init() takes an unsigned int; frames may be larger.
uv_buf_t MakeBuf(char* base, size_t len) {
  uv_buf_t b;
  b.base = base;
  b.len = len;
  return b;
}
}  // namespace

UvConnection::ReadOp::~ReadOp() { std::free(fresh); }

Napi::Function UvConnection::Define(Napi::Env env) {
  return DefineClass(env, "UvConnection",
                     {
                         InstanceMethod<&UvConnection::Write>("write"),
                         InstanceMethod<&UvConnection::Read>("read"),
                         InstanceMethod<&UvConnection::Close>("close"),
                         InstanceMethod<&UvConnection::LocalAddress>("localAddress"),
                         InstanceMethod<&UvConnection::RemoteAddress>("remoteAddress"),
                     });
}

UvConnection* UvConnection::Create(Napi::Env env, uv_loop_t* loop, Napi::Object* out) {
  AddonData* data = GetAddonData(env);
  *out = data->connectionConstructor.New({Napi::External<void>::New(env, nullptr)});
  UvConnection* c = Unwrap(*out);
  c->handle_ = new uv_tcp_t;
  uv_tcp_init(loop, c->handle_);
  c->handle_->data = c;
  // The JS object must outlive the handle, whatever JS holds on to.
  c->Ref();
  return c;
}

UvConnection::UvConnection(const Napi::CallbackInfo& info) : Napi::ObjectWrap<UvConnection>(info) {
  if (info.Length() != 1 || !info[0].IsExternal()) {
    throw Napi::TypeError::New(info.Env(), "UvConnection is created by connect() or a listener");
  }
  staging_.resize(kStagingSize);
  asyncContext_ = std::make_unique<Napi::AsyncContext>(info.Env(), "tensorpipe.UvConnection", info.This().As<Napi::Object>());
}

UvConnection::~UvConnection() = default;

void UvConnection::Start() {
  state_ = State::kOpen;
  uv_tcp_nodelay(handle_, 1);
  UpdateReading();
}

void UvConnection::CloseHandle() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  reads_.clear();
  if (reading_) uv_read_stop(reinterpret_cast<uv_stream_t*>(handle_));
  reading_ = false;
  uv_close(reinterpret_cast<uv_handle_t*>(handle_), OnClose);
}

void UvConnection::OnClose(uv_handle_t* handle) {
  auto* c = static_cast<UvConnection*>(handle->data);
  delete reinterpret_cast<uv_tcp_t*>(handle);
  c->handle_ = nullptr;
  c->Unref();
}

Napi::Value UvConnection::Close(const Napi::CallbackInfo& info) {
  CloseHandle();
  return info.Env().Undefined();
}

// write(frames: ArrayBufferView[], callback(err)) -> true when every byte
// was written at once (the callback is then never called), else false.
Napi::Value UvConnection::Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (state_ != State::kOpen) throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
  Napi::Array frames = info[0].As<Napi::Array>();
  uint32_t n = frames.Length();
  auto op = std::make_unique<WriteOp>();
  op->headers.resize(n);
  op->bufs.reserve(2 * n);
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    ByteSpan span;
    if (!GetBytes(frames.Get(i), &span)) throw Napi::TypeError::New(env, "frames must be ArrayBufferViews");
    uint64_t len = span.length;
    std::memcpy(&op->headers[i], &len, 8);  // little-endian hosts only, as upstream
    op->bufs.push_back(MakeBuf(reinterpret_cast<char*>(&op->headers[i]), 8));
    if (len > 0) op->bufs.push_back(MakeBuf(span.data, len));
    total += 8 + len;
  }
  auto* stream = reinterpret_cast<uv_stream_t*>(handle_);
  int written = uv_try_write(stream, op->bufs.data(), static_cast<unsigned int>(op->bufs.size()));
  if (written >= 0 && static_cast<size_t>(written) == total) return Napi::Boolean::New(env, true);
  // Skip what went out already; queue the rest, which libuv keeps in order.
  size_t skip = written > 0 ? static_cast<size_t>(written) : 0;
  size_t first = 0;
  while (skip > 0 && skip >= op->bufs[first].len) skip -= op->bufs[first++].len;
  op->bufs[first].base += skip;
  op->bufs[first].len -= skip;
  op->connection = this;
  op->keepFrames = Napi::Persistent(info[0]);
  op->callback = Napi::Persistent(info[1].As<Napi::Function>());
  op->req.data = op.get();
  int r = uv_write(&op->req, stream, op->bufs.data() + first, static_cast<unsigned int>(op->bufs.size() - first), OnWrite);
  if (r < 0) throw UvError(env, r, "write");
  op.release();
  return Napi::Boolean::New(env, false);
}

void UvConnection::OnWrite(uv_write_t* req, int status) {
  std::unique_ptr<WriteOp> op(static_cast<WriteOp*>(req->data));
  UvConnection* c = op->connection;
  if (c->state_ == State::kClosed) return;
  Napi::Env env = op->callback.Env();
  Napi::HandleScope scope(env);
  napi_value arg = status < 0 ? UvError(env, status, "write").Value() : env.Null();
  InvokeCallback(op->callback, *c->asyncContext_, {arg});
}

// read(target: ArrayBufferView | null, maxLength: number, callback(err, buf))
// -> false when queued, or the result when the frame was already here:
// true (read into target), a Buffer (fresh memory) or an Error.
Napi::Value UvConnection::Read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (state_ == State::kClosed || state_ == State::kIdle) {
    throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
  }
  auto op = std::make_unique<ReadOp>();
  if (!info[0].IsNull() && !info[0].IsUndefined()) {
    ByteSpan span;
    if (!GetBytes(info[0], &span)) throw Napi::TypeError::New(env, "target must be an ArrayBufferView");
    op->hasTarget = true;
    op->target = span.data;
    op->targetLength = span.length;
    op->keepTarget = Napi::Persistent(info[0]);
  }
  op->maxLength = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
  // With nothing queued before it, a frame already read ahead completes
  // here, even from inside a completion callback: order cannot change.
  if (reads_.empty()) {
    Progress p = Consume(*op);
    if (p == Progress::kDone) return Result(*op);
    if (p == Progress::kError) return Fail(nullptr, 0);
  }
  if (state_ == State::kFailed) return FailureFor(*op);
  op->callback = Napi::Persistent(info[2].As<Napi::Function>());
  reads_.push_back(std::move(op));
  UpdateReading();
  return Napi::Boolean::New(env, false);
}

UvConnection::Progress UvConnection::Consume(ReadOp& op) {
  while (!op.haveHeader && stagingBegin_ < stagingEnd_) {
    size_t n = std::min<size_t>(8 - op.headerGot, stagingEnd_ - stagingBegin_);
    std::memcpy(op.header + op.headerGot, staging_.data() + stagingBegin_, n);
    op.headerGot += n;
    stagingBegin_ += n;
    if (op.headerGot < 8) break;
    std::memcpy(&op.frameLength, op.header, 8);
    if (op.hasTarget) {
      if (op.frameLength != op.targetLength) {
        protocolError_ = "frame of " + std::to_string(op.frameLength) + " bytes where " +
                         std::to_string(op.targetLength) + " were expected";
        return Progress::kError;
      }
      op.body = op.target;
    } else {
      if (op.frameLength > op.maxLength) {
        protocolError_ = "frame length " + std::to_string(op.frameLength) + " exceeds the limit of " +
                         std::to_string(op.maxLength) + " bytes";
        return Progress::kError;
      }
      op.fresh = static_cast<char*>(std::malloc(op.frameLength > 0 ? op.frameLength : 1));
      if (op.fresh == nullptr) {
        protocolError_ = "cannot allocate " + std::to_string(op.frameLength) + " bytes for a frame";
        return Progress::kError;
      }
      op.body = op.fresh;
    }
    op.haveHeader = true;
  }
  if (!op.haveHeader) return Progress::kNeedMore;
  uint64_t n = std::min<uint64_t>(op.frameLength - op.bodyGot, stagingEnd_ - stagingBegin_);
  if (n > 0) {
    std::memcpy(op.body + op.bodyGot, staging_.data() + stagingBegin_, n);
    op.bodyGot += n;
    stagingBegin_ += n;
  }
  if (stagingBegin_ == stagingEnd_) stagingBegin_ = stagingEnd_ = 0;
  return op.bodyGot == op.frameLength ? Progress::kDone : Progress::kNeedMore;
}

Napi::Value UvConnection::Result(ReadOp& op) {
  Napi::Env env = Env();
  if (op.hasTarget) return Napi::Boolean::New(env, true);
  // Small frames are copied into a shared slab and returned as views of it:
  // no ArrayBuffer (and no finalizer) per frame, as Node's Buffer pool does.
  if (op.frameLength <= kSmallFrame) {
    if (slab_.IsEmpty() || slabUsed_ + op.frameLength > kSlabSize) {
      Napi::ArrayBuffer slab = Napi::ArrayBuffer::New(env, kSlabSize);
      slab_ = Napi::Persistent(slab);
      slabData_ = static_cast<char*>(slab.Data());
      slabUsed_ = 0;
    }
    std::memcpy(slabData_ + slabUsed_, op.fresh, op.frameLength);
    Napi::Uint8Array view = Napi::Uint8Array::New(env, op.frameLength, slab_.Value(), slabUsed_);
    slabUsed_ += op.frameLength;
    return view;
  }
  char* data = op.fresh;
  op.fresh = nullptr;
  return Napi::Buffer<char>::New(env, data, op.frameLength, [](Napi::Env, char* p) { std::free(p); });
}

void UvConnection::Pump() {
  if (pumping_) return;
  pumping_ = true;
  Napi::Env env = Env();
  while (!reads_.empty() && state_ == State::kOpen) {
    Progress p = Consume(*reads_.front());
    if (p == Progress::kNeedMore) break;
    std::unique_ptr<ReadOp> op = std::move(reads_.front());
    reads_.pop_front();
    Napi::HandleScope scope(env);
    if (p == Progress::kError) {
      InvokeCallback(op->callback, *asyncContext_, {Fail(nullptr, 0)});
      break;
    }
    napi_value result = Result(*op);
    InvokeCallback(op->callback, *asyncContext_, {env.Null(), result});
  }
  pumping_ = false;
  UpdateReading();
}

// Reads ahead into the staging buffer while it has room, as node:net
// does: no epoll changes between messages, and a frame that is already
// here completes without waiting for the loop. A full buffer with nobody
// reading stops reading, which pushes back on the peer through TCP.
void UvConnection::UpdateReading() {
  if (state_ != State::kOpen) return;
  bool want = !reads_.empty() || stagingEnd_ - stagingBegin_ < staging_.size();
  auto* stream = reinterpret_cast<uv_stream_t*>(handle_);
  if (want && !reading_) {
    int r = uv_read_start(stream, OnAlloc, OnRead);
    if (r < 0) {
      Napi::HandleScope scope(Env());
      FailFront(Fail(nullptr, r));
      return;
    }
    reading_ = true;
  } else if (!want && reading_) {
    uv_read_stop(stream);
    reading_ = false;
  }
}

// Records why reading ended (a libuv status, or 0 for the protocol error
// already recorded) and returns the error for `op`.
Napi::Value UvConnection::Fail(const ReadOp* op, int status) {
  state_ = State::kFailed;
  if (reading_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(handle_));
    reading_ = false;
  }
  if (status != 0 && failStatus_ == 0 && protocolError_.empty()) failStatus_ = status;
  return op ? FailureFor(*op) : FailureFor(ReadOp());
}

// A frame cut short by EOF is a protocol error; EOF between frames is EOF.
Napi::Value UvConnection::FailureFor(const ReadOp& op) {
  Napi::Env env = Env();
  if (!protocolError_.empty()) return CodedError(env, "ERR_TP_PROTOCOL", protocolError_).Value();
  if (failStatus_ == UV_EOF && (op.headerGot > 0 || stagingBegin_ != stagingEnd_)) {
    std::string what = op.haveHeader ? "after " + std::to_string(op.bodyGot) + " of " +
                                           std::to_string(op.frameLength) + " bytes"
                                     : "inside a frame header";
    return CodedError(env, "ERR_TP_PROTOCOL", "truncated frame: peer closed the connection " + what).Value();
  }
  return UvError(env, failStatus_, "read").Value();
}

void UvConnection::FailFront(Napi::Value error) {
  if (reads_.empty()) return;
  std::unique_ptr<ReadOp> op = std::move(reads_.front());
  reads_.pop_front();
  InvokeCallback(op->callback, *asyncContext_, {error});
}

void UvConnection::OnAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* c = static_cast<UvConnection*>(handle->data);
  if (c->stagingBegin_ == c->stagingEnd_) c->stagingBegin_ = c->stagingEnd_ = 0;
  if (!c->reads_.empty() && c->stagingBegin_ == c->stagingEnd_) {
    ReadOp& op = *c->reads_.front();
    uint64_t remaining = op.frameLength - op.bodyGot;
    if (op.haveHeader && remaining >= kDirectThreshold) {
      c->direct_ = true;
      *buf = MakeBuf(op.body + op.bodyGot, std::min(remaining, kMaxRecv));
      return;
    }
  }
  if (c->stagingBegin_ > 0 && c->staging_.size() - c->stagingEnd_ < kDirectThreshold) {
    std::memmove(c->staging_.data(), c->staging_.data() + c->stagingBegin_, c->stagingEnd_ - c->stagingBegin_);
    c->stagingEnd_ -= c->stagingBegin_;
    c->stagingBegin_ = 0;
  }
  c->direct_ = false;
  *buf = MakeBuf(c->staging_.data() + c->stagingEnd_, c->staging_.size() - c->stagingEnd_);
}

void UvConnection::OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t*) {
  auto* c = static_cast<UvConnection*>(stream->data);
  if (c->state_ != State::kOpen) return;
  if (nread > 0) {
    if (c->direct_) c->reads_.front()->bodyGot += static_cast<uint64_t>(nread);
    else c->stagingEnd_ += static_cast<size_t>(nread);
    c->Pump();
    return;
  }
  if (nread == 0) return;
  Napi::HandleScope scope(c->Env());
  const ReadOp* front = c->reads_.empty() ? nullptr : c->reads_.front().get();
  Napi::Value err = c->Fail(front, static_cast<int>(nread));
  // With no read pending, the next read() learns of it (after any frames
  // still in the staging buffer).
  if (front) c->FailFront(err);
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
  return AddressOf(info.Env(), handle_, false);
}

Napi::Value UvConnection::RemoteAddress(const Napi::CallbackInfo& info) {
  return AddressOf(info.Env(), handle_, true);
}

}  // namespace tensorpipe_js
