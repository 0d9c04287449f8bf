// transport/resume.cc — resuming the control stream (docs/protocol.md "Resuming the
// control stream"; docs/rails.md). Each side counts the bytes of the other's control
// stream it handled (whole frames) and says so in HANDLED frames; what it sent stays in
// a replay buffer until the peer handled it. When the control connection resets, the
// connecting side connects it again through the peer's listener (a resume HELLO with the
// endpoint's id and token, authenticated and sealed as the first); each side then sends
// HANDLED (RESUMED) with its count, and the other replays from there. No frame is handled
// twice and none is skipped, so every operation completes exactly once.
#include <algorithm>

#include <fmt/format.h>

#include "net/io.h"
#include "transport/endpoint_core.h"

namespace remora::detail {

bool EndpointCore::can_resume() const noexcept {
  if (!resume_ok_ || shm_ != nullptr || peer_goodbye_.has_value() || state_ != State::kActive) return false;
  if (resumer_) return true;
  return rejoin_token_ != 0 && listening_ && listening_();
}

bool EndpointCore::begin_resume(const Status& why) {
  if (resuming_since_) return true;  // broken already: an attempt is on its way
  if (!can_resume()) return false;
  engine_->remove(control_.get(), control_hid_);
  control_.reset();
  // A frame cut off by the break is read again whole from the replay.
  rx_begin_ = rx_end_ = 0;
  ctl_blocked_ = false;
  ctl_watch_out_ = false;
  ctl_hup_ = false;
  ctl_pre_.clear();
  ctl_pre_off_ = 0;
  resume_handshake_ = false;
  resuming_since_ = std::chrono::steady_clock::now();
  resume_why_ = why.message();
  REMORA_LOG(kWarn, "endpoint {} to {}: the control stream broke ({}); {} (at most {} ms)",
             static_cast<uint64_t>(params_.id), params_.peer, why.message(),
             resumer_ ? "connecting it again" : "waiting for the peer to connect it again",
             std::chrono::duration_cast<std::chrono::milliseconds>(resume_limit()).count());
  maybe_resume();
  return true;
}

bool EndpointCore::peer_silent(const Status& why) {
  // A silent peer whose kernel does not acknowledge the control connection's bytes may
  // be alive behind another rail (the control's link went down): where the endpoint
  // resumes, try the other paths for a short while before the verdict stands. With one
  // rail there is no other path to try: the verdict stands at once, as it always did.
  if (resume_quiet_path(why, /*idle=*/false)) return true;
  fail_locked(why);
  return false;
}

bool EndpointCore::watches_path() const {
  return resumer_ && rails_.size() > 1 && state_ == State::kActive && control_.valid() && !resuming_since_ &&
         can_resume();
}

bool EndpointCore::path_quiet() {
  // Found while idle: the peer, if it was waiting on this side, has waited since the
  // probe at least, and waits for this side to connect again (it cannot).
  // Nothing of this side's waits: other paths are tried as long as after a reset.
  return watches_path() &&
         resume_quiet_path(
             Status(StatusCode::kPeerFailed,
                    fmt::format("peer {} did not answer a heartbeat for {} ms (REMORA_PEER_TIMEOUT_MS={})",
                                params_.peer, config_.peer_timeout_ms / 2, config_.peer_timeout_ms)),
             /*idle=*/true);
}

bool EndpointCore::resume_quiet_path(const Status& why, bool idle) {
  if (state_ != State::kActive || !control_.valid() || resuming_since_ || rails_.size() <= 1 || !can_resume()) {
    return false;
  }
  std::optional<std::string> stalled = control_path_stalled();
  if (!stalled) return false;
  silent_why_ = why.message();
  resume_stalled_ = true;
  resume_idle_ = idle;
  quiet_path_.reset();
  auto local = net::local_address(control_.get());
  auto peer = net::peer_address(control_.get());
  if (local && peer) quiet_path_ = QuietPath{*local, *peer};
  if (begin_resume(Status(StatusCode::kTimeout, *stalled))) return true;
  resume_stalled_ = resume_idle_ = false;
  return false;
}

std::optional<std::string> EndpointCore::control_path_stalled() const {
  // A zero window whose probes are answered is the peer's kernel saying its process
  // does not read (stopped): that is the peer, not the path.
  return net::tcp_path_stalled(control_.get(), config_.peer_timeout_ms / 2);
}

std::chrono::steady_clock::duration EndpointCore::stall_limit() const noexcept {
  // At least 2 s: one whole connect attempt along another rail (bounded by 2 s).
  const auto half = std::max<std::chrono::steady_clock::duration>(
      std::chrono::milliseconds(config_.peer_timeout_ms / 2), std::chrono::seconds(2));
  return resumer_ ? half : 2 * half;
}

bool EndpointCore::orphaned() const {
  if (resumer_ || resume_stalled_) return false;
  for (uint16_t i = 0; i < data_watch_.size(); ++i) {
    if (!chunks_.retired(i) && chunks_.fd(i) >= 0 && !net::tcp_peer_ended(chunks_.fd(i))) return false;
  }
  return true;
}

std::chrono::steady_clock::duration EndpointCore::orphan_limit() const noexcept {
  return std::max<std::chrono::steady_clock::duration>(std::chrono::milliseconds(config_.peer_timeout_ms),
                                                       std::chrono::seconds(1));
}

std::chrono::steady_clock::duration EndpointCore::resume_limit() const {
  if (resume_stalled_) return resume_idle_ ? reconnect_limit() : stall_limit();
  return orphaned() ? orphan_limit() : reconnect_limit();
}

void EndpointCore::maybe_resume() {
  if (!resumer_ || !resuming_since_ || resume_in_flight_ || state_ != State::kActive) return;
  resume_in_flight_ = true;
  resumer_(resume_attempts_++, resume_stalled_ && quiet_path_ ? &*quiet_path_ : nullptr);
}

void EndpointCore::check_resume() {
  if (!resuming_since_) {
    // A tick: acknowledge what came since the last HANDLED, and watch the replay buffer.
    if (resume_ok_ && rx_unacked_) {
      acknowledge_handled();
      flush_control();
    }
    // Nothing sent for a whole tick: the spare buffers go back.
    if (tx_high_ == tx_high_at_tick_ && !spare_.empty()) {
      spare_ = {};
      spare_bytes_ = 0;
    }
    tx_high_at_tick_ = tx_high_;
    return;
  }
  const bool orphan = orphaned();
  const auto limit = resume_limit();
  if (std::chrono::steady_clock::now() - *resuming_since_ < limit) {
    maybe_resume();
    return;
  }
  const std::string last = !resume_error_.empty() ? resume_error_ : resume_in_flight_ ? "no answer yet" : "";
  if (resume_stalled_) {
    fail_locked(Status(StatusCode::kPeerFailed,
                       fmt::format("{}; its control connection had {}, and no other path {} within {} ms{}",
                                   silent_why_, resume_why_, resumer_ ? "reached it" : "was connected from it",
                                   std::chrono::duration_cast<std::chrono::milliseconds>(limit).count(),
                                   last.empty() ? "" : " (the last attempt: " + last + ")")));
    return;
  }
  if (orphan) {
    // A live peer's connecting side tries at once (it saw the same break): a peer that
    // ended every connection and did not try within the peer timeout has ended.
    fail_locked(Status(
        StatusCode::kPeerFailed,
        fmt::format("the control stream to {} broke ({}), the peer ended every data stream too, and "
                    "it did not connect again within {} ms (REMORA_PEER_TIMEOUT_MS, at least 1 s): its "
                    "process has most likely ended",
                    params_.peer, resume_why_, std::chrono::duration_cast<std::chrono::milliseconds>(limit).count())));
    return;
  }
  fail_locked(
      Status(StatusCode::kPeerFailed, fmt::format("the control stream to {} broke ({}) and was not connected again {}",
                                                  params_.peer, resume_why_, reconnect_limit_words(last))));
}

bool EndpointCore::resume_wanted(uint64_t token) const noexcept {
  return rejoin_token_ != 0 && token == rejoin_token_ && state_ == State::kActive && resume_ok_ && shm_ == nullptr &&
         !peer_goodbye_.has_value();
}

void EndpointCore::resume_accept(net::Fd fd) {
  if (!resume_wanted(rejoin_token_)) return;  // the socket closes
  // The peer saw the break first: so does this side, now.
  if (!resuming_since_ &&
      !begin_resume(Status(StatusCode::kPeerFailed, "the peer connected it again before this side saw it break"))) {
    return;
  }
  install_control(std::move(fd));
}

void EndpointCore::resume_done(net::Fd fd, const Status& why, bool refused) {
  resume_in_flight_ = false;
  if (state_ != State::kActive || !resuming_since_) return;  // the socket closes
  if (!why.is_ok()) {
    resume_error_ = why.message();
    REMORA_LOG(kDebug, "endpoint {} to {}: the control stream not connected again yet: {}",
               static_cast<uint64_t>(params_.id), params_.peer, why.message());
    // The peer answered and said no, or nothing listens there any more (its process or
    // its listener is gone): no later attempt can do better.
    if (refused || why.code() == StatusCode::kProtocol || why.code() == StatusCode::kAccessDenied) {
      fail_locked(Status(StatusCode::kPeerFailed,
                         fmt::format("the control stream to {} broke ({}) and could not be connected again: {}",
                                     params_.peer, resume_why_, why.message())));
    }
    return;
  }
  install_control(std::move(fd));
}

void EndpointCore::install_control(net::Fd fd) {
  control_ = std::move(fd);
  auto hid = engine_->add(control_.get(), &control_handler_, kControlEvents);
  if (!hid) {
    fail_locked(hid.status().with_context("the resumed control stream"));
    return;
  }
  control_hid_ = *hid;
  if (Status s = Liveness::set_user_timeout(control_.get(), Liveness::user_timeout_ms(config_.peer_timeout_ms)); !s) {
    REMORA_LOG(kWarn, "endpoint to {}: {}", params_.peer, s.message());
  }
  resuming_since_.reset();
  resume_stalled_ = resume_idle_ = false;
  liveness_.heard();  // the peer's (authenticated) resumption: silence counts from here
  resume_error_.clear();
  resume_handshake_ = true;
  ++control_resumed_;
  REMORA_LOG(kWarn, "endpoint {} to {}: the control stream is connected again", static_cast<uint64_t>(params_.id),
             params_.peer);
  // First on the new connection: where the peer's replay starts. Not counted.
  const wire::HandledFrame handled{.bytes = rx_handled_, .resumed = true};
  ctl_pre_.resize(wire::encoded_size(handled));
  wire::encode(handled, ctl_pre_);
  ctl_pre_off_ = 0;
  flush_control();
  if (state_ == State::kActive) read_control();  // what the peer sent before the registration
}

void EndpointCore::handle_handled(const wire::HandledFrame& f) {
  if (!resume_ok_) {
    protocol_error("HANDLED on an endpoint that does not resume its control stream");
    return;
  }
  // A HANDLED sent before a break that the peer had not seen handled comes again in the
  // peer's replay, after its HANDLED (RESUMED) said more: a stale count, not an error.
  if (!f.resumed && f.bytes <= peer_handled_ && f.bytes <= tx_high_) return;
  if (f.bytes > tx_high_ || f.bytes < replay_base_) {
    protocol_error(
        fmt::format("HANDLED says {} bytes of this side's control stream were handled; it sent {} and "
                    "keeps those from {} on",
                    f.bytes, tx_high_, replay_base_));
    return;
  }
  peer_handled_ = std::max(peer_handled_, f.bytes);
  // The peer has what was handled: forget it (whole buffers; the last may stay partly).
  while (!replay_.empty() && replay_base_ + replay_.front().size() <= peer_handled_) {
    replay_base_ += replay_.front().size();
    keep_spare(std::move(replay_.front()));
    replay_.pop_front();
  }
  if (!f.resumed) return;
  // The peer's answer on a resumed connection: send again what it did not handle, the
  // sent buffers' part first, then the output queue from that point on.
  resume_handshake_ = false;
  chunks_.restart_progress_clocks();  // no stream could be judged while the control stream was down
  uint64_t at = replay_base_;
  for (const std::vector<std::byte>& sent : replay_) {
    const uint64_t end = at + sent.size();
    if (end > f.bytes) {
      const size_t from = f.bytes > at ? static_cast<size_t>(f.bytes - at) : 0;
      ctl_pre_.insert(ctl_pre_.end(), sent.begin() + static_cast<ptrdiff_t>(from), sent.end());
    }
    at = end;
  }
  ctl_tx_off_ = f.bytes > ctl_tx_base_ ? static_cast<size_t>(f.bytes - ctl_tx_base_) : 0;
  flush_control();
}

void EndpointCore::count_handled(size_t size, bool is_handled_frame) {
  rx_handled_ += size;
  if (!is_handled_frame) rx_unacked_ = true;
}

void EndpointCore::acknowledge_handled() {
  if (!resume_ok_) return;
  append_frame(wire::HandledFrame{.bytes = rx_handled_});
  rx_acked_ = rx_handled_;
  rx_unacked_ = false;
}

namespace {
// The spare buffers are a max-heap by capacity: take_spare() hands out the largest.
bool smaller_capacity(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  return a.capacity() < b.capacity();
}
}  // namespace

void EndpointCore::keep_spare(std::vector<std::byte>&& buffer) {
  const size_t capacity = buffer.capacity();
  if (capacity == 0 || capacity > kSpareBytes - spare_bytes_ || spare_.size() == kSpareBuffers) return;  // freed
  buffer.clear();
  spare_bytes_ += capacity;
  spare_.push_back(std::move(buffer));
  std::push_heap(spare_.begin(), spare_.end(), smaller_capacity);
}

std::vector<std::byte> EndpointCore::take_spare() {
  if (spare_.empty()) return {};
  std::pop_heap(spare_.begin(), spare_.end(), smaller_capacity);
  std::vector<std::byte> buffer = std::move(spare_.back());
  spare_.pop_back();
  spare_bytes_ -= buffer.capacity();
  return buffer;
}

void EndpointCore::control_output_sent() {
  const size_t size = ctl_tx_.size();
  ctl_tx_base_ += size;
  ctl_tx_off_ = ctl_tx_offered_ = 0;
  if (!keeps_replay()) {
    ctl_tx_.clear();
    replay_.clear();
    replay_base_ = ctl_tx_base_;
    return;
  }
  if (size > 0 && size <= kReplayCopy && !replay_.empty() && replay_.back().size() + size <= kReplayBuffer) {
    // Small frames (a message's, a reply's) are copied behind the last buffer, which
    // costs less than a buffer of their own each.
    replay_.back().insert(replay_.back().end(), ctl_tx_.begin(), ctl_tx_.end());
    ctl_tx_.clear();
  } else if (size > 0) {
    replay_.push_back(std::move(ctl_tx_));
    ctl_tx_ = take_spare();
  }
  if (ctl_tx_base_ - replay_base_ > kReplayLimit) {
    fail_locked(Status(StatusCode::kProtocol,
                       fmt::format("peer {} acknowledged none of the last {} bytes sent on the control stream (HANDLED "
                                   "comes every {} KiB handled): it cannot be resumed, and is not working",
                                   params_.peer, ctl_tx_base_ - replay_base_, kAckEvery >> 10)));
  }
}

}  // namespace remora::detail
