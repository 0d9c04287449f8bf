// remora/request.h — the completion handle of an asynchronous operation.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "remora/status.h"
#include "remora/types.h"

namespace remora {

class Request;
namespace detail {
struct RequestState;
/// The library's way to hand out a Request for an operation's state (engine/request_state.h).
Request make_request(std::shared_ptr<RequestState> state) noexcept;
/// A Request for an operation that succeeded before it was handed out (an eager send, a
/// copy through a mapping): no state of its own is made for it.
Request done_request(size_t bytes, Tag tag) noexcept;
}  // namespace detail

/// Handle to one asynchronous operation (send, recv, ...). Copies share the same
/// operation. Dropping every handle does not cancel the operation; its buffers must
/// stay valid until it completes or its endpoint fails/closes.
///
/// Completion: a send completes when its buffer may be reused (the bytes are in the
/// kernel or copied), not when the peer received them. A recv completes when the
/// whole message is in the buffer.
///
/// Thread safety: wait/test may be called from any thread, concurrently.
class Request {
 public:
  Request() noexcept = default;

  bool valid() const noexcept { return state_ != nullptr; }

  /// Drives progress once. kInProgress while running, else the final status.
  Status test() const;
  /// Waits up to `timeout` (spinning briefly, then blocking in the kernel).
  /// The final status, or kTimeout (the operation goes on; wait again or close the
  /// endpoint to abort it). Without a timeout (kDefaultTimeout) the wait is bounded by
  /// the context's Config::wait_timeout_ms (REMORA_WAIT_TIMEOUT_MS, 5 min by default),
  /// and its kTimeout names that variable; kForever waits without a deadline.
  Status wait(Duration timeout = kDefaultTimeout) const;
  template <typename Rep, typename Period>
  Status wait(std::chrono::duration<Rep, Period> timeout) const {
    return wait(std::chrono::duration_cast<Duration>(timeout));
  }

  bool done() const noexcept;
  /// Bytes sent or received (a recv: the message's length). Valid once done.
  size_t bytes() const noexcept;
  /// Tag of the matched message (recv) or the sent one.
  Tag tag() const noexcept;

  /// Calls `fn` exactly once when the operation has completed (done() is true): at
  /// once, on the calling thread, if it already has; otherwise on the thread that
  /// completes it, which may hold remora's progress lock. So `fn` must be quick, must
  /// not block and must not call remora (write to an eventfd, post to an event loop,
  /// count down). Several functions may be added; each runs once. For event loops
  /// (Python's asyncio awaits Requests this way) and for composing operations
  /// (Endpoint::put_batch). kInvalidArgument on an empty Request (fn is not called).
  Status on_done(std::function<void()> fn) const;

 private:
  friend Status wait_all(std::span<const Request> requests, Duration timeout);
  friend Request detail::make_request(std::shared_ptr<detail::RequestState> state) noexcept;
  friend Request detail::done_request(size_t bytes, Tag tag) noexcept;
  explicit Request(std::shared_ptr<detail::RequestState> state) noexcept;
  std::shared_ptr<detail::RequestState> state_;
  // A done_request's bytes and tag (its state is one shared by all of them).
  size_t done_bytes_ = 0;
  Tag done_tag_{};
};

/// Waits for all requests (up to `timeout` in total). First error wins; kTimeout if
/// any is still running at the deadline. kDefaultTimeout: the default bound of the
/// context of the first request still running (see Request::wait); kForever: none.
Status wait_all(std::span<const Request> requests, Duration timeout = kDefaultTimeout);

}  // namespace remora
