// transport/endpoint.cc — the endpoint: set-up, the public calls' locking and
// admission, the control stream (framing, output, input) and its dispatch of each frame
// to the part or protocol that handles it, the lingering close, the one failure path,
// and the heartbeat's side of it. The protocols are in their own files (messages.cc,
// eager.cc, rendezvous.cc, one_sided.cc, data_streams.cc, same_host_pulls.cc; see
// endpoint_core.h), the parts in theirs.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/checksum.h"
#include "net/io.h"
#include "net/rails.h"
#include "net/seal.h"
#include "transport/endpoint_core.h"

namespace remora {
namespace detail {

using wire::ChunkFrame;
using wire::CreditFrame;
using wire::CtsFrame;
using wire::EagerFrame;
using wire::GoodbyeFrame;
using wire::RtsFrame;

EndpointCore::EndpointCore(std::shared_ptr<engine::ProgressEngine> engine, const Config& config, Params params)
    : engine_(std::move(engine)),
      config_(config),
      params_(std::move(params)),
      chunks_(*this, params_.streams, config_.chunk_bytes, params_.peer) {
  data_watch_.resize(params_.streams);
  for (uint16_t i = 0; i < data_watch_.size(); ++i) data_watch_[i].handler = std::make_unique<DataHandler>(this, i);
  rejoining_.resize(params_.streams, false);
  rejoin_backoff_.resize(params_.streams, RejoinBackoff(std::chrono::milliseconds(config_.peer_timeout_ms)));
  retired_why_.resize(params_.streams);
  ctl_rx_.resize(kControlRxStart);  // grows on the first frame that does not fit (read_control)
  eager_limit_ = std::min<uint64_t>(config_.eager_limit, params_.peer_eager_limit);
  chunks_.set_checksum(checksum_);
  // A chunk's rest goes to a worker when it is worth a hand-over: at least 64 KiB.
  if (params_.stream_workers) chunks_.set_workers(params_.stream_workers.get(), uint64_t{64} << 10);
  tx_credit_ = params_.peer_eager_credit;
  direct_negotiated_ = shm_negotiated() && (params_.peer_capabilities & wire::kCapDirectMap) != 0;
  placed_short_negotiated_ = direct_negotiated_ && (params_.peer_capabilities & wire::kCapPlacedShort) != 0;
}

EndpointCore::~EndpointCore() {
  // Workers may be reading or writing operations' memory, which the members after
  // chunks_ hold: take every stream back from them first.
  chunks_.cancel_jobs();
  paths_.detach_host();
  // Receives still waiting for device copies (the context is going away): now.
  for (auto& [op, why] : staged_failing_) op->req->complete(why, op->in.received);
}

void EndpointCore::set_control(net::Fd fd) { control_ = std::move(fd); }

Status EndpointCore::set_data(uint16_t index, net::Fd fd, std::unique_ptr<StreamIn> in) {
  REMORA_RETURN_IF_ERROR(chunks_.attach(index, std::move(fd)));
  if (in != nullptr) attach_stream_in(index, std::move(in));
  return Status::ok();
}

void EndpointCore::attach_stream_in(uint16_t index, std::unique_ptr<StreamIn> in) {
  if (in->devmem() == nullptr) return;
  in->on_arrival([engine = std::weak_ptr(engine_), anchor = std::weak_ptr(paths_.host_anchor()), index] {
    if (auto e = engine.lock()) {
      e->post([anchor, index] {
        if (auto host = anchor.lock()) static_cast<EndpointCore*>(*host)->on_data_event(index, EPOLLIN);
      });
    }
  });
  chunks_.set_stream_in(index, std::move(in));
}

bool EndpointCore::all_streams_attached() const noexcept { return chunks_.all_attached(); }

Status EndpointCore::activate() {
  if (!control_.valid() || !all_streams_attached()) return Status(StatusCode::kInternal, "activate before all streams attached");
  paths_.settle();
  // Sealed by now on both sides (REMORA_ENCRYPT); kept, as the socket closes before the
  // endpoint's last stats are read.
  if (auto cipher = net::sealed_cipher(control_.get())) encryption_ = std::string(net::cipher_name(*cipher));
  // The control stream is watched for EPOLLOUT only while a send is blocked
  // (watch_control_output). Otherwise, with edge-triggered interest, every arriving
  // frame would also queue an EPOLLOUT report: after a spinning poller has already
  // read the frame directly, the next epoll_wait would still return it, costing the
  // poller a dispatch and one more epoll_wait per frame on a get's critical path.
  auto hid = engine_->add(control_.get(), &control_handler_, ctl_blocked_ ? kControlEvents | EPOLLOUT : kControlEvents);
  if (!hid) return hid.status();
  control_hid_ = *hid;
  ctl_watch_out_ = ctl_blocked_;
  for (uint16_t i = 0; i < data_watch_.size(); ++i) {
    auto dh = engine_->add(chunks_.fd(i), data_watch_[i].handler.get());
    if (!dh) return dh.status();
    data_watch_[i].hid = *dh;
  }
  group_rails();
  // Failover needs a stream to fail over to, and both sides to speak it.
  if (config_.failover && (params_.peer_capabilities & wire::kCapFailover) != 0 && data_watch_.size() >= 2) {
    chunks_.enable_failover();
    // The control stream may be connected again too: both offer it, and heartbeats run
    // (their tick bounds the wait).
    resume_ok_ = (params_.peer_capabilities & wire::kCapResume) != 0 && liveness_.probes();
  }
  state_ = State::kActive;
  start_liveness();
  if (same_host_negotiated()) {
    // Who this side is: a peer on the same host may answer that it can read our memory.
    append_frame(host_frame(/*can_pull=*/false));
    flush_control();
  } else {
    same_host_reason_ = config_.same_host_pulls ? "the peer does not offer same-host pulls (REMORA_SAME_HOST=off there)"
                                                : "REMORA_SAME_HOST=off";
    shm_reason_ = same_host_reason_;
  }
  // Bytes may have arrived before registration; edge-triggered epoll would not report them.
  read_control();
  for (uint16_t i = 0; i < data_watch_.size() && alive(); ++i) read_stream(i);
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

Status EndpointCore::inactive() const {
  if (state_ == State::kActive) return Status::ok();
  return failure_.is_ok() ? Status(StatusCode::kAborted, "endpoint is not active") : failure_;
}

Status EndpointCore::admission() const {
  if (state_ != State::kActive) return inactive();
  const uint64_t outstanding = outstanding_ + initiator_.outstanding();
  if (outstanding >= config_.max_outstanding) {
    return Status(StatusCode::kNoResource, "endpoint has " + std::to_string(outstanding) +
                                               " outstanding operations (REMORA_MAX_OUTSTANDING); wait for some first");
  }
  return Status::ok();
}

void EndpointCore::close(wire::GoodbyeReason reason) {
  engine::ProgressEngine::Guard guard(*engine_);
  keep_arrived_ = false;
  if (state_ == State::kFailed) {
    matcher_.clear_unexpected();
    return;
  }
  if (state_ == State::kActive && control_.valid() && !resuming_since_) {
    // A held PLACED ACK first: the peer's put reached this side before it closed.
    if (reason == wire::GoodbyeReason::kClosed) ack_placed();
    append_frame(GoodbyeFrame{static_cast<uint32_t>(reason)});
    flush_control();
    if (reason == wire::GoodbyeReason::kClosed && state_ == State::kActive) {
      // The sockets are taken out of the endpoint, so fail_locked leaves them open;
      // the control socket's queue goes with them (fail_locked clears what is left).
      std::vector<LingeringClose::Socket> data;
      for (uint16_t i = 0; i < data_watch_.size(); ++i) {
        net::Fd fd = chunks_.take(i);
        if (fd.valid()) data.push_back({std::move(fd), data_watch_[i].hid});
      }
      linger_ = std::make_shared<LingeringClose>(
          engine_, params_.peer, LingeringClose::Socket{std::move(control_), control_hid_}, std::move(data),
          std::move(ctl_tx_), ctl_tx_off_,
          [weak = weak_from_this()] {
            if (auto self = weak.lock()) self->end_linger();
          },
          shm_);
    }
  }
  fail_locked(Status(StatusCode::kAborted, reason == wire::GoodbyeReason::kAborted ? "endpoint aborted locally"
                                                                                     : "endpoint closed locally"));
  if (linger_) linger_->start();
}

void EndpointCore::end_linger() {
  if (!linger_) return;
  linger_->stop();
  linger_.reset();
  notify_closed();
}

void EndpointCore::notify_closed() {
  if (!on_closed_) return;
  // Deferred: we may be inside one of our own handlers.
  auto fn = std::move(on_closed_);
  on_closed_ = nullptr;
  EndpointId id = params_.id;
  engine_->add_timer(engine::Clock::now(), [fn = std::move(fn), id] { fn(id); });
}

bool EndpointCore::closed_by_peer() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return state_ == State::kFailed && peer_goodbye_ == wire::GoodbyeReason::kClosed;
}

bool EndpointCore::peer_said_goodbye() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return peer_goodbye_.has_value();
}

bool EndpointCore::failed() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return state_ == State::kFailed;
}

