// A CUDA driver for machines without a GPU: the part of libcuda's API that
// tensorpipe-js calls, over host memory, so that the CUDA packages' own
// code (addons and channels) runs for real in tests. Loaded in place of
// libcuda.so.1 through TENSORPIPE_CUDA_DRIVER.
//
// It keeps the properties bugs hide behind:
// - device pointers are addresses that fault when the host touches them;
//   the bytes live in a memfd mapped elsewhere, which IPC handles name;
// - copies run on a thread per stream, after a delay, in stream order, so
//   work that is not waited for is seen unfinished; events, stream waits,
//   the legacy default stream's implicit waits and IPC events are honoured;
//   a stream's wait on a peer process's event costs what it did on an H100
//   (about 275 us more than no wait at all);
// - calls that need a current context fail without one, as on a GPU;
// - pageable host copies behave as the driver documents (host to device
//   takes the bytes at the call, device to host returns once done).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kOutOfMemory = 2;
constexpr CUresult kNotInitialized = 3;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kMapFailed = 205;
constexpr CUresult kInvalidHandle = 400;
constexpr CUresult kNotFound = 500;
constexpr CUresult kNotReady = 600;
constexpr CUresult kNotSupported = 801;

constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kEventInterprocess = 0x4;
constexpr int kAttributeMemoryType = 2;
constexpr int kAttributeBufferId = 7;
constexpr unsigned kMemoryTypeHost = 1;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr int kAttributeDeviceOrdinal = 9;

// The driver these stand in for: CUDA 13.0.
constexpr int kDriverVersion = 13000;
constexpr char kMemMagic[8] = {'T', 'P', 'E', 'M', 'U', 'M', 'E', 'M'};
constexpr char kEventMagic[8] = {'T', 'P', 'E', 'M', 'U', 'E', 'V', 'T'};

struct IpcHandle {
  char magic[8];
  int32_t pid;
  int32_t fd;
  uint64_t id;
  uint64_t size;
  char unused[32];
};
static_assert(sizeof(IpcHandle) == 64, "IPC handles are 64 bytes");

size_t EnvNumber(const char* name, size_t fallback) {
  const char* v = getenv(name);
  return v && *v ? static_cast<size_t>(strtoull(v, nullptr, 10)) : fallback;
}

size_t PageRound(size_t n) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

std::string MemfdName(uint64_t id) { return "tp-cuda-emulator-" + std::to_string(id); }

// The memfd of an exporting process, through /proc; checked to be the
// allocation the handle names, as the number may have been reused.
int OpenPeerFd(const IpcHandle& h) {
  std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  char target[256] = {0};
  ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  std::string want = "memfd:" + MemfdName(h.id) + " ";
  if (n <= 0 || std::string(target, n).find(want) == std::string::npos) return -1;
  return open(path.c_str(), O_RDWR | O_CLOEXEC);
}

struct Allocation {
  CUdeviceptr base;
  size_t size;
  size_t mapped;
  char* host;
  int fd;
  int device;
  uint64_t id;
  // Opened from a peer's handle: which one, and how many opens are unclosed.
  bool imported = false;
  int32_t peerPid = 0;
  uint64_t peerId = 0;
  int refs = 1;
};

// An event's progress: records issued, and the last one that ran. In a
// memfd page for interprocess events, so that a peer can wait on it.
struct EventCounters {
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> completed{0};
};

// Shared by the event and the records and waits queued on it, so that an
// event may be destroyed with work on it still queued, as on a GPU.
using Counters = std::shared_ptr<EventCounters>;

Counters MappedCounters(void* page) {
  return Counters(new (page) EventCounters(),
                  [](EventCounters* c) { munmap(c, static_cast<size_t>(sysconf(_SC_PAGESIZE))); });
}

struct Event {
  unsigned flags;
  Counters counters;
  int fd = -1;
  uint64_t id = 0;
  bool imported = false;
};

using Op = std::function<void(std::unique_lock<std::mutex>&)>;

struct Stream {
  int device;
  bool legacy;
  bool blocking;
  bool destroyed = false;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  std::deque<Op> queue;
};

struct Context {
  int device;
};

