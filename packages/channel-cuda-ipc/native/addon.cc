// The cuda-ipc channel's native half. The sender exports the allocation
// holding its tensor (an IPC memory handle, the tensor's offset in it) once
// the work that produces the tensor is done: the sender waits for its stream
// on the host, not the receiver through an interprocess event, which
// cost about 275 us per transfer on an H100 (cuda_ipc_baseline). The
// receiver opens the allocation and copies device to device into its own,
// on its stream, where the request arrives; the driver tells the loop when
// the copy is done (cuLaunchHostFunc), so no thread waits per copy.
// Opened allocations are cached per handle, as opening one costs far more
// than a copy.
#include <napi.h>
#include <uv.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "tensorpipe/cuda_napi.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {
namespace {

using cuda::Check;
using cuda::CUDA_SUCCESS;
using cuda::CudaError;
using cuda::CUdeviceptr;
using cuda::CUevent;
using cuda::CUresult;
using cuda::CUstream;
using cuda::Driver;

constexpr size_t kHandleBytes = sizeof(cuda::CUipcMemHandle);

std::string HandleArg(const Napi::Value& v) {
  ByteSpan bytes;
  if (!GetBytes(v, &bytes) || bytes.length != kHandleBytes) {
    throw Napi::TypeError::New(v.Env(), "an IPC handle is 64 bytes");
  }
  return std::string(bytes.data, bytes.length);
}

// Allocations opened from peers' handles, per channel context, device and
// handle; closed when that channel context closes.
// Context ids are counted per environment: with several workers in one
// process, the environment tells theirs apart.
struct OpenedKey {
  uintptr_t env;
  double context;
  int device;
  std::string handle;
  bool operator<(const OpenedKey& o) const {
    return std::tie(env, context, device, handle) < std::tie(o.env, o.context, o.device, o.handle);
  }
};
std::mutex openedMutex;
std::map<OpenedKey, CUdeviceptr> opened;

// deviceOfUuid(uuidHex) -> the index of the visible GPU with that UUID, or -1.
Napi::Value DeviceOfUuid(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  std::string wanted = info[0].As<Napi::String>();
  int count = 0;
  Check(env, d, d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  for (int i = 0; i < count; i++) {
    if (cuda::UuidHex(d, i) == wanted) return Napi::Number::New(env, i);
  }
  return Napi::Number::New(env, -1);
}

// canAccessPeer(a, b) -> whether GPU a may read GPU b's memory.
Napi::Value CanAccessPeer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  int a = info[0].As<Napi::Number>().Int32Value();
  int b = info[1].As<Napi::Number>().Int32Value();
  if (a == b) return Napi::Boolean::New(env, true);
  cuda::CUdevice da, db;
  int can = 0;
  if (d.cuDeviceGet(&da, a) != CUDA_SUCCESS || d.cuDeviceGet(&db, b) != CUDA_SUCCESS ||
      d.cuDeviceCanAccessPeer(&can, da, db) != CUDA_SUCCESS) {
    return Napi::Boolean::New(env, false);
  }
  return Napi::Boolean::New(env, can != 0);
}

// exportTensor(device, ptr, stream) -> { memHandle, offset, ready }: the
// allocation's handle, the tensor's offset in it, and whether the work
// queued on `stream` so far is done (else the caller waits for the stream).
Napi::Value ExportTensor(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Driver& d = cuda::NeedDriver(env);
  int device = info[0].As<Napi::Number>().Int32Value();
  CUdeviceptr ptr = static_cast<CUdeviceptr>(BigIntArg(info[1], "ptr"));
  CUstream stream = cuda::StreamArg(info[2]);
  Check(env, d, cuda::UseDevice(d, device), "cuCtxSetCurrent");
  CUdeviceptr base = 0;
  size_t size = 0;
  Check(env, d, d.cuMemGetAddressRange(&base, &size, ptr), "cuMemGetAddressRange");
  cuda::CUipcMemHandle mem;
  Check(env, d, d.cuIpcGetMemHandle(&mem, base), "cuIpcGetMemHandle");
  // An event rather than a stream query: on the legacy default stream it
  // also covers the other streams' work that stream waits for.
  CUevent event = nullptr;
  Check(env, d, d.cuEventCreate(&event, cuda::kEventDisableTiming), "cuEventCreate");
  const char* call = "cuEventRecord";
  CUresult r = d.cuEventRecord(event, stream);
  if (r == CUDA_SUCCESS) {
    call = "cuEventQuery";
    r = d.cuEventQuery(event);
  }
  d.cuEventDestroy(event);
  if (r != CUDA_SUCCESS && r != cuda::CUDA_ERROR_NOT_READY) throw CudaError(env, d, r, call);
  Napi::Object out = Napi::Object::New(env);
  out.Set("memHandle", Napi::Buffer<char>::Copy(env, mem.reserved, kHandleBytes));
  out.Set("offset", Napi::Number::New(env, static_cast<double>(ptr - base)));
  out.Set("ready", Napi::Boolean::New(env, r == CUDA_SUCCESS));
  return out;
}

// Copies whose completion the driver reports from its own thread
// (cuLaunchHostFunc), handed to the loop through one uv_async: no thread
// blocks per copy. What the driver reports after the environment went is
// dropped (its JS callback with it).
class Completions : public EnvResource {
 public:
  // A copy under way: its callback, and the error that ended it, if any.
  struct Copy {
    const Driver* driver;
    CUresult result = CUDA_SUCCESS;
    const char* call = "";
    Napi::FunctionReference callback;
    std::unique_ptr<Napi::AsyncContext> asyncContext;
    std::shared_ptr<Completions> to;
  };