Status EndpointCore::failure() const {
  engine::ProgressEngine::Guard guard(*engine_);
  return failure_;
}

void EndpointCore::group_rails() {
  rails_.clear();
  stream_rail_.assign(chunks_.streams(), 0);
  // A path is a local address and a peer host: on the listening side every stream
  // comes from another port of the peer, and streams of one path must not count as
  // rails (rate-aware choice, stall verdicts against each other).
  std::vector<std::string> path_peer;  // per rail: the peer host its streams go to
  for (uint16_t i = 0; i < chunks_.streams(); ++i) {
    auto local = net::local_address(chunks_.fd(i));
    auto peer = net::peer_address(chunks_.fd(i));
    const std::string local_text = local ? net::address_text(*local) : "?";
    const std::string peer_host = peer ? net::address_text(*peer) : "?";
    size_t at = 0;
    while (at < rails_.size() && !(rails_[at].local_address == local_text && path_peer[at] == peer_host)) ++at;
    auto it = rails_.begin() + static_cast<ptrdiff_t>(at);
    if (it == rails_.end()) {
      RailStats r;
      r.local_address = local_text;
      r.peer_address = peer ? net::to_string(*peer) : "?";  // the first stream's, with its port
      path_peer.push_back(peer_host);
      r.state = "up";
      for (const auto& [address, name] : rail_interfaces_) {
        if (address == local_text) r.interface = name;
      }
      rails_.push_back(std::move(r));
      it = rails_.end() - 1;
    }
    ++it->streams;
    stream_rail_[i] = static_cast<uint16_t>(it - rails_.begin());
  }
  chunks_.set_stream_paths(stream_rail_);
  // Streams over different paths: give chunks by measured rate. (Streams of one path,
  // as without rails, keep the least-queued choice.)
  chunks_.set_rate_aware(rails_.size() > 1);
  chunks_.set_equal_split(rails_.size() > 1 && config_.rail_split == RailSplit::kEqual);
}

