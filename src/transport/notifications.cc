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
  queue_.push_back(n);
  if (waiters_.empty()) return false;
  waiters_.front()->complete(Status::ok(), 0);
  waiters_.pop_front();
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
  for (auto& w : waiters_) w->complete(Status::ok(), 0);
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
  std::shared_ptr<RequestState> waiter;
  for (;;) {
    {
      engine::ProgressEngine::Guard guard(*engine_);
      // The last round's waiter completed (deliver() completed it under this lock and
      // let it go): kept for the next wait, unless something else still holds it.
      if (waiter != nullptr && waiter->done() && waiter.use_count() == 1) spare_waiter_ = std::move(waiter);
      waiter.reset();
      if (std::optional<Notification> n = take()) return *n;
      if (Status down = owner_.inactive(); !down) return down;
      if (spare_waiter_ != nullptr) {
        waiter = std::move(spare_waiter_);
        waiter->rearm();
      } else {
        waiter = RequestState::make(engine_, Tag{});
      }
      waiters_.push_back(waiter);
    }
    Duration left = kForever;
    if (!forever) {
      const auto now = engine::Clock::now();
      left = now >= deadline ? Duration::zero() : std::chrono::duration_cast<Duration>(deadline - now);
    }
    Status st = detail::make_request(waiter).wait(left);
    if (st.code() == StatusCode::kTimeout) {
      engine::ProgressEngine::Guard guard(*engine_);
      std::erase(waiters_, waiter);
      if (std::optional<Notification> n = take()) return *n;
      return Status(StatusCode::kTimeout, "no notification from " + peer_ + " within the timeout");
    }
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
