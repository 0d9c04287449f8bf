// datapath/rejoin_backoff.h — when the connecting side tries a retired data stream's rail
// again (docs/rails.md, "A rail that comes back").
//
// A rail that stays away is tried once per peer timeout, the first time at once. A rail
// that comes back and is retired again before it stayed up for kSettle peer timeouts
// flaps (a link that bounces, a path congested past the peer timeout again and again):
// each such return doubles the wait before the next attempt, up to kMaxFactor peer
// timeouts, so that the chunks stalled on it each time (resent only after a peer timeout)
// stop costing the endpoint that much again and again. A rail that stayed up that long
// is tried at once again the next time it goes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

namespace remora::detail {

class RejoinBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kSettle = 8;      ///< peer timeouts up that end a flap
  static constexpr uint32_t kMaxFactor = 32;  ///< the longest wait, in peer timeouts

  explicit RejoinBackoff(Clock::duration peer_timeout) : base_(peer_timeout) {}

  /// Whether an attempt may start now.
  bool due(Clock::time_point now) const noexcept { return now >= next_; }
  /// An attempt starts: the next not before the current wait.
  void attempted(Clock::time_point now) noexcept { next_ = now + wait(); }
  /// The stream runs again.
  void rejoined(Clock::time_point now) noexcept { up_since_ = now; }
  /// The stream was retired (again). Returns true when this was a flap: the next attempt
  /// then waits wait(), which doubled.
  bool retired(Clock::time_point now) noexcept {
    const bool flapped = up_since_ && now - *up_since_ < kSettle * base_;
    up_since_.reset();
    if (!flapped) {
      factor_ = 1;
      next_ = now;
      return false;
    }
    factor_ = std::min(factor_ * 2, kMaxFactor);
    next_ = now + wait();
    return true;
  }
  /// The wait between attempts now: the peer timeout times 1, 2, 4 … kMaxFactor.
  Clock::duration wait() const noexcept { return factor_ * base_; }

 private:
  Clock::duration base_;
  uint32_t factor_ = 1;
  Clock::time_point next_{};
  std::optional<Clock::time_point> up_since_;
};

}  // namespace remora::detail
