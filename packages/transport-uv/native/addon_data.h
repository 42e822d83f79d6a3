#pragma once

#include <napi.h>

#include "tensorpipe/frame_io.h"

namespace tensorpipe_js {

// Per-environment state: the constructors native code instantiates itself.
struct AddonData {
  Napi::FunctionReference connectionConstructor;
  uv_loop_t* loop = nullptr;
  // One slab pool for the small frames of every connection.
  FrameResults results;
};

inline AddonData* GetAddonData(Napi::Env env) { return env.GetInstanceData<AddonData>(); }

}  // namespace tensorpipe_js