  Completions(EnvLifecycle& lifecycle, napi_env env) : lifecycle_(lifecycle), env_(env) {
    uv_async_init(lifecycle.loop(), async_.Make(this), OnAsync);
    async_.Unref();
    lifecycle.Own(this);
  }

  // Reports `copy` done once the work queued on `stream` so far is.
  CUresult After(CUstream stream, Copy* copy) { return copy->driver->cuLaunchHostFunc(stream, OnHost, copy); }

  // Reports `copy` on the loop's next turn (a copy that never started).
  void Now(Copy* copy) { Deliver(copy); }

  void Teardown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
      ready_.clear();
    }
    async_.Close();
    lifecycle_.Released(this);
  }

  // Copies in flight keep the loop alive, as a job on the pool would.
  void Started() {
    if (inFlight_++ == 0) async_.Ref();
  }

 private:
  static void OnHost(void* data) {
    auto* copy = static_cast<Copy*>(data);
    copy->to->Deliver(copy);
  }

  void Deliver(Copy* copy) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    ready_.push_back(copy);
    uv_async_send(async_.get());
  }

  static void OnAsync(uv_async_t* h) {
    auto* self = static_cast<Completions*>(h->data);
    std::vector<Copy*> ready;
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      ready.swap(self->ready_);
    }
    self->inFlight_ -= ready.size();
    if (self->inFlight_ == 0) self->async_.Unref();
    Napi::Env env(self->env_);
    for (Copy* c : ready) {
      std::unique_ptr<Copy> copy(c);
      FromLoop(env, [&] {
        napi_value arg = env.Null();
        if (copy->result != CUDA_SUCCESS) arg = CudaError(env, *copy->driver, copy->result, copy->call).Value();
        InvokeCallback(copy->callback, *copy->asyncContext, {arg});
      });
    }
  }

  EnvLifecycle& lifecycle_;
  napi_env env_;
  UvHandle<uv_async_t> async_;
  std::mutex mutex_;
  bool closed_ = false;
  std::vector<Copy*> ready_;
  size_t inFlight_ = 0;
};

using Copy = Completions::Copy;

struct IpcEnv : AddonEnv, EnvResource {
  explicit IpcEnv(napi_env env);
  void Teardown() override;
  napi_env env;
  // The channel contexts that imported memory here.
  std::set<double> contexts;
  std::shared_ptr<Completions> completions;
};

// Where one copy comes from and goes.
struct CopyPlan {
  uintptr_t env;
  double context;
  int device;
  std::string memHandle;
  uint64_t offset;
  CUdeviceptr dst;
  size_t bytes;
  CUstream stream;
};

// The peer's allocation, if this context opened it already.
bool CachedBase(const CopyPlan& p, CUdeviceptr* base) {
  std::lock_guard<std::mutex> lock(openedMutex);
  auto it = opened.find(OpenedKey{p.env, p.context, p.device, p.memHandle});
  if (it == opened.end()) return false;
  *base = it->second;
  return true;
}

// Queues the copy from the peer's allocation at `base`, and its report;
// false (the error in `copy`) when the driver refused either.
bool Enqueue(const CopyPlan& p, CUdeviceptr base, Copy* copy) {
  const Driver& d = *copy->driver;
  CUresult r = d.cuMemcpyDtoDAsync(p.dst, base + p.offset, p.bytes, p.stream);
  copy->call = "cuMemcpyDtoDAsync";
  if (r == CUDA_SUCCESS) {
    r = copy->to->After(p.stream, copy);
    copy->call = "cuLaunchHostFunc";
  }
  copy->result = r;
  return r == CUDA_SUCCESS;
}

// The first copy from a peer's allocation opens it, which takes far longer
// than a copy (about 155 us on an H100): on the pool, not the loop.
struct Open : PoolJob {
  void Run() override {
    const Driver& d = *copy->driver;
    CUresult r = cuda::UseDevice(d, plan.device);
    const char* call = "cuCtxSetCurrent";
    CUdeviceptr base = 0;
    if (r == CUDA_SUCCESS) {
      std::lock_guard<std::mutex> lock(openedMutex);
      OpenedKey key{plan.env, plan.context, plan.device, plan.memHandle};
      auto it = opened.find(key);
      if (it != opened.end()) {
        base = it->second;
      } else {
        cuda::CUipcMemHandle h;
        std::memcpy(h.reserved, plan.memHandle.data(), kHandleBytes);
        call = "cuIpcOpenMemHandle";
        r = d.cuIpcOpenMemHandle(&base, h, cuda::kIpcMemLazyEnablePeerAccess);
        if (r == CUDA_SUCCESS) opened[key] = base;
      }
    }
    if (r != CUDA_SUCCESS) {
      copy->result = r;
      copy->call = call;
      return;
    }
    queued = Enqueue(plan, base, copy);
  }
  void Done(int status) override {
    // A queued copy reports itself; one that never started is reported now.
    if (queued) return;
    if (status < 0) {
      copy->result = cuda::CUDA_ERROR_UNKNOWN;
      copy->call = "uv_queue_work";
    }
    copy->to->Now(copy);
  }