EndpointStats EndpointCore::stats() const {
  engine::ProgressEngine::Guard guard(*engine_);
  EndpointStats st = stats_;
  st.chunks_sent = chunks_.chunks_sent();
  st.chunks_per_stream = chunks_.chunks_per_stream();
  st.rails = rails_;
  for (uint16_t i = 0; i < stream_rail_.size(); ++i) {
    RailStats& r = st.rails[stream_rail_[i]];
    r.bytes_sent += chunks_.bytes_sent(i);
    r.bytes_received += chunks_.bytes_received(i);
    r.chunks_sent += chunks_.chunks_per_stream()[i];
    r.chunks_received += chunks_.chunks_received(i);
  }
  st.rails.insert(st.rails.end(), skipped_rails_.begin(), skipped_rails_.end());
  st.chunks_resent = chunks_.chunks_resent();
  st.streams_retired = chunks_.streams_retired();
  st.streams_rejoined = chunks_.streams_rejoined();
  st.worker_jobs = chunks_.worker_jobs();
  st.worker_bytes = chunks_.worker_bytes();
  st.worker_send_jobs = chunks_.worker_send_jobs();
  st.worker_send_bytes = chunks_.worker_send_bytes();
  st.control_resumed = control_resumed_;
  st.failover = chunks_.failover();
  for (uint16_t i = 0; i < stream_rail_.size(); ++i) {
    if (chunks_.retired(i)) ++st.rails[stream_rail_[i]].streams_retired;
  }
  for (uint16_t i = 0; i < stream_rail_.size(); ++i) {
    RailStats& r = st.rails[stream_rail_[i]];
    if (r.state != "up" || r.streams == 0 || r.streams_retired != r.streams) continue;
    r.state = "down";
    r.reason = retired_why_[i];
    if (rejoiner_) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(rejoin_backoff_[i].wait()).count();
      r.reason += fmt::format("; connected again when it works (tried every {} ms)", ms);
    }
  }
  st.chunks_pulled = chunks_.chunks_pulled();
  st.bytes_pulled = chunks_.bytes_pulled();
  st.huge_pages_promoted = chunks_.huge_pages_promoted();
  st.same_host_reason = chunks_.pull_rx() ? std::string() : same_host_reason_;
  st.encryption = encryption_;
  if (control_.valid()) {
    if (auto local = net::local_address(control_.get())) st.control_address = net::to_string(*local);
  }
  st.shm_reason = st.shm_tx && st.shm_rx ? std::string() : shm_reason_;
  return st;
}

// ---------------------------------------------------------------------------
// Failure
// ---------------------------------------------------------------------------

void EndpointCore::protocol_error(std::string message) {
  Status s(StatusCode::kProtocol, "peer " + params_.peer + " violated the protocol: " + std::move(message));
  REMORA_LOG(kWarn, "{}", s.message());
  fail_locked(s);
}

