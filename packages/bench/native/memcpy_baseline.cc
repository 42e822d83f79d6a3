// memcpy as fast as this machine does it, the limit cma's copy is held
// against with nothing in the way: one buffer copied into another by
// THREADS threads at once, each its slice (on 4 KiB boundaries), both
// buffers made huge pages as cma makes its reader's (remote_copy.h), where
// the bench's memcpy (memcpy-baseline.ts) copies between JS buffers of
// 4 KiB pages. The first pass is untimed.
//
//   memcpy_baseline SIZE COUNT THREADS   -> {"gbps":x}
#include <pthread.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "remote_copy.h"

namespace {

uint64_t Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

char* HugeBuffer(uint64_t size) {
  uint64_t rounded = (size + tensorpipe_js::kHugePage - 1) & ~(tensorpipe_js::kHugePage - 1);
  void* p = std::aligned_alloc(tensorpipe_js::kHugePage, rounded);
  if (p == nullptr) {
    std::perror("aligned_alloc");
    std::exit(1);
  }
  std::memset(p, 1, rounded);
  tensorpipe_js::HugePageRange r = tensorpipe_js::WholeHugePages(static_cast<char*>(p), rounded);
  if (r.length > 0) tensorpipe_js::CollapseToHugePages(r.begin, r.length);
  return static_cast<char*>(p);
}

// Every thread copies its slice `count` times, released together; returns the nanoseconds until the last is done.
uint64_t Pass(char* dst, const char* src, uint64_t size, uint64_t count, unsigned threads) {
  uint64_t step = (size / threads + 4095) & ~uint64_t{4095};
  pthread_barrier_t start;
  pthread_barrier_init(&start, nullptr, threads + 1);
  std::vector<std::thread> copiers;
  for (unsigned i = 0; i < threads && i * step < size; i++) {
    uint64_t offset = i * step;
    uint64_t length = std::min(step, size - offset);
    copiers.emplace_back([&, offset, length] {
      pthread_barrier_wait(&start);
      for (uint64_t k = 0; k < count; k++) std::memcpy(dst + offset, src + offset, length);
    });
  }
  // Threads a small size left without a slice still meet the barrier.
  for (size_t i = copiers.size(); i < threads; i++) copiers.emplace_back([&] { pthread_barrier_wait(&start); });
  pthread_barrier_wait(&start);
  uint64_t t0 = Now();
  for (std::thread& t : copiers) t.join();
  uint64_t ns = Now() - t0;
  pthread_barrier_destroy(&start);
  return ns;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SIZE COUNT THREADS\n", argv[0]);
    return 2;
  }
  uint64_t size = std::strtoull(argv[1], nullptr, 10);
  uint64_t count = std::strtoull(argv[2], nullptr, 10);
  unsigned long threads = std::strtoul(argv[3], nullptr, 10);
  if (size == 0 || count == 0 || threads < 1 || threads > 64) {
    std::fprintf(stderr, "%s: SIZE and COUNT must be positive, THREADS from 1 to 64\n", argv[0]);
    return 2;
  }
  char* src = HugeBuffer(size);
  char* dst = HugeBuffer(size);
  Pass(dst, src, size, 1, threads);
  uint64_t ns = Pass(dst, src, size, count, threads);
  if (std::memcmp(dst, src, size) != 0) {
    std::fprintf(stderr, "%s: the copy differs from its source\n", argv[0]);
    return 1;
  }
  std::printf("{\"gbps\":%.6f}\n", static_cast<double>(size) * count / ns);
  return 0;
}
