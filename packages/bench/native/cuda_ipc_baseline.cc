// What two processes sharing one GPU can do at best, to hold cuda-ipc
// against: the exchange it makes (the sender records an interprocess event
// after the tensor, sends the allocation's and the event's handles, the
// receiver waits for the event, copies device to device into its own
// memory, waits for the copy and answers), in C over a socketpair, every
// handle made and opened once. Also the cost of each driver call that a
// transfer could make afresh, for finding where the time of one goes.
// MODE changes the exchange: `event` (the above), `fresh-event` (a new
// event per transfer, its handle sent and opened each time), `sender-sync`
// (no event: the sender waits for its stream before it says go), `local`
// (the receiver copies within its own memory: what the hop between
// processes and contexts costs alone).
//
//   cuda_ipc_baseline SIZE COUNT [MODE]
//   -> {"us":[per transfer...],"steps":{"call":us,...}}
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "baseline_main.h"
#include "tensorpipe/cuda_driver.h"

namespace {

using namespace tensorpipe_js;
using namespace tensorpipe_js::cuda;
using baseline::Die;
using baseline::Now;

constexpr int kSteps = 50;

const Driver& Need() {
  std::string why;
  const Driver* d = GetDriver(&why);
  if (d == nullptr) {
    std::fprintf(stderr, "%s\n", why.c_str());
    std::exit(2);
  }
  return *d;
}

void Ok(const Driver& d, CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "%s\n", d.ErrorText(r, call).c_str());
  std::exit(1);
}

void WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0) Die("write");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) Die("read");
    c += r;
    n -= static_cast<size_t>(r);
  }
}

struct Handles {
  CUipcMemHandle mem;
  CUipcEventHandle event;
};

// One process's start: the driver on GPU 0, two allocations of the
// transfer's size and a stream of its own.
struct Gpu {
  const Driver& d;
  CUdeviceptr first;
  CUdeviceptr second;
  CUstream stream;
};

Gpu Start(uint64_t size) {
  const Driver& d = Need();
  Ok(d, UseDevice(d, 0), "cuCtxSetCurrent");
  Gpu g{d, 0, 0, nullptr};
  Ok(d, d.cuMemAlloc(&g.first, size), "cuMemAlloc");
  Ok(d, d.cuMemAlloc(&g.second, size), "cuMemAlloc");
  Ok(d, d.cuStreamCreate(&g.stream, kStreamNonBlocking), "cuStreamCreate");
  return g;
}

// Mean microseconds of `f` over kSteps calls.
template <typename F>
double Mean(F f) {
  uint64_t t0 = Now();
  for (int i = 0; i < kSteps; i++) f();
  return static_cast<double>(Now() - t0) / 1000.0 / kSteps;
}

