// A single-producer single-consumer byte ring in shared memory. Each side
// keeps its own copy of the index it owns and never trusts the peer's
// index further than the bounds checks here: a hostile peer can corrupt
// the bytes it sends, never this process's memory.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tensorpipe_js {

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written (by the writer)
  std::atomic<uint32_t> writerCore;        // 1 + the core it last published from; 0: not yet
  // The position at the ring's first byte: position p is at byte
  // (p - base) % size. The writer moves it to its head while the ring is
  // empty (RewindIfEmpty), so that frames start over at the first byte and
  // a connection touches as many pages as it holds in flight, not the ring.
  std::atomic<uint64_t> base;
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever consumed (by the reader)
  std::atomic<uint32_t> readerCore;
  alignas(64) std::atomic<uint32_t> readerWaiting;
  alignas(64) std::atomic<uint32_t> writerWaiting;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

constexpr size_t kRingHeaderSize = 4096;

// What a ring's memfd is sealed against before it is handed to its writer,
// and what the writer checks: a ring cut short under the writer's mapping
// would kill the writer with SIGBUS.
constexpr int kRingSeals = F_SEAL_SHRINK | F_SEAL_GROW;

// The transport's defaults: bytes per direction, and how long at most a
// waiting side polls the ring before it sleeps until woken.
constexpr uint64_t kDefaultRingSize = 4 << 20;
// A writer starts over at the ring's first byte once its head is this far
// into the ring and the reader has taken everything; it looks at most once
// per kRewindEvery bytes written (a look pulls the reader's cache line).
constexpr uint64_t kRewindAfter = 64 << 10;
constexpr uint64_t kRewindEvery = 16 << 10;
constexpr uint64_t kDefaultSpinMicros = 200;

// A waiting side yields its core between looks at the ring when its peer
// last published from the same core, since the peer cannot run until it
// does (else each end waits out the other's spell: 420 us round trips
// instead of 9). Otherwise it polls without yielding, as a yield costs a
// system call and a pass through the scheduler (0.5 us here, 0.8 us of a
// 3 us round trip between two Node processes), until the wait is
// kYieldAfterNanos old: the peer may have moved to this core since.
constexpr uint64_t kYieldAfterNanos = 20000;

// How long, on each turn of its loop, a Node thread polls the rings of its
// waiting readers without a break before the loop goes on: bytes that come
// meanwhile are seen at once, not after the rest of the turn (an
// epoll_wait and Node's own handles; 0.4-0.7 us of a 5-7 us round trip).
// Only in a wait's first kYieldAfterNanos, so the loop is held up for a
// moment while an answer is due and not while a connection idles.
constexpr uint64_t kHoldLoopNanos = 5000;

// Tells the core that this thread busy-waits (a sibling hyperthread gets
// its share, and leaving the loop costs no pipeline flush).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// 1 + the core this thread runs on (a vDSO call of a few nanoseconds).
inline uint32_t CurrentCore() { return static_cast<uint32_t>(sched_getcpu() + 1); }

// Wake-ups go only to a side that said it sleeps: a side that finds
// nothing to do first polls the ring a while, then sets its waiting flag,
// looks once more and sleeps until the wake-up its writer or reader gives
// (PublishHead, PublishTail: the transport a byte on its Unix socket).

class RingView {
 public:
  RingView() = default;
  RingView(void* base, uint64_t size)
      : header_(static_cast<RingHeader*>(base)), data_(static_cast<char*>(base) + kRingHeaderSize), size_(size) {}

  RingHeader* header() const { return header_; }
  char* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Where position `pos` is in the ring.
  uint64_t OffsetOf(uint64_t pos) const { return (pos - base_) & (size_ - 1); }

  // Writer: starts the ring over at its first byte, at `head`, when the
  // reader has taken everything (the tail, read again, is `head`).
  // `tailSeen` takes the tail read.
  void RewindIfEmpty(uint64_t head, uint64_t* tailSeen) {
    uint64_t tail = header_->tail.load(std::memory_order_acquire);
    *tailSeen = tail;
    if (tail != head) return;
    base_ = head;
    // Published with the next head (release): a reader that sees bytes
    // past it reads them where they are.
    header_->base.store(head, std::memory_order_relaxed);
  }

