// The mpt channel's native half: bulk lanes on their own threads.
#include <napi.h>

#include "lane_set.h"

namespace {

Napi::Object InitAddon(Napi::Env env, Napi::Object exports) {
  exports.Set("LaneSet", tensorpipe_js::LaneSet::Define(env));
  return exports;
}

}  // namespace

NODE_API_MODULE(tensorpipe_mpt, InitAddon)
