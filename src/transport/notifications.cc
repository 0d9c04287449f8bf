// transport/notifications.cc — see notifications.h.
#include "transport/notifications.h"

#include <algorithm>
#include <utility>

namespace remora::detail {

Notifications::Notifications(Owner& owner, std::shared_ptr<engine::ProgressEngine> engine, std::string peer,
                             EndpointStats& stats)
    : owner_(owner), engine_(std::move(engine)), peer_(std::move(peer)), stats_(stats) {}

bool Notifications::deliver(const Notification& n) {
  ++stats_.notifications;
  if (handler_) {
    handler_queue_.push_back(n);
    if (!delivering_) owner_.run_handler_later();
    return false;
  }
  if (waiters_.empty()) {
    queue_.push_back(n);
    return false;
  }
  Waiter w = std::move(waiters_.front());
  waiters_.pop_front();
  *w.slot = n;
  w.state->complete(Status::ok(), 0);
  spare_waiters_.keep(std::move(w.state));
  owner_.waiter_woken();
  return true;
}

std::optional<Notification> Notifications::take() {
  if (queue_.empty()) return std::nullopt;
  Notification n = queue_.front();
  queue_.pop_front();
  return n;
}

void Notifications::fail() {
  promised_ = 0;
  for (auto& w : waiters_) w.state->complete(Status::ok(), 0);  // no notification: they see why
  waiters_.clear();
}

std::optional<Notification> Notifications::poll() {
  engine_->try_progress();
  engine::ProgressEngine::Guard guard(*engine_);
  return take();
}

Result<Notification> Notifications::wait(Duration timeout) {
  const bool forever = timeout == kForever;
  const auto deadline = forever ? engine::Clock::time_point::max() : engine::Clock::now() + timeout;
  std::optional<Notification> slot;  // deliver() fills it while this thread is in waiters_
  for (;;) {
    std::shared_ptr<RequestState> waiter;
    {
      engine::ProgressEngine::Guard guard(*engine_);
      if (std::optional<Notification> n = take()) return *n;
      if (Status down = owner_.inactive(); !down) return down;
      waiter = spare_waiters_.take(engine_, Tag{});
      waiters_.push_back(Waiter{.state = waiter, .slot = &slot});
    }
    Duration left = kForever;
    if (!forever) {
      const auto now = engine::Clock::now();
      left = now >= deadline ? Duration::zero() : std::chrono::duration_cast<Duration>(deadline - now);
    }
    Status st = detail::make_request(waiter).wait(left);
    // Completed: deliver() filled the slot before it completed the state (or fail()
    // left it empty); the completion makes either visible here.
    if (st.is_ok() && slot) return *slot;
    if (st.code() == StatusCode::kTimeout) {
      engine::ProgressEngine::Guard guard(*engine_);
      std::erase_if(waiters_, [&](const Waiter& w) { return w.state == waiter; });
      if (slot) return *slot;  // delivered while the wait gave up
      if (std::optional<Notification> n = take()) return *n;
      return Status(StatusCode::kTimeout, "no notification from " + peer_ + " within the timeout");
    }
    // Woken without one: the endpoint failed (fail()); the next round says why.
  }
}

void Notifications::set_handler(std::function<void(const Notification&)> handler) {
  engine::ProgressEngine::Guard guard(*engine_);
  if (handler) {
    handler_ = std::make_shared<Handler>(std::move(handler));
    handler_queue_.insert(handler_queue_.end(), queue_.begin(), queue_.end());
    queue_.clear();
    if (!handler_queue_.empty()) owner_.run_handler_later();
  } else {
    handler_.reset();
    queue_.insert(queue_.begin(), handler_queue_.begin(), handler_queue_.end());
    handler_queue_.clear();
  }
}

void Notifications::run_handler() {
  for (;;) {
    std::deque<Notification> batch;
    std::shared_ptr<Handler> handler;
    {
      engine::ProgressEngine::Guard guard(*engine_);
      if (delivering_ || !handler_ || handler_queue_.empty()) return;
      delivering_ = true;
      batch.swap(handler_queue_);
      handler = handler_;
    }
    for (const Notification& n : batch) (*handler)(n);
    engine::ProgressEngine::Guard guard(*engine_);
    delivering_ = false;
  }
}

}  // namespace remora::detail
