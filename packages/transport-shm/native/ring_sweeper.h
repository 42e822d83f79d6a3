// Gives back the memory of rings that went idle, so that an idle pipe costs
// a few pages however busy it once was: once a second, on the loop, each
// connection whose ring to its peer is empty and has been unwritten for
// kQuietSweeps looks punches the ring's pages out (MADV_REMOVE frees the memfd's pages
// for both processes); the next frames fault fresh ones in. The writer
// does it because it alone decides what goes into the ring next.
#pragma once

#include <uv.h>

#include <cstddef>
#include <vector>

#include "tensorpipe/env_lifecycle.h"
#include "tensorpipe/uv_handle.h"

namespace tensorpipe_js {

// What the sweeper looks at: a connection that owns a ring's head.
class SweptRing {
 public:
  virtual ~SweptRing() = default;
  // Called on the loop, once per sweep.
  virtual void Sweep() = 0;

 private:
  friend class RingSweeper;
  size_t sweepIndex_ = static_cast<size_t>(-1);
};

class RingSweeper : public EnvResource {
 public:
  // How often idle rings are looked for, and how many looks in a row must
  // find one unwritten: a ring is given back 5-6 s after its last frame. A
  // server busy with 1000 pipes echoing 1 MiB in turn left some unwritten
  // for a second at a time, and giving those back (kQuietSweeps 1) cost it
  // a fifth of its CPU zeroing their pages again.
  static constexpr uint64_t kPeriodMs = 1000;
  static constexpr int kQuietSweeps = 5;

  explicit RingSweeper(EnvLifecycle& lifecycle) : lifecycle_(lifecycle) {}

  void Add(SweptRing* ring);
  void Remove(SweptRing* ring);
  void Teardown() override;

 private:
  static void OnTimer(uv_timer_t* timer);

  EnvLifecycle& lifecycle_;
  UvHandle<uv_timer_t> timer_;
  std::vector<SweptRing*> rings_;
  bool closing_ = false;
};

}  // namespace tensorpipe_js