void EndpointCore::fail_locked(const Status& why) {
  if (state_ == State::kFailed) {
    if (linger_) end_linger();  // the context is going away: stop lingering
    return;
  }
  bool was_setup = state_ == State::kSetup;
  state_ = State::kFailed;
  liveness_.stop();
  failure_ = why;
  if (!was_setup) REMORA_LOG(kInfo, "endpoint {} to {} failed: {}", static_cast<uint64_t>(params_.id), params_.peer, why.to_string());

  chunks_.clear();
  for (uint16_t i = 0; i < data_watch_.size(); ++i) {
    if (chunks_.fd(i) >= 0) engine_->remove(chunks_.fd(i), data_watch_[i].hid);
  }
  chunks_.close_all();
  if (control_.valid()) {
    engine_->remove(control_.get(), control_hid_);
    control_.reset();
  }
  if (linger_) {
    shm_.reset();  // the lingering close holds the channel and its registration now
  } else {
    release_shm();
  }
  // Complete in a stable order: sends, matched receives, posted receives.
  for (auto& [id, op] : sends_) {
    const uint64_t written = op->out.written;  // before the move below
    finish_staged_send(std::move(op), why, written);
  }
  sends_.clear();
  for (auto& [id, op] : recvs_) fail_staged_recv(std::move(op), why);
  recvs_.clear();
  fail_one_sided(why);
  matcher_.fail_posted(why, /*orderly=*/keep_arrived_);
  if (!keep_arrived_) matcher_.clear_unexpected();
  outstanding_ = 0;
  ctl_tx_.clear();
  ctl_tx_off_ = ctl_tx_offered_ = 0;
  replay_.clear();
  spare_.clear();
  spare_bytes_ = 0;
  ctl_pre_.clear();
  resuming_since_.reset();
  resume_stalled_ = resume_idle_ = false;
  control_queue_empty();
  if (!linger_) notify_closed();  // else once the linger ends
}

void EndpointCore::handle_control_eof(const Status& why) {
  Status reason = why;
  if (peer_goodbye_ == wire::GoodbyeReason::kAborted) {
    reason = Status(StatusCode::kPeerFailed, "peer " + params_.peer + " aborted the endpoint (it gave up after a failure)");
  } else if (peer_goodbye_ == wire::GoodbyeReason::kClosed) {
    reason = Status(StatusCode::kPeerFailed, "peer " + params_.peer + " closed the endpoint");
    // An orderly close: the eager messages it sent before stay receivable. A
    // rendezvous announcement cannot complete any more (its sender is gone).
    matcher_.drop_rts();
    keep_arrived_ = true;
  }
  // Everything already announced on the data streams may still arrive: keep the
  // receives whose chunks are all announced, fail the rest. One-sided operations
  // need the control stream for their replies: they all fail now (their announced
  // bytes are drained into scratch so message chunks behind them still land).
  bool any_left = false;
  for (auto& [id, op] : recvs_) {
    if (op->in.announced < op->in.length) op->in.doomed = true;
    any_left = true;
  }
  // With every data stream retired (waiting for a rejoin) nothing more can arrive.
  if (!any_left || (chunks_.failover() && chunks_.live_streams() == 0)) {
    fail_locked(reason);
    return;
  }
  chunks_.redirect([](const RxTransfer& t) { return t.kind != wire::ChunkKind::kMessage; }, &drain_);
  // A PULL not read yet belongs to a send that did not complete at the peer (it
  // completes at its PULLED): its memory is the peer's again, and what it holds now is
  // not the message.
  chunks_.distrust_pulls(Status(StatusCode::kPeerFailed, "peer " + params_.peer +
                                                             " ended the endpoint before this side read a chunk "
                                                             "out of its memory (same-host pull)"));
  engine_->remove(control_.get(), control_hid_);
  control_.reset();
  release_shm();  // no control input any more, from either place
  state_ = State::kDraining;
  failure_ = reason;
  for (auto& [id, op] : sends_) {
    const uint64_t written = op->out.written;  // before the move below
    finish_staged_send(std::move(op), reason, written);
  }
  outstanding_ -= sends_.size();
  chunks_.clear_tx();
  sends_.clear();
  fail_one_sided(reason);
  outstanding_ -= matcher_.fail_posted(reason, /*orderly=*/keep_arrived_);
  if (!keep_arrived_) matcher_.clear_unexpected();
  // Doomed receives whose announced bytes are all in already fail now.
  std::vector<RecvOp*> done;
  for (auto& [id, op] : recvs_) {
    if (op->in.doomed && op->in.complete()) done.push_back(op.get());
  }
  for (RecvOp* op : done) finish_recv(op);
  for (uint16_t i = 0; i < data_watch_.size() && state_ == State::kDraining; ++i) read_stream(i);
  if (state_ == State::kDraining) chunks_.read_pulls();  // PULLs announced before the end
  maybe_finalize();
}

void EndpointCore::maybe_finalize() {
  if (state_ == State::kDraining && recvs_.empty()) fail_locked(failure_);
}

// ---------------------------------------------------------------------------
// Control stream
// ---------------------------------------------------------------------------

void EndpointCore::append_frame(const wire::Frame& frame) {
  if (!std::holds_alternative<wire::RespFrame>(frame) && !std::holds_alternative<wire::ReceivedFrame>(frame)) {
    ctl_resp_only_ = false;
  }
  if (checksum_) {
    // The one place inline payloads get their CRC (an inline PUT's data, a GET's inline
    // reply, read by the caller inside its region bracket); EAGER is encoded in send()
    // and chunks are announced with theirs by the scheduler.
    if (const auto* put = std::get_if<wire::PutFrame>(&frame); put != nullptr && put->inline_data) {
      wire::PutFrame f = *put;
      f.has_crc = true;
      f.crc = checksum_of(f.payload);
      return append_encoded(f);
    }
    if (const auto* resp = std::get_if<wire::RespFrame>(&frame); resp != nullptr && resp->inline_data) {
      wire::RespFrame f = *resp;
      f.has_crc = true;
      f.crc = checksum_of(f.payload);
      return append_encoded(f);
    }
  }
  append_encoded(frame);
}