struct State {
  std::mutex mu;
  std::condition_variable changed;
  std::atomic<bool> initialized{false};
  int deviceCount = 1;
  size_t capacity = 0;
  std::chrono::microseconds delay{0};
  std::chrono::microseconds peerEventWait{0};
  std::chrono::microseconds ipcOpen{0};
  // What the host waited for and opened, for tests that count them per
  // transfer (TENSORPIPE_CUDA_EMULATOR_COUNTS).
  std::atomic<uint64_t> hostWaits{0};
  std::atomic<uint64_t> memHandleOpens{0};
  std::atomic<uint64_t> eventHandleOpens{0};
  std::atomic<uint64_t> hostFuncs{0};
  std::vector<Context*> contexts;
  std::vector<Stream*> legacy;
  // Owned here until drained after cuStreamDestroy; waits hold them too.
  std::vector<std::shared_ptr<Stream>> streams;
  std::map<CUdeviceptr, Allocation> allocations;
  std::map<char*, size_t> pinned;
  std::vector<size_t> used;
  uint64_t nextId = 1;
};

// An IPC handle opened: counted, and as slow as on an H100 (about 155 us),
// so that an open per transfer shows.
void Opening(std::atomic<uint64_t>& count);

// Never destroyed: stream threads may still be waiting when the process exits.
State& S() {
  static State* s = new State();
  return *s;
}

thread_local Context* current = nullptr;

void Opening(std::atomic<uint64_t>& count) {
  count++;
  std::this_thread::sleep_for(S().ipcOpen);
}

// At exit, with TENSORPIPE_CUDA_EMULATOR_COUNTS=<dir>: <dir>/<pid>.json.
void WriteCounts() {
  State& st = S();
  std::string path = std::string(getenv("TENSORPIPE_CUDA_EMULATOR_COUNTS")) + "/" + std::to_string(getpid()) + ".json";
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) return;
  fprintf(f, "{\"hostWaits\":%llu,\"memHandleOpens\":%llu,\"eventHandleOpens\":%llu,\"hostFuncs\":%llu}\n",
          static_cast<unsigned long long>(st.hostWaits.load()),
          static_cast<unsigned long long>(st.memHandleOpens.load()),
          static_cast<unsigned long long>(st.eventHandleOpens.load()),
          static_cast<unsigned long long>(st.hostFuncs.load()));
  fclose(f);
}

void RunStream(std::shared_ptr<Stream> s) {
  State& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  for (;;) {
    st.changed.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
    if (s->queue.empty()) break;
    Op op = std::move(s->queue.front());
    op(lock);
    s->queue.pop_front();
    s->completed++;
    st.changed.notify_all();
  }
  st.streams.erase(std::remove(st.streams.begin(), st.streams.end(), s), st.streams.end());
}

Stream* NewStream(int device, bool legacy, bool blocking) {
  auto s = std::make_shared<Stream>();
  s->device = device;
  s->legacy = legacy;
  s->blocking = blocking;
  S().streams.push_back(s);
  std::thread(RunStream, s).detach();
  return s.get();
}

std::shared_ptr<Stream> Owned(Stream* s) {
  for (auto& o : S().streams) {
    if (o.get() == s) return o;
  }
  return nullptr;
}

// Queues op on s, behind the implicit waits of the legacy default stream:
// it waits for every blocking stream of its device, and they wait for it.
// Returns the ticket that s->completed reaches once op has run.
uint64_t Enqueue(Stream* s, Op op) {
  State& st = S();
  auto waitFor = [s](std::shared_ptr<Stream> other) {
    uint64_t ticket = other->enqueued;
    s->queue.push_back([other, ticket](std::unique_lock<std::mutex>& lock) {
      S().changed.wait(lock, [&] { return other->completed >= ticket; });
    });
    s->enqueued++;
  };
  if (s->legacy) {
    for (auto& b : st.streams) {
      if (b.get() != s && b->device == s->device && b->blocking && !b->legacy && b->enqueued > b->completed) waitFor(b);
    }
  } else if (s->blocking) {
    Stream* l = st.legacy[s->device];
    if (l->enqueued > l->completed) waitFor(Owned(l));
  }
  s->queue.push_back(std::move(op));
  s->enqueued++;
  st.changed.notify_all();
  return s->enqueued;
}

// The work a GPU would take time over: the delay, then the copy, unlocked.
Op Work(std::function<void()> f) {
  return [f = std::move(f)](std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    std::this_thread::sleep_for(S().delay);
    f();
    lock.lock();
  };
}

