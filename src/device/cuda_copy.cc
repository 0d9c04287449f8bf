// device/cuda_copy.cc — how a CUDA copy ends (cuda_copy.h).
//
// Threads. Three kinds touch a copy: the caller (starts it, tests, waits, registers
// on_done), the driver's host-function thread (runs on_stream_done after the copy's
// event), and the process's CompletionWatcher thread (polls the events of copies that
// have an on_done pending, because the driver drops host functions after a
// context-wide error). The host-function thread must not call CUDA, so it only flips
// the copy's state and calls on_done's function; a CUDA object released on that thread
// (an on_done function that destroys its copy) is handed to the watcher to destroy.
#include "device/cuda_copy.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/log.h"

namespace remora::device {
namespace {

using Clock = std::chrono::steady_clock;

/// How often the watcher and a waiting thread look for copies the driver failed.
constexpr auto kErrorPoll = std::chrono::milliseconds(250);

/// Whether a copy has ended, how, and what to call when it does.
struct CopyState {
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;     // the result is known: test() and on_done see the end
  bool reported = false;  // on_done's call (if any) has returned: wait() sees the end
  Status result;
  std::function<void()> fn;   // set by on_done while the copy runs
  uint64_t in_flight_id = 0;  // InFlight's number for the host function

  /// Ends the copy with `status` unless it has ended, calls on_done's function (if one
  /// is registered) on this thread, then lets wait() return: a waiter that returns sees
  /// the effects of that call.
  void finish(Status status) {
    std::function<void()> to_call;
    {
      std::lock_guard lock(mu);
      if (ended) return;
      ended = true;
      result = std::move(status);
      to_call = std::move(fn);
      fn = nullptr;
    }
    if (to_call) to_call();
    {
      std::lock_guard lock(mu);
      reported = true;
    }
    cv.notify_all();
  }

  bool has_ended() {
    std::lock_guard lock(mu);
    return ended;
  }
  /// Not ended, and nobody to call when it does: a waiter may end it itself.
  bool unwatched() {
    std::lock_guard lock(mu);
    return !ended && !fn;
  }
};

/// True on the driver's thread while it runs one of our host functions, where no CUDA
/// call is allowed.
thread_local bool t_in_host_function = false;

void destroy_event(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event) noexcept {
  ScopedContext scope(driver, ctx);
  driver.cuEventDestroy(event);  // legal before the event completes: freed when it does
}

void retire_event(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event,
                  std::shared_ptr<const void> context_hold);  // by the watcher

/// The copies whose host function may still come, by a number never reused: the host
/// function gets the number, not a pointer, so one that comes after its copy was ended
/// another way finds nothing, and a copy whose host function never comes (the driver
/// drops them after a context-wide error) is let go by whoever ends it. One per
/// process, never destroyed (a host function may run at any time).
class InFlight {
 public:
  static InFlight& instance() {
    static auto* in_flight = new InFlight();
    return *in_flight;
  }
  uint64_t add(std::shared_ptr<CopyState> state) {
    std::lock_guard lock(mu_);
    const uint64_t id = next_++;
    copies_.emplace(id, std::move(state));
    return id;
  }
  std::shared_ptr<CopyState> take(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = copies_.find(id);
    if (it == copies_.end()) return nullptr;
    std::shared_ptr<CopyState> state = std::move(it->second);
    copies_.erase(it);
    return state;
  }

 private:
  std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<CopyState>> copies_;
};

/// The driver's host function, run after a copy's event: no CUDA calls here.
void on_stream_done(void* user_data) noexcept {
  t_in_host_function = true;
  if (auto state = InFlight::instance().take(reinterpret_cast<uintptr_t>(user_data))) {
    state->finish(Status::ok());  // CopyState holds no CUDA object, so it may be freed here
  }
  t_in_host_function = false;
}

/// Ends a copy found ended (or failed) by asking its event, not by its host function.
void end_by_query(CopyState& state, Status status) {
  InFlight::instance().take(state.in_flight_id);
  state.finish(std::move(status));
}

/// An event recorded after a copy. Destroyed by whoever lets go of it last: the
/// AsyncCopy's owner or the watcher; on the host-function thread (an on_done function
/// that destroyed its copy) the watcher destroys it later. `context_hold` keeps the
/// context alive until then (released after the event is destroyed).
struct CopyEvent {
  const CudaDriver* driver;
  cu::CUcontext ctx;
  cu::CUevent event;
  std::shared_ptr<const void> context_hold;