  // Reader: the writer's base, after a load of its head that found bytes
  // (those bytes were all written from this base). The peer's word, but
  // any base keeps every offset inside the ring.
  void TakeBase() { base_ = header_->base.load(std::memory_order_relaxed); }

  // Copies `n` bytes into the ring at absolute position `pos`, wrapping.
  void CopyIn(uint64_t pos, const char* src, uint64_t n) const {
    uint64_t at = OffsetOf(pos);
    uint64_t first = n < size_ - at ? n : size_ - at;
    std::memcpy(data_ + at, src, first);
    if (n > first) std::memcpy(data_, src + first, n - first);
  }

  // Writer: the room after `head`, from `tailSeen` (the reader's tail as
  // last read, updated here) while it leaves `want` bytes, else from the
  // tail read again: each read of the tail pulls the line the reader writes
  // at every frame over to this core, and back at the reader's next write.
  // False when the tail moved where no honest reader could.
  bool Room(uint64_t head, uint64_t want, uint64_t* tailSeen, uint64_t* room) const {
    *room = size_ - (head - *tailSeen);
    if (*room >= want) return true;
    uint64_t tail = header_->tail.load(std::memory_order_acquire);
    if (tail - *tailSeen > head - *tailSeen) return false;
    *tailSeen = tail;
    *room = size_ - (head - tail);
    return true;
  }

  // Writer: bytes up to `head` are there to read; wakes a sleeping reader
  // (`wake()`). True when the reader slept.
  template <typename Wake>
  bool PublishHead(uint64_t head, Wake&& wake) const {
    header_->writerCore.store(CurrentCore(), std::memory_order_relaxed);
    header_->head.store(head, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (header_->readerWaiting.exchange(0) == 0) return false;
    wake();
    return true;
  }

  // Reader: bytes up to `tail` are free again; wakes a writer waiting for room.
  template <typename Wake>
  void PublishTail(uint64_t tail, Wake&& wake) const {
    header_->readerCore.store(CurrentCore(), std::memory_order_relaxed);
    header_->tail.store(tail, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (header_->writerWaiting.exchange(0) != 0) wake();
  }

  // Whether the writer (the reader) last published from `core` (CurrentCore()).
  bool WriterLastOn(uint32_t core) const { return header_->writerCore.load(std::memory_order_relaxed) == core; }
  bool ReaderLastOn(uint32_t core) const { return header_->readerCore.load(std::memory_order_relaxed) == core; }

  // A reader polling for bytes for `spunNanos` yields its core before the
  // next look; a writer polling for room, likewise.
  bool ReaderShouldYield(uint64_t spunNanos) const {
    return spunNanos >= kYieldAfterNanos || WriterLastOn(CurrentCore());
  }
  bool WriterShouldYield(uint64_t spunNanos) const {
    return spunNanos >= kYieldAfterNanos || ReaderLastOn(CurrentCore());
  }

  // A reader about to sleep says so; true when bytes came meanwhile, which
  // no writer will signal.
  bool ReaderSleeps(uint64_t tail) const {
    header_->readerWaiting.store(1, std::memory_order_seq_cst);
    return header_->head.load(std::memory_order_seq_cst) != tail;
  }

  // A sleeping reader that polls again takes its word back; false when the
  // writer took it first (and signals, or has).
  bool ReaderWakesItself() const { return header_->readerWaiting.exchange(0) != 0; }

  // A writer about to sleep for room says so; true when room came meanwhile.
  bool WriterSleeps(uint64_t head) const {
    header_->writerWaiting.store(1, std::memory_order_seq_cst);
    return head - header_->tail.load(std::memory_order_seq_cst) < size_;
  }

  // The (up to two) contiguous segments of [pos, pos + n).
  void Segments(uint64_t pos, uint64_t n, const char** a, uint64_t* an, const char** b, uint64_t* bn) const {
    uint64_t at = OffsetOf(pos);
    *a = data_ + at;
    *an = n < size_ - at ? n : size_ - at;
    *b = data_;
    *bn = n - *an;
  }

 private:
  RingHeader* header_ = nullptr;
  char* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t base_ = 0;
};

}  // namespace tensorpipe_js