// Every call that needs the driver started; most also a current context.
CUresult Ready(bool needContext = true) {
  if (!S().initialized) return kNotInitialized;
  if (needContext && current == nullptr) return kInvalidContext;
  return kSuccess;
}

CUresult ResolveStream(void* handle, Stream** out) {
  State& st = S();
  auto value = reinterpret_cast<uintptr_t>(handle);
  if (value == 0 || value == 1) {
    if (current == nullptr) return kInvalidContext;
    *out = st.legacy[current->device];
    return kSuccess;
  }
  // CU_STREAM_PER_THREAD is not emulated.
  if (value == 2) return kNotSupported;
  auto* s = static_cast<Stream*>(handle);
  if (Owned(s) == nullptr || s->destroyed) return kInvalidHandle;
  *out = s;
  return kSuccess;
}

// The preamble of every call on a stream: the driver started, a current
// context, the state locked and the stream found; then f(stream, lock).
template <typename F>
CUresult OnStream(void* stream, F f) {
  if (CUresult r = Ready()) return r;
  std::unique_lock<std::mutex> lock(S().mu);
  Stream* s;
  if (CUresult r = ResolveStream(stream, &s)) return r;
  return f(s, lock);
}

// The host bytes behind [ptr, ptr + n) of one allocation, or nullptr.
char* DeviceBytes(CUdeviceptr ptr, size_t n) {
  auto& all = S().allocations;
  auto it = all.upper_bound(ptr);
  if (it == all.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  if (ptr + n > a.base + a.size || ptr + n < ptr) return nullptr;
  return a.host + (ptr - a.base);
}

const Allocation* AllocationAt(CUdeviceptr ptr) {
  auto& all = S().allocations;
  auto it = all.upper_bound(ptr);
  if (it == all.begin()) return nullptr;
  --it;
  return ptr < it->second.base + it->second.size ? &it->second : nullptr;
}

bool IsPinned(const void* p, size_t n) {
  auto& pinned = S().pinned;
  auto c = static_cast<char*>(const_cast<void*>(p));
  auto it = pinned.upper_bound(c);
  if (it == pinned.begin()) return false;
  --it;
  return c + n <= it->first + it->second;
}

void WaitIdle(std::unique_lock<std::mutex>& lock) {
  State& st = S();
  st.changed.wait(lock, [&] {
    for (auto& s : st.streams) {
      if (s->completed < s->enqueued) return false;
    }
    return true;
  });
}

// Maps fd as an allocation of `size` bytes on device: the bytes at a host
// address, and a device address range that faults if the host uses it.
// Takes fd: closed with the allocation, or at once on failure.
CUresult MapAllocation(int fd, size_t size, int device, uint64_t id, CUdeviceptr* out, Allocation** made) {
  size_t mapped = PageRound(size);
  void* host = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (host == MAP_FAILED) {
    close(fd);
    return kMapFailed;
  }
  void* dev = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (dev == MAP_FAILED) {
    munmap(host, mapped);
    close(fd);
    return kOutOfMemory;
  }
  auto base = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(dev));
  Allocation& a = S().allocations[base];
  a = Allocation{base, size, mapped, static_cast<char*>(host), fd, device, id};
  *out = base;
  if (made) *made = &a;
  return kSuccess;
}

// As on a GPU, memory goes once the work queued before is done.
CUresult UnmapWhenIdle(CUdeviceptr ptr, std::unique_lock<std::mutex>& lock) {
  WaitIdle(lock);
  auto it = S().allocations.find(ptr);
  if (it == S().allocations.end()) return kInvalidValue;
  Allocation& a = it->second;
  munmap(a.host, a.mapped);
  munmap(reinterpret_cast<void*>(static_cast<uintptr_t>(a.base)), a.mapped);
  close(a.fd);
  if (!a.imported) S().used[a.device] -= a.size;
  S().allocations.erase(it);
  return kSuccess;
}

CUresult RecordOn(Event* e, Stream* s) {
  uint64_t gen = e->counters->recorded.fetch_add(1) + 1;
  Counters c = e->counters;
  Enqueue(s, [c, gen](std::unique_lock<std::mutex>&) {
    uint64_t seen = c->completed.load();
    while (seen < gen && !c->completed.compare_exchange_weak(seen, gen)) {
    }
  });
  return kSuccess;
}

