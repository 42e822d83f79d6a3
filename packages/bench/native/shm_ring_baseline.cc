// The limit the shm transport is held against in `tensorpipe bench`: frames
// over the transport's own rings (ring.h) and wake-ups (poll the ring for a
// while, then sleep on an eventfd), with no Node, event loop or JS between.
//
//   shm_ring_baseline pingpong|stream SIZE COUNT [SPIN_US]
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#include <new>

#include "baseline_main.h"
#include "ring.h"

namespace tensorpipe_js {
namespace {

// This program's wake-ups: an eventfd each way, as the transport had them.
void SignalEventfd(int fd) {
  uint64_t one = 1;
  ssize_t r;
  do {
    r = ::write(fd, &one, sizeof(one));
  } while (r < 0 && errno == EINTR);
}

void DrainEventfd(int fd) {
  uint64_t value;
  ssize_t r;
  do {
    r = ::read(fd, &value, sizeof(value));
  } while (r < 0 && errno == EINTR);
}

using baseline::Die;
using baseline::Now;

constexpr uint64_t kRingSize = kDefaultRingSize;
uint64_t spinNanos = kDefaultSpinMicros * 1000;

// One direction: the ring and the eventfds that wake its reader and writer.
// Made before the fork, so both processes share the memory and descriptors.
struct Direction {
  RingView ring;
  int readerWake = -1;
  int writerWake = -1;

  Direction() {
    // Populated, as a transport's rings are once their connection has
    // lived 20 ms (RingPopulator): a fresh one would time page faults.
    void* base = mmap(nullptr, kRingHeaderSize + kRingSize, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (base == MAP_FAILED) Die("mmap");
    new (base) RingHeader();
    ring = RingView(base, kRingSize);
    readerWake = eventfd(0, EFD_NONBLOCK);
    writerWake = eventfd(0, EFD_NONBLOCK);
    if (readerWake < 0 || writerWake < 0) Die("eventfd");
  }
};

// Polls `ready` for the transport's spell, yielding the core between looks
// when `shouldYield` says so, as the transport does, then announces the
// sleep and sleeps unless `announce` saw the ring change meanwhile.
template <typename Ready, typename ShouldYield, typename Announce>
void WaitFor(Ready ready, ShouldYield shouldYield, Announce announce, int wakeFd) {
  uint64_t start = Now();
  for (uint64_t spun = 0; spun < spinNanos; spun = Now() - start) {
    if (ready()) return;
    if (shouldYield(spun)) sched_yield();
  }
  if (announce()) return;
  struct pollfd p = {wakeFd, POLLIN, 0};
  while (poll(&p, 1, -1) < 0) {
    if (errno != EINTR) Die("poll");
  }
  DrainEventfd(wakeFd);
}

class RingEnd : public baseline::End {
 public:
  RingEnd(Direction& out, Direction& in) : out_(out), in_(in) {}

  void Write(const char* p, uint64_t n) override {
    RingView& r = out_.ring;
    while (n > 0) {
      uint64_t room;
      if (!r.Room(head_, n, &tailSeen_, &room)) Die("tail out of range");
      if (room == 0) {
        WaitFor([&] { return head_ - r.header()->tail.load(std::memory_order_acquire) < kRingSize; },
                [&](uint64_t spun) { return r.WriterShouldYield(spun); }, [&] { return r.WriterSleeps(head_); },
                out_.writerWake);
        continue;
      }
      uint64_t k = n < room ? n : room;
      r.CopyIn(head_, p, k);
      head_ += k;
      p += k;
      n -= k;
      r.PublishHead(head_, [&] { SignalEventfd(out_.readerWake); });
    }
  }

  void Read(char* p, uint64_t n) override {
    RingView& r = in_.ring;
    while (n > 0) {
      uint64_t avail = r.header()->head.load(std::memory_order_acquire) - tail_;
      if (avail == 0) {
        WaitFor([&] { return r.header()->head.load(std::memory_order_acquire) != tail_; },
                [&](uint64_t spun) { return r.ReaderShouldYield(spun); }, [&] { return r.ReaderSleeps(tail_); },
                in_.readerWake);
        continue;
      }
      uint64_t k = n < avail ? n : avail;
      const char* a;
      const char* b;
      uint64_t an, bn;
      r.Segments(tail_, k, &a, &an, &b, &bn);
      std::memcpy(p, a, an);
      std::memcpy(p + an, b, bn);
      tail_ += k;
      p += k;
      n -= k;
      r.PublishTail(tail_, [&] { SignalEventfd(in_.writerWake); });
    }
  }

 private:
  Direction& out_;
  Direction& in_;
  uint64_t head_ = 0;
  uint64_t tailSeen_ = 0;  // the out ring's tail as last read
  uint64_t tail_ = 0;
};

}  // namespace
}  // namespace tensorpipe_js

int main(int argc, char** argv) {
  using namespace tensorpipe_js;
  baseline::Args a = baseline::ParseArgs(argc, argv, "[SPIN_US]");
  if (!a.rest.empty()) spinNanos = std::strtoull(a.rest[0].c_str(), nullptr, 10) * 1000;
  Direction there;
  Direction back;
  return baseline::Run(
      a, [&] { return std::make_unique<RingEnd>(back, there); },
      [&] { return std::make_unique<RingEnd>(there, back); });
}
