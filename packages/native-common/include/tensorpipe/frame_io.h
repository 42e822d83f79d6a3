// Frames as every tensorpipe-js connection carries them (8-byte
// little-endian length, then the bytes), read into the caller's memory or
// fresh memory and written from the caller's memory, whatever moves the
// bytes (a socket, a shared-memory ring).
#pragma once

#include <napi.h>
#include <uv.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {

// uv_buf_init() takes an unsigned int; frames may be larger.
inline uv_buf_t MakeBuf(char* base, size_t len) {
  uv_buf_t b;
  b.base = base;
  b.len = len;
  return b;
}

// One frame being read.
struct FrameRead {
  enum class Progress { kNeedMore, kDone, kError };
  static constexpr uint64_t kInitialFresh = 64 * 1024;

  Napi::FunctionReference callback;
  Napi::Reference<Napi::Value> keepTarget;
  char* target = nullptr;
  size_t targetLength = 0;
  bool hasTarget = false;
  // The caller takes a small frame as a loan (readFrame): see LentFrames.
  bool lend = false;
  uint64_t maxLength = 0;
  uint8_t header[8];
  size_t headerGot = 0;
  bool haveHeader = false;
  uint64_t frameLength = 0;
  char* body = nullptr;
  uint64_t bodyGot = 0;
  char* fresh = nullptr;
  // Bytes of `body` that may be written: the target's length, or for fresh
  // memory what has been allocated so far.
  uint64_t capacity = 0;

  FrameRead() = default;
  FrameRead(const FrameRead&) = delete;
  FrameRead& operator=(const FrameRead&) = delete;
  ~FrameRead() { std::free(fresh); }

  // Becomes the read that read(target: ArrayBufferView | null, maxLength:
  // number, callback, lend?: boolean) asks for. The memory a fresh frame
  // took before is kept for the next one; nothing of JS is held until the
  // read has to wait (see Wait).
  void Assign(const Napi::CallbackInfo& info) {
    target = nullptr;
    targetLength = 0;
    hasTarget = false;
    headerGot = 0;
    haveHeader = false;
    frameLength = 0;
    body = nullptr;
    bodyGot = 0;
    capacity = 0;
    if (!info[0].IsNull() && !info[0].IsUndefined()) {
      ByteSpan span;
      if (!GetBytes(info[0], &span)) throw Napi::TypeError::New(info.Env(), "target must be an ArrayBufferView");
      hasTarget = true;
      target = span.data;
      targetLength = span.length;
    }
    maxLength = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
    lend = info.Length() > 3 && info[3].ToBoolean().Value();
  }

  // The read did not finish at once: it holds on to its target and its
  // callback until it does. A recycled state keeps the reference to the
  // callback of its last wait, and a connection's reads all pass the same
  // one: it is made again only for another.
  void Wait(const Napi::CallbackInfo& info) {
    if (hasTarget) keepTarget = Napi::Persistent(info[0]);
    Napi::Function fn = info[2].As<Napi::Function>();
    if (callback.IsEmpty() || !fn.StrictEquals(callback.Value())) callback = Napi::Persistent(fn);
  }

  uint64_t BodyRemaining() const { return haveHeader ? frameLength - bodyGot : 0; }

  // Room for at least `n` more bytes (at most what the frame still needs).
  // Fresh memory grows with the bytes that actually arrive, never ahead of
  // them by more than double: a peer that announces a large frame and sends
  // little costs little. False when memory runs out.
  bool Reserve(uint64_t n) {
    uint64_t want = std::min(frameLength, bodyGot + n);
    if (want <= capacity) return true;
    uint64_t grown = std::min(frameLength, std::max(want, std::max<uint64_t>(capacity * 2, kInitialFresh)));
    char* p = static_cast<char*>(std::realloc(fresh, grown > 0 ? grown : 1));
    if (p == nullptr) return false;
    fresh = body = p;
    capacity = grown;
    return true;
  }

  // Where the next bytes of the body go, and how many fit there now.
  char* BodyCursor() const { return body + bodyGot; }
  uint64_t Room() const { return std::min(capacity, frameLength) - bodyGot; }

  // Takes what it needs of [data, data + avail) and says how much in *used.
  // A length that the target or the limit cannot take is an error, found
  // before any memory is allocated for it.
  Progress Feed(const char* data, size_t avail, size_t* used, std::string* error) {
    size_t taken = 0;
    if (!haveHeader) {
      size_t n = std::min<size_t>(8 - headerGot, avail);
      std::memcpy(header + headerGot, data, n);
      headerGot += n;
      taken += n;
      if (headerGot < 8) {
        *used = taken;
        return Progress::kNeedMore;
      }
      std::memcpy(&frameLength, header, 8);  // little-endian hosts only, as upstream
      if (hasTarget) {
        if (frameLength != targetLength) {
          *error = "frame of " + std::to_string(frameLength) + " bytes where " + std::to_string(targetLength) +
                   " were expected";
          return Progress::kError;
        }
        body = target;
        capacity = targetLength;
      } else if (frameLength > maxLength) {
        *error = "frame length " + std::to_string(frameLength) + " exceeds the limit of " + std::to_string(maxLength) +
                 " bytes";
        return Progress::kError;
      }
      haveHeader = true;
    }
    uint64_t n = std::min<uint64_t>(frameLength - bodyGot, avail - taken);
    if (!Reserve(n)) {
      *error = "cannot allocate memory for a frame of " + std::to_string(frameLength) + " bytes";
      return Progress::kError;
    }
    if (n > 0) {
      std::memcpy(body + bodyGot, data + taken, n);
      bodyGot += n;
      taken += n;
    }
    *used = taken;
    return bodyGot == frameLength ? Progress::kDone : Progress::kNeedMore;
  }

