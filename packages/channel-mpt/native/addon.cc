// The mpt channel's native half: bulk lanes on their own threads.
#include <napi.h>

#include "lane_set.h"
#include "tensorpipe/env_lifecycle.h"

namespace {

Napi::Object InitAddon(Napi::Env env, Napi::Object exports) {
  tensorpipe_js::AddonEnv::Install<tensorpipe_js::AddonEnv>(env);
  exports.Set("LaneSet", tensorpipe_js::LaneSet::Define(env));
  return exports;
}

}  // namespace

NODE_API_MODULE(tensorpipe_mpt, InitAddon)
