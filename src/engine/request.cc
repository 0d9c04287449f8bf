// engine/request.cc — remora::Request: test, and wait (spin, then block) with a bound
// that is the caller's, the context's default (kDefaultTimeout) or none (kForever).
#include <sched.h>

#include <chrono>
#include <string>

#include "engine/request_state.h"
#include "engine/wait_bound.h"

namespace remora {

using engine::Clock;

Request::Request(std::shared_ptr<detail::RequestState> state) noexcept : state_(std::move(state)) {}

Request detail::make_request(std::shared_ptr<RequestState> state) noexcept { return Request(std::move(state)); }

namespace {
/// The state of every done_request: complete and ok, never changed again, and owned by
/// no one (made once, never freed, so no order of static destruction can matter).
detail::RequestState* done_state() noexcept {
  static detail::RequestState* const state = [] {
    auto* s = new detail::RequestState();
    s->word.store(2, std::memory_order_relaxed);
    return s;
  }();
  return state;
}
}  // namespace

Request detail::done_request(size_t bytes, Tag tag) noexcept {
  // Aliasing an empty shared_ptr: a pointer with no control block, so neither this nor
  // any copy of the Request counts references.
  Request r(std::shared_ptr<RequestState>(std::shared_ptr<RequestState>(), done_state()));
  r.done_bytes_ = bytes;
  r.done_tag_ = tag;
  return r;
}

bool Request::done() const noexcept { return state_ != nullptr && state_->done(); }
size_t Request::bytes() const noexcept {
  if (state_.get() == done_state()) return done_bytes_;
  return done() ? state_->bytes : 0;
}
Tag Request::tag() const noexcept {
  if (state_.get() == done_state()) return done_tag_;
  return state_ ? state_->tag : Tag{};
}

Status Request::on_done(std::function<void()> fn) const {
  if (!state_) return Status(StatusCode::kInvalidArgument, "on_done() on an empty Request");
  if (state_.get() == done_state()) {
    fn();  // done already, and the shared state takes no functions
    return Status::ok();
  }
  state_->add_on_done(std::move(fn));
  return Status::ok();
}

Status Request::test() const {
  if (!state_) return Status(StatusCode::kInvalidArgument, "test() on an empty Request");
  if (!state_->done() && state_->engine) {
    state_->engine->waiter_enter();
    state_->engine->try_progress();
    state_->engine->waiter_exit();
  }
  if (!state_->done()) return Status(StatusCode::kInProgress, "");
  return state_->status;
}

Status Request::wait(Duration requested) const {
  if (!state_) return Status(StatusCode::kInvalidArgument, "wait() on an empty Request");
  detail::RequestState& st = *state_;
  if (st.done()) return st.status;
  const engine::WaitBound bound(requested, st.default_timeout);
  const Duration timeout = bound.timeout();
  const auto start = Clock::now();
  const bool forever = timeout == kForever || timeout > std::chrono::hours(24 * 365);
  const auto deadline = forever ? Clock::time_point::max() : start + timeout;
  engine::ProgressEngine* eng = st.engine.get();

  // Spin phase: drive progress from this thread; no wake-up needed when data arrives.
  // The budget restarts whenever this thread makes progress, so a waiter keeps
  // driving a transfer that is moving and blocks only after spin_us of idleness.
  if (eng != nullptr && eng->options().spin_us > 0) {
    const auto spin = std::chrono::microseconds(eng->options().spin_us);
    auto spin_end = start + spin;
    eng->waiter_enter();
    unsigned idle_polls = 0;
    engine::Clock::time_point now{};
    while (!st.done()) {
      now = Clock::now();
      if (now >= spin_end || now >= deadline) break;
      eng->waiter_polling(now);
      if (eng->try_progress(now) > 0) {
        // From the start of the round: after a round that moved a transfer for longer
        // than spin_us, a waiter whose request is still open blocks at once. Counting
        // from the round's end was measured and not kept (bench/results/rma.md).
        spin_end = now + spin;
        idle_polls = 0;
      } else if (++idle_polls % eng->yield_polls() == 0) {
        // Nothing moved for a while: let a thread that shares this CPU (the peer
        // process on an oversubscribed host) run. Returns at once when none waits.
        sched_yield();
      }
    }
    eng->waiter_exit(now);
    if (st.done()) return st.status;
  }

  // Block phase: the progress thread completes the request and wakes us.
  auto expired = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    return bound.explain(
        Status(StatusCode::kTimeout, "operation still in progress after " + std::to_string(ms) + " ms"));
  };
  if (Clock::now() >= deadline && !st.done()) return expired();
  struct BlockScope {
    engine::ProgressEngine* e;
    explicit BlockScope(engine::ProgressEngine* eng) : e(eng) {
      if (e != nullptr) e->block_begin();
    }
    ~BlockScope() {
      if (e != nullptr) e->block_end();
    }
    BlockScope(const BlockScope&) = delete;
    BlockScope& operator=(const BlockScope&) = delete;
  } block(eng);
  while (!st.done()) {
    auto now = Clock::now();
    if (now >= deadline) return expired();
    uint32_t expected = 0;
    if (!st.word.compare_exchange_strong(expected, 1, std::memory_order_acq_rel) && expected == 2) break;
    engine::futex_wait(&st.word, 1, forever ? std::chrono::nanoseconds(-1) : deadline - now);
  }
  return st.status;
}

Status wait_all(std::span<const Request> requests, Duration requested) {
  // The default bound is that of the first request still running (requests of one
  // call normally share a context); when none is, there is nothing to wait for.
  Duration default_bound = Duration::zero();
  for (const Request& r : requests) {
    if (r.state_ && !r.state_->done()) {
      default_bound = r.state_->default_timeout;
      break;
    }
  }
  const engine::WaitBound bound(requested, default_bound);
  const Duration timeout = bound.timeout();
  const bool forever = timeout == kForever || timeout > std::chrono::hours(24 * 365);
  const auto deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
  Status first;
  for (const Request& r : requests) {
    Duration left = forever ? kForever : std::chrono::duration_cast<Duration>(deadline - Clock::now());
    if (!forever && left < Duration::zero()) left = Duration::zero();
    Status s = r.wait(left);
    if (!s.is_ok() && first.is_ok()) first = s;
  }
  return bound.explain(std::move(first));
}

}  // namespace remora
