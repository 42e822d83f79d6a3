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
constexpr size_t kStagingSize = 256 * 1024;
// Bodies at least this large skip the staging buffer.
constexpr uint64_t kDirectThreshold = 32 * 1024;
// One recv() at most; larger bodies take several.
constexpr uint64_t kMaxRecv = 1ull << 30;
constexpr uint64_t kSmallFrame = 4096;

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
  if (state_ != State::kOpen) throw CodedError(env, "ERR_TP_CLOSED", "connection is closed");
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
  // With nothing queued before it, a frame already buffered completes here,
  // even from inside a completion callback: order cannot change.
  if (reads_.empty()) {
    Progress p = Consume(*op);
    // Bytes may already wait in the socket: take them now rather than a
    // loop iteration later, for small frames (large ones go direct below).
    if (p == Progress::kNeedMore && !(op->haveHeader && op->frameLength - op->bodyGot >= kDirectThreshold) &&
        TryReadNow()) {
      p = Consume(*op);
    }
    if (p == Progress::kDone) return Result(*op);
    if (p == Progress::kError) {
      state_ = State::kFailed;
      return CodedError(env, "ERR_TP_PROTOCOL", protocolError_).Value();
    }
  }
  op->callback = Napi::Persistent(info[2].As<Napi::Function>());
  reads_.push_back(std::move(op));
  UpdateReading();
  return Napi::Boolean::New(env, false);
}

bool UvConnection::TryReadNow() {
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(handle_), &fd) != 0) return false;
  if (stagingBegin_ == stagingEnd_) stagingBegin_ = stagingEnd_ = 0;
  ssize_t n;
  do {
    n = ::recv(fd, staging_.data() + stagingEnd_, staging_.size() - stagingEnd_, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  // EOF and errors are left for libuv's read callback to report.
  if (n <= 0) return false;
  stagingEnd_ += static_cast<size_t>(n);
  return true;
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
  // Copying a small frame is cheaper than an external buffer and its finalizer.
  if (op.frameLength <= kSmallFrame) return Napi::Buffer<char>::Copy(env, op.fresh, op.frameLength);
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
      state_ = State::kFailed;
      InvokeCallback(op->callback, *asyncContext_, {CodedError(env, "ERR_TP_PROTOCOL", protocolError_).Value()});
      break;
    }
    napi_value result = Result(*op);
    InvokeCallback(op->callback, *asyncContext_, {env.Null(), result});
  }
  pumping_ = false;
  UpdateReading();
}

void UvConnection::UpdateReading() {
  if (state_ == State::kClosed) return;
  bool want = state_ == State::kOpen && !reads_.empty();
  auto* stream = reinterpret_cast<uv_stream_t*>(handle_);
  if (want && !reading_) {
    int r = uv_read_start(stream, OnAlloc, OnRead);
    if (r < 0) {
      Napi::HandleScope scope(Env());
      state_ = State::kFailed;
      FailReads(UvError(Env(), r, "read").Value());
      return;
    }
    reading_ = true;
  } else if (!want && reading_) {
    uv_read_stop(stream);
    reading_ = false;
  }
}

void UvConnection::FailReads(Napi::Value error) {
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
  Napi::Env env = c->Env();
  Napi::HandleScope scope(env);
  c->state_ = State::kFailed;
  uv_read_stop(stream);
  c->reading_ = false;
  bool midFrame = c->stagingBegin_ != c->stagingEnd_ ||
                  (!c->reads_.empty() && c->reads_.front()->headerGot > 0);
  if (nread == UV_EOF && midFrame) {
    const ReadOp* op = c->reads_.empty() ? nullptr : c->reads_.front().get();
    std::string what = op && op->haveHeader ? "after " + std::to_string(op->bodyGot) + " of " +
                                                  std::to_string(op->frameLength) + " bytes"
                                            : "inside a frame header";
    c->FailReads(CodedError(env, "ERR_TP_PROTOCOL", "truncated frame: peer closed the connection " + what).Value());
    return;
  }
  c->FailReads(UvError(env, static_cast<int>(nread), "read").Value());
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
