// GPU memory for users without another GPU framework, and for the CUDA
// channels' tests: device and pinned host allocations, copies and fills
// on streams, through the driver loaded with dlopen (cuda_driver.h). Work
// goes on its stream when JS asks for it, so that whatever JS asks of that
// stream next (a pipe's write of the tensor, say) comes after it; each
// operation then waits on libuv's thread pool for an event recorded after
// it. Copies to or from pageable host memory can block in the driver, so
// those are queued from the pool, in turn (StreamTurns).
#include <napi.h>
#include <uv.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tensorpipe/cuda_napi.h"

namespace tensorpipe_js {
namespace {

using cuda::Check;
using cuda::CUDA_SUCCESS;
using cuda::CudaError;
using cuda::CUdeviceptr;
using cuda::CUresult;
using cuda::CUstream;
using cuda::Driver;

// The order of the work asked for on one stream of one device, while some
// of it waits on libuv's pool to be queued. Each such operation takes a
// turn when JS asks for it and queues its work at that turn; until none is
// left waiting, later work on the stream takes turns too. The pool starts
// work in the order it was queued, so the turn before is always running or
// done, never waiting behind the one that waits for it.
class StreamTurns {
 public:
  // Called from JS's thread only, as Take is: nothing else starts waiting.
  bool Idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return serving_ == next_;
  }

  uint64_t Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return next_++;
  }

  void Wait(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mu_);
    served_.wait(lock, [&] { return serving_ == ticket; });
  }

  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    Advance();
  }

  // A turn whose work will never run (its environment went first): served
  // as soon as it comes.
  void Skip(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mu_);
    if (serving_ == ticket)
      Advance();
    else
      skipped_.insert(ticket);
  }

 private:
  void Advance() {
    serving_++;
    while (skipped_.erase(serving_) != 0) serving_++;
    served_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable served_;
  uint64_t next_ = 0;
  uint64_t serving_ = 0;
  std::set<uint64_t> skipped_;
};

std::mutex turnsMutex;
std::map<std::pair<int, uintptr_t>, std::shared_ptr<StreamTurns>> turnsByStream;

std::shared_ptr<StreamTurns> TurnsOf(int device, CUstream stream) {
  std::lock_guard<std::mutex> lock(turnsMutex);
  auto& t = turnsByStream[{device, reinterpret_cast<uintptr_t>(stream)}];
  if (!t) t = std::make_shared<StreamTurns>();
  return t;
}

// A destroyed stream's handle may come back for a new stream: it starts afresh.
void ForgetTurns(int device, CUstream stream) {
  std::lock_guard<std::mutex> lock(turnsMutex);
  turnsByStream.erase({device, reinterpret_cast<uintptr_t>(stream)});
}

// probe() -> { reason: string | null, driverVersion, devices: [...] }
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  Napi::Array devices = Napi::Array::New(env);
  out.Set("devices", devices);
  std::string why;
  const Driver* d = cuda::GetDriver(&why);
  if (d == nullptr) {
    out.Set("reason", Napi::String::New(env, why));
    return out;
  }
  out.Set("driverVersion", Napi::Number::New(env, d->version));
  int count = 0;
  CUresult r = d->cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    out.Set("reason", Napi::String::New(env, d->ErrorText(r, "cuDeviceGetCount")));
    return out;
  }
  out.Set("reason", count == 0 ? Napi::Value(Napi::String::New(env, "the CUDA driver sees no GPU")) : env.Null());
  for (int i = 0; i < count; i++) {
    cuda::CUdevice dev;
    if (d->cuDeviceGet(&dev, i) != CUDA_SUCCESS) continue;
    char name[256] = {0};
    char bus[64] = {0};
    d->cuDeviceGetName(name, sizeof(name) - 1, dev);
    d->cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, dev);
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", Napi::Number::New(env, i));
    o.Set("name", Napi::String::New(env, name));
    o.Set("pciBusId", Napi::String::New(env, bus));
    o.Set("uuid", Napi::String::New(env, cuda::UuidHex(*d, i)));
    devices.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

// alloc(device, bytes) -> bigint
Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  int device = info[0].As<Napi::Number>().Int32Value();
  size_t bytes = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
  Check(env, d, cuda::UseDevice(d, device), "cuCtxSetCurrent");
  CUdeviceptr ptr = 0;
  Check(env, d, d.cuMemAlloc(&ptr, bytes == 0 ? 1 : bytes), "cuMemAlloc");
  return Napi::BigInt::New(env, static_cast<uint64_t>(ptr));
}

