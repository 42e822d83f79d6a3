// A single-producer single-consumer byte ring in shared memory. Each side
// keeps its own copy of the index it owns and never trusts the peer's
// index further than the bounds checks here: a hostile peer can corrupt
// the bytes it sends, never this process's memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tensorpipe_js {

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written (by the writer)
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever consumed (by the reader)
  alignas(64) std::atomic<uint32_t> readerWaiting;
  alignas(64) std::atomic<uint32_t> writerWaiting;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

constexpr size_t kRingHeaderSize = 4096;

class RingView {
 public:
  RingView() = default;
  RingView(void* base, uint64_t size)
      : header_(static_cast<RingHeader*>(base)), data_(static_cast<char*>(base) + kRingHeaderSize), size_(size) {}

  RingHeader* header() const { return header_; }
  char* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Copies `n` bytes into the ring at absolute position `pos`, wrapping.
  void CopyIn(uint64_t pos, const char* src, uint64_t n) const {
    uint64_t at = pos & (size_ - 1);
    uint64_t first = n < size_ - at ? n : size_ - at;
    std::memcpy(data_ + at, src, first);
    if (n > first) std::memcpy(data_, src + first, n - first);
  }

  // The (up to two) contiguous segments of [pos, pos + n).
  void Segments(uint64_t pos, uint64_t n, const char** a, uint64_t* an, const char** b, uint64_t* bn) const {
    uint64_t at = pos & (size_ - 1);
    *a = data_ + at;
    *an = n < size_ - at ? n : size_ - at;
    *b = data_;
    *bn = n - *an;
  }

 private:
  RingHeader* header_ = nullptr;
  char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace tensorpipe_js