void EndpointCore::append_encoded(const wire::Frame& frame) {
  const size_t n = wire::encoded_size(frame);
  const size_t at = ctl_tx_.size();
  // An inline payload (up to 16 KiB of a put or a get's reply) is copied once to its
  // place, not zeroed by the resize first.
  const std::span<const std::byte> payload = wire::inline_payload(frame);
  ctl_tx_.resize(at + n - payload.size());
  ctl_tx_.insert(ctl_tx_.end(), payload.begin(), payload.end());
  wire::encode_header(frame, std::span(ctl_tx_).subspan(at, n));
}

bool EndpointCore::crc_as_negotiated(bool has_crc, std::string_view frame) {
  if (has_crc == checksum_) return true;
  protocol_error(checksum_ ? fmt::format("{} without the CRC-32C this endpoint negotiated (REMORA_CHECKSUM=crc32c)", frame)
                           : fmt::format("{} with a CRC on an endpoint without checksums", frame));
  return false;
}

void EndpointCore::flush_control() {
  if (!control_.valid() || ctl_blocked_) return;
  if (ctl_tx_.empty() && ctl_pre_.empty() && !resume_handshake_) {
    control_queue_empty();  // nothing queued (a round that only read)
    return;
  }
  // A resumed connection: HANDLED (RESUMED), then (once the peer said where) the replay.
  while (ctl_pre_off_ < ctl_pre_.size()) {
    const net::IoResult r =
        net::send_some(control_.get(), ctl_pre_.data() + ctl_pre_off_, ctl_pre_.size() - ctl_pre_off_);
    if (r.moved() && r.bytes > 0) {
      ctl_pre_off_ += r.bytes;
      continue;
    }
    if (r.would_block()) {
      ctl_blocked_ = true;
      if (!ctl_watch_out_) watch_control_output(true);
      return;
    }
    Status why = net::errno_status(r.err, "send on the resumed control stream to " + params_.peer);
    if (!begin_resume(why)) handle_control_eof(why);
    return;
  }
  if (!ctl_pre_.empty()) {
    ctl_pre_.clear();
    ctl_pre_off_ = 0;
  }
  if (resume_handshake_) return;  // the replay waits for the peer's HANDLED (RESUMED)
  if (hold_resps_ && ctl_resp_only_ && ctl_tx_off_ < ctl_tx_.size()) {
    if (!hold_release_queued_) {
      hold_release_queued_ = true;
      engine_->at_next_round([weak = weak_from_this()] {
        if (auto self = weak.lock()) self->release_held_resps();
      });
    }
    return;
  }
  if (rx_credit_owed_ >= config_.eager_credit / 16 && ctl_tx_off_ < ctl_tx_.size()) {
    // Piggyback owed credit on traffic we send anyway, once enough is owed to be worth a
    // frame: returned with every message, it doubled the frames of a ping-pong.
    uint64_t owed = rx_credit_owed_;
    rx_credit_owed_ = 0;
    rx_credit_used_ -= owed;
    append_frame(CreditFrame{owed});
  }
  while (ctl_tx_off_ < ctl_tx_.size()) {
    ctl_tx_offered_ = ctl_tx_.size();
    const net::IoResult r =
        shm_ != nullptr ? shm_->send(control_.get(), ctl_tx_.data(), ctl_tx_off_, ctl_tx_.size())
                        : net::send_some(control_.get(), ctl_tx_.data() + ctl_tx_off_, ctl_tx_.size() - ctl_tx_off_);
    if (r.moved() && r.bytes > 0) {
      ctl_tx_off_ += r.bytes;
      tx_high_ = std::max(tx_high_, ctl_tx_base_ + ctl_tx_off_);
      target_.control_sent(ctl_tx_off_);
      continue;
    }
    const bool ring = shm_ != nullptr && shm_->tx_on();
    if (r.would_block()) {
      ctl_blocked_ = true;
      // A full ring: the peer wakes this side through its eventfd once it read.
      if (!ring && !ctl_watch_out_) watch_control_output(true);
      return;
    }
    if (ring && r.err == EPROTO) {
      protocol_error(shm_->corruption().message());
      return;
    }
    // The peer is gone. What it sent before is read first, as the receiving side would
    // read it before the end: an ABORT or GOODBYE saying why, the last eager messages.
    // (Right after connect the same-host channel's set-up frames are in flight, so a
    // peer that aborts at once resets a connection this side is still writing to.)
    if (ctl_send_failed_ == 0) {
      ctl_send_failed_ = r.err;
      read_control();
      ctl_send_failed_ = 0;
      if (state_ != State::kActive || !control_.valid()) return;
    }
    Status why = net::errno_status(r.err, "send on control stream to " + params_.peer);
    if (!begin_resume(why)) handle_control_eof(why);
    return;
  }
  control_output_sent();
  control_queue_empty();
}

