// Per-environment state of a transport addon: the loop, the connection
// class that native code instantiates itself, and the slab pool for small
// frames shared by every connection.
#pragma once

#include <napi.h>
#include <uv.h>

#include "tensorpipe/frame_io.h"

namespace tensorpipe_js {

struct AddonData {
  Napi::FunctionReference connectionConstructor;
  uv_loop_t* loop = nullptr;
  FrameResults results;
};

inline AddonData* GetAddonData(Napi::Env env) { return env.GetInstanceData<AddonData>(); }

}  // namespace tensorpipe_js
