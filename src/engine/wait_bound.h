// engine/wait_bound.h — how a wait given remora::kDefaultTimeout is bounded (by its
// context's Config::wait_timeout_ms, REMORA_WAIT_TIMEOUT_MS) and how the expiry of that
// bound is reported, for every public wait: Request::wait, wait_all, Listener::accept,
// Endpoint::wait_notification.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/progress.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora::engine {

/// The timeout of one wait with kDefaultTimeout resolved, and when the wait began: a
/// kTimeout that comes back once the default bound has passed is the bound's, and
/// says so; a kTimeout from anywhere else (a failure that carries that code, an
/// explicit timeout) goes back untouched.
class WaitBound {
 public:
  /// `requested` as given, or `default_bound` when it is kDefaultTimeout.
  WaitBound(Duration requested, Duration default_bound) noexcept
      : defaulted_(requested == kDefaultTimeout),
        timeout_(defaulted_ ? default_bound : requested),
        start_(defaulted_ ? Clock::now() : Clock::time_point()) {}
  /// The bound of waits on `engine`'s context.
  WaitBound(Duration requested, const ProgressEngine& engine) noexcept : WaitBound(requested, default_bound(engine)) {}

  /// What to wait for: never kDefaultTimeout.
  Duration timeout() const noexcept { return timeout_; }
  bool defaulted() const noexcept { return defaulted_; }

  /// `s`, with the default bound named when it is that bound's kTimeout.
  Status explain(Status s) const {
    if (!defaulted_ || s.code() != StatusCode::kTimeout || Clock::now() - start_ < timeout_) return s;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count();
    return Status(StatusCode::kTimeout,
                  s.message() + " (no timeout was given, so the context's default bound of " + std::to_string(ms) +
                      " ms applied: REMORA_WAIT_TIMEOUT_MS or ContextOptions::wait_timeout_ms sets it; pass a "
                      "timeout, or remora::kForever to wait without one)");
  }
  template <typename T>
  Result<T> explain(Result<T> r) const {
    if (r.is_ok()) return r;
    return explain(r.status());
  }

  static Duration default_bound(const ProgressEngine& engine) noexcept {
    return std::chrono::milliseconds(engine.options().wait_timeout_ms);
  }

 private:
  bool defaulted_;
  Duration timeout_;
  Clock::time_point start_;
};

}  // namespace remora::engine