void EndpointCore::control_queue_empty() noexcept {
  target_.control_cleared();
  ctl_resp_only_ = true;
  hold_resps_ = false;
}

void EndpointCore::watch_control_output(bool on) {
  if (state_ != State::kActive) return;
  Status s = engine_->modify(control_.get(), control_hid_, on ? kControlEvents | EPOLLOUT : kControlEvents);
  if (!s.is_ok()) {
    fail_locked(s);
    return;
  }
  ctl_watch_out_ = on;
}

void EndpointCore::release_held_resps() {
  hold_release_queued_ = false;
  hold_resps_ = false;
  if (state_ == State::kActive) flush_control();
}

void EndpointCore::on_control_event(uint32_t events) {
  if (state_ != State::kActive) {
    if (linger_) linger_->progress();  // closed: the sockets are draining (see close)
    return;
  }
  if ((events & EPOLLOUT) && ctl_blocked_) {
    ctl_blocked_ = false;
    flush_control();
    if (!ctl_blocked_ && ctl_watch_out_) watch_control_output(false);  // all sent: stop watching
  }
  if (shm_ != nullptr && shm_->rx_on()) {
    if (state_ == State::kActive) control_event_after_switch(events);
    return;
  }
  if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ctl_hup_ = true;
  if (state_ == State::kActive && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) read_control();
  // The peer's SWITCH came with this event: a hang-up that came with it too is seen now.
  if (state_ == State::kActive && shm_ != nullptr && shm_->rx_on() && ctl_hup_) control_event_after_switch(events);
}

bool EndpointCore::read_control() {
  bool got = false;
  if (!control_.valid()) return false;  // broken, being connected again (resume.cc)
  if (placed_ack_held_ && state_ == State::kActive) release_placed_ack();
  const wire::DecodeLimits limits{static_cast<uint32_t>(config_.eager_limit)};
  while (state_ == State::kActive && control_.valid()) {
    if (rx_end_ == ctl_rx_.size()) {
      // Make room: move the partial frame to the front.
      std::memmove(ctl_rx_.data(), ctl_rx_.data() + rx_begin_, rx_end_ - rx_begin_);
      rx_end_ -= rx_begin_;
      rx_begin_ = 0;
      // One frame fills the buffer and is still short (an inline payload near a large
      // eager limit): room for two of the largest frames this side accepts. Endpoints
      // that only ever carry small frames keep the small buffer.
      if (rx_end_ == ctl_rx_.size())
        ctl_rx_.resize(std::max(ctl_rx_.size(), 2 * (config_.eager_limit + kMaxFramePrefix)));
    }
    const size_t space = ctl_rx_.size() - rx_end_;
    // After the peer's SWITCH its bytes come out of this side's ring (copied out before
    // they are decoded, so the peer cannot change a frame under the decoder).
    const bool ring = shm_ != nullptr && shm_->rx_on();
    const net::IoResult r = ring ? shm_->recv(ctl_rx_.data() + rx_end_, space, ring_arm_)
                                 : net::recv_some(control_.get(), ctl_rx_.data() + rx_end_, space);
    if (r.would_block()) break;
    if (ring && r.error()) {
      protocol_error(shm_->corruption().message());
      return true;
    }
    if (r.error()) {
      Status why = net::errno_status(r.err, "recv on control stream from " + params_.peer);
      if (r.err == EBADMSG) {
        // A sealed record failed to open (REMORA_ENCRYPT): nothing more of this peer's
        // stream can be trusted, not even what it announced before.
        REMORA_LOG(kWarn, "{}", why.message());
        fail_locked(why);
        return true;
      }
      // A reset (not an end: a peer that exits or closes ends its connections) may be a
      // middlebox or a NIC that lost the connection: connected again where both can.
      if (!begin_resume(why)) handle_control_eof(why);
      return got;
    }
    if (r.eof()) {
      // After a send failed (a reset, or this side's connection aborted: the send took
      // the error), the kernel reports an end: the failed send is what happened, and
      // flush_control goes on with it. (A peer that ended its connection before is read
      // as an end before any send fails, unless the two race.)
      if (ctl_send_failed_ != 0 && can_resume()) return got;
      handle_control_eof(Status(StatusCode::kPeerFailed, "peer " + params_.peer + " closed the connection"));
      return true;
    }
    const size_t n = r.bytes;
    liveness_.heard();
    rx_end_ += n;
    got = true;
    while (state_ == State::kActive && rx_begin_ < rx_end_) {
      auto decoded = wire::decode_frame(std::span(ctl_rx_).subspan(rx_begin_, rx_end_ - rx_begin_), limits);
      if (!decoded) {
        if (decoded.status().code() == StatusCode::kInProgress) break;
        protocol_error(decoded.status().message());
        return true;
      }
      rx_begin_ += decoded->consumed;
      const auto* handled = std::get_if<wire::HandledFrame>(&decoded->frame);
      if (resume_handshake_ != (handled != nullptr && handled->resumed)) {
        protocol_error(resume_handshake_ ? "the first frame on a resumed control connection is not HANDLED (RESUMED)"
                                         : "HANDLED (RESUMED) on a control connection that was not resumed");
        return true;
      }
      if (handled == nullptr || !handled->resumed) count_handled(decoded->consumed, handled != nullptr);
      handle_frame(decoded->frame);
      if (shm_rx_switch_now_) {
        shm_rx_switch_now_ = false;
        if (rx_begin_ != rx_end_) {
          protocol_error("bytes on the TCP control connection after the peer's SHM SWITCH");
          return true;
        }
        break;  // the next bytes are in the ring
      }
    }
    if (rx_begin_ == rx_end_) rx_begin_ = rx_end_ = 0;
    if (!ring && shm_ != nullptr && shm_->rx_on()) continue;  // switched: read the ring now
    // A short read drained the socket; new bytes raise a new edge. Skipping the
    // recv that would return EAGAIN saves a syscall per message — but not once the
    // peer hung up: the FIN came with the same edge, and only a read sees the EOF.
    // The ring is read until it is found empty (no system call): only that read, when
    // it arms (poll_ring before the progress thread sleeps), marks this side sleeping,
    // without which the peer's next write would wake nobody.
    if (n < space && !ring && !ctl_hup_) break;
  }
  if (got && state_ == State::kActive && rx_handled_ - rx_acked_ >= kAckEvery) acknowledge_handled();
  if (got && state_ == State::kActive) pump();  // nothing read, nothing new to send
  return got;
}

