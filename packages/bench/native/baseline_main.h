// The frame of the small C programs `tensorpipe bench` holds transports
// against: two processes (the one timing and a forked peer) exchanging
// frames laid out as the transports lay them (8-byte length, then the
// bytes), written from one buffer and read into reused buffers: one for
// round trips, two in turn for streams, as the bench's peer lands them.
//
//   <program> pingpong SIZE COUNT [...]  -> {"us":[...],"cores":[a,b]}  round trips, peer echoes
//   <program> stream SIZE COUNT [...]    -> {"gbps":x}   one way, peer acks the last
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tensorpipe_js::baseline {

inline uint64_t Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

[[noreturn]] inline void Die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// One process's end of the exchange: byte I/O, blocking until done.
class End {
 public:
  virtual ~End() = default;
  virtual void Write(const char* p, uint64_t n) = 0;
  virtual void Read(char* p, uint64_t n) = 0;

  virtual void WriteFrame(const char* p, uint64_t n) {
    Write(reinterpret_cast<const char*>(&n), 8);
    Write(p, n);
  }

  virtual void ReadFrame(char* p, uint64_t n) {
    uint64_t length;
    Read(reinterpret_cast<char*>(&length), 8);
    ExpectLength(length, n);
    Read(p, n);
  }

  // For an end whose ReadFrame returns while the bytes still land: until
  // they have.
  virtual void Drain() {}

 protected:
  static void ExpectLength(uint64_t length, uint64_t expected) {
    if (length == expected) return;
    std::fprintf(stderr, "frame of %llu bytes where %llu were expected\n", static_cast<unsigned long long>(length),
                 static_cast<unsigned long long>(expected));
    std::exit(1);
  }
};

// An end over a file descriptor it owns (a socket), with blocking calls.
class FdEnd : public End {
 public:
  explicit FdEnd(int fd) : fd_(fd) {}
  ~FdEnd() override { close(fd_); }

  void Write(const char* p, uint64_t n) override {
    struct iovec iov = {const_cast<char*>(p), n};
    Gather(&iov, 1);
  }

  void Read(char* p, uint64_t n) override {
    while (n > 0) {
      ssize_t r = read(fd_, p, n);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) Die("read");
      p += r;
      n -= static_cast<uint64_t>(r);
    }
  }

 protected:
  // Writes all of iov[0, count) (advanced in place), in as few calls as the
  // kernel takes.
  void Gather(struct iovec* iov, int count) {
    int at = 0;
    while (at < count) {
      ssize_t w = writev(fd_, iov + at, count - at);
      if (w < 0) {
        if (errno == EINTR) continue;
        Die("writev");
      }
      while (at < count && static_cast<size_t>(w) >= iov[at].iov_len) w -= iov[at++].iov_len;
      if (at < count) {
        iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + w;
        iov[at].iov_len -= w;
      }
    }
  }

 private:
  int fd_;
};

struct Args {
  std::string mode;
  uint64_t size = 0;
  uint64_t count = 0;
  // What follows COUNT, for the program's own settings.
  std::vector<std::string> rest;
};

inline Args ParseArgs(int argc, char** argv, const char* extraUsage) {
  Args a;
  if (argc >= 4) {
    a.mode = argv[1];
    a.size = std::strtoull(argv[2], nullptr, 10);
    a.count = std::strtoull(argv[3], nullptr, 10);
    for (int i = 4; i < argc; i++) a.rest.push_back(argv[i]);
  }
  if ((a.mode != "pingpong" && a.mode != "stream") || a.count == 0) {
    std::fprintf(stderr, "usage: %s pingpong|stream SIZE COUNT %s\n", argv[0], extraUsage);
    std::exit(2);
  }
  return a;
}

// A peer that fails (a check, a call) ends this process too, instead of
// leaving it waiting for bytes that never come.
inline void OnChildExit(int) {
  int status;
  if (waitpid(-1, &status, WNOHANG) > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    static const char kMessage[] = "the peer process failed\n";
    ssize_t ignored = write(2, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
    _exit(1);
  }
}

// Round trips are timed with the two processes on two cores (the first two
// this process may use), where there are two. Left to the scheduler, a
// forked peer starts on its parent's core and both hand that core back and
// forth for the first 10,000 round trips or more (3 us each here, against
// 0.6 us from two cores), while the long-lived processes of the pipes held
// against these programs are spread by then. Streams are left where the
// scheduler puts them: on one core of this VM the ring stays in that core's
// cache (34 GB/s at 1 MiB, 11 GB/s from two).
inline int NthAllowedCore(int nth) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) return -1;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
    if (CPU_ISSET(cpu, &allowed) && seen++ == nth) return cpu;
  }
  return -1;
}