  CopyEvent(const CudaDriver* d, cu::CUcontext c, cu::CUevent e, std::shared_ptr<const void> hold)
      : driver(d), ctx(c), event(e), context_hold(std::move(hold)) {}
  ~CopyEvent() {
    if (t_in_host_function) {
      retire_event(*driver, ctx, event, std::move(context_hold));
    } else {
      destroy_event(*driver, ctx, event);
    }
  }
  CopyEvent(const CopyEvent&) = delete;
  CopyEvent& operator=(const CopyEvent&) = delete;

  /// ok when the work before the event is done, kInProgress while it runs, or the error.
  Status query(std::string_view what) const {
    ScopedContext scope(*driver, ctx);
    REMORA_RETURN_IF_ERROR(scope.status(what));
    const cu::CUresult r = driver->cuEventQuery(event);
    if (r == cu::CUDA_SUCCESS) return Status::ok();
    if (r == cu::CUDA_ERROR_NOT_READY) return Status(StatusCode::kInProgress, fmt::format("{} still running", what));
    return cuda_error(*driver, r, "cuEventQuery", what);
  }
};

class CompletedCopy final : public AsyncCopy {
 public:
  Status test() override { return Status::ok(); }
  Status wait(Duration /*timeout*/) override { return Status::ok(); }
  void on_done(std::function<void()> fn) override { fn(); }
};

/// The process's one watcher (all domains share it): polls, every kErrorPoll while any
/// are pending, the events of copies whose on_done is still to be called, and ends
/// those whose event reports an error (or completion the host function has not yet
/// reported); and destroys events released on the host-function thread. Its thread
/// starts with the first such copy, sleeps on a condition variable while there is
/// nothing to do, and lives as long as the process (so no copy can outlive it).
class CompletionWatcher {
 public:
  static CompletionWatcher& instance() {
    static auto* watcher = new CompletionWatcher();  // never destroyed: see above
    return *watcher;
  }

  void watch(std::shared_ptr<CopyState> state, std::shared_ptr<CopyEvent> event, std::string what) {
    std::lock_guard lock(mu_);
    const bool was_idle = pending_.empty() && retired_.empty();
    pending_.push_back({std::move(state), std::move(event), std::move(what)});
    start_locked();
    if (was_idle) cv_.notify_all();  // a busy watcher finds it at its next poll
  }

  void retire(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event, std::shared_ptr<const void> hold) {
    std::lock_guard lock(mu_);
    retired_.push_back({&driver, ctx, event, std::move(hold)});
    start_locked();
    cv_.notify_all();
  }

 private:
  struct Pending {
    std::shared_ptr<CopyState> state;
    std::shared_ptr<CopyEvent> event;
    std::string what;
  };
  struct Retired {
    const CudaDriver* driver;
    cu::CUcontext ctx;
    cu::CUevent event;
    std::shared_ptr<const void> context_hold;  // released once the event is destroyed
  };

  CompletionWatcher() = default;

  void start_locked() {
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
  }

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return !pending_.empty() || !retired_.empty(); });
      if (retired_.empty()) cv_.wait_for(lock, kErrorPoll, [this] { return !retired_.empty(); });
      std::vector<Retired> retired = std::exchange(retired_, {});
      std::vector<Pending> batch = std::exchange(pending_, {});
      lock.unlock();
      for (const Retired& r : retired) destroy_event(*r.driver, r.ctx, r.event);
      retired.clear();  // the contexts' holds, after their events
      std::vector<Pending> still_running;
      for (Pending& p : batch) {
        if (p.state->has_ended()) continue;
        Status s = p.event->query(p.what);
        if (s.code() == StatusCode::kInProgress) {
          still_running.push_back(std::move(p));
          continue;
        }
        if (!s.is_ok()) REMORA_LOG(kWarn, "{}", s.message());
        end_by_query(*p.state, std::move(s));
      }
      batch.clear();  // destroys the events nobody else holds, here, outside the lock
      lock.lock();
      for (Pending& p : still_running) pending_.push_back(std::move(p));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  std::vector<Pending> pending_;
  std::vector<Retired> retired_;
};

void retire_event(const CudaDriver& driver, cu::CUcontext ctx, cu::CUevent event,
                  std::shared_ptr<const void> context_hold) {
  CompletionWatcher::instance().retire(driver, ctx, event, std::move(context_hold));
}

class CudaCopy final : public AsyncCopy {
 public:
  CudaCopy(std::shared_ptr<CopyState> state, std::shared_ptr<CopyEvent> event, std::string what,
           std::chrono::microseconds spin)
      : state_(std::move(state)), event_(std::move(event)), what_(std::move(what)), spin_(spin) {}

  Status test() override {
    {
      std::lock_guard lock(state_->mu);
      if (state_->ended) return state_->result;
    }
    return event_->query(what_);
  }

