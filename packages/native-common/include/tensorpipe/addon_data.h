// Per-environment state of a transport addon: its lifecycle, the connection
// class that native code instantiates itself, and the slab pool for small
// frames shared by every connection.
#pragma once

#include <napi.h>
#include <uv.h>

#include "tensorpipe/env_lifecycle.h"
#include "tensorpipe/frame_io.h"

namespace tensorpipe_js {

struct AddonData : AddonEnv {
  explicit AddonData(napi_env env) : AddonEnv(env) {}
  uv_loop_t* loop() const { return lifecycle.loop(); }
  Napi::FunctionReference connectionConstructor;
  FrameResults results;
};

inline AddonData* GetAddonData(Napi::Env env) { return AddonEnv::Get<AddonData>(env); }

}  // namespace tensorpipe_js