// Waits, lock held, until the event's last record (as of now) has run; a
// peer's progress is seen by polling, as no notification crosses processes.
void WaitEvent(const Counters& c, uint64_t gen, std::unique_lock<std::mutex>& lock) {
  while (c->completed.load() < gen) S().changed.wait_for(lock, std::chrono::microseconds(200));
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

// The results the emulator gives, named and worded as the driver does.
const ErrorText* FindError(CUresult r) {
  static const ErrorText errors[] = {
      {kSuccess, "CUDA_SUCCESS", "no error"},
      {kInvalidValue, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
      {kOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
      {kNotInitialized, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
      {kInvalidDevice, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
      {kInvalidContext, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
      {kMapFailed, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
      {kInvalidHandle, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
      {kNotFound, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
      {kNotReady, "CUDA_ERROR_NOT_READY", "device not ready"},
      {kNotSupported, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
  };
  for (const ErrorText& e : errors) {
    if (e.code == r) return &e;
  }
  return nullptr;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.initialized) return kSuccess;
  st.deviceCount = static_cast<int>(EnvNumber("TENSORPIPE_CUDA_EMULATOR_DEVICES", 2));
  st.capacity = EnvNumber("TENSORPIPE_CUDA_EMULATOR_MEMORY_MIB", 16384) << 20;
  st.delay = std::chrono::microseconds(EnvNumber("TENSORPIPE_CUDA_EMULATOR_DELAY_US", 500));
  st.peerEventWait = std::chrono::microseconds(EnvNumber("TENSORPIPE_CUDA_EMULATOR_PEER_EVENT_WAIT_US", 300));
  st.ipcOpen = std::chrono::microseconds(EnvNumber("TENSORPIPE_CUDA_EMULATOR_IPC_OPEN_US", 155));
  if (getenv("TENSORPIPE_CUDA_EMULATOR_COUNTS")) atexit(WriteCounts);
  st.used.assign(st.deviceCount, 0);
  for (int i = 0; i < st.deviceCount; i++) {
    st.contexts.push_back(new Context{i});
    st.legacy.push_back(NewStream(i, true, true));
  }
  st.initialized = true;
  return kSuccess;
}

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return kInvalidValue;
  *version = kDriverVersion;
  return kSuccess;
}

CUresult cuGetErrorName(CUresult r, const char** name) {
  const ErrorText* e = FindError(r);
  *name = e ? e->name : nullptr;
  return e ? kSuccess : kInvalidValue;
}

CUresult cuGetErrorString(CUresult r, const char** text) {
  const ErrorText* e = FindError(r);
  *text = e ? e->text : nullptr;
  return e ? kSuccess : kInvalidValue;
}

CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = Ready(false)) return r;
  *count = S().deviceCount;
  return kSuccess;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = Ready(false)) return r;
  if (ordinal < 0 || ordinal >= S().deviceCount) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice device) {
  if (CUresult r = Ready(false)) return r;
  if (device < 0 || device >= S().deviceCount) return kInvalidDevice;
  snprintf(name, static_cast<size_t>(len), "TensorPipe CUDA emulator %d", device);
  return kSuccess;
}

CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice device) {
  if (CUresult r = Ready(false)) return r;
  if (device < 0 || device >= S().deviceCount) return kInvalidDevice;
  snprintf(bus, static_cast<size_t>(len), "0000:%02X:00.0", 0xE0 + device);
  return kSuccess;
}

// The same in every process, as a GPU's UUID is.
CUresult cuDeviceGetUuid_v2(char* uuid, CUdevice device) {
  if (CUresult r = Ready(false)) return r;
  if (device < 0 || device >= S().deviceCount) return kInvalidDevice;
  const char stem[] = "tp-cuda-emulatr";
  memcpy(uuid, stem, 15);
  uuid[15] = static_cast<char>(device);
  return kSuccess;
}

CUresult cuDeviceCanAccessPeer(int* can, CUdevice a, CUdevice b) {
  if (CUresult r = Ready(false)) return r;
  if (a < 0 || b < 0 || a >= S().deviceCount || b >= S().deviceCount) return kInvalidDevice;
  *can = a != b;
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(Context** ctx, CUdevice device) {
  if (CUresult r = Ready(false)) return r;
  if (device < 0 || device >= S().deviceCount) return kInvalidDevice;
  *ctx = S().contexts[device];
  return kSuccess;
}

CUresult cuCtxSetCurrent(Context* ctx) {
  if (CUresult r = Ready(false)) return r;
  current = ctx;
  return kSuccess;
}

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) {
  if (CUresult r = Ready()) return r;
  if (size == 0) return kInvalidValue;
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  int device = current->device;
  if (size > st.capacity - st.used[device]) return kOutOfMemory;
  uint64_t id = st.nextId++;
  int fd = memfd_create(MemfdName(id).c_str(), MFD_CLOEXEC);
  if (fd < 0) return kOutOfMemory;
  if (ftruncate(fd, static_cast<off_t>(PageRound(size))) != 0) {
    close(fd);
    return kOutOfMemory;
  }
  CUresult r = MapAllocation(fd, size, device, id, ptr, nullptr);
  if (r != kSuccess) return r;
  st.used[device] += size;
  return kSuccess;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  if (CUresult r = Ready()) return r;
  State& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  auto it = st.allocations.find(ptr);
  if (it == st.allocations.end() || it->second.imported) return kInvalidValue;
  return UnmapWhenIdle(ptr, lock);
}

CUresult cuMemAllocHost_v2(void** p, size_t size) {
  if (CUresult r = Ready()) return r;
  if (size == 0) return kInvalidValue;
  void* m = mmap(nullptr, PageRound(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return kOutOfMemory;
  std::lock_guard<std::mutex> lock(S().mu);
  S().pinned[static_cast<char*>(m)] = size;
  *p = m;
  return kSuccess;
}

CUresult cuMemFreeHost(void* p) {
  if (CUresult r = Ready()) return r;
  State& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  auto it = st.pinned.find(static_cast<char*>(p));
  if (it == st.pinned.end()) return kInvalidValue;
  WaitIdle(lock);
  munmap(p, PageRound(it->second));
  st.pinned.erase(it);
  return kSuccess;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  if (CUresult r = Ready()) return r;
  std::lock_guard<std::mutex> lock(S().mu);
  const Allocation* a = AllocationAt(ptr);
  if (a == nullptr) return kNotFound;
  if (base) *base = a->base;
  if (size) *size = a->size;
  return kSuccess;
}

CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr ptr) {
  if (CUresult r = Ready(false)) return r;
  std::lock_guard<std::mutex> lock(S().mu);
  if (attribute == kAttributeMemoryType && IsPinned(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)), 1)) {
    *static_cast<unsigned*>(data) = kMemoryTypeHost;
    return kSuccess;
  }
  const Allocation* a = AllocationAt(ptr);
  if (a == nullptr) return kInvalidValue;
  switch (attribute) {
    case kAttributeMemoryType:
      *static_cast<unsigned*>(data) = kMemoryTypeDevice;
      return kSuccess;
    case kAttributeDeviceOrdinal:
      *static_cast<int*>(data) = a->device;
      return kSuccess;
    case kAttributeBufferId:
      *static_cast<unsigned long long*>(data) = a->id;
      return kSuccess;
    default:
      return kNotSupported;
  }
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream) {
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>&) {
    char* to = DeviceBytes(dst, n);
    if (to == nullptr) return kInvalidValue;
    if (IsPinned(src, n)) {
      Enqueue(s, Work([to, src, n] { memcpy(to, src, n); }));
    } else {
      // Pageable memory is staged before the call returns.
      auto staged =
          std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
      Enqueue(s, Work([to, staged] { memcpy(to, staged->data(), staged->size()); }));
    }
    return kSuccess;
  });
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* stream) {
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>& lock) {
    char* from = DeviceBytes(src, n);
    if (from == nullptr) return kInvalidValue;
    uint64_t ticket = Enqueue(s, Work([dst, from, n] { memcpy(dst, from, n); }));
    // Into pageable memory the copy is done when the call returns.
    if (!IsPinned(dst, n)) S().changed.wait(lock, [&] { return s->completed >= ticket; });
    return kSuccess;
  });
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) {
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>&) {
    char* to = DeviceBytes(dst, n);
    char* from = DeviceBytes(src, n);
    if (to == nullptr || from == nullptr) return kInvalidValue;
    Enqueue(s, Work([to, from, n] { memmove(to, from, n); }));
    return kSuccess;
  });
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void* stream) {
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>&) {
    char* to = DeviceBytes(dst, n);
    if (to == nullptr) return kInvalidValue;
    Enqueue(s, Work([to, value, n] { memset(to, value, n); }));
    return kSuccess;
  });
}