  /// Returns when the copy has ended and on_done's call, if one is registered, has
  /// returned.
  Status wait(Duration timeout) override {
    if (timeout <= Duration::zero()) return test();  // kDefaultTimeout too: a domain has no context default
    // Past a year is forever (and keeps now + timeout from overflowing).
    const bool forever = timeout >= std::chrono::hours(24 * 365);
    const Clock::time_point deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
    for (;;) {
      {
        std::unique_lock lock(state_->mu);
        const Clock::time_point now = Clock::now();
        const Clock::time_point slice_end = deadline - now > kErrorPoll ? now + kErrorPoll : deadline;
        state_->cv.wait_until(lock, slice_end, [this] { return state_->reported; });
        if (state_->reported) return state_->result;
      }
      // The host function never comes after a context-wide error. With an on_done
      // registered the watcher ends the copy (and calls it); without one, end it here.
      // (Ended but not reported: another thread is in on_done's call; wait for it.)
      Status s = event_->query(what_);
      if (s.code() != StatusCode::kInProgress && state_->unwatched()) {
        end_by_query(*state_, std::move(s));
        std::lock_guard lock(state_->mu);
        return state_->result;
      }
      if (Clock::now() >= deadline) {
        return Status(StatusCode::kTimeout,
                      fmt::format("{} still running after {} ms", what_,
                                  std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
      }
    }
  }

  void on_done(std::function<void()> fn) override {
    // Once the function is registered, the host function's thread may end the copy and
    // call it, and the function may destroy this copy: from there on, only these copies
    // of its members are used (a use after free corrupted the heap: OnDoneMayDestroyItsCopy).
    const std::shared_ptr<CopyState> state = state_;
    const std::shared_ptr<CopyEvent> event = event_;
    const std::string what = what_;
    const std::chrono::microseconds spin = spin_;
    {
      std::unique_lock lock(state->mu);
      if (state->ended) {
        lock.unlock();
        fn();
        return;
      }
      state->fn = std::move(fn);
    }
    // Ended on the device but not yet reported by the host function: end it here, so
    // the function runs at once, as for a copy test() already calls done. (Should the
    // host function get there first, it makes the call instead: still exactly one.)
    // A small copy is polled for a few microseconds first (spin, track_copy_end).
    Status s = event->query(what);
    for (const Clock::time_point until = Clock::now() + spin;
         s.code() == StatusCode::kInProgress && Clock::now() < until;) {
      s = event->query(what);
    }
    if (s.code() != StatusCode::kInProgress) {
      end_by_query(*state, std::move(s));
      return;
    }
    CompletionWatcher::instance().watch(state, event, what);
  }

 private:
  std::shared_ptr<CopyState> state_;
  std::shared_ptr<CopyEvent> event_;
  std::string what_;
  std::chrono::microseconds spin_;
};

}  // namespace

Result<std::unique_ptr<AsyncCopy>> track_copy_end(const CudaDriver& driver, cu::CUcontext ctx, cu::CUstream stream,
                                                  cu::CUstream notify, std::string what,
                                                  std::shared_ptr<const void> context_hold,
                                                  std::chrono::microseconds spin) {
  cu::CUevent raw_event = nullptr;
  cu::CUresult r = driver.cuEventCreate(&raw_event, cu::CU_EVENT_DISABLE_TIMING);
  if (r != cu::CUDA_SUCCESS) return cuda_error(driver, r, "cuEventCreate", what);
  auto event = std::make_shared<CopyEvent>(&driver, ctx, raw_event, std::move(context_hold));
  r = driver.cuEventRecord(raw_event, stream);
  if (r != cu::CUDA_SUCCESS) return cuda_error(driver, r, "cuEventRecord", what);
  r = driver.cuStreamWaitEvent(notify, raw_event, 0);
  if (r != cu::CUDA_SUCCESS) return cuda_error(driver, r, "cuStreamWaitEvent", what);
  auto state = std::make_shared<CopyState>();
  state->in_flight_id = InFlight::instance().add(state);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): a number, not a pointer
  r = driver.cuLaunchHostFunc(notify, &on_stream_done, reinterpret_cast<void*>(state->in_flight_id));
  if (r != cu::CUDA_SUCCESS) {
    InFlight::instance().take(state->in_flight_id);
    return cuda_error(driver, r, "cuLaunchHostFunc", what);
  }
  return std::unique_ptr<AsyncCopy>(
      std::make_unique<CudaCopy>(std::move(state), std::move(event), std::move(what), spin));
}

std::unique_ptr<AsyncCopy> completed_copy() { return std::make_unique<CompletedCopy>(); }

}  // namespace remora::device