void Receiver(int fd, uint64_t size, uint64_t count, const std::string& mode) {
  Gpu g = Start(size);
  const Driver& d = g.d;
  CUdeviceptr dst = g.first, own = g.second;
  CUstream stream = g.stream;
  Handles h;
  ReadAll(fd, &h, sizeof h);
  CUdeviceptr src;
  CUevent event;
  Ok(d, d.cuIpcOpenMemHandle(&src, h.mem, kIpcMemLazyEnablePeerAccess), "cuIpcOpenMemHandle");
  Ok(d, d.cuIpcOpenEventHandle(&event, h.event), "cuIpcOpenEventHandle");
  char go = 0;
  CUipcEventHandle fresh;
  for (uint64_t i = 0; i < 2 * count; i++) {
    ReadAll(fd, &fresh, sizeof fresh);
    CUevent wait = event;
    if (mode == "fresh-event") Ok(d, d.cuIpcOpenEventHandle(&wait, fresh), "cuIpcOpenEventHandle");
    if (mode == "event" || mode == "fresh-event") Ok(d, d.cuStreamWaitEvent(stream, wait, 0), "cuStreamWaitEvent");
    Ok(d, d.cuMemcpyDtoDAsync(dst, mode == "local" ? own : src, size, stream), "cuMemcpyDtoDAsync");
    Ok(d, d.cuStreamSynchronize(stream), "cuStreamSynchronize");
    if (mode == "fresh-event") Ok(d, d.cuEventDestroy(wait), "cuEventDestroy");
    WriteAll(fd, &go, 1);
  }
  // What a receiver pays when it opens the handles afresh each time.
  double openEvent = Mean([&] {
    CUevent e;
    Ok(d, d.cuIpcOpenEventHandle(&e, h.event), "cuIpcOpenEventHandle");
    Ok(d, d.cuEventDestroy(e), "cuEventDestroy");
  });
  Ok(d, d.cuIpcCloseMemHandle(src), "cuIpcCloseMemHandle");
  double openMem = Mean([&] {
    CUdeviceptr p;
    Ok(d, d.cuIpcOpenMemHandle(&p, h.mem, kIpcMemLazyEnablePeerAccess), "cuIpcOpenMemHandle");
    Ok(d, d.cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
  });
  double sync = Mean([&] { Ok(d, d.cuStreamSynchronize(stream), "cuStreamSynchronize"); });
  double steps[] = {openEvent, openMem, sync};
  WriteAll(fd, steps, sizeof steps);
  ReadAll(fd, &go, 1);
  d.cuEventDestroy(event);
}

int Sender(int fd, uint64_t size, uint64_t count, const std::string& mode) {
  Gpu g = Start(size);
  const Driver& d = g.d;
  CUdeviceptr src = g.first, mine = g.second;
  CUstream stream = g.stream;
  Ok(d, d.cuMemsetD8Async(src, 90, size, stream), "cuMemsetD8Async");
  Ok(d, d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  Handles h;
  CUevent event;
  Ok(d, d.cuIpcGetMemHandle(&h.mem, src), "cuIpcGetMemHandle");
  Ok(d, d.cuEventCreate(&event, kEventDisableTiming | kEventInterprocess), "cuEventCreate");
  Ok(d, d.cuIpcGetEventHandle(&h.event, event), "cuIpcGetEventHandle");
  WriteAll(fd, &h, sizeof h);
  std::vector<double> us(count);
  char go = 1;
  // Twice, the first untimed: the first copies map the peer's memory.
  for (int pass = 0; pass < 2; pass++) {
    for (uint64_t i = 0; i < count; i++) {
      uint64_t t0 = Now();
      CUevent e = event;
      CUipcEventHandle eh = h.event;
      if (mode == "fresh-event") {
        Ok(d, d.cuEventCreate(&e, kEventDisableTiming | kEventInterprocess), "cuEventCreate");
        Ok(d, d.cuEventRecord(e, stream), "cuEventRecord");
        Ok(d, d.cuIpcGetEventHandle(&eh, e), "cuIpcGetEventHandle");
      } else if (mode == "event") {
        Ok(d, d.cuEventRecord(e, stream), "cuEventRecord");
      } else if (mode == "sender-sync") {
        Ok(d, d.cuStreamSynchronize(stream), "cuStreamSynchronize");
      }
      WriteAll(fd, &eh, sizeof eh);
      ReadAll(fd, &go, 1);
      if (mode == "fresh-event") Ok(d, d.cuEventDestroy(e), "cuEventDestroy");
      us[i] = static_cast<double>(Now() - t0) / 1000.0;
    }
  }
  double localCopy = Mean([&] {
    Ok(d, d.cuMemcpyDtoDAsync(mine, src, size, stream), "cuMemcpyDtoDAsync");
    Ok(d, d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  });
  double getMem = Mean([&] {
    CUipcMemHandle m;
    Ok(d, d.cuIpcGetMemHandle(&m, src), "cuIpcGetMemHandle");
  });
  double newEvent = Mean([&] {
    CUevent e;
    CUipcEventHandle eh;
    Ok(d, d.cuEventCreate(&e, kEventDisableTiming | kEventInterprocess), "cuEventCreate");
    Ok(d, d.cuEventRecord(e, stream), "cuEventRecord");
    Ok(d, d.cuIpcGetEventHandle(&eh, e), "cuIpcGetEventHandle");
    Ok(d, d.cuEventDestroy(e), "cuEventDestroy");
  });
  double record = Mean([&] { Ok(d, d.cuEventRecord(event, stream), "cuEventRecord"); });
  double peer[3];
  ReadAll(fd, peer, sizeof peer);
  WriteAll(fd, &go, 1);
  std::sort(us.begin(), us.end());
  std::printf("{\"us\":[");
  for (uint64_t i = 0; i < count; i++) std::printf(i ? ",%.3f" : "%.3f", us[i]);
  std::printf(
      "],\"mode\":\"%s\",\"steps\":{\"localCopyAndSync\":%.3f,\"cuIpcGetMemHandle\":%.3f,\"newInterprocessEvent\":%.3f,"
      "\"cuEventRecord\":%.3f,\"cuIpcOpenEventHandle+destroy\":%.3f,\"cuIpcOpenMemHandle+close\":%.3f,"
      "\"idleStreamSynchronize\":%.3f}}\n",
      mode.c_str(), localCopy, getMem, newEvent, record, peer[0], peer[1], peer[2]);
  d.cuEventDestroy(event);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc == 4 ? argv[3] : "event";
  if (argc < 3 || argc > 4 || (mode != "event" && mode != "fresh-event" && mode != "sender-sync" && mode != "local")) {
    std::fprintf(stderr, "usage: %s SIZE COUNT [event|fresh-event|sender-sync|local]\n", argv[0]);
    return 2;
  }
  uint64_t size = std::strtoull(argv[1], nullptr, 10);
  uint64_t count = std::strtoull(argv[2], nullptr, 10);
  if (size == 0 || count == 0) {
    std::fprintf(stderr, "SIZE and COUNT must be positive\n");
    return 2;
  }
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) Die("socketpair");
  // Before either process starts the driver, which does not survive a fork.
  pid_t child = fork();
  if (child < 0) Die("fork");
  if (child == 0) {
    close(fds[0]);
    Receiver(fds[1], size, count, mode);
    _exit(0);
  }
  close(fds[1]);
  int rc = Sender(fds[0], size, count, mode);
  int status;
  if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  return rc;
}
