// The cma channel's native half: process_vm_readv straight from the
// sender's memory into the receiver's allocation, on libuv's thread pool,
// split into parts that run side by side.
#include <napi.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {
namespace {

// One process_vm_readv moves at most this much; larger parts loop.
constexpr uint64_t kMaxCall = 1ull << 30;

// One transfer: its parts run side by side on the pool, and the callback
// follows the last.
struct Transfer {
  pid_t pid;
  int pending = 0;
  int error = 0;
  Napi::Reference<Napi::Value> keepTarget;
  Napi::FunctionReference callback;
  std::unique_ptr<Napi::AsyncContext> asyncContext;

  void PartDone(int partError) {
    if (error == 0) error = partError;
    if (--pending > 0) return;
    std::unique_ptr<Transfer> done(this);
    Napi::Env env = callback.Env();
    FromLoop(env, [&] {
      napi_value arg = error == 0 ? env.Null() : UvError(env, uv_translate_sys_error(error), "process_vm_readv").Value();
      InvokeCallback(callback, *asyncContext, {arg});
    });
  }
};

// Reads [remote, remote + length) of `pid` into `local`, however many
// calls that takes. Returns 0 or an errno.
int ReadRemote(pid_t pid, char* local, uint64_t remote, uint64_t length) {
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

// One part of a transfer, on the pool. A worker that goes meanwhile waits
// for it: the part writes into that worker's memory.
class Part : public PoolJob {
 public:
  Part(Transfer* transfer, char* local, uint64_t remote, uint64_t length)
      : transfer_(transfer), local_(local), remote_(remote), length_(length) {}

 private:
  void Run() override { error_ = ReadRemote(transfer_->pid, local_, remote_, length_); }
  void Done(int status) override { transfer_->PartDone(status < 0 ? ECANCELED : error_); }

  Transfer* transfer_;
  char* local_;
  uint64_t remote_;
  uint64_t length_;
  int error_ = 0;
};

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

// process_vm_readv pins every page it copies: with 4 KiB pages that costs
// more than the copy (about 10 GB/s here against 16 with 2 MiB pages on two
// threads). So large buffers get the whole 2 MiB pages inside them turned
// into huge pages, once, on the thread pool: the bytes and the buffer stay
// as they are, later transfers of it run faster.
constexpr uint64_t kHugePage = 2 << 20;

// The ranges handed to the kernel, so that a buffer sent or read again is
// not collapsed again. MADV_COLLAPSE gives up (EAGAIN) on pages pinned
// meanwhile, which a peer reading the same buffer does: a range it failed
// on is tried again by a later transfer, a few times at most.
class CollapsedRanges {
 public:
  // True when `range` needs a collapse now: it is then marked pending.
  bool Claim(uintptr_t begin, uint64_t length) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Range& r : ranges_) {
      if (r.begin != begin || r.length != length) continue;
      if (r.pending || r.done || r.failures >= kMaxAttempts) return false;
      r.pending = true;
      return true;
    }
    if (ranges_.size() == kRemembered) ranges_.erase(ranges_.begin());
    ranges_.push_back({begin, length, true, false, 0});
    return true;
  }

  // `ran`: the job ran (not cancelled); `ok`: the kernel collapsed it all.
  void Finish(uintptr_t begin, uint64_t length, bool ran, bool ok) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Range& r : ranges_) {
      if (r.begin != begin || r.length != length) continue;
      r.pending = false;
      r.done = ran && ok;
      if (ran && !ok) r.failures++;
      return;
    }
  }

 private:
  static constexpr size_t kRemembered = 64;
  static constexpr int kMaxAttempts = 8;
  struct Range {
    uintptr_t begin;
    uint64_t length;
    bool pending;
    bool done;
    int failures;
  };
  std::mutex mutex_;
  std::vector<Range> ranges_;
};

CollapsedRanges collapsed;

class Collapse : public PoolJob {
 public:
  Collapse(uintptr_t begin, uint64_t length) : begin_(begin), length_(length) {}

 private:
  // Advice only: a kernel without it, or pages it cannot move, just stay.
  void Run() override {
    void* start = reinterpret_cast<void*>(begin_);
    ok_ = madvise(start, length_, MADV_HUGEPAGE) == 0 && madvise(start, length_, MADV_COLLAPSE) == 0;
    // Without MADV_COLLAPSE (before Linux 6.1) it can never succeed: new
    // faults in the range still get huge pages from MADV_HUGEPAGE.
    if (!ok_ && errno == EINVAL) ok_ = true;
  }
  void Done(int status) override { collapsed.Finish(begin_, length_, status >= 0, ok_); }

