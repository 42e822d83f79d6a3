// What every addon that calls the CUDA driver from JS needs: the driver or
// a JS error saying why there is none, driver errors as JS errors with the
// CUDA error's name as `code`, bigint handles, GPU UUIDs as hex.
#pragma once

#include <napi.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "tensorpipe/cuda_driver.h"
#include "tensorpipe/napi_helpers.h"

namespace tensorpipe_js {
namespace cuda {

inline const Driver& NeedDriver(Napi::Env env) {
  std::string why;
  const Driver* d = GetDriver(&why);
  if (d == nullptr) throw CodedError(env, "ERR_TP_NOT_VIABLE", why);
  return *d;
}

// An Error whose code is the CUDA error's name (CUDA_ERROR_OUT_OF_MEMORY).
inline Napi::Error CudaError(Napi::Env env, const Driver& d, CUresult r, const char* call) {
  Napi::Error err = Napi::Error::New(env, d.ErrorText(r, call));
  err.Set("code", Napi::String::New(env, d.ErrorName(r)));
  err.Set("syscall", Napi::String::New(env, call));
  return err;
}

inline void Check(Napi::Env env, const Driver& d, CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw CudaError(env, d, r, call);
}

// A stream handed to JS as a bigint.
inline CUstream StreamArg(const Napi::Value& v) {
  return reinterpret_cast<CUstream>(static_cast<uintptr_t>(BigIntArg(v, "stream")));
}

// GPU `index`'s UUID as 32 hex digits, or "" where the driver cannot say.
inline std::string UuidHex(const Driver& d, int index) {
  CUdevice dev;
  CUuuid uuid;
  if (d.cuDeviceGet(&dev, index) != CUDA_SUCCESS || d.cuDeviceGetUuid(&uuid, dev) != CUDA_SUCCESS) return "";
  char hex[33];
  for (int b = 0; b < 16; b++) snprintf(hex + 2 * b, 3, "%02x", static_cast<uint8_t>(uuid.bytes[b]));
  return std::string(hex, 32);
}

}  // namespace cuda
}  // namespace tensorpipe_js