int EndpointCore::poll_control() {
  if (state_ != State::kActive || !chunks_.idle()) return -1;
  return read_control() ? 1 : 0;
}

void EndpointCore::handle_frame(const wire::Frame& frame) {
  std::visit(
      [this](const auto& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, EagerFrame>) handle_eager(f);
        else if constexpr (std::is_same_v<T, RtsFrame>) handle_rts(f);
        else if constexpr (std::is_same_v<T, CtsFrame>) handle_cts(f);
        else if constexpr (std::is_same_v<T, ChunkFrame>) handle_chunk(f);
        else if constexpr (std::is_same_v<T, CreditFrame>) handle_credit(f);
        else if constexpr (std::is_same_v<T, GoodbyeFrame>) handle_goodbye(f);
        else if constexpr (std::is_same_v<T, wire::RespFrame>) {
          if (!f.inline_data || crc_as_negotiated(f.has_crc, "RESP with inline data")) initiator_.handle_resp(f);
        }
        else if constexpr (std::is_same_v<T, wire::AbortFrame>) handle_abort(f);
        else if constexpr (std::is_same_v<T, wire::HeartbeatFrame>) handle_heartbeat(f);
        else if constexpr (std::is_same_v<T, wire::HostFrame>)
          handle_host(f);
        else if constexpr (std::is_same_v<T, wire::PullFrame>)
          handle_pull(f);
        else if constexpr (std::is_same_v<T, wire::PulledFrame>)
          handle_pulled(f);
        else if constexpr (std::is_same_v<T, wire::ShmFrame>)
          handle_shm(f);
        else if constexpr (std::is_same_v<T, wire::ReceivedFrame>)
          handle_received(f);
        else if constexpr (std::is_same_v<T, wire::RetireFrame>)
          handle_retire(f);
        else if constexpr (std::is_same_v<T, wire::RejoinedFrame>)
          handle_rejoined(f);
        else if constexpr (std::is_same_v<T, wire::HandledFrame>)
          handle_handled(f);
        else if constexpr (std::is_same_v<T, wire::MapFrame>)
          handle_map(f);
        else if constexpr (std::is_same_v<T, wire::PlacedFrame>)
          handle_placed(f);
        else if constexpr (std::is_same_v<T, wire::PlacedShortFrame>)
          handle_placed_short(f);
        else serve_request(f);  // PUT, GET, ATOMIC
      },
      frame);
}

void EndpointCore::handle_goodbye(const GoodbyeFrame& f) {
  if (f.reason != static_cast<uint32_t>(wire::GoodbyeReason::kClosed) &&
      f.reason != static_cast<uint32_t>(wire::GoodbyeReason::kAborted)) {
    protocol_error("GOODBYE with unknown reason " + std::to_string(f.reason));
    return;
  }
  peer_goodbye_ = static_cast<wire::GoodbyeReason>(f.reason);
}

// ---------------------------------------------------------------------------
// Liveness (transport/liveness.h): the endpoint's side of the heartbeat
// ---------------------------------------------------------------------------