CUresult cuStreamCreate(Stream** out, unsigned flags) {
  if (CUresult r = Ready()) return r;
  if (flags & ~kStreamNonBlocking) return kInvalidValue;
  std::lock_guard<std::mutex> lock(S().mu);
  *out = NewStream(current->device, false, (flags & kStreamNonBlocking) == 0);
  return kSuccess;
}

// Returns at once; the stream's queued work still runs, then it goes.
CUresult cuStreamDestroy_v2(void* stream) {
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>&) {
    if (s->legacy) return kInvalidHandle;
    s->destroyed = true;
    S().changed.notify_all();
    return kSuccess;
  });
}

CUresult cuStreamSynchronize(void* stream) {
  S().hostWaits++;
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>& lock) {
    uint64_t ticket = s->enqueued;
    S().changed.wait(lock, [&] { return s->completed >= ticket; });
    return kSuccess;
  });
}

CUresult cuStreamWaitEvent(void* stream, Event* e, unsigned flags) {
  if (flags != 0 || e == nullptr) return kInvalidValue;
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>&) {
    Counters c = e->counters;
    uint64_t gen = c->recorded.load();
    bool peer = e->imported;
    Enqueue(s, [c, gen, peer](std::unique_lock<std::mutex>& l) {
      WaitEvent(c, gen, l);
      if (peer) {
        l.unlock();
        std::this_thread::sleep_for(S().peerEventWait);
        l.lock();
      }
    });
    return kSuccess;
  });
}

