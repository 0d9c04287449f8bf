// transport/liveness.h — noticing a silent peer: the endpoint's heartbeat and its
// verdict (REMORA_PEER_TIMEOUT_MS, docs/configuration.md).
//
// A connection whose peer stopped (SIGSTOP: its kernel still ACKs) or whose link went
// down looks, to the sockets, like a peer with nothing to say. While anything is
// outstanding on the endpoint in either direction, a tick every quarter of the peer
// timeout checks whether anything arrived since the last tick (heard(): any bytes on
// any of the endpoint's streams). After a silent tick it probes: a HEARTBEAT frame
// on the control stream, which the peer's progress engine answers whatever its
// application is doing. A peer silent for the whole timeout while something is
// outstanding is declared dead (Owner::peer_silent); the endpoint then fails every
// operation through its one failure path. A slow peer answers the probes and is never
// declared dead, however long its transfers take. With nothing outstanding, silence
// is normal and nothing is sent, except by the side that would connect a control stream
// again along another rail (Owner::watches_path), which probes its idle peer every half
// timeout so that a path gone quiet is found while the peer may still be waiting for
// this side. An endpoint that resumes its control stream may take
// a verdict back (Owner::peer_silent answers true): when the control
// connection's own bytes went unacknowledged, its path rather than the peer may be gone,
// and another rail is tried first (transport/resume.cc).
//
// TCP_USER_TIMEOUT (set_user_timeout) is the kernel's backstop: data it cannot get
// acknowledged (a link down) fails the socket. It is longer than the peer timeout
// (user_timeout_ms): on a live but lossy or shaped link, retransmission backoff leaves
// a segment unacknowledged for seconds (measured: 3 MiB messages over an 8 Mbit/s tbf
// link failed with ETIMEDOUT at 1 s), while the heartbeat still gets through.
//
// Runs with the progress lock held, on the engine's timers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/progress.h"
#include "remora/status.h"

namespace remora::detail {

class Liveness {
 public:
  class Owner {
   public:
    virtual ~Owner() = default;
    /// Anything outstanding on the endpoint, in either direction: an operation of
    /// this side's, a request served for the peer, chunks or control bytes queued.
    virtual bool awaiting_peer() const = 0;
    /// Reads whatever the endpoint's sockets hold (before a verdict: this process may
    /// itself have been descheduled while the peer's answers arrived).
    virtual void read_input() = 0;
    /// Queues a HEARTBEAT probe with `seq` on the control stream.
    virtual void send_probe(uint64_t seq) = 0;
    /// The peer is presumed dead: fail the endpoint with `why`, and answer false. True:
    /// the owner took the silence for its control connection's path gone quiet rather
    /// than the peer, and is connecting it again (then reconnecting() is true).
    virtual bool peer_silent(const Status& why) = 0;
    /// The control connection is being connected again (resumption): silence is expected
    /// and judged by the owner's own limit (check_streams), not here.
    virtual bool reconnecting() const { return false; }
    /// Every tick while the peer is alive: a data stream silent for the timeout while
    /// another works may be given up (failover); one blocked on a drained socket is
    /// written again.
    virtual void check_streams(std::chrono::steady_clock::duration /*timeout*/) {}
    /// The owner could connect its control stream again along another path, and would
    /// be the one to do it: then an idle endpoint is watched too. Its peer may have
    /// something for this side that cannot get through (the control connection's link
    /// went down), and only this side can mend that: silence of half the timeout is
    /// probed, and a probe that stays unanswered as long is reported (path_quiet).
    virtual bool watches_path() const { return false; }
    /// An idle endpoint's probe went unanswered for half the timeout: true if the owner
    /// took that for its control connection's path gone quiet (TCP says its bytes went
    /// unacknowledged) and is connecting it again. Silence alone fails nothing while
    /// idle; the resumption fails the endpoint only if no path answers within its bound.
    virtual bool path_quiet() { return false; }
  };

  /// `probes`: the peer advertised the heartbeat capability (an older peer would
  /// refuse the frame); without it only TCP_USER_TIMEOUT watches the peer.
  Liveness(Owner& owner, std::shared_ptr<engine::ProgressEngine> engine, uint32_t timeout_ms, bool probes,
           std::string peer);

  /// Starts ticking. `anchor` is the object this Liveness lives in: a tick after it is
  /// gone does nothing.
  void start(std::weak_ptr<const void> anchor);
  /// No more ticks (the endpoint failed or closed). Idempotent.
  void stop() noexcept { stopped_ = true; }
  /// Bytes arrived from the peer on one of the endpoint's streams. Hot path: a counter.
  void heard() noexcept { ++heard_; }
  /// The peer answered probe `seq`.
  void replied(uint64_t seq) noexcept {
    if (seq == probe_seq_) probe_outstanding_ = false;
  }
  bool probes() const noexcept { return probes_; }
  uint32_t timeout_ms() const noexcept { return timeout_ms_; }

  /// The TCP_USER_TIMEOUT for a peer timeout: three of them, at least 10 s.
  static uint32_t user_timeout_ms(uint32_t peer_timeout_ms) noexcept;
  /// TCP_USER_TIMEOUT of `timeout_ms` on a stream socket: unacknowledged data older
  /// than that (or a zero window never reopened) fails the socket with ETIMEDOUT.
  static Status set_user_timeout(int fd, uint32_t timeout_ms);

 private:
  void arm(engine::Clock::time_point when);
  void tick();

  Owner& owner_;
  std::shared_ptr<engine::ProgressEngine> engine_;
  uint32_t timeout_ms_;
  bool probes_;
  std::string peer_;
  engine::Clock::duration timeout_;
  engine::Clock::duration period_;
  std::weak_ptr<const void> anchor_;
  bool stopped_ = false;
  uint64_t heard_ = 0;
  uint64_t seen_ = 0;  // heard_ at the last tick
  engine::Clock::time_point last_heard_{};
  uint64_t probe_seq_ = 0;
  bool probe_outstanding_ = false;
  engine::Clock::time_point probe_sent_{};
};

}  // namespace remora::detail