// free(device, ptr)
Napi::Value Free(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  Check(env, d, cuda::UseDevice(d, info[0].As<Napi::Number>().Int32Value()), "cuCtxSetCurrent");
  Check(env, d, d.cuMemFree(static_cast<CUdeviceptr>(BigIntArg(info[1], "ptr"))), "cuMemFree");
  return env.Undefined();
}

// The host memory of copies in flight, and the pinned allocations whose
// freeing waits for them. When a worker goes, Node runs its external
// buffers' finalizers before the copies it waits for have finished: an
// allocation a copy still reads or writes is freed once no copy uses it.
struct CudaEnv : AddonEnv {
  explicit CudaEnv(napi_env env) : AddonEnv(env) {}
  ~CudaEnv() override {
    for (const auto& [data, length] : deferred) Free(data);
  }

  void CopyStarted(char* host) {
    if (host != nullptr) inFlight.insert(host);
  }
  void CopyDone(char* host) {
    if (host == nullptr) return;
    inFlight.erase(inFlight.find(host));
    for (auto it = deferred.begin(); it != deferred.end();) {
      if (InUse(it->first, it->second)) {
        ++it;
        continue;
      }
      Free(it->first);
      it = deferred.erase(it);
    }
  }
  void FreeHost(char* data, size_t length) {
    if (InUse(data, length))
      deferred.emplace_back(data, length);
    else
      Free(data);
  }

 private:
  bool InUse(char* data, size_t length) const {
    auto it = inFlight.lower_bound(data);
    return it != inFlight.end() && *it < data + length;
  }
  static void Free(void* data) {
    const Driver* drv = cuda::GetDriver(nullptr);
    if (drv != nullptr) drv->cuMemFreeHost(data);
  }

  std::multiset<char*> inFlight;
  std::vector<std::pair<char*, size_t>> deferred;
};

// allocHost(bytes) -> ArrayBuffer in pinned memory, freed with it.
Napi::Value AllocHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  size_t bytes = static_cast<size_t>(info[0].As<Napi::Number>().DoubleValue());
  Check(env, d, cuda::UseDevice(d, 0), "cuCtxSetCurrent");
  void* p = nullptr;
  Check(env, d, d.cuMemAllocHost(&p, bytes == 0 ? 1 : bytes), "cuMemAllocHost");
  return Napi::ArrayBuffer::New(
      env, p, bytes,
      [](Napi::Env env, void* data, size_t* length) {
        AddonEnv::Get<CudaEnv>(env)->FreeHost(static_cast<char*>(data), *length);
        delete length;
      },
      new size_t(bytes == 0 ? 1 : bytes));
}

// pointerDevice(ptr) -> the GPU index the pointer belongs to, or -1.
Napi::Value PointerDevice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  int ordinal = -1;
  CUresult r = d.cuPointerGetAttribute(&ordinal, cuda::kPointerAttributeDeviceOrdinal,
                                       static_cast<CUdeviceptr>(BigIntArg(info[0], "ptr")));
  return Napi::Number::New(env, r == CUDA_SUCCESS ? ordinal : -1);
}

// allocationOf(device, ptr) -> { base: bigint, size, bufferId: bigint }: the
// allocation holding ptr, with the driver's process-wide id for it (a new
// allocation at a freed one's address gets a new id).
Napi::Value AllocationOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  Check(env, d, cuda::UseDevice(d, info[0].As<Napi::Number>().Int32Value()), "cuCtxSetCurrent");
  CUdeviceptr base = 0;
  size_t size = 0;
  Check(env, d, d.cuMemGetAddressRange(&base, &size, static_cast<CUdeviceptr>(BigIntArg(info[1], "ptr"))),
        "cuMemGetAddressRange");
  unsigned long long id = 0;
  Check(env, d, d.cuPointerGetAttribute(&id, cuda::kPointerAttributeBufferId, base), "cuPointerGetAttribute");
  Napi::Object out = Napi::Object::New(env);
  out.Set("base", Napi::BigInt::New(env, static_cast<uint64_t>(base)));
  out.Set("size", Napi::Number::New(env, static_cast<double>(size)));
  out.Set("bufferId", Napi::BigInt::New(env, static_cast<uint64_t>(id)));
  return out;
}