  uintptr_t begin_;
  uint64_t length_;
  bool ok_ = false;
};

void CollapseLater(Napi::Env env, char* data, uint64_t length) {
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + length) & ~(kHugePage - 1);
  if (end <= begin || !collapsed.Claim(begin, end - begin)) return;
  auto* job = new Collapse(begin, end - begin);
  if (job->Queue(LifecycleOf(env)) < 0) collapsed.Finish(begin, end - begin, false, false);
}

// readv(pid, remoteAddress: bigint, length, target: ArrayBufferView,
//       parallelism, hugePages, callback(err))
Napi::Value ReadV(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto t = std::make_unique<Transfer>();
  t->pid = info[0].As<Napi::Number>().Int32Value();
  bool lossless = false;
  uint64_t remote = info[1].As<Napi::BigInt>().Uint64Value(&lossless);
  uint64_t length = static_cast<uint64_t>(info[2].As<Napi::Number>().DoubleValue());
  ByteSpan target;
  if (!lossless || !GetBytes(info[3], &target)) throw Napi::TypeError::New(env, "bad address or target");
  if (length > target.length) throw Napi::RangeError::New(env, "target is smaller than the transfer");
  uint32_t parallelism = std::max(1u, info[4].As<Napi::Number>().Uint32Value());
  bool hugePages = info[5].ToBoolean();
  t->keepTarget = Napi::Persistent(info[3]);
  t->callback = Napi::Persistent(info[6].As<Napi::Function>());
  t->asyncContext = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.CmaRead");
  // Parts of at least 4 MiB: smaller ones cost more to schedule than to copy.
  uint64_t count = std::max<uint64_t>(1, std::min<uint64_t>(parallelism, length / (4 << 20)));
  uint64_t step = (length + count - 1) / count;
  step = (step + 4095) & ~uint64_t(4095);
  if (hugePages && length >= 4 * kHugePage) CollapseLater(env, target.data, length);
  std::vector<Part*> parts;
  for (uint64_t off = 0; parts.empty() || off < length; off += step) {
    parts.push_back(new Part(t.get(), target.data + off, remote + off, std::min(step, length - off)));
  }
  t->pending = static_cast<int>(parts.size());
  Transfer* transfer = t.release();
  EnvLifecycle& lifecycle = LifecycleOf(env);
  // uv_queue_work fails only on a null callback; a part that could not be
  // queued counts as cancelled all the same.
  for (Part* part : parts) {
    if (part->Queue(lifecycle) < 0) transfer->PartDone(ECANCELED);
  }
  return env.Undefined();
}

// The address of a view's first byte, for the peer to read from.
// addressOf(view, hugePages: boolean)
Napi::Value AddressOf(const Napi::CallbackInfo& info) {
  ByteSpan span;
  if (!GetBytes(info[0], &span)) throw Napi::TypeError::New(info.Env(), "expected an ArrayBufferView");
  if (info[1].ToBoolean() && span.length >= 4 * kHugePage) CollapseLater(info.Env(), span.data, span.length);
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(span.data)));
}

// null when process_vm_readv works here, else why not.
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  char source[64] = "tensorpipe-js cma probe";
  char dest[64] = {0};
  int err = ReadRemote(getpid(), dest, reinterpret_cast<uint64_t>(source), sizeof(source));
  if (err == ENOSYS) {
    return Napi::String::New(env, "process_vm_readv is not implemented here (ENOSYS): an emulator such as qemu-user, or a kernel built without it");
  }
  if (err != 0) {
    return Napi::String::New(env, std::string("process_vm_readv is not permitted here (") + strerror(err) +
                                      "): seccomp or a container profile blocks it");
  }
  if (std::memcmp(source, dest, sizeof(source)) != 0) return Napi::String::New(env, "process_vm_readv copied wrong bytes");
  FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f != nullptr) {
    int scope = 0;
    int n = std::fscanf(f, "%d", &scope);
    std::fclose(f);
    if (n == 1 && scope > 0) {
      return Napi::String::New(env, "Yama ptrace_scope is " + std::to_string(scope) +
                                        ": reading a sibling process's memory is forbidden (set it to 0)");
    }
  }
  return env.Null();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  AddonEnv::Install<AddonEnv>(env);
  exports.Set("readv", Napi::Function::New(env, ReadV, "readv"));
  exports.Set("addressOf", Napi::Function::New(env, AddressOf, "addressOf"));
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  return exports;
}

}  // namespace
}  // namespace tensorpipe_js

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tensorpipe_js::Init(env, exports); }

NODE_API_MODULE(tensorpipe_cma, InitAddon)
