// engine/request_state.h — the shared state behind a remora::Request.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/futex.h"
#include "engine/progress.h"
#include "engine/wait_bound.h"
#include "remora/request.h"
#include "remora/status.h"

namespace remora::detail {

/// Completed exactly once, by whoever holds the progress lock (or before the request
/// is handed out). `word`: 0 pending, 1 pending with a sleeper, 2 done.
struct RequestState {
  std::atomic<uint32_t> word{0};
  Status status;
  size_t bytes = 0;
  Tag tag{};
  std::shared_ptr<engine::ProgressEngine> engine;
  /// What a wait given kDefaultTimeout waits at most: the context's wait_timeout_ms.
  /// make() takes it from the engine; the owner of a request without one (the
  /// collectives' worker) sets it from its context.
  Duration default_timeout = std::chrono::milliseconds(Config{}.wait_timeout_ms);

  bool done() const noexcept { return word.load(std::memory_order_acquire) == 2; }

  void complete(Status s, size_t n) {
    if (done()) return;
    status = std::move(s);
    bytes = n;
    if (word.exchange(2, std::memory_order_acq_rel) == 1) engine::futex_wake_all(&word);
  }

  static std::shared_ptr<RequestState> make(std::shared_ptr<engine::ProgressEngine> e, Tag t) {
    auto r = std::make_shared<RequestState>();
    if (e) r->default_timeout = engine::WaitBound::default_bound(*e);
    r->engine = std::move(e);
    r->tag = t;
    return r;
  }
  /// A request that is already complete (immediate errors, eager sends).
  static std::shared_ptr<RequestState> completed(Status s, size_t n, Tag t) {
    auto r = std::make_shared<RequestState>();
    r->tag = t;
    r->complete(std::move(s), n);
    return r;
  }
};

}  // namespace remora::detail
