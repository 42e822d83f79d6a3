#include "ring_populator.h"

#include <sys/mman.h>

#include <algorithm>
#include <system_error>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

namespace tensorpipe_js {

namespace {
// Per hold of a ring's lock: what its connection may wait for when it closes.
constexpr uint64_t kChunk = 256 * 1024;
}  // namespace

std::shared_ptr<RingPopulation> RingPopulator::Add(char* base, uint64_t length, bool forWriting) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closing_) return nullptr;
  if (!started_) {
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::system_error&) {
      return nullptr;
    }
    started_ = true;
    lifecycle_.Own(this);
  }
  auto population = std::make_shared<RingPopulation>(base, length, forWriting);
  queue_.push_back(population);
  lock.unlock();
  work_.notify_one();
  return population;
}

void RingPopulator::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    if (closing_) return;
    std::shared_ptr<RingPopulation> p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    for (uint64_t done = 0; done < p->length; done += kChunk) {
      std::lock_guard<std::mutex> hold(p->mutex);
      if (p->cancelled) break;
      uint64_t n = std::min(kChunk, p->length - done);
      // MADV_POPULATE_* (Linux 5.14) fault the pages in as a write or a
      // read would, without writing: bytes the loop writes meanwhile stay.
      // An older kernel refuses them, and the pages come on first use.
      if (madvise(p->base + done, n, p->forWriting ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) != 0) break;
    }
    lock.lock();
  }
}

void RingPopulator::Teardown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    queue_.clear();
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
  lifecycle_.Released(this);
}

}  // namespace tensorpipe_js
