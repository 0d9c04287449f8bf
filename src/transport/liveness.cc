// transport/liveness.cc — the heartbeat tick and TCP_USER_TIMEOUT (see liveness.h).
#include "transport/liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <fmt/format.h>

#include "net/socket.h"

namespace remora::detail {

namespace {
// Ticks per timeout: the verdict comes at most one period after the timeout, and a
// live peer has about three periods to answer a probe.
constexpr uint32_t kTicksPerTimeout = 4;
}  // namespace

Liveness::Liveness(Owner& owner, std::shared_ptr<engine::ProgressEngine> engine, uint32_t timeout_ms, bool probes,
                   std::string peer)
    : owner_(owner),
      engine_(std::move(engine)),
      timeout_ms_(timeout_ms),
      probes_(probes),
      peer_(std::move(peer)),
      timeout_(std::chrono::milliseconds(timeout_ms)),
      period_(std::chrono::milliseconds(std::max<uint32_t>(timeout_ms / kTicksPerTimeout, 1))) {}

void Liveness::start(std::weak_ptr<const void> anchor) {
  // Without probes silence proves nothing (an idle peer with a receive posted here is
  // silent too): only TCP_USER_TIMEOUT watches such a peer.
  if (!probes_) return;
  anchor_ = std::move(anchor);
  last_heard_ = engine::Clock::now();
  arm(last_heard_ + period_);
}

void Liveness::arm(engine::Clock::time_point when) {
  engine_->add_timer(when, [anchor = anchor_, this] {
    if (auto alive = anchor.lock()) tick();
  });
}

void Liveness::tick() {
  if (stopped_) return;
  const auto now = engine::Clock::now();
  const bool idle = !owner_.awaiting_peer();
  if (heard_ != seen_ || owner_.reconnecting() || (idle && !owner_.watches_path())) {
    // Heard from the peer, or nothing to hear: silence counts from here.
    seen_ = heard_;
    last_heard_ = now;
  } else if (idle) {
    // Nothing of this side's outstanding, but the peer may be waiting on this side's
    // control connection: probe it, and report a probe that went unanswered.
    if (now - last_heard_ >= timeout_ / 2 && !probe_outstanding_) {
      probe_outstanding_ = true;
      probe_sent_ = now;
      owner_.send_probe(++probe_seq_);
    } else if (probe_outstanding_ && now - probe_sent_ >= timeout_ / 2 && owner_.path_quiet()) {
      seen_ = heard_;
      last_heard_ = now;
    }
    if (stopped_) return;
  } else if (now - last_heard_ >= timeout_) {
    owner_.read_input();  // what arrived while this process was not running counts
    if (stopped_) return;
    if (heard_ != seen_) {
      seen_ = heard_;
      last_heard_ = now;
    } else {
      stopped_ = true;
      const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_).count();
      if (!owner_.peer_silent(Status(
              StatusCode::kPeerFailed,
              fmt::format("peer {} sent nothing for {} ms while operations were outstanding (REMORA_PEER_TIMEOUT_MS={}"
                          "{}): presumed dead (stopped, or its network is gone)",
                          peer_, silent, timeout_ms_, probes_ ? ", heartbeats unanswered" : "")))) {
        return;
      }
      // The owner connects its control stream again: silence counts from here.
      stopped_ = false;
      seen_ = heard_;
      last_heard_ = now;
    }
  } else if (probes_ && !probe_outstanding_) {
    probe_outstanding_ = true;
    probe_sent_ = now;
    owner_.send_probe(++probe_seq_);
    if (stopped_) return;
  }
  owner_.check_streams(timeout_);
  if (stopped_) return;
  arm(now + period_);
}

uint32_t Liveness::user_timeout_ms(uint32_t peer_timeout_ms) noexcept {
  constexpr uint64_t kMinUserTimeoutMs = 10'000;
  const uint64_t ms = std::max<uint64_t>(uint64_t{peer_timeout_ms} * 3, kMinUserTimeoutMs);
  return static_cast<uint32_t>(std::min<uint64_t>(ms, UINT32_MAX));
}

Status Liveness::set_user_timeout(int fd, uint32_t timeout_ms) {
  const unsigned int ms = timeout_ms;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) != 0) {
    return net::errno_status(errno, "TCP_USER_TIMEOUT");
  }
  return Status::ok();
}

}  // namespace remora::detail