void EndpointCore::start_liveness() {
  // TCP_USER_TIMEOUT on every stream (Liveness::user_timeout_ms): data unacknowledged
  // that long (a link gone down) fails the socket, whatever the heartbeat sees.
  const uint32_t user_timeout = Liveness::user_timeout_ms(config_.peer_timeout_ms);
  Status s = Liveness::set_user_timeout(control_.get(), user_timeout);
  for (uint16_t i = 0; i < data_watch_.size() && s.is_ok(); ++i) s = Liveness::set_user_timeout(chunks_.fd(i), user_timeout);
  if (!s.is_ok()) REMORA_LOG(kWarn, "endpoint to {}: {}; a dead link is noticed by heartbeats only", params_.peer, s.message());
  if (!liveness_.probes()) {
    REMORA_LOG(kInfo, "peer {} does not answer heartbeats (an older remora): a stopped peer is not noticed",
               params_.peer);
  }
  liveness_.start(weak_from_this());
}

bool EndpointCore::awaiting_peer() const {
  // A thread waiting for a notification awaits the peer as a posted receive does: without
  // it, a wait_notification() on a stopped peer with nothing else outstanding ran to its
  // own timeout instead of failing at the peer timeout (found by the fault matrix,
  // tests/faults, put-in × sigstop).
  return outstanding_ > 0 || initiator_.outstanding() > 0 || initiator_.placed_pending() > 0 || target_.serving() ||
         !recvs_.empty() || !chunks_.idle() || ctl_tx_off_ < ctl_tx_.size() || notifications_.waited_for() ||
         peer_watchers_.load(std::memory_order_relaxed) != 0;
}

void EndpointCore::read_input() {
  if (state_ == State::kActive) read_control();
  for (uint16_t i = 0; i < data_watch_.size() && (state_ == State::kActive || state_ == State::kDraining); ++i) {
    read_stream(i);
  }
}

void EndpointCore::send_probe(uint64_t seq) {
  // Draining: nothing to probe with. While the control stream is connected again the
  // probe waits in the output and goes with the replay.
  if (state_ != State::kActive || (!control_.valid() && !resuming_since_)) return;
  append_frame(wire::HeartbeatFrame{.seq = seq, .reply = false});
  flush_control();
}

void EndpointCore::handle_heartbeat(const wire::HeartbeatFrame& f) {
  if (f.reply) {
    liveness_.replied(f.seq);
    return;
  }
  append_frame(wire::HeartbeatFrame{.seq = f.seq, .reply = true});  // read_control's pump flushes it
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Endpoint (public handle)
// ---------------------------------------------------------------------------

Endpoint::Endpoint(std::shared_ptr<detail::EndpointCore> core) noexcept : core_(std::move(core)) {}
Endpoint::~Endpoint() {
  if (core_) core_->close(wire::GoodbyeReason::kClosed);
}
Request Endpoint::send(std::span<const std::byte> data, Tag tag) { return core_->send(data, tag); }
Request Endpoint::recv(std::span<std::byte> buffer, Tag tag) { return core_->recv(buffer, tag); }
void Endpoint::close() { core_->close(wire::GoodbyeReason::kClosed); }
void Endpoint::abort() { core_->close(wire::GoodbyeReason::kAborted); }
bool Endpoint::failed() const { return core_->failed(); }
bool Endpoint::closed_by_peer() const { return core_->closed_by_peer(); }
bool Endpoint::peer_said_goodbye() const { return core_->peer_said_goodbye(); }
Status Endpoint::failure() const { return core_->failure(); }
void Endpoint::watch_peer(bool on) { core_->watch_peer(on); }
EndpointId Endpoint::id() const { return core_->id(); }
std::string Endpoint::peer_address() const { return core_->peer(); }
uint32_t Endpoint::data_streams() const { return core_->streams(); }
EndpointStats Endpoint::stats() const { return core_->stats(); }

Request Endpoint::put(std::span<const std::byte> local, const RemoteKey& key, uint64_t remote_offset,
                      const PutOptions& options) {
  return core_->put(local, key, remote_offset, options);
}
Request Endpoint::get(std::span<std::byte> local, const RemoteKey& key, uint64_t remote_offset) {
  return core_->get(local, key, remote_offset);
}
Request Endpoint::fetch_add(uint64_t* result, const RemoteKey& key, uint64_t remote_offset, uint64_t value) {
  return core_->atomic(result, key, remote_offset, wire::AtomicOp::kFetchAdd, value, 0);
}
Request Endpoint::compare_swap(uint64_t* result, const RemoteKey& key, uint64_t remote_offset, CompareSwap operands) {
  return core_->atomic(result, key, remote_offset, wire::AtomicOp::kCompareSwap, operands.desired, operands.expected);
}
Request Endpoint::flush() { return core_->flush(); }
std::optional<Notification> Endpoint::poll_notification() { return core_->poll_notification(); }
Result<Notification> Endpoint::wait_notification(Duration timeout) {
  const engine::WaitBound bound(timeout, *core_->engine());
  return bound.explain(core_->wait_notification(bound.timeout()));
}
void Endpoint::set_notification_handler(std::function<void(const Notification&)> handler) {
  core_->set_notification_handler(std::move(handler));
}

}  // namespace remora
