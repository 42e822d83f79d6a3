// The cma channel's native half: process_vm_readv straight from the
// sender's memory into the receiver's allocation, in chunks that a few
// copier threads take in turn.
#include <napi.h>
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <vector>

#include "remote_copy.h"
#include "shared_segments.h"
#include "tensorpipe/napi_helpers.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {
namespace {

// One tensor read from a peer: its chunks are copied by the copiers of
// its environment's queue, and its callback follows the last.
struct Transfer {
  pid_t pid;
  // Chunks not copied (or dropped) yet, and the first error; under the queue's lock.
  uint64_t chunksLeft = 0;
  int error = 0;
  Napi::Reference<Napi::Value> keepTarget;
  Napi::FunctionReference callback;
  std::unique_ptr<Napi::AsyncContext> asyncContext;

  // On the loop, once every chunk is accounted for.
  void Finish() {
    std::unique_ptr<Transfer> done(this);
    Napi::Env env = callback.Env();
    FromLoop(env, [&] {
      napi_value arg =
          error == 0 ? env.Null() : UvError(env, uv_translate_sys_error(error), "process_vm_readv").Value();
      InvokeCallback(callback, *asyncContext, {arg});
    });
  }
};

struct Chunk {
  Transfer* transfer;
  char* local;
  uint64_t remote;
  uint64_t length;
};

// The reads of one environment, cut into chunks that copier threads of
// its own take in the order the reads were asked for: the oldest read ends
// first, and the cores go on with the next while the loop answers it. A
// copier tells the loop of each read it ends through an async handle.
// Reads cut into halves up front on libuv's pool ran side by side, ended
// together, and woke pool threads on whichever core woke them: one of two
// cores sat idle 7-12% of the time while 64 MiB tensors streamed, 1% now,
// and they stream 6% faster. Threads of its own, as upstream's cma channel
// has, also leave libuv's pool (shared by every worker of the process) to
// the file system.
class CopyQueue : public EnvResource {
 public:
  explicit CopyQueue(EnvLifecycle& lifecycle) : lifecycle_(lifecycle) {}

  // On the loop: queues the read, with up to `parallelism` copiers for the
  // queue (a std::system_error when not even one could start).
  void Add(Transfer* t, char* local, uint64_t remote, uint64_t length, uint32_t parallelism) {
    if (!open_) Open();
    while (copiers_.size() < parallelism) {
      try {
        copiers_.emplace_back([this] { CopyLoop(); });
      } catch (const std::system_error&) {
        if (copiers_.empty()) throw;
        break;
      }
    }
    // Like a job on the pool, a read keeps the loop alive until it ends.
    if (reading_++ == 0) async_.Ref();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      uint64_t off = 0;
      do {
        uint64_t n = std::min(kChunk, length - off);
        chunks_.push_back({t, local + off, remote + off, n});
        t->chunksLeft++;
        off += n;
      } while (off < length);
    }
    work_.notify_all();
  }

 private:
  void Open() {
    uv_async_init(lifecycle_.loop(), async_.Make(this), OnAsync);
    async_.Unref();
    lifecycle_.Own(this);
    open_ = true;
  }

