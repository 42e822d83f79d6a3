#include "ring_sweeper.h"

namespace tensorpipe_js {

void RingSweeper::Add(SweptRing* ring) {
  if (closing_ || ring->sweepIndex_ != static_cast<size_t>(-1)) return;
  if (!timer_) {
    uv_timer_init(lifecycle_.loop(), timer_.Make(this));
    // The sweep keeps no process alive.
    timer_.Unref();
    uv_timer_start(timer_.get(), OnTimer, kPeriodMs, kPeriodMs);
    lifecycle_.Own(this);
  }
  ring->sweepIndex_ = rings_.size();
  rings_.push_back(ring);
}

void RingSweeper::Remove(SweptRing* ring) {
  size_t at = ring->sweepIndex_;
  if (at == static_cast<size_t>(-1)) return;
  rings_[at] = rings_.back();
  rings_[at]->sweepIndex_ = at;
  rings_.pop_back();
  ring->sweepIndex_ = static_cast<size_t>(-1);
}

void RingSweeper::OnTimer(uv_timer_t* timer) {
  auto* self = static_cast<RingSweeper*>(timer->data);
  for (size_t i = 0; i < self->rings_.size(); i++) self->rings_[i]->Sweep();
}

void RingSweeper::Teardown() {
  closing_ = true;
  for (SweptRing* r : rings_) r->sweepIndex_ = static_cast<size_t>(-1);
  rings_.clear();
  timer_.Close(
      [](void* sweeper) {
        auto* self = static_cast<RingSweeper*>(sweeper);
        self->lifecycle_.Released(self);
      },
      this);
}

}  // namespace tensorpipe_js
