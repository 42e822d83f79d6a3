// Checks that the emulator keeps the properties the CUDA packages' tests
// rely on to find bugs, through the same loader the addons use:
//   emulator_check <case>    prints "ok" and exits 0, or says what failed.
// TENSORPIPE_CUDA_DRIVER must name the emulator.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tensorpipe/cuda_driver.h"

using namespace tensorpipe_js::cuda;

namespace {

const Driver* d = nullptr;

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

#define OK(call) CHECK((call) == CUDA_SUCCESS)

CUdeviceptr Alloc(size_t n) {
  CUdeviceptr p = 0;
  OK(d->cuMemAlloc(&p, n));
  return p;
}

unsigned char* Pinned(size_t n) {
  void* p = nullptr;
  OK(d->cuMemAllocHost(&p, n));
  return static_cast<unsigned char*>(p);
}

CUstream NewStream(unsigned flags = kStreamNonBlocking) {
  CUstream s = nullptr;
  OK(d->cuStreamCreate(&s, flags));
  return s;
}

// Copies are queued and run later; synchronizing waits for them.
void Async() {
  CUdeviceptr dev = Alloc(4096);
  unsigned char* host = Pinned(4096);
  CUstream s = NewStream();
  OK(d->cuMemsetD8Async(dev, 7, 4096, s));
  memset(host, 0, 4096);
  OK(d->cuMemcpyDtoHAsync(host, dev, 4096, s));
  CHECK(host[4095] == 0);
  OK(d->cuStreamSynchronize(s));
  CHECK(host[0] == 7 && host[4095] == 7);
  OK(d->cuStreamDestroy(s));
  OK(d->cuMemFree(dev));
  OK(d->cuMemFreeHost(host));
}

// Two non-blocking streams keep no order between them unless an event says so.
void Events() {
  CUdeviceptr dev = Alloc(4096);
  unsigned char* host = Pinned(4096);
  CUstream a = NewStream();
  CUstream b = NewStream();
  OK(d->cuMemsetD8Async(dev, 1, 4096, a));
  OK(d->cuStreamSynchronize(a));
  // Twenty operations' delays on a before it writes 2, one on b: b copies
  // long before that.
  for (int i = 0; i < 20; i++) OK(d->cuMemsetD8Async(dev, 1, 4096, a));
  OK(d->cuMemsetD8Async(dev, 2, 4096, a));
  OK(d->cuMemcpyDtoHAsync(host, dev, 4096, b));
  OK(d->cuStreamSynchronize(b));
  CHECK(host[0] == 1);
  OK(d->cuStreamSynchronize(a));
  CUevent e = nullptr;
  OK(d->cuEventCreate(&e, kEventDisableTiming));
  OK(d->cuMemsetD8Async(dev, 3, 4096, a));
  OK(d->cuEventRecord(e, a));
  OK(d->cuStreamWaitEvent(b, e, 0));
  OK(d->cuMemcpyDtoHAsync(host, dev, 4096, b));
  // Destroying an event with work still queued on it is allowed.
  OK(d->cuEventDestroy(e));
  OK(d->cuStreamSynchronize(b));
  CHECK(host[0] == 3);
  OK(d->cuStreamDestroy(a));
  OK(d->cuStreamDestroy(b));
  OK(d->cuMemFree(dev));
}

// The legacy default stream waits for blocking streams, and they for it.
void Legacy() {
  CUdeviceptr dev = Alloc(4096);
  unsigned char* host = Pinned(4096);
  CUstream blocking = NewStream(0);
  OK(d->cuMemsetD8Async(dev, 4, 4096, blocking));
  OK(d->cuMemcpyDtoHAsync(host, dev, 4096, nullptr));
  OK(d->cuStreamSynchronize(nullptr));
  CHECK(host[0] == 4);
  OK(d->cuMemsetD8Async(dev, 5, 4096, nullptr));
  OK(d->cuMemcpyDtoHAsync(host, dev, 4096, blocking));
  OK(d->cuStreamSynchronize(blocking));
  CHECK(host[0] == 5);
  OK(d->cuStreamDestroy(blocking));
  OK(d->cuMemFree(dev));
}

// Pageable host memory: host to device takes the bytes at the call, device
// to host is done at return.
void Pageable() {
  CUdeviceptr dev = Alloc(4096);
  std::vector<unsigned char> src(4096, 9), dst(4096, 0);
  CUstream s = NewStream();
  OK(d->cuMemcpyHtoDAsync(dev, src.data(), 4096, s));
  src.assign(4096, 0);
  OK(d->cuMemcpyDtoHAsync(dst.data(), dev, 4096, s));
  CHECK(dst[0] == 9 && dst[4095] == 9);
  CHECK(!IsPinned(*d, dst.data()));
  unsigned char* pinned = Pinned(4096);
  CHECK(IsPinned(*d, pinned + 4095));
  unsigned type = 0;
  OK(d->cuPointerGetAttribute(&type, kPointerAttributeMemoryType, dev));
  CHECK(type == 2);
  OK(d->cuMemFreeHost(pinned));
  OK(d->cuStreamDestroy(s));
  OK(d->cuMemFree(dev));
}

// The host cannot read device memory: a process that tries dies of SIGSEGV.
void Fault() {
  CUdeviceptr dev = Alloc(4096);
  fflush(nullptr);
  pid_t child = fork();
  if (child == 0) {
    volatile unsigned char c = *reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(dev));
    (void)c;
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
}

// Errors the driver gives: no context, sizes, unknown pointers, own handles.
void Errors() {
  std::string why;
  CUdeviceptr p = 0;
  CHECK(d->cuMemAlloc(&p, 16) == 201);  // no current context on this thread yet
  OK(UseDevice(*d, 1));
  CUdeviceptr dev = Alloc(64);
  int ordinal = -1;
  OK(d->cuPointerGetAttribute(&ordinal, kPointerAttributeDeviceOrdinal, dev + 10));
  CHECK(ordinal == 1);
  CHECK(d->cuPointerGetAttribute(&ordinal, kPointerAttributeDeviceOrdinal, 12345) == 1);
  CHECK(d->cuMemAlloc(&p, 0) == 1);
  CHECK(d->cuMemAlloc(&p, size_t(1) << 52) == 2);
  CHECK(d->cuMemsetD8Async(dev, 0, 65, nullptr) == 1);
  CUdeviceptr base = 0;
  size_t size = 0;
  OK(d->cuMemGetAddressRange(&base, &size, dev + 63));
  CHECK(base == dev && size == 64);
  CHECK(d->cuMemGetAddressRange(&base, &size, dev + 64) == 500);
  CUipcMemHandle h;
  OK(d->cuIpcGetMemHandle(&h, dev));
  CHECK(d->cuIpcOpenMemHandle(&p, h, kIpcMemLazyEnablePeerAccess) == 201);
  CUevent e = nullptr;
  CUipcEventHandle eh;
  OK(d->cuEventCreate(&e, kEventDisableTiming));
  CHECK(d->cuIpcGetEventHandle(&eh, e) == 1);
  OK(d->cuMemFree(dev));
  CHECK(d->cuMemFree(dev) == 1);
  const char* name = nullptr;
  OK(d->cuGetErrorName(201, &name));
  CHECK(std::string(name) == "CUDA_ERROR_INVALID_CONTEXT");
}

std::string Hex(const void* p, size_t n) {
  std::string out;
  char b[3];
  for (size_t i = 0; i < n; i++) {
    snprintf(b, sizeof(b), "%02x", static_cast<const unsigned char*>(p)[i]);
    out += b;
  }
  return out;
}

void Unhex(const char* s, void* out, size_t n) {
  for (size_t i = 0; i < n; i++) sscanf(s + 2 * i, "%2hhx", static_cast<unsigned char*>(out) + i);
}

// The importing end of Ipc, in another process: opens the memory twice
// (one pointer, counted), waits for the event on its own stream, copies.
void IpcPeer(const char* memHex, const char* eventHex) {
  CUipcMemHandle h;
  CUipcEventHandle eh;
  Unhex(memHex, h.reserved, 64);
  Unhex(eventHex, eh.reserved, 64);
  CUdeviceptr a = 0, b = 0;
  OK(d->cuIpcOpenMemHandle(&a, h, kIpcMemLazyEnablePeerAccess));
  OK(d->cuIpcOpenMemHandle(&b, h, kIpcMemLazyEnablePeerAccess));
  CHECK(a == b);
  CUevent e = nullptr;
  OK(d->cuIpcOpenEventHandle(&e, eh));
  CUstream s = NewStream();
  CUdeviceptr mine = Alloc(1 << 20);
  unsigned char* host = Pinned(1 << 20);
  OK(d->cuStreamWaitEvent(s, e, 0));
  OK(d->cuMemcpyDtoDAsync(mine, a, 1 << 20, s));
  OK(d->cuMemcpyDtoHAsync(host, mine, 1 << 20, s));
  OK(d->cuStreamSynchronize(s));
  CHECK(host[0] == 0x5a && host[(1 << 20) - 1] == 0x5a);
  OK(d->cuIpcCloseMemHandle(a));
  OK(d->cuIpcCloseMemHandle(b));
  CHECK(d->cuIpcCloseMemHandle(a) == 1);
  OK(d->cuEventDestroy(e));
}

// Memory and an event cross to another process; the peer's copy waits for
// work queued here before the event, and sees its bytes.
void Ipc(const char* self) {
  CUdeviceptr dev = Alloc(1 << 20);
  CUstream s = NewStream();
  OK(d->cuMemsetD8Async(dev, 0x11, 1 << 20, s));
  OK(d->cuStreamSynchronize(s));
  CUevent e = nullptr;
  OK(d->cuEventCreate(&e, kEventDisableTiming | kEventInterprocess));
  // Behind 400 operations' delays (200 ms): not done when the peer starts waiting.
  for (int i = 0; i < 400; i++) OK(d->cuMemsetD8Async(dev, 0x11, 1, s));
  OK(d->cuMemsetD8Async(dev, 0x5a, 1 << 20, s));
  OK(d->cuEventRecord(e, s));
  CUipcMemHandle h;
  CUipcEventHandle eh;
  OK(d->cuIpcGetMemHandle(&h, dev));
  OK(d->cuIpcGetEventHandle(&eh, e));
  std::string cmd = std::string(self) + " ipc-peer " + Hex(h.reserved, 64) + " " + Hex(eh.reserved, 64);
  CHECK(system(cmd.c_str()) == 0);
  OK(d->cuEventDestroy(e));
  OK(d->cuMemFree(dev));
  // A freed allocation's handle no longer opens, even where its number is reused.
  CUdeviceptr again = Alloc(1 << 20);
  cmd = std::string(self) + " ipc-stale " + Hex(h.reserved, 64);
  CHECK(system(cmd.c_str()) == 0);
  OK(d->cuMemFree(again));
}

void IpcStale(const char* memHex) {
  CUipcMemHandle h;
  Unhex(memHex, h.reserved, 64);
  CUdeviceptr p = 0;
  CHECK(d->cuIpcOpenMemHandle(&p, h, kIpcMemLazyEnablePeerAccess) == 1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  d = GetDriver(&why);
  if (d == nullptr) {
    fprintf(stderr, "no driver: %s\n", why.c_str());
    return 1;
  }
  std::string what = argc > 1 ? argv[1] : "";
  if (what == "errors") {
    Errors();
  } else {
    OK(UseDevice(*d, 0));
    if (what == "async")
      Async();
    else if (what == "events")
      Events();
    else if (what == "legacy")
      Legacy();
    else if (what == "pageable")
      Pageable();
    else if (what == "fault")
      Fault();
    else if (what == "ipc")
      Ipc(argv[0]);
    else if (what == "ipc-peer" && argc == 4)
      IpcPeer(argv[2], argv[3]);
    else if (what == "ipc-stale" && argc == 3)
      IpcStale(argv[2]);
    else {
      fprintf(stderr, "unknown case %s\n", what.c_str());
      return 2;
    }
  }
  printf("ok\n");
  return 0;
}