  void CopyLoop() {
    // Named for top -H, perf and /proc/<pid>/task/*/comm (the bench counts them there).
    pthread_setname_np(pthread_self(), "tp-cma-copier");
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_.wait(lock, [this] { return closing_ || !chunks_.empty(); });
      if (closing_) return;
      Chunk c = chunks_.front();
      chunks_.pop_front();
      Transfer* t = c.transfer;
      // The rest of a read that failed need not be copied.
      bool skip = t->error != 0;
      lock.unlock();
      int error = skip ? 0 : ReadRemote(t->pid, c.local, c.remote, c.length);
      lock.lock();
      if (t->error == 0) t->error = error;
      if (--t->chunksLeft > 0) continue;
      ended_.push_back(t);
      // Outside the lock: the loop thread it wakes takes the lock at once,
      // and, woken on this core, it ran before this thread let go: it then
      // waited for this thread to run again, up to a scheduler slice (a
      // 16 MiB stream's reader blocked on the lock 340 times in 2 s, once
      // for 2.2 ms). Teardown() closes the handle only after joining the
      // copiers.
      lock.unlock();
      uv_async_send(async_.get());
      lock.lock();
    }
  }

  static void OnAsync(uv_async_t* handle) { static_cast<CopyQueue*>(handle->data)->AnswerEnded(); }

  // On the loop: the callbacks of the reads copied to the end.
  void AnswerEnded() {
    std::vector<Transfer*> ended;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ended.swap(ended_);
    }
    for (Transfer* t : ended) t->Finish();
    reading_ -= ended.size();
    if (reading_ == 0 && !ended.empty()) async_.Unref();
  }

  // The environment is going: chunks not taken are dropped, the copiers
  // finish the one they hold (it writes into this environment's memory)
  // and are joined, and every read left ends here, without a callback.
  void Teardown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
      for (const Chunk& c : chunks_) {
        if (--c.transfer->chunksLeft == 0) ended_.push_back(c.transfer);
      }
      chunks_.clear();
    }
    work_.notify_all();
    for (std::thread& copier : copiers_) copier.join();
    copiers_.clear();
    AnswerEnded();
    auto released = [](void* queue) {
      auto* self = static_cast<CopyQueue*>(queue);
      self->lifecycle_.Released(self);
    };
    if (!async_.Close(released, this)) released(this);
  }

  EnvLifecycle& lifecycle_;
  UvHandle<uv_async_t> async_;
  bool open_ = false;
  // Reads not answered yet (loop thread).
  size_t reading_ = 0;
  std::vector<std::thread> copiers_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<Chunk> chunks_;
  std::vector<Transfer*> ended_;
  bool closing_ = false;
};

// The pidfds of the peers proven in one environment: closed by the channel
// that pinned them, or here when the environment goes first (a worker
// terminated with pipes open).
class PinnedProcesses : public EnvResource {
 public:
  explicit PinnedProcesses(EnvLifecycle& lifecycle) : lifecycle_(lifecycle) {}

  void Add(int fd) {
    if (fds_.empty()) lifecycle_.Own(this);
    fds_.insert(fd);
  }

  // Only a pidfd of this set: a number from JS closes nothing else.
  void Remove(int fd) {
    if (fds_.erase(fd) == 0) return;
    ::close(fd);
    if (fds_.empty()) lifecycle_.Released(this);
  }

  void Teardown() override {
    for (int fd : fds_) ::close(fd);
    fds_.clear();
    lifecycle_.Released(this);
  }

 private:
  EnvLifecycle& lifecycle_;
  std::unordered_set<int> fds_;
};

// The cma addon's data in one environment.
struct CmaEnv : AddonEnv {
  explicit CmaEnv(napi_env env) : AddonEnv(env), queue(lifecycle), pinned(lifecycle) {}
  CopyQueue queue;
  PinnedProcesses pinned;
  SharedSegments segments;
};

SharedSegments* SegmentsOf(Napi::Env env) { return &AddonEnv::Get<CmaEnv>(env)->segments; }

// Large buffers sent again get the whole 2 MiB pages inside them turned
// into huge pages (WholeHugePages), once, on the thread pool: the bytes and the
// buffer stay as they are, later transfers of it run faster.

// The ranges handed to the kernel, so that a buffer sent or read again is
// not collapsed again. MADV_COLLAPSE gives up (EAGAIN) on pages pinned
// meanwhile, which a peer reading the same buffer does: a range it failed
// on is tried again by a later transfer, a few times at most.
class CollapsedRanges {
 public:
  // True when `range` needs a collapse now: it is then marked pending.
  // Only from its second transfer on: a buffer sent once (a fresh one per
  // request) would pay the collapse for nothing, and a fan-out front that
  // sent a fresh 16 MiB buffer per request spent 12.4 ms of CPU on each
  // against 6.9 without.
  bool Claim(uintptr_t begin, uint64_t length) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Range& r : ranges_) {
      if (r.begin != begin || r.length != length) continue;
      if (r.pending || r.done || r.failures >= kMaxAttempts) return false;
      r.pending = true;
      return true;
    }
    if (ranges_.size() == kRemembered) ranges_.erase(ranges_.begin());
    ranges_.push_back({begin, length, false, false, 0});
    return false;
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
    ok_ = CollapseToHugePages(begin_, length_);
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
  HugePageRange r = WholeHugePages(data, length);
  if (r.length == 0 || !collapsed.Claim(r.begin, r.length)) return;
  auto* job = new Collapse(r.begin, r.length);
  if (job->Queue(LifecycleOf(env)) < 0) collapsed.Finish(r.begin, r.length, false, false);
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
  if (hugePages) CollapseLater(env, target.data, length);
  try {
    AddonEnv::Get<CmaEnv>(env)->queue.Add(t.get(), target.data, remote, length, parallelism);
  } catch (const std::system_error& e) {
    throw Napi::Error::New(env, std::string("cma could not start a copier thread: ") + e.what());
  }
  t.release();
  return env.Undefined();
}

