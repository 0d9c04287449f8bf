// transport/linger.h — an endpoint's lingering close. After Endpoint::close() the
// endpoint has failed (every request completed), but its sockets stay open until
// everything queued on the control socket (frames behind a full socket, then GOODBYE)
// has been sent and the peer has closed each socket too, or the peer took nothing for
// kPatience: an eager send completes once its bytes are copied and a rendezvous send
// once its last chunk is in the kernel, so closing at once (or with unread bytes, which
// resets the connection) could drop messages already reported sent.
//
// Runs under the progress lock. The endpoint routes its sockets' events here
// (progress()) once it has closed; the lingering close ends itself (on_end) when it is
// done, or is stopped (stop()) when the context goes away.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/progress.h"
#include "net/socket.h"
#include "transport/shm_channel.h"

namespace remora::detail {

class LingeringClose : public std::enable_shared_from_this<LingeringClose> {
 public:
  /// How long the peer may take nothing before what is still queued is dropped.
  static constexpr auto kPatience = std::chrono::seconds(10);

  /// A socket and its registration with the engine.
  struct Socket {
    net::Fd fd;  // invalid once the peer's EOF came
    engine::HandlerId hid;
  };

  /// `queued`: the control socket's output queue, of which `sent` bytes were sent.
  /// `on_end` runs once when the linger is over by itself (not after stop()). `shm`: the
  /// endpoint's shared-memory channel, if any (what is queued goes on TCP up to its
  /// switch and into the peer's ring after it; what the peer writes into this side's
  /// ring is read and dropped); the endpoint routes its ring's events here too.
  LingeringClose(std::shared_ptr<engine::ProgressEngine> engine, std::string peer, Socket control,
                 std::vector<Socket> data, std::vector<std::byte> queued, size_t sent, std::function<void()> on_end,
                 std::shared_ptr<ShmChannel> shm = nullptr);
  ~LingeringClose();
  LingeringClose(const LingeringClose&) = delete;
  LingeringClose& operator=(const LingeringClose&) = delete;

  /// Watches the control socket for room and makes the first progress.
  void start();
  /// One of the sockets had an event (or a scheduled continuation came): send what is
  /// queued, shut down, read and drop what the peer still sends.
  void progress();
  /// Ends now: unregisters and closes every socket still open. Idempotent; on_end is
  /// not called.
  void stop();

 private:
  void arm_timer();
  /// stop(), then on_end.
  void finish();

  std::shared_ptr<engine::ProgressEngine> engine_;
  std::string peer_;
  Socket control_;
  std::vector<Socket> data_;
  std::vector<std::byte> queued_;
  size_t sent_ = 0;
  bool shut_ = false;       // everything sent and shutdown(SHUT_WR) done
  bool data_shut_ = false;  // the data streams' shutdown(SHUT_WR) done (after shut_)
  bool stopped_ = false;
  engine::Clock::time_point last_progress_;  // when the peer last took bytes
  std::function<void()> on_end_;
  std::vector<std::byte> scratch_;  // what the peer still sends is read here and dropped
  std::shared_ptr<ShmChannel> shm_;
};

}  // namespace remora::detail
