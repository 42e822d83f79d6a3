// How long a waiting read polls its ring before it sleeps until its peer wakes it,
// learnt from the waits before it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tensorpipe_js {

// The rule of the kernel's haltpoll governor for an idle vCPU, made slower
// to give up: a wait that a longer spell would have caught (longer than the
// spell, within the longest) grows the next spell, to kGrowStartNanos at
// least; kLongWaitsToShrink waits in a row longer than the longest halve
// it, to 0 below kGrowStartNanos. A connection whose every wait is long
// sleeps at once from its sixth; one that pauses now and then between
// bursts of round trips keeps its spell (haltpoll's own rule halves it at
// each pause, and the first round trips of the bursts then sleep).
//
// Two spells are learnt, each from its own clock: one for the peer's next
// message, from when the read began to wait, and one for an answer, from
// the last frame written meanwhile to a peer that was awake. A pipe posts
// its next read as soon as a message lands, so the first spans a client's
// own pause as well as the answer: a client and a server exchanging a
// message every millisecond both stop polling between messages, while a
// client whose awake server answers in microseconds polls for it.
class PollingSpells {
 public:
  enum Kind { kNext = 0, kAnswer = 1 };

  explicit PollingSpells(uint64_t longestNanos = 0) : longest_(longestNanos), spell_{longestNanos, longestNanos} {}

  uint64_t Spell(Kind kind) const { return spell_[kind]; }

  // A wait of `kind` ended with bytes after `waitedNanos`.
  void Learn(Kind kind, uint64_t waitedNanos) {
    uint64_t& spell = spell_[kind];
    const uint64_t growStart = std::min(longest_, kGrowStartNanos);
    if (waitedNanos > longest_) {
      if (++longWaits_[kind] < kLongWaitsToShrink) return;
      spell /= 2;
      if (spell < growStart) spell = 0;
      return;
    }
    longWaits_[kind] = 0;
    if (waitedNanos > spell) spell = std::min(longest_, std::max(spell * 2, growStart));
  }

 private:
  // haltpoll's guest_halt_poll_grow_start.
  static constexpr uint64_t kGrowStartNanos = 50000;
  static constexpr uint32_t kLongWaitsToShrink = 3;
  uint64_t longest_;
  uint64_t spell_[2];
  // Long waits in a row, up to the one that waits now.
  uint32_t longWaits_[2] = {0, 0};
};

}  // namespace tensorpipe_js