// The address of a view's first byte, for the peer to read from.
// addressOf(view, hugePages: boolean)
Napi::Value AddressOf(const Napi::CallbackInfo& info) {
  ByteSpan span;
  if (!GetBytes(info[0], &span)) throw Napi::TypeError::New(info.Env(), "expected an ArrayBufferView");
  if (info[1].ToBoolean()) CollapseLater(info.Env(), span.data, span.length);
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(span.data)));
}

// A pidfd for `pid`, so that the process proven to be the peer stays the
// one read from: a pid can be reused once its process is gone, a pidfd
// cannot. -1 where the kernel has no pidfd_open (before Linux 5.3).
// pinProcess(pid) -> fd
Napi::Value PinProcess(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int32_t pid = info[0].As<Napi::Number>().Int32Value();
  if (pid <= 0) throw CodedError(env, "ERR_TP_PERMISSION_DENIED", "pid " + std::to_string(pid) + " is not a process");
  long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (fd < 0 && errno == ENOSYS) return Napi::Number::New(env, -1);
  if (fd < 0) {
    if (errno == ESRCH) throw CodedError(env, "ERR_TP_PERMISSION_DENIED", "no process has pid " + std::to_string(pid));
    throw UvError(env, uv_translate_sys_error(errno), "pidfd_open");
  }
  AddonEnv::Get<CmaEnv>(env)->pinned.Add(static_cast<int>(fd));
  return Napi::Number::New(env, static_cast<double>(fd));
}

// processExited(pidfd) -> whether the pinned process has exited (a pidfd
// turns readable then).
Napi::Value ProcessExited(const Napi::CallbackInfo& info) {
  struct pollfd p = {info[0].As<Napi::Number>().Int32Value(), POLLIN, 0};
  int n;
  do {
    n = poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  return Napi::Boolean::New(info.Env(), n > 0);
}

// unpinProcess(pidfd)
Napi::Value UnpinProcess(const Napi::CallbackInfo& info) {
  AddonEnv::Get<CmaEnv>(info.Env())->pinned.Remove(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

// null when process_vm_readv works here, else why not.
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  char source[64] = "tensorpipe-js cma probe";
  char dest[64] = {0};
  int err = ReadRemote(getpid(), dest, reinterpret_cast<uint64_t>(source), sizeof(source));
  if (err == ENOSYS) {
    return Napi::String::New(env,
                             "process_vm_readv is not implemented here (ENOSYS): an emulator such as qemu-user, or a "
                             "kernel built without it");
  }
  if (err != 0) {
    return Napi::String::New(env, std::string("process_vm_readv is not permitted here (") + strerror(err) +
                                      "): a seccomp filter blocks it; in Docker, run with --security-opt "
                                      "seccomp=unconfined or a profile that allows process_vm_readv");
  }
  if (std::memcmp(source, dest, sizeof(source)) != 0)
    return Napi::String::New(env, "process_vm_readv copied wrong bytes");
  FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f != nullptr) {
    int scope = 0;
    int n = std::fscanf(f, "%d", &scope);
    std::fclose(f);
    if (n == 1 && scope > 0) {
      return Napi::String::New(env, "Yama ptrace_scope is " + std::to_string(scope) +
                                        ": reading a sibling process's memory is forbidden; set it to 0 "
                                        "(sysctl kernel.yama.ptrace_scope=0)");
    }
  }
  return env.Null();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  AddonEnv::Install<CmaEnv>(env);
  exports.Set("readv", Napi::Function::New(env, ReadV, "readv"));
  exports.Set("addressOf", Napi::Function::New(env, AddressOf, "addressOf"));
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("pinProcess", Napi::Function::New(env, PinProcess, "pinProcess"));
  exports.Set("processExited", Napi::Function::New(env, ProcessExited, "processExited"));
  exports.Set("unpinProcess", Napi::Function::New(env, UnpinProcess, "unpinProcess"));
  RegisterSharedSegments(env, exports, SegmentsOf);
  return exports;
}

}  // namespace
}  // namespace tensorpipe_js

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tensorpipe_js::Init(env, exports); }

NODE_API_MODULE(tensorpipe_cma, InitAddon)
