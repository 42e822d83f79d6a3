// Shared by every tensorpipe-js addon: errors with a `code` the way Node
// reports errno failures, access to TypedArray memory, and callbacks into JS
// from libuv callbacks that cannot crash the process.
#pragma once

#include <napi.h>
#include <net/if.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tensorpipe/env_lifecycle.h"

namespace tensorpipe_js {

// An Error whose `code` is libuv's errno name (ECONNRESET, EOF, ...).
// `detail`, where given, says more than errno's name: it follows the message.
inline Napi::Error UvError(Napi::Env env, int status, const char* syscall, const std::string& detail = "") {
  std::string message = std::string(syscall) + ": " + uv_strerror(status) + (detail.empty() ? "" : ": " + detail);
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, uv_err_name(status)));
  err.Set("errno", Napi::Number::New(env, status));
  err.Set("syscall", Napi::String::New(env, syscall));
  return err;
}

// An Error with one of core's ERR_TP_* codes.
inline Napi::Error CodedError(Napi::Env env, const char* code, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  return err;
}

struct ByteSpan {
  char* data = nullptr;
  size_t length = 0;
};

// The memory of a TypedArray, DataView or Buffer. Asking for it pins the
// backing store, so the pointer stays valid while the view is referenced.
inline bool GetBytes(Napi::Value value, ByteSpan* out) {
  napi_env env = value.Env();
  bool is = false;
  if (napi_is_typedarray(env, value, &is) == napi_ok && is) {
    napi_typedarray_type type;
    size_t length = 0;
    void* data = nullptr;
    napi_value arraybuffer;
    size_t offset = 0;
    if (napi_get_typedarray_info(env, value, &type, &length, &data, &arraybuffer, &offset) != napi_ok) return false;
    size_t element = 1;
    switch (type) {
      case napi_int16_array:
      case napi_uint16_array:
        element = 2;
        break;
      case napi_int32_array:
      case napi_uint32_array:
      case napi_float32_array:
        element = 4;
        break;
      case napi_float64_array:
      case napi_bigint64_array:
      case napi_biguint64_array:
        element = 8;
        break;
      default:
        break;
    }
    out->data = static_cast<char*>(data);
    out->length = length * element;
    return true;
  }
  if (napi_is_dataview(env, value, &is) == napi_ok && is) {
    size_t length = 0;
    void* data = nullptr;
    napi_value arraybuffer;
    size_t offset = 0;
    if (napi_get_dataview_info(env, value, &length, &data, &arraybuffer, &offset) != napi_ok) return false;
    out->data = static_cast<char*>(data);
    out->length = length;
    return true;
  }
  return false;
}

// Calls a JS callback from a libuv callback, inside a handle scope: runs
// microtasks afterwards like any Node callback, and turns a throwing
// callback into an uncaught exception instead of a C++ crash.
// Nothing is called once the environment is going (see CanCallIntoJs).
// Plain Node-API here: node-addon-api turns a failed call into a C++
// exception, and building that exception aborts when JS cannot run.
inline void InvokeCallback(Napi::FunctionReference& fn, const Napi::AsyncContext& context,
                           std::initializer_list<napi_value> args) {
  napi_env env = fn.Env();
  if (!CanCallIntoJs(env)) return;
  napi_value global;
  napi_value result;
  if (napi_get_global(env, &global) != napi_ok) return;
  napi_status status = napi_make_callback(env, context, global, fn.Value(), args.size(), args.begin(), &result);
  if (status == napi_ok) return;
  bool pending = false;
  napi_value exception;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending &&
      napi_get_and_clear_last_exception(env, &exception) == napi_ok && CanCallIntoJs(env)) {
    napi_fatal_exception(env, exception);
  }
}

// Runs `body` from a libuv callback that makes JS objects (a connection
// accepted, say): nothing once the environment is going, and an exception
// from JS being terminated meanwhile ends here instead of unwinding
// through libuv.
template <typename F>
inline void FromLoop(Napi::Env env, F&& body) {
  Napi::HandleScope scope(env);
  if (!CanCallIntoJs(env)) return;
  try {
    body();
  } catch (const Napi::Error& e) {
    if (CanCallIntoJs(env)) napi_fatal_exception(env, e.Value());
  }
}

// "127.0.0.1:80" or "[::1]:80" from a socket address.
inline std::string SockaddrToString(const struct sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN + 1] = {0};
  int port = 0;
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const struct sockaddr_in6*>(&addr);
    uv_ip6_name(a, host, sizeof(host));
    port = ntohs(a->sin6_port);
    std::string scope;
    char ifname[IF_NAMESIZE];
    // Link-local addresses mean nothing without their interface.
    if (a->sin6_scope_id != 0 && if_indextoname(a->sin6_scope_id, ifname) != nullptr) scope = std::string("%") + ifname;
    return std::string("[") + host + scope + "]:" + std::to_string(port);
  }
  auto* a = reinterpret_cast<const struct sockaddr_in*>(&addr);
  uv_ip4_name(a, host, sizeof(host));
  port = ntohs(a->sin_port);
  return std::string(host) + ":" + std::to_string(port);
}

// Parses a numeric IPv4 or IPv6 address (with %scope for link-local).
inline int ParseIpAddress(const std::string& host, int port, struct sockaddr_storage* out) {
  if (host.find(':') != std::string::npos) {
    return uv_ip6_addr(host.c_str(), port, reinterpret_cast<struct sockaddr_in6*>(out));
  }
  return uv_ip4_addr(host.c_str(), port, reinterpret_cast<struct sockaddr_in*>(out));
}

// A 64-bit value handed to JS as a bigint: a device pointer, an address, a
// stream or an event.
inline uint64_t BigIntArg(const Napi::Value& v, const char* what) {
  bool lossless = false;
  if (!v.IsBigInt()) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a bigint");
  uint64_t out = v.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throw Napi::RangeError::New(v.Env(), std::string(what) + " does not fit 64 bits");
  return out;
}

}  // namespace tensorpipe_js
