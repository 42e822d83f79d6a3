// The CUDA driver API, loaded with dlopen on first use. Its few types and
// constants are declared here rather than taken from cuda.h, so that every
// addon that uses it builds without the CUDA toolkit and loads on machines
// without a GPU, where it says why the driver is not there instead.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensorpipe/dynamic_library.h"

namespace tensorpipe_js {
namespace cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
struct CUipcMemHandle {
  char reserved[64];
};
struct CUipcEventHandle {
  char reserved[64];
};
struct CUuuid {
  char bytes[16];
};

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_UNKNOWN = 999;
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kEventInterprocess = 0x4;
constexpr unsigned kIpcMemLazyEnablePeerAccess = 0x1;
// CUpointer_attribute values.
constexpr int kPointerAttributeMemoryType = 2;
constexpr int kPointerAttributeBufferId = 7;
constexpr int kPointerAttributeDeviceOrdinal = 9;
constexpr unsigned kMemoryTypeHost = 1;

struct Driver {
  int version = 0;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice);
  CUresult (*cuDeviceCanAccessPeer)(int*, CUdevice, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemAllocHost)(void**, size_t);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr);
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuLaunchHostFunc)(CUstream, void (*)(void*), void*);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuIpcGetEventHandle)(CUipcEventHandle*, CUevent);
  CUresult (*cuIpcOpenEventHandle)(CUevent*, CUipcEventHandle);

  // "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string ErrorText(CUresult r, const char* call) const {
    const char* name = nullptr;
    const char* text = nullptr;
    cuGetErrorName(r, &name);
    cuGetErrorString(r, &text);
    return std::string(call) + ": " + (name ? name : "CUDA error " + std::to_string(r)) +
           (text ? std::string(" (") + text + ")" : "");
  }

  std::string ErrorName(CUresult r) const {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    return name ? name : "CUDA_ERROR_" + std::to_string(r);
  }
};

namespace detail {

template <typename F>
bool Resolve(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) *why = std::string("libcuda.so.1 has no ") + name + " (a driver older than CUDA 11?)";
  return *out != nullptr;
}

struct Loaded {
  Driver driver;
  std::string why;
  bool ok = false;
};