// Calls fn(data) on the stream's thread once the work queued before it is
// done, as the driver calls it on a thread of its own; fn must not call
// the driver.
CUresult cuLaunchHostFunc(void* stream, void (*fn)(void*), void* data) {
  if (fn == nullptr) return kInvalidValue;
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>&) {
    S().hostFuncs++;
    Enqueue(s, [fn, data](std::unique_lock<std::mutex>& lock) {
      lock.unlock();
      fn(data);
      lock.lock();
    });
    return kSuccess;
  });
}

CUresult cuEventCreate(Event** out, unsigned flags) {
  if (CUresult r = Ready()) return r;
  if (flags & ~(kEventDisableTiming | kEventInterprocess | 0x1u)) return kInvalidValue;
  if ((flags & kEventInterprocess) && !(flags & kEventDisableTiming)) return kInvalidValue;
  auto e = std::make_unique<Event>(Event{flags, nullptr});
  if (flags & kEventInterprocess) {
    std::lock_guard<std::mutex> lock(S().mu);
    e->id = S().nextId++;
    e->fd = memfd_create(MemfdName(e->id).c_str(), MFD_CLOEXEC);
    void* m = MAP_FAILED;
    if (e->fd >= 0 && ftruncate(e->fd, static_cast<off_t>(PageRound(1))) == 0) {
      m = mmap(nullptr, PageRound(1), PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0);
    }
    if (m == MAP_FAILED) {
      if (e->fd >= 0) close(e->fd);
      return kOutOfMemory;
    }
    e->counters = MappedCounters(m);
  } else {
    e->counters = std::make_shared<EventCounters>();
  }
  *out = e.release();
  return kSuccess;
}

CUresult cuEventRecord(Event* e, void* stream) {
  // A peer's event is only waited on here, never recorded.
  if (e == nullptr || e->imported) return kInvalidHandle;
  return OnStream(stream, [&](Stream* s, std::unique_lock<std::mutex>&) { return RecordOn(e, s); });
}

CUresult cuEventSynchronize(Event* e) {
  if (CUresult r = Ready(false)) return r;
  if (e == nullptr) return kInvalidHandle;
  S().hostWaits++;
  std::unique_lock<std::mutex> lock(S().mu);
  WaitEvent(e->counters, e->counters->recorded.load(), lock);
  return kSuccess;
}

