// Maps the pages of an environment's rings, on a thread of its own, once
// frames flow through them (kPopulateAfter). A ring's memfd gets its pages on first use,
// and the kernel allocating, zeroing and mapping one took 2.2 us here, 4-6
// us inside a Node write, and the reader's mapping faulted again for each;
// small messages take millions of round trips to write a whole ring once,
// and until then one frame in every 4 KiB paid it on the loop. Upstream
// allocates its rings up front on the connecting thread, which here took
// 20 ms a pipe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "tensorpipe/env_lifecycle.h"

namespace tensorpipe_js {

// One ring's mapping being populated, for writing (the peer's ring) or
// reading (this side's). Its connection calls Cancel() before it unmaps
// the ring: the populator holds `mutex` while it works on it.
struct RingPopulation {
  char* base;
  uint64_t length;
  bool forWriting;
  bool cancelled = false;
  std::mutex mutex;

  RingPopulation(char* b, uint64_t n, bool w) : base(b), length(n), forWriting(w) {}
  // Once this returns, the populator does not touch the mapping again.
  void Cancel() {
    std::lock_guard<std::mutex> lock(mutex);
    cancelled = true;
  }
};

class RingPopulator : public EnvResource {
 public:
  explicit RingPopulator(EnvLifecycle& lifecycle) : lifecycle_(lifecycle) {}

  // Queues [base, base + length) of a shared mapping; null where no thread
  // could start (the pages then come on first use, as before).
  std::shared_ptr<RingPopulation> Add(char* base, uint64_t length, bool forWriting);

  // The environment is going: the chunk at hand is finished, the thread
  // joined, the rest dropped.
  void Teardown() override;

 private:
  void Run();

  EnvLifecycle& lifecycle_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<RingPopulation>> queue_;
  bool started_ = false;
  bool closing_ = false;
};

}  // namespace tensorpipe_js
