// What the cma channel's addon and its C baseline (baseline/cma_baseline.cc)
// copy with, so that the baseline copies as the channel does: reads of
// another process's memory in chunks, into buffers made of huge pages.
#pragma once

#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace tensorpipe_js {

// Chunks small enough that the copiers finish the last read of a burst
// within a fraction of a millisecond of each other (2 MiB takes about
// 0.25 ms on a core), large enough that taking one costs nothing beside
// its copy.
constexpr uint64_t kChunk = 2 << 20;

// One process_vm_readv moves at most this much; larger chunks loop.
constexpr uint64_t kMaxCall = 1ull << 30;

// Reads [remote, remote + length) of `pid` into `local`, however many
// calls that takes. Returns 0 or an errno.
inline int ReadRemote(pid_t pid, char* local, uint64_t remote, uint64_t length) {
  while (length > 0) {
    uint64_t n = std::min(length, kMaxCall);
    struct iovec l = {local, n};
    struct iovec r = {reinterpret_cast<void*>(remote), n};
    ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // A short read means the next byte is not readable: let the next
    // call say why (EFAULT) rather than spin.
    if (got == 0) return EFAULT;
    local += got;
    remote += static_cast<uint64_t>(got);
    length -= static_cast<uint64_t>(got);
  }
  return 0;
}

// process_vm_readv pins every page it copies: with 4 KiB pages that costs
// more than the copy (about 10 GB/s here against 16 with 2 MiB pages on two
// threads).
constexpr uint64_t kHugePage = 2 << 20;

struct HugePageRange {
  uintptr_t begin;
  uint64_t length;  // 0: none worth making huge
};

// The whole 2 MiB pages inside [data, data + length). Buffers under 8 MiB
// hold at most three of them: not worth it.
inline HugePageRange WholeHugePages(const char* data, uint64_t length) {
  if (length < 4 * kHugePage) return {0, 0};
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + length) & ~(kHugePage - 1);
  return end <= begin ? HugePageRange{0, 0} : HugePageRange{begin, end - begin};
}

// Advice only: true when the kernel made the whole range huge pages (errno
// says why not otherwise).
inline bool CollapseToHugePages(uintptr_t begin, uint64_t length) {
  void* start = reinterpret_cast<void*>(begin);
  return madvise(start, length, MADV_HUGEPAGE) == 0 && madvise(start, length, MADV_COLLAPSE) == 0;
}

}  // namespace tensorpipe_js