// streamCreate(device) -> bigint; streamDestroy(device, stream)
Napi::Value StreamCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  Check(env, d, cuda::UseDevice(d, info[0].As<Napi::Number>().Int32Value()), "cuCtxSetCurrent");
  CUstream s = nullptr;
  Check(env, d, d.cuStreamCreate(&s, cuda::kStreamNonBlocking), "cuStreamCreate");
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s)));
}

Napi::Value StreamDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  int device = info[0].As<Napi::Number>().Int32Value();
  Check(env, d, cuda::UseDevice(d, device), "cuCtxSetCurrent");
  CUstream stream = cuda::StreamArg(info[1]);
  Check(env, d, d.cuStreamDestroy(stream), "cuStreamDestroy");
  ForgetTurns(device, stream);
  return env.Undefined();
}

enum class Kind { kHtoD, kDtoH, kDtoD, kFill, kReady };

struct Copy : PoolJob {
  void Run() override;
  void Done(int status) override;
  // Work already on the stream may still write into this environment's
  // memory: its job waits for it, whatever happens.
  bool Cancellable() const override { return !queued; }

  const Driver* driver;
  Kind kind;
  int device;
  CUdeviceptr devDst = 0;
  CUdeviceptr devSrc = 0;
  char* host = nullptr;
  size_t bytes = 0;
  unsigned char value = 0;
  CUstream stream = nullptr;
  // Queued when asked for; else at `turn` of `turns`, from the pool.
  bool queued = false;
  std::shared_ptr<StreamTurns> turns;
  uint64_t turn = 0;
  // Recorded on the stream right after the work, so that later work is not waited for.
  cuda::CUevent event = nullptr;
  CUresult result = CUDA_SUCCESS;
  const char* call = "";
  Napi::Reference<Napi::Value> keepHost;
  Napi::FunctionReference callback;
  std::unique_ptr<Napi::AsyncContext> asyncContext;
};

// Queues c's work on its stream and records c->event after it.
CUresult Enqueue(Copy* c) {
  const Driver& d = *c->driver;
  c->call = "cuEventCreate";
  CUresult r = d.cuEventCreate(&c->event, cuda::kEventDisableTiming);
  if (r != CUDA_SUCCESS) return r;
  switch (c->kind) {
    case Kind::kHtoD:
      c->call = "cuMemcpyHtoDAsync";
      r = d.cuMemcpyHtoDAsync(c->devDst, c->host, c->bytes, c->stream);
      break;
    case Kind::kDtoH:
      c->call = "cuMemcpyDtoHAsync";
      r = d.cuMemcpyDtoHAsync(c->host, c->devSrc, c->bytes, c->stream);
      break;
    case Kind::kDtoD:
      c->call = "cuMemcpyDtoDAsync";
      r = d.cuMemcpyDtoDAsync(c->devDst, c->devSrc, c->bytes, c->stream);
      break;
    case Kind::kFill:
      c->call = "cuMemsetD8Async";
      r = d.cuMemsetD8Async(c->devDst, c->value, c->bytes, c->stream);
      break;
    case Kind::kReady:
      // Nothing to queue: the event is the wait.
      break;
  }
  if (r != CUDA_SUCCESS) return r;
  c->call = "cuEventRecord";
  return d.cuEventRecord(c->event, c->stream);
}

void Copy::Run() {
  const Driver& d = *driver;
  call = "cuCtxSetCurrent";
  result = cuda::UseDevice(d, device);
  if (!queued) {
    turns->Wait(turn);
    if (result == CUDA_SUCCESS) result = Enqueue(this);
    turns->Done();
  }
  if (result == CUDA_SUCCESS) {
    call = "cuEventSynchronize";
    result = d.cuEventSynchronize(event);
  }
  if (event != nullptr) d.cuEventDestroy(event);
}

void Copy::Done(int status) {
  AddonEnv::Get<CudaEnv>(callback.Env())->CopyDone(host);
  if (status == UV_ECANCELED) turns->Skip(turn);
  Napi::Env env = callback.Env();
  FromLoop(env, [&] {
    napi_value arg = result != CUDA_SUCCESS ? CudaError(env, *driver, result, call).Value() : env.Null();
    if (status < 0) arg = UvError(env, status, "cuda copy").Value();
    InvokeCallback(callback, *asyncContext, {arg});
  });
}