inline Loaded Load() {
  Loaded l;
  // TENSORPIPE_CUDA_DRIVER names another driver: one installed out of the
  // loader's path, or @tensorpipe/cuda-emulator.
  std::string error;
  void* lib = OpenLibrary("TENSORPIPE_CUDA_DRIVER", "libcuda.so.1", &error);
  if (lib == nullptr) {
    l.why = "no CUDA driver: " + error;
    return l;
  }
  Driver& d = l.driver;
  std::string* w = &l.why;
  // Versioned names where cuda.h maps the plain name to one.
  bool ok =
      Resolve(lib, "cuInit", &d.cuInit, w) && Resolve(lib, "cuDriverGetVersion", &d.cuDriverGetVersion, w) &&
      Resolve(lib, "cuGetErrorName", &d.cuGetErrorName, w) &&
      Resolve(lib, "cuGetErrorString", &d.cuGetErrorString, w) &&
      Resolve(lib, "cuDeviceGetCount", &d.cuDeviceGetCount, w) && Resolve(lib, "cuDeviceGet", &d.cuDeviceGet, w) &&
      Resolve(lib, "cuDeviceGetName", &d.cuDeviceGetName, w) &&
      Resolve(lib, "cuDeviceGetPCIBusId", &d.cuDeviceGetPCIBusId, w) &&
      Resolve(lib, "cuDeviceGetUuid_v2", &d.cuDeviceGetUuid, w) &&
      Resolve(lib, "cuDeviceCanAccessPeer", &d.cuDeviceCanAccessPeer, w) &&
      Resolve(lib, "cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, w) &&
      Resolve(lib, "cuCtxSetCurrent", &d.cuCtxSetCurrent, w) && Resolve(lib, "cuMemAlloc_v2", &d.cuMemAlloc, w) &&
      Resolve(lib, "cuMemFree_v2", &d.cuMemFree, w) && Resolve(lib, "cuMemAllocHost_v2", &d.cuMemAllocHost, w) &&
      Resolve(lib, "cuMemFreeHost", &d.cuMemFreeHost, w) &&
      Resolve(lib, "cuMemGetAddressRange_v2", &d.cuMemGetAddressRange, w) &&
      Resolve(lib, "cuPointerGetAttribute", &d.cuPointerGetAttribute, w) &&
      Resolve(lib, "cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync, w) &&
      Resolve(lib, "cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync, w) &&
      Resolve(lib, "cuMemcpyDtoDAsync_v2", &d.cuMemcpyDtoDAsync, w) &&
      Resolve(lib, "cuMemsetD8Async", &d.cuMemsetD8Async, w) && Resolve(lib, "cuStreamCreate", &d.cuStreamCreate, w) &&
      Resolve(lib, "cuStreamDestroy_v2", &d.cuStreamDestroy, w) &&
      Resolve(lib, "cuStreamSynchronize", &d.cuStreamSynchronize, w) &&
      Resolve(lib, "cuStreamWaitEvent", &d.cuStreamWaitEvent, w) &&
      Resolve(lib, "cuLaunchHostFunc", &d.cuLaunchHostFunc, w) && Resolve(lib, "cuEventCreate", &d.cuEventCreate, w) &&
      Resolve(lib, "cuEventRecord", &d.cuEventRecord, w) &&
      Resolve(lib, "cuEventSynchronize", &d.cuEventSynchronize, w) &&
      Resolve(lib, "cuEventQuery", &d.cuEventQuery, w) && Resolve(lib, "cuEventDestroy_v2", &d.cuEventDestroy, w) &&
      Resolve(lib, "cuIpcGetMemHandle", &d.cuIpcGetMemHandle, w) &&
      Resolve(lib, "cuIpcOpenMemHandle_v2", &d.cuIpcOpenMemHandle, w) &&
      Resolve(lib, "cuIpcCloseMemHandle", &d.cuIpcCloseMemHandle, w) &&
      Resolve(lib, "cuIpcGetEventHandle", &d.cuIpcGetEventHandle, w) &&
      Resolve(lib, "cuIpcOpenEventHandle", &d.cuIpcOpenEventHandle, w);
  if (!ok) return l;
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    l.why = "the CUDA driver is there but did not start: " + d.ErrorText(r, "cuInit");
    return l;
  }
  d.cuDriverGetVersion(&d.version);
  l.ok = true;
  return l;
}

}  // namespace detail

// The driver, loaded and initialised once per process; nullptr with *why
// set where there is none (no libcuda.so.1, no GPU, a broken install).
inline const Driver* GetDriver(std::string* why) {
  static const detail::Loaded loaded = detail::Load();
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return &loaded.driver;
}

// Whether host memory at p is page-locked (allocated or registered with the
// driver), which copies reach without the driver blocking the caller.
inline bool IsPinned(const Driver& d, const void* p) {
  unsigned type = 0;
  return d.cuPointerGetAttribute(&type, kPointerAttributeMemoryType,
                                 static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p))) == CUDA_SUCCESS &&
         type == kMemoryTypeHost;
}

// Makes device `index`'s primary context current on this thread (each
// thread that calls the driver needs one); returns the failing result.
inline CUresult UseDevice(const Driver& d, int index) {
  CUdevice dev;
  CUresult r = d.cuDeviceGet(&dev, index);
  if (r != CUDA_SUCCESS) return r;
  CUcontext ctx;
  r = d.cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r != CUDA_SUCCESS) return r;
  return d.cuCtxSetCurrent(ctx);
}

}  // namespace cuda
}  // namespace tensorpipe_js
