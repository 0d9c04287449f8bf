// transport/notifications.h — the notifications delivered to one endpoint (each from
// a put the peer sent with PutOptions::notify, served by the RMA target): the queue
// the application polls or waits on, the threads waiting for one, the handler that
// takes them instead once set (run outside the lock, in delivery order, one batch at
// a time), and the served puts that promised one (they count against the queue's
// bound from the moment they are admitted, before their data is in).
//
// It knows nothing of puts or frames: the RMA target checks the bound, promises and
// delivers; the endpoint's public calls poll, wait and set the handler. deliver, full,
// promise, settle, take and fail run with the progress lock held; poll, wait,
// set_handler and run_handler take it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/progress.h"
#include "engine/request_state.h"
#include "remora/endpoint.h"

namespace remora::detail {

class Notifications {
 public:
  /// The endpoint the notifications belong to.
  class Owner {
   public:
    virtual ~Owner() = default;
    /// ok while the endpoint is active; else why not (a wait returns it).
    virtual Status inactive() const = 0;
    /// Call run_handler() soon, outside the lock, keeping the owner alive until then.
    virtual void run_handler_later() = 0;
    /// deliver() just woke a thread waiting for a notification (it usually answers at
    /// once: the endpoint may hold its replies back to travel with that answer).
    virtual void waiter_woken() = 0;
  };

  /// `peer` names the other side in error messages.
  Notifications(Owner& owner, std::shared_ptr<engine::ProgressEngine> engine, std::string peer, EndpointStats& stats);

  // --- lock held --------------------------------------------------------------
  /// True when `max` notifications are queued or promised: a notified put is refused.
  bool full(uint64_t max) const noexcept { return queue_.size() + handler_queue_.size() + promised_ >= max; }
  /// A served put will deliver one (or settle) once its data is in; or a place given to
  /// the peer for a PLACED frame, settled when one comes.
  void promise() noexcept { ++promised_; }
  /// A promising put is finished; it delivers or not.
  void settle() noexcept { --promised_; }
  /// Queues `n` for the handler, a waiting thread or a later poll; true when a waiting
  /// thread was woken for it.
  bool deliver(const Notification& n);
  /// The oldest queued notification, taken out; nullopt if none (or a handler takes them).
  std::optional<Notification> take();
  /// A thread waits in wait(): the endpoint then awaits the peer (its liveness watch
  /// counts it, as it counts a posted receive).
  bool waited_for() const noexcept { return !waiters_.empty(); }
  /// The endpoint failed: nothing promised will come; waiting threads wake and see why.
  void fail();

  // --- take the lock ------------------------------------------------------------
  /// Makes progress once, then take().
  std::optional<Notification> poll();
  /// The oldest notification, waiting up to `timeout` for one; kTimeout, or why the
  /// endpoint is not active.
  Result<Notification> wait(Duration timeout);
  /// From now on `handler` (outside the lock, in order) takes every notification,
  /// those queued first; an empty one puts what it had not run yet back in the queue.
  void set_handler(std::function<void(const Notification&)> handler);
  /// Runs the handler on what is queued for it, until nothing is (see Owner).
  void run_handler();

 private:
  using Handler = std::function<void(const Notification&)>;

  Owner& owner_;
  std::shared_ptr<engine::ProgressEngine> engine_;
  std::string peer_;
  EndpointStats& stats_;
  std::deque<Notification> queue_;
  // Served puts in flight that will queue one, and places the peer holds for its PLACED
  // frames (direct mappings: EndpointCore::credit_placed).
  uint64_t promised_ = 0;
  /// A thread in wait(): deliver() puts the notification straight into its `slot`
  /// (the queue is empty while anyone waits) and completes `state`, so the woken
  /// thread returns it without taking the lock again.
  struct Waiter {
    std::shared_ptr<RequestState> state;
    std::optional<Notification>* slot = nullptr;
  };
  std::deque<Waiter> waiters_;
  /// The states of waiters deliver() completed, for later waits to use again once
  /// nothing else holds them (a ping-pong of notified puts waits once per round trip).
  SpareStates<2> spare_waiters_;
  std::shared_ptr<Handler> handler_;
  std::deque<Notification> handler_queue_;
  bool delivering_ = false;  // a thread runs the handler (outside the lock)
};

}  // namespace remora::detail