  CopyPlan plan;
  Copy* copy = nullptr;
  bool queued = false;
};

// importCopy(context, device, memHandle, offset, dst: bigint, bytes,
//            stream: bigint, callback(err)): copies the peer's tensor into
// dst on `stream`; settles once the bytes are there. From an allocation
// opened before, the copy is queued here and now.
Napi::Value ImportCopy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  IpcEnv* data = AddonEnv::Get<IpcEnv>(env);
  CopyPlan plan;
  plan.env = reinterpret_cast<uintptr_t>(static_cast<napi_env>(env));
  plan.context = info[0].As<Napi::Number>().DoubleValue();
  plan.device = info[1].As<Napi::Number>().Int32Value();
  plan.memHandle = HandleArg(info[2]);
  plan.offset = static_cast<uint64_t>(info[3].As<Napi::Number>().DoubleValue());
  plan.dst = static_cast<CUdeviceptr>(BigIntArg(info[4], "dst"));
  plan.bytes = static_cast<size_t>(info[5].As<Napi::Number>().DoubleValue());
  plan.stream = cuda::StreamArg(info[6]);
  auto copy = std::make_unique<Copy>();
  copy->driver = &cuda::NeedDriver(env);
  copy->callback = Napi::Persistent(info[7].As<Napi::Function>());
  copy->asyncContext = std::make_unique<Napi::AsyncContext>(env, "tensorpipe.cudaIpc.copy");
  copy->to = data->completions;
  data->contexts.insert(plan.context);
  data->completions->Started();
  CUdeviceptr base = 0;
  if (CachedBase(plan, &base)) {
    Copy* c = copy.release();
    CUresult r = cuda::UseDevice(*c->driver, plan.device);
    if (r != CUDA_SUCCESS) {
      c->result = r;
      c->call = "cuCtxSetCurrent";
      c->to->Now(c);
    } else if (!Enqueue(plan, base, c)) {
      c->to->Now(c);
    }
    return env.Undefined();
  }
  auto open = std::make_unique<Open>();
  open->plan = std::move(plan);
  open->copy = copy.release();
  Copy* c = open->copy;
  int r = open.release()->Queue(data->lifecycle);
  if (r < 0) {
    c->result = cuda::CUDA_ERROR_UNKNOWN;
    c->call = "uv_queue_work";
    c->to->Now(c);
  }
  return env.Undefined();
}

// Closes what one channel context opened.
void CloseImportedBy(napi_env env, double context) {
  const Driver* d = cuda::GetDriver(nullptr);
  if (d == nullptr) return;
  std::lock_guard<std::mutex> lock(openedMutex);
  for (auto it = opened.begin(); it != opened.end();) {
    if (it->first.env != reinterpret_cast<uintptr_t>(env) || it->first.context != context) {
      ++it;
      continue;
    }
    if (cuda::UseDevice(*d, it->first.device) == CUDA_SUCCESS) d->cuIpcCloseMemHandle(it->second);
    it = opened.erase(it);
  }
}

// What this environment's channel contexts opened goes with it, closed
// or not: a terminated worker never calls closeImported.
IpcEnv::IpcEnv(napi_env env) : AddonEnv(env), env(env), completions(std::make_shared<Completions>(lifecycle, env)) {
  lifecycle.Own(this);
}

void IpcEnv::Teardown() {
  for (double context : contexts) CloseImportedBy(env, context);
  contexts.clear();
  lifecycle.Released(this);
}

// closeImported(context): closes what that channel context opened.
Napi::Value CloseImported(const Napi::CallbackInfo& info) {
  double context = info[0].As<Napi::Number>().DoubleValue();
  CloseImportedBy(info.Env(), context);
  AddonEnv::Get<IpcEnv>(info.Env())->contexts.erase(context);
  return info.Env().Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  AddonEnv::Install<IpcEnv>(env);
  exports.Set("deviceOfUuid", Napi::Function::New(env, DeviceOfUuid, "deviceOfUuid"));
  exports.Set("canAccessPeer", Napi::Function::New(env, CanAccessPeer, "canAccessPeer"));
  exports.Set("exportTensor", Napi::Function::New(env, ExportTensor, "exportTensor"));
  exports.Set("importCopy", Napi::Function::New(env, ImportCopy, "importCopy"));
  exports.Set("closeImported", Napi::Function::New(env, CloseImported, "closeImported"));
  return exports;
}

}  // namespace
}  // namespace tensorpipe_js

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tensorpipe_js::Init(env, exports); }

NODE_API_MODULE(tensorpipe_cuda_ipc, InitAddon)
