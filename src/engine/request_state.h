// engine/request_state.h — the shared state behind a remora::Request.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/futex.h"
#include "engine/progress.h"
#include "engine/wait_bound.h"
#include "remora/request.h"
#include "remora/status.h"

namespace remora::detail {

/// Completed exactly once, by whoever holds the progress lock (or before the request
/// is handed out). `word`: 0 pending, 1 pending with a sleeper, 2 done.
struct RequestState {
  // Every member says how it starts: a provided constructor spares make_shared the
  // zero-filling of the whole object that value-initialization does first.
  RequestState() noexcept {}  // NOLINT(modernize-use-equals-default)
  std::atomic<uint32_t> word{0};
  Status status;
  size_t bytes = 0;
  Tag tag{};
  std::shared_ptr<engine::ProgressEngine> engine;
  /// What a wait given kDefaultTimeout waits at most: the context's wait_timeout_ms.
  /// make() takes it from the engine; the owner of a request without one (the
  /// collectives' worker) sets it from its context.
  Duration default_timeout = std::chrono::milliseconds(Config{}.wait_timeout_ms);

  /// Request::on_done functions not yet run. `has_on_done` is set (seq_cst) before
  /// add_on_done looks at `word`, and complete() looks at it after its (seq_cst)
  /// exchange of `word`, so at least one of the two sees the other and runs them.
  std::mutex on_done_mutex;
  std::vector<std::function<void()>> on_done;
  std::atomic<bool> has_on_done{false};

  bool done() const noexcept { return word.load(std::memory_order_acquire) == 2; }

  /// Pending again, for an owner that holds the only reference to a completed state
  /// with no on_done functions (Notifications' spare waiter).
  void rearm() noexcept {
    word.store(0, std::memory_order_relaxed);
    status = Status::ok();
    bytes = 0;
  }

  void complete(Status s, size_t n) {
    if (done()) return;
    status = std::move(s);
    bytes = n;
    if (word.exchange(2, std::memory_order_seq_cst) == 1) engine::futex_wake_all(&word);
    if (has_on_done.load(std::memory_order_seq_cst)) run_on_done();
  }

  void add_on_done(std::function<void()> fn) {
    {
      std::lock_guard lock(on_done_mutex);
      on_done.push_back(std::move(fn));
      has_on_done.store(true, std::memory_order_seq_cst);
    }
    if (word.load(std::memory_order_seq_cst) == 2) run_on_done();
  }

  /// Runs (once) the functions added so far; either side of the race may get here.
  void run_on_done() {
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard lock(on_done_mutex);
      fns.swap(on_done);
    }
    for (auto& fn : fns) fn();
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

/// Completed request states kept to be used again, so that an owner that makes one per
/// operation (a receive, a notified put through a mapping, a wait for a notification)
/// allocates and frees none in a steady ping-pong. keep() a state as it completes;
/// take() hands back one that nothing else holds any more (its Request is gone), pending
/// again, or a new one. Under the owner's lock: a state held only here cannot be reached
/// by anyone else, so none is rearmed under a waiter.
///
/// The last Request may have gone on another thread, which read the state before its
/// reference count went down (acquire-release); the count is read relaxed, then an
/// acquire fence orders the rearm after that thread's reads. ThreadSanitizer does not
/// model fences, so its builds make a new state every time.
template <size_t N>
class SpareStates {
 public:
  std::shared_ptr<RequestState> take(const std::shared_ptr<engine::ProgressEngine>& engine, Tag tag) {
#if !defined(__SANITIZE_THREAD__)
    for (std::shared_ptr<RequestState>& s : spares_) {
      if (s != nullptr && s.use_count() == 1 && !s->has_on_done.load(std::memory_order_relaxed)) {
        std::atomic_thread_fence(std::memory_order_acquire);
        std::shared_ptr<RequestState> r = std::move(s);
        r->rearm();
        r->tag = tag;
        return r;
      }
    }
#endif
    return RequestState::make(engine, tag);
  }
  /// `s` (completed) replaces the oldest kept.
  void keep(std::shared_ptr<RequestState> s) noexcept {
    spares_[next_] = std::move(s);
    next_ = (next_ + 1) % N;
  }

 private:
  std::array<std::shared_ptr<RequestState>, N> spares_{};
  size_t next_ = 0;
};

}  // namespace remora::detail