// copy(kind: "htod" | "dtoh" | "dtod" | "fill" | "ready", device, dst, src,
//      bytes, stream: bigint, callback(err)): dst and src are bigint device
// pointers or host views as the kind says; for "fill", src is the byte;
// "ready" copies nothing and settles once the work asked for on the stream
// so far is done. Work goes on the stream in the order of these calls.
Napi::Value CopyAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  auto c = std::make_unique<Copy>();
  c->driver = &d;
  std::string kind = info[0].As<Napi::String>();
  c->device = info[1].As<Napi::Number>().Int32Value();
  c->bytes = static_cast<size_t>(info[4].As<Napi::Number>().DoubleValue());
  c->stream = cuda::StreamArg(info[5]);
  ByteSpan host;
  if (kind == "htod" || kind == "dtoh") {
    const Napi::Value& view = kind == "htod" ? info[3] : info[2];
    if (!GetBytes(view, &host)) throw Napi::TypeError::New(env, "the host side must be a TypedArray or DataView");
    if (host.length < c->bytes) throw Napi::RangeError::New(env, "the host view is smaller than the copy");
    c->host = host.data;
    c->keepHost = Napi::Persistent(view);
  }
  if (kind == "htod") {
    c->kind = Kind::kHtoD;
    c->devDst = BigIntArg(info[2], "dst");
  } else if (kind == "dtoh") {
    c->kind = Kind::kDtoH;
    c->devSrc = BigIntArg(info[3], "src");
  } else if (kind == "dtod") {
    c->kind = Kind::kDtoD;
    c->devDst = BigIntArg(info[2], "dst");
    c->devSrc = BigIntArg(info[3], "src");
  } else if (kind == "fill") {
    c->kind = Kind::kFill;
    c->devDst = BigIntArg(info[2], "dst");
    c->value = static_cast<unsigned char>(info[3].As<Napi::Number>().Uint32Value());
  } else if (kind == "ready") {
    c->kind = Kind::kReady;
  } else {
    throw Napi::TypeError::New(env, "kind must be htod, dtoh, dtod, fill or ready");
  }
  c->callback = Napi::Persistent(info[6].As<Napi::Function>());
  c->asyncContext = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.cuda.copy");
  c->turns = TurnsOf(c->device, c->stream);
  if (c->turns->Idle() && (c->host == nullptr || cuda::IsPinned(d, c->host))) {
    Check(env, d, cuda::UseDevice(d, c->device), "cuCtxSetCurrent");
    CUresult r = Enqueue(c.get());
    if (r != CUDA_SUCCESS) {
      if (c->event != nullptr) d.cuEventDestroy(c->event);
      throw CudaError(env, d, r, c->call);
    }
    c->queued = true;
  } else {
    // Taken last, right before queueing: a turn taken must be served.
    // uv_queue_work fails only on a null callback.
    c->turn = c->turns->Take();
  }
  CudaEnv* data = AddonEnv::Get<CudaEnv>(env);
  char* hostMemory = c->host;
  data->CopyStarted(hostMemory);
  int r = c.release()->Queue(data->lifecycle);
  if (r < 0) {
    data->CopyDone(hostMemory);
    throw UvError(env, r, "uv_queue_work");
  }
  return env.Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  AddonEnv::Install<CudaEnv>(env);
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("alloc", Napi::Function::New(env, Alloc, "alloc"));
  exports.Set("free", Napi::Function::New(env, Free, "free"));
  exports.Set("allocHost", Napi::Function::New(env, AllocHost, "allocHost"));
  exports.Set("pointerDevice", Napi::Function::New(env, PointerDevice, "pointerDevice"));
  exports.Set("allocationOf", Napi::Function::New(env, AllocationOf, "allocationOf"));
  exports.Set("streamCreate", Napi::Function::New(env, StreamCreate, "streamCreate"));
  exports.Set("streamDestroy", Napi::Function::New(env, StreamDestroy, "streamDestroy"));
  exports.Set("copy", Napi::Function::New(env, CopyAsync, "copy"));
  return exports;
}

}  // namespace
}  // namespace tensorpipe_js

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tensorpipe_js::Init(env, exports); }

NODE_API_MODULE(tensorpipe_cuda, InitAddon)