CUresult cuEventQuery(Event* e) {
  if (CUresult r = Ready(false)) return r;
  if (e == nullptr) return kInvalidHandle;
  return e->counters->completed.load() >= e->counters->recorded.load() ? kSuccess : kNotReady;
}

CUresult cuEventDestroy_v2(Event* e) {
  if (CUresult r = Ready(false)) return r;
  if (e == nullptr) return kInvalidHandle;
  std::lock_guard<std::mutex> lock(S().mu);
  if (e->fd >= 0) close(e->fd);
  delete e;
  return kSuccess;
}

CUresult cuIpcGetMemHandle(IpcHandle* handle, CUdeviceptr ptr) {
  if (CUresult r = Ready()) return r;
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().allocations.find(ptr);
  if (it == S().allocations.end() || it->second.imported) return kInvalidValue;
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->magic, kMemMagic, 8);
  handle->pid = getpid();
  handle->fd = it->second.fd;
  handle->id = it->second.id;
  handle->size = it->second.size;
  return kSuccess;
}

// Opening a handle twice in a process gives the same pointer, counted, as
// the driver does; a process cannot open its own handles.
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* out, IpcHandle handle, unsigned flags) {
  if (CUresult r = Ready()) return r;
  if (memcmp(handle.magic, kMemMagic, 8) != 0 || flags > 1) return kInvalidValue;
  if (handle.pid == getpid()) return kInvalidContext;
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  for (auto& [base, a] : st.allocations) {
    if (a.imported && a.peerPid == handle.pid && a.peerId == handle.id && a.device == current->device) {
      a.refs++;
      *out = base;
      return kSuccess;
    }
  }
  int fd = OpenPeerFd(handle);
  if (fd < 0) return kInvalidValue;
  Opening(st.memHandleOpens);
  Allocation* a = nullptr;
  CUresult r = MapAllocation(fd, handle.size, current->device, st.nextId++, out, &a);
  if (r != kSuccess) return r;
  a->imported = true;
  a->peerPid = handle.pid;
  a->peerId = handle.id;
  return kSuccess;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  if (CUresult r = Ready()) return r;
  State& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  auto it = st.allocations.find(ptr);
  if (it == st.allocations.end() || !it->second.imported) return kInvalidValue;
  if (--it->second.refs > 0) return kSuccess;
  return UnmapWhenIdle(ptr, lock);
}

CUresult cuIpcGetEventHandle(IpcHandle* handle, Event* e) {
  if (CUresult r = Ready()) return r;
  if (e == nullptr || e->imported || !(e->flags & kEventInterprocess)) return kInvalidValue;
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->magic, kEventMagic, 8);
  handle->pid = getpid();
  handle->fd = e->fd;
  handle->id = e->id;
  return kSuccess;
}

CUresult cuIpcOpenEventHandle(Event** out, IpcHandle handle) {
  if (CUresult r = Ready()) return r;
  if (memcmp(handle.magic, kEventMagic, 8) != 0) return kInvalidValue;
  int fd = OpenPeerFd(handle);
  if (fd < 0) return kInvalidValue;
  Opening(S().eventHandleOpens);
  void* m = mmap(nullptr, PageRound(1), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return kMapFailed;
  // The exporter's counters as they are, not reset.
  Counters c(static_cast<EventCounters*>(m),
             [](EventCounters* p) { munmap(p, static_cast<size_t>(sysconf(_SC_PAGESIZE))); });
  *out = new Event{kEventDisableTiming | kEventInterprocess, std::move(c), -1, handle.id, true};
  return kSuccess;
}

// What nvidia-peermem gives a real NIC, for the emulated one (the ibverbs
// emulator): the memory behind [ptr, ptr + n) of one allocation, as a new
// descriptor of it and the offset there, so that it stays valid while the
// NIC holds it, as a registration pins GPU memory. -1 where no allocation
// holds the range.
int tensorpipe_emulator_peer_memory(uint64_t ptr, size_t n, uint64_t* offset) {
  State& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  const Allocation* a = AllocationAt(static_cast<CUdeviceptr>(ptr));
  if (a == nullptr || ptr + n > a->base + a->size || ptr + n < ptr) return -1;
  *offset = ptr - a->base;
  return fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
}

}  // extern "C"