inline void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) Die("sched_setaffinity");
}

// Forks; the child makes its end with `peerEnd` and serves, this process
// makes its end with `timedEnd`, measures and prints. The exit status says
// whether the peer finished too.
inline int Run(const Args& a, const std::function<std::unique_ptr<End>()>& peerEnd,
               const std::function<std::unique_ptr<End>()>& timedEnd) {
  // A pattern both processes know: what arrives last is checked against it.
  // The top byte of a multiplicative hash, so that no two pieces of it
  // match (a byte pattern repeats every 256 bytes: a chunk or a ring slot
  // landing at the wrong offset would pass).
  std::vector<char> out(a.size);
  for (uint64_t i = 0; i < a.size; i++) out[i] = static_cast<char>((i * 0x9E3779B97F4A7C15ull) >> 56);
  // A stream's frames land in two buffers in turn, as the bench's peer
  // double-buffers them (at 16 MiB one buffer stays in a 32 MiB L3 where
  // two do not: cma (C) ran 1.2-1.3x faster into one); a round trip's echo
  // is read into one.
  std::vector<char> landing[2] = {std::vector<char>(a.size), std::vector<char>(a.mode == "stream" ? a.size : 0)};
  std::vector<char>& in = landing[0];
  auto check = [&](const char* where, const std::vector<char>& got) {
    if (std::memcmp(got.data(), out.data(), a.size) != 0) {
      std::fprintf(stderr, "%s: the bytes that arrived differ from those sent\n", where);
      std::exit(1);
    }
  };
  char ack = 1;
  const bool pin = a.mode == "pingpong";
  const int cores[2] = {pin ? NthAllowedCore(0) : -1, pin ? NthAllowedCore(1) : -1};
  signal(SIGCHLD, OnChildExit);
  pid_t child = fork();
  if (child < 0) Die("fork");
  // Everything runs twice, the first time untimed: a fresh connection
  // starts with small socket buffers and cold pages, where the pipes it is
  // held against have been warmed up.
  if (child == 0) {
    PinTo(cores[1]);
    std::unique_ptr<End> end = peerEnd();
    for (int pass = 0; pass < 2; pass++) {
      if (a.mode == "pingpong") {
        for (uint64_t i = 0; i < a.count; i++) {
          end->ReadFrame(in.data(), a.size);
          end->WriteFrame(in.data(), a.size);
        }
      } else {
        for (uint64_t i = 0; i < a.count; i++) end->ReadFrame(landing[i % 2].data(), a.size);
        end->Drain();
        const std::vector<char>& last = landing[(a.count - 1) % 2];
        // Outside the timing: the ack of the first pass starts the timed
        // one, the ack of the timed pass ends it. (Checked before its ack,
        // the timed pass took 64 MiB frames' memcmp too: a fifth of the
        // time of six of them.)
        if (pass == 0) check("peer", last);
        end->WriteFrame(&ack, 1);
        if (pass == 1) check("peer", last);
      }
    }
    _exit(0);
  }
  PinTo(cores[0]);
  std::unique_ptr<End> end = timedEnd();
  std::vector<double> us(a.count);
  double gbps = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (a.mode == "pingpong") {
      for (uint64_t i = 0; i < a.count; i++) {
        uint64_t t0 = Now();
        end->WriteFrame(out.data(), a.size);
        end->ReadFrame(in.data(), a.size);
        us[i] = static_cast<double>(Now() - t0) / 1000.0;
      }
      check("echo", in);
    } else {
      uint64_t t0 = Now();
      for (uint64_t i = 0; i < a.count; i++) end->WriteFrame(out.data(), a.size);
      end->ReadFrame(&ack, 1);
      gbps = static_cast<double>(a.size) * a.count / (static_cast<double>(Now() - t0) / 1e9) / 1e9;
    }
  }
  if (a.mode == "pingpong") {
    std::printf("{\"us\":[");
    for (uint64_t i = 0; i < a.count; i++) std::printf(i ? ",%.3f" : "%.3f", us[i]);
    if (cores[0] >= 0)
      std::printf("],\"cores\":[%d,%d]}\n", cores[0], cores[1]);
    else
      std::printf("],\"cores\":[]}\n");
  } else {
    std::printf("{\"gbps\":%.6f}\n", gbps);
  }
  end.reset();
  signal(SIGCHLD, SIG_DFL);
  int status;
  // ECHILD: the handler reaped a peer that had finished well.
  if (waitpid(child, &status, 0) < 0) return errno == ECHILD ? 0 : 1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace tensorpipe_js::baseline
