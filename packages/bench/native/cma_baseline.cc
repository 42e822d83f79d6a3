// The exchange the cma channel is held against in `tensorpipe bench`, with
// no Node, event loop or JS between: the sender announces each frame's
// address on a socket, the reader's copier threads pull it in 2 MiB chunks
// with process_vm_readv straight into two reused buffers in turn, in the
// order the frames came and two frames in flight, as cma's copiers and the
// bench's peer do; buffers of 8 MiB and more are turned into huge pages
// first, as cma turns them. Every size goes through process_vm_readv (cma
// sends the small ones inline); only the acknowledgement travels on the
// socket.
//
//   cma_baseline stream SIZE COUNT [THREADS]   (THREADS: cma's default, min(4, cores))
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "baseline_main.h"
#include "remote_copy.h"

namespace tensorpipe_js {
namespace {

using baseline::Die;

// Frames up to this size travel on the socket: the acknowledgement.
constexpr uint64_t kInlineMax = 64;

// Copier threads taking chunks of the frames in the order they were added.
class Copiers {
 public:
  Copiers(pid_t peer, unsigned threads) : peer_(peer) {
    for (unsigned i = 0; i < threads; i++) threads_.emplace_back([this] { Loop(); });
  }

  ~Copiers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Queues the next frame.
  void Add(char* local, uint64_t remote, uint64_t n) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      uint64_t chunks = 0;
      for (uint64_t off = 0; off < n; off += kChunk, chunks++) {
        chunks_.push_back({added_, local + off, remote + off, std::min(kChunk, n - off)});
      }
      left_.push_back(chunks);
      added_++;
    }
    work_.notify_all();
  }

  // Until at most `inFlight` frames are still landing.
  void Wait(uint64_t inFlight) {
    std::unique_lock<std::mutex> lock(mutex_);
    landed_.wait(lock, [&] { return added_ - Landed() <= inFlight; });
  }

 private:
  struct Chunk {
    uint64_t frame;
    char* local;
    uint64_t remote;
    uint64_t n;
  };

  // Frames landed so far: the leading ones with no chunk left (under the lock).
  uint64_t Landed() {
    while (!left_.empty() && left_.front() == 0) {
      left_.pop_front();
      first_++;
    }
    return first_;
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_.wait(lock, [this] { return closing_ || !chunks_.empty(); });
      if (chunks_.empty()) return;
      Chunk c = chunks_.front();
      chunks_.pop_front();
      lock.unlock();
      Copy(c);
      lock.lock();
      if (--left_[c.frame - first_] > 0) continue;
      // Outside the lock, which the woken thread takes at once (cma's
      // copiers wake the loop so too).
      lock.unlock();
      landed_.notify_all();
      lock.lock();
    }
  }

  void Copy(const Chunk& c) {
    int err = ReadRemote(peer_, c.local, c.remote, c.n);
    if (err == 0) return;
    errno = err;
    Die("process_vm_readv");
  }

  const pid_t peer_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable landed_;
  std::deque<Chunk> chunks_;
  // Chunks left of each frame not counted as landed yet, from frame first_.
  std::deque<uint64_t> left_;
  uint64_t first_ = 0;
  uint64_t added_ = 0;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

// A frame on the socket: its length, and where the sender holds it (0
// when its bytes follow inline).
struct Announce {
  uint64_t length;
  uint64_t address;
};

class CmaEnd : public baseline::FdEnd {
 public:
  CmaEnd(int fd, pid_t peer, unsigned threads) : FdEnd(fd), copiers_(peer, threads) {}

  void WriteFrame(const char* p, uint64_t n) override {
    bool inline_ = n <= kInlineMax;
    if (!inline_) Once(p, n);
    Announce a = {n, inline_ ? 0 : static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))};
    struct iovec iov[2] = {{&a, sizeof a}, {const_cast<char*>(p), inline_ ? n : 0}};
    Gather(iov, 2);
  }

  // Returns with the frame queued and at most one older frame still landing.
  void ReadFrame(char* p, uint64_t n) override {
    Announce a;
    Read(reinterpret_cast<char*>(&a), sizeof a);
    ExpectLength(a.length, n);
    if (a.address == 0) return Read(p, n);
    Once(p, n);
    copiers_.Add(p, a.address, n);
    copiers_.Wait(1);
  }

  void Drain() override { copiers_.Wait(0); }

 private:
  // A buffer's first sight: made huge (in the untimed first pass).
  void Once(const char* p, uint64_t n) {
    if (std::find(seen_.begin(), seen_.end(), p) != seen_.end()) return;
    seen_.push_back(p);
    // Made huge as cma's CollapseLater makes them; advice only.
    HugePageRange r = WholeHugePages(p, n);
    if (r.length > 0) CollapseToHugePages(r.begin, r.length);
  }

  Copiers copiers_;
  std::vector<const char*> seen_;
};

}  // namespace
}  // namespace tensorpipe_js

int main(int argc, char** argv) {
  using namespace tensorpipe_js;
  baseline::Args a = baseline::ParseArgs(argc, argv, "[THREADS]");
  if (a.mode != "stream") {
    std::fprintf(stderr, "%s: stream only (cma sends small tensors inline, through the transport)\n", argv[0]);
    return 2;
  }
  // As cma counts cores: those this process may run on (availableParallelism()).
  cpu_set_t allowed;
  unsigned cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  unsigned threads = std::min(4u, std::max(1u, cores));
  if (!a.rest.empty()) threads = static_cast<unsigned>(std::strtoul(a.rest[0].c_str(), nullptr, 10));
  if (threads < 1 || threads > 64) {
    std::fprintf(stderr, "%s: THREADS must be from 1 to 64\n", argv[0]);
    return 2;
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) Die("socketpair");
  pid_t parent = getpid();
  // The forked peer reads: the timing end (this process) is the sender.
  return baseline::Run(
      a,
      [&] {
        close(fds[0]);
        return std::make_unique<CmaEnd>(fds[1], parent, threads);
      },
      [&] {
        close(fds[1]);
        return std::make_unique<CmaEnd>(fds[0], 0, 0);
      });
}