  // A stream that ended inside this frame. The peer may be hostile, but
  // far more often it died mid-message (a process killed, a worker
  // terminated): the connection broke, which is what the code says.
  Napi::Error TruncationError(Napi::Env env) const {
    return CodedError(env, "ERR_TP_CONNECTION_RESET", TruncationMessage());
  }

  // Why a stream that ended now leaves this read unfinished.
  std::string TruncationMessage() const {
    return haveHeader ? "truncated frame: peer closed the connection after " + std::to_string(bodyGot) + " of " +
                            std::to_string(frameLength) + " bytes"
                      : "truncated frame: peer closed the connection inside a frame header";
  }
};

// Small frames lent to a read's callback (readFrame), all in one buffer of
// the connection's, each overwriting the one before: a reader that decodes
// each frame as it comes (a pipe's descriptors) costs no memory per frame.
// A slab of FrameResults lives as long as any view of it, so slabs outlived
// young collections and went only at the next full one: a busy pipe's
// process grew by 3 MB/s of them, and every fresh slab's pages faulted in
// one by one as frames were copied in (760 faults a second, each a stall).
class LentFrames {
 public:
  static constexpr uint64_t kMaxLength = 4096;

  static bool Takes(const FrameRead& op) { return op.lend && !op.hasTarget && op.frameLength <= kMaxLength; }

  // The frame in the lent buffer, as the same view while frames keep
  // their length (a pipe's descriptors mostly do): no JS object a frame.
  Napi::Value View(Napi::Env env, const FrameRead& op) {
    // A buffer the caller transferred away is no longer this one's to write.
    if (buffer_.IsEmpty() || buffer_.Value().IsDetached()) {
      Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(env, kMaxLength);
      data_ = static_cast<char*>(buffer.Data());
      buffer_ = Napi::Persistent(buffer);
      view_.Reset();
    }
    if (op.frameLength > 0) std::memcpy(data_, op.fresh, op.frameLength);
    if (view_.IsEmpty() || viewLength_ != op.frameLength) {
      view_ = Napi::Persistent(Napi::Uint8Array::New(env, op.frameLength, buffer_.Value(), 0));
      viewLength_ = op.frameLength;
    }
    return view_.Value();
  }

  void Release() {
    view_.Reset();
    buffer_.Reset();
    data_ = nullptr;
  }

 private:
  Napi::Reference<Napi::ArrayBuffer> buffer_;
  Napi::Reference<Napi::Uint8Array> view_;
  uint64_t viewLength_ = 0;
  char* data_ = nullptr;
};

// Hands finished reads to JS: `true` for a read into a target; small fresh
// frames as views of a shared slab (no ArrayBuffer and finalizer per frame,
// as Node's Buffer pool does), large ones as external Buffers.
class FrameResults {
 public:
  Napi::Value Result(Napi::Env env, FrameRead& op) {
    if (op.hasTarget) return Napi::Boolean::New(env, true);
    if (op.frameLength <= kSmallFrame) {
      if (slab_.IsEmpty() || slabUsed_ + op.frameLength > kSlabSize || slab_.Value().IsDetached()) {
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

 private:
  static constexpr uint64_t kSmallFrame = 4096;
  static constexpr size_t kSlabSize = 64 * 1024;
  Napi::Reference<Napi::ArrayBuffer> slab_;
  char* slabData_ = nullptr;
  size_t slabUsed_ = 0;
};

// Frames to write, as one gather list of headers and the callers' bytes.
struct FrameWrite {
  std::vector<uint64_t> headers;
  std::vector<uv_buf_t> bufs;
  size_t total = 0;
  size_t first = 0;  // bufs before this one are fully written
  Napi::Reference<Napi::Value> keepFrames;

  // Becomes the write of write(frames: ArrayBufferView[], ...), in the
  // memory of the one before: a write that finishes at once allocates
  // nothing, and one that has to wait takes this object along. The buffers
  // point into `headers`, which is sized before they are made.
  void Assign(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsArray()) throw Napi::TypeError::New(env, "frames must be an array");
    Napi::Array frames = info[0].As<Napi::Array>();
    uint32_t n = frames.Length();
    headers.resize(n);
    bufs.clear();
    bufs.reserve(2 * n);
    total = 0;
    first = 0;
    for (uint32_t i = 0; i < n; i++) {
      ByteSpan span;
      if (!GetBytes(frames.Get(i), &span)) throw Napi::TypeError::New(env, "frames must be ArrayBufferViews");
      uint64_t len = span.length;
      std::memcpy(&headers[i], &len, 8);
      bufs.push_back(MakeBuf(reinterpret_cast<char*>(&headers[i]), 8));
      if (len > 0) bufs.push_back(MakeBuf(span.data, len));
      total += 8 + len;
    }
  }

  // Marks `n` more bytes as written.
  void Advance(size_t n) {
    while (n > 0 && first < bufs.size()) {
      size_t step = std::min(n, bufs[first].len);
      bufs[first].base += step;
      bufs[first].len -= step;
      n -= step;
      if (bufs[first].len == 0) first++;
    }
    while (first < bufs.size() && bufs[first].len == 0) first++;
  }

  bool Done() const { return first == bufs.size(); }

  // Bytes not written yet.
  size_t Left() const {
    size_t n = 0;
    for (size_t i = first; i < bufs.size(); i++) n += bufs[i].len;
    return n;
  }
};

}  // namespace tensorpipe_js
