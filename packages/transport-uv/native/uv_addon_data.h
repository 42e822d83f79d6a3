// The uv addon's per-environment data: the transports' shared data, and the
// class of the sockets its connections hand over.
#pragma once

#include <napi.h>

#include "tensorpipe/addon_data.h"

namespace tensorpipe_js {

struct UvAddonData : AddonData {
  explicit UvAddonData(napi_env env) : AddonData(env) {}
  Napi::FunctionReference handedSocketConstructor;
};

inline UvAddonData* GetUvAddonData(Napi::Env env) { return AddonEnv::Get<UvAddonData>(env); }

}  // namespace tensorpipe_js
