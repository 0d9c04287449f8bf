// transport/data_streams.cc — the endpoint as the chunk scheduler's owner: pushing and
// reading the data streams (pump, read_stream, giving way and resuming), CHUNK and ABORT
// frames handed to the transfer they name, what a transfer's end means for the operation
// that owns it (sent, received: a message, a put, a served get, a get), the copies and
// zero-copy sends of the data paths reporting back (StagingHost, zero_copy_released),
// and a data stream's events and end.
#include <fmt/format.h>

#include "transport/endpoint_core.h"

namespace remora::detail {

// ---------------------------------------------------------------------------
// Moving bytes
// ---------------------------------------------------------------------------

void EndpointCore::pump(bool one_round) {
  // Schedule chunks onto streams with room, announce them, push bytes; repeat while
  // streams drain fast enough to take more. Stop only when nothing more can be
  // scheduled (every stream holds a chunk it could not write, or nothing is ready):
  // only then is a later EPOLLOUT edge guaranteed to call us again. Stopping earlier
  // (one round for a posting thread; another thread waiting for the lock) leaves
  // streams with room and no edge to come, so resume() goes on at the next round.
  // With nothing for the streams (every round that read only small frames), the
  // control stream's queue is all there is to send.
  if (chunks_.sends_nothing()) {
    if (state_ == State::kActive) flush_control();
    return;
  }
  while (state_ == State::kActive) {
    bool scheduled = chunks_.schedule();
    flush_control();
    if (state_ != State::kActive) return;
    chunks_.write_all();
    if (state_ != State::kActive) return;
    // With rails, chunks may wait for the stream that delivers them first; if the
    // writes just made room on it, no event will say so: schedule again.
    if (!scheduled && !chunks_.waiting_stream_has_room()) break;
    if (one_round || engine_->lock_wanted()) {
      queue_resume();
      break;
    }
  }
  // Finishing a chunk may have queued a reply (a served GET's RESP).
  if (state_ == State::kActive && ctl_tx_off_ < ctl_tx_.size()) flush_control();
}

void EndpointCore::queue_resume() {
  if (resume_queued_) return;
  resume_queued_ = true;
  engine_->at_next_round([weak = weak_from_this()] {
    if (auto self = weak.lock()) self->resume();
  });
}

void EndpointCore::post(std::function<void()> fn) {
  // From a worker's thread: nothing of this endpoint but its engine is touched
  // here (the scheduler's cancel waits for this call to return).
  engine_->post([weak = weak_from_this(), fn = std::move(fn)] {
    auto self = weak.lock();
    if (!self || (self->state_ != State::kActive && self->state_ != State::kDraining)) return;
    fn();
    if (self->state_ == State::kDraining) self->maybe_finalize();
    // A send job's end made room for more chunks; finishing a chunk may have queued a
    // reply or a RECEIVED (pump sends both).
    if (self->state_ == State::kActive) self->pump();
  });
}

void EndpointCore::resume() {
  resume_queued_ = false;
  if (state_ != State::kActive && state_ != State::kDraining) return;
  chunks_.resume();
  if (state_ == State::kDraining) maybe_finalize();
  if (state_ == State::kActive) pump();
}

void EndpointCore::read_stream(uint16_t index) {
  if (state_ != State::kActive && state_ != State::kDraining) return;
  chunks_.read(index);
  if (state_ == State::kDraining) maybe_finalize();
}

// ---------------------------------------------------------------------------
// Announcements
// ---------------------------------------------------------------------------

RxTransfer* EndpointCore::find_in(wire::ChunkKind kind, uint64_t id) {
  switch (kind) {
    case wire::ChunkKind::kMessage: {
      auto it = recvs_.find(id);
      return it == recvs_.end() ? nullptr : &it->second->in;
    }
    case wire::ChunkKind::kPut: return target_.put_transfer(id);
    case wire::ChunkKind::kGet: return initiator_.get_transfer(id);
  }
  return nullptr;
}

RxTransfer* EndpointCore::find_announced(std::string_view frame, wire::ChunkKind kind, uint64_t id) {
  RxTransfer* op = find_in(kind, id);
  if (op == nullptr) {
    static constexpr const char* kWhat[] = {"receive", "put", "get"};
    protocol_error(fmt::format("{} for unknown {} id {}", frame, kWhat[static_cast<uint8_t>(kind)], id));
  }
  return op;
}

void EndpointCore::handle_chunk(const wire::ChunkFrame& f) {
  if (f.resend) {
    // Sent again after its first stream was retired: its transfer was announced (and
    // may have been redirected to the drain since), so it is found among the owed.
    if (std::string violation = chunks_.expect_resend(f.kind, f.recv_id, f.stream, f.offset, f.length,
                                                      f.has_crc ? std::optional<uint32_t>(f.crc) : std::nullopt);
        !violation.empty()) {
      protocol_error(std::move(violation));
      return;
    }
    read_stream(f.stream);
    return;
  }
  RxTransfer* op = find_announced("CHUNK", f.kind, f.recv_id);
  if (op == nullptr) return;
  if (std::string violation =
          chunks_.expect(op, f.stream, f.offset, f.length, f.has_crc ? std::optional<uint32_t>(f.crc) : std::nullopt);
      !violation.empty()) {
    protocol_error(std::move(violation));
    return;
  }
  read_stream(f.stream);
}

void EndpointCore::handle_abort(const wire::AbortFrame& f) {
  RxTransfer* in = find_in(f.kind, f.id);
  if (in == nullptr || in->doomed) {
    static constexpr const char* kWhat[] = {"receive", "put", "get"};
    protocol_error(std::string("ABORT for unknown ") + kWhat[static_cast<uint8_t>(f.kind)] + " id " +
                   std::to_string(f.id));
    return;
  }
  // What was announced still arrives; nothing more will be.
  in->doomed = true;
  if (in->failure.is_ok()) {
    in->failure = Status(f.code, fmt::format("peer {} stopped sending after {} of {} bytes: its side of the transfer "
                                             "failed ({})",
                                             params_.peer, in->announced, in->length, to_string(f.code)));
  }
  if (in->complete()) received(*in);
}

// ---------------------------------------------------------------------------
// Transfers' ends (ChunkScheduler::Owner)
// ---------------------------------------------------------------------------

void EndpointCore::sent(TxTransfer& out) {
  switch (out.kind) {
    case wire::ChunkKind::kMessage: message_sent(out); return;
    case wire::ChunkKind::kPut:
      // The put completes at its RESP, which the target sends only once every byte is
      // in (an earlier RESP is a protocol violation, see RmaInitiator::handle_resp). A
      // put whose source failed (device memory that could not be staged) was cut short:
      // the target hears that nothing more comes, and answers. (Under failover the
      // ABORT went at written() already.)
      if (!out.failure.is_ok() && !out.written_told) {
        append_frame(wire::AbortFrame{.id = out.chunk_id, .kind = out.kind, .code = out.failure.code()});
      }
      return;
    case wire::ChunkKind::kGet:
      // A served get whose source failed was cut short: the initiator hears that nothing
      // more comes (the RESP then says device_failed).
      if (!out.failure.is_ok() && !out.written_told) {
        append_frame(wire::AbortFrame{.id = out.chunk_id, .kind = out.kind, .code = out.failure.code()});
      }
      target_.get_sent(out.owner, &out);
      return;
  }
}

void EndpointCore::written(TxTransfer& out) {
  // A put or get cut short (its staged source failed) says so at once, and a get's
  // ABORT must come before its RESP: the initiator completes the get at the RESP, and an
  // ABORT after it would name an unknown get.
  if (!out.failure.is_ok() && out.kind != wire::ChunkKind::kMessage) {
    append_frame(wire::AbortFrame{.id = out.chunk_id, .kind = out.kind, .code = out.failure.code()});
  }
  // Failover keeps a transfer until the peer confirmed it (sent() then), but a served
  // get's RESP need not wait for that: the initiator completes the get once it has the
  // RESP and every chunk, and a chunk sent again is never zeros (RegionSource::write_again,
  // StagingSource::prepare).
  if (out.kind == wire::ChunkKind::kGet) target_.get_written(out.owner);
}

void EndpointCore::received(RxTransfer& in) {
  switch (in.kind) {
    case wire::ChunkKind::kMessage: {
      auto it = recvs_.find(in.id);
      if (it != recvs_.end()) finish_recv(it->second.get());
      return;
    }
    case wire::ChunkKind::kPut: target_.put_received(in.id); return;
    case wire::ChunkKind::kGet: initiator_.get_received(in.id); return;
  }
}

void EndpointCore::stream_failed(uint16_t index, const Status& why) {
  // A sealed record that failed to open (tampering) or a protocol violation fails the
  // endpoint; a connection that broke is failed over where it can be.
  if (why.code() == StatusCode::kProtocol) {
    REMORA_LOG(kWarn, "{}", why.message());
    fail_locked(why);
    return;
  }
  if (chunks_.failover() && index < data_watch_.size() && state_ == State::kActive) {
    retire_stream(index, why);
    return;
  }
  fail_locked(why);
}

bool EndpointCore::may_lose_every_stream() const noexcept {
  return (rejoiner_ || rejoin_token_ != 0) && liveness_.probes();
}

std::chrono::steady_clock::duration EndpointCore::reconnect_limit() const noexcept {
  // Twice the peer timeout leaves the connecting side two attempts (the first at once);
  // at least 5 s, for a connect of up to 2 s with a short peer timeout. The listening
  // side waits one peer timeout (at least 5 s) longer: the connecting side, which knows
  // why its attempts failed, gives up first and says so, even on a loaded host.
  const auto timeout = std::chrono::milliseconds(config_.peer_timeout_ms);
  const auto limit = std::max<std::chrono::steady_clock::duration>(2 * timeout, std::chrono::seconds(5));
  return rejoiner_ ? limit : limit + std::max<std::chrono::steady_clock::duration>(timeout, std::chrono::seconds(5));
}

std::string EndpointCore::reconnect_limit_words(const std::string& last_attempt) const {
  return fmt::format("within {} ms ({}){}",
                     std::chrono::duration_cast<std::chrono::milliseconds>(reconnect_limit()).count(),
                     rejoiner_ ? "twice REMORA_PEER_TIMEOUT_MS, at least 5 s"
                               : "the connecting side's limit and one REMORA_PEER_TIMEOUT_MS more, at least 5 s",
                     last_attempt.empty() ? "" : "; the last attempt: " + last_attempt);
}

void EndpointCore::retire_stream(uint16_t index, const Status& why) {
  if (chunks_.retired(index)) return;
  // Only a connection that broke (a reset, an end, the peer's RETIRE) is waited out: an
  // error of this side's own (the kernel refusing a send) would only come back.
  if (chunks_.live_streams() <= 1 && (why.code() != StatusCode::kPeerFailed || !may_lose_every_stream())) {
    fail_locked(why.with_context("the endpoint's last data stream"));
    return;
  }
  engine_->remove(chunks_.fd(index), data_watch_[index].hid);
  // Devmem sends on it that the kernel has not reported done never will be: they count
  // as done (their chunks go again, from host copies).
  paths_.zero_copy_streams().abandon(chunks_.fd(index), [this](uint64_t id) { zero_copy_released(id); });
  Result<uint64_t> read_whole = chunks_.retire(index);
  if (!read_whole) {
    fail_locked(read_whole.status());
    return;
  }
  REMORA_LOG(kWarn, "endpoint {} to {}: data stream {} retired ({}); its chunks go on the other {}",
             static_cast<uint64_t>(params_.id), params_.peer, index, why.message(), chunks_.live_streams());
  retired_why_[index] = why.message();
  if (rejoiner_) {
    if (rejoin_backoff_[index].retired(std::chrono::steady_clock::now())) {
      REMORA_LOG(kWarn, "endpoint {} to {}: data stream {} came back only briefly; its rail is tried again in {} ms",
                 static_cast<uint64_t>(params_.id), params_.peer, index,
                 std::chrono::duration_cast<std::chrono::milliseconds>(rejoin_backoff_[index].wait()).count());
    }
  }
  if (chunks_.live_streams() == 0) {
    // The control stream lives: chunks wait for a stream connected again (the
    // connecting side tries at once), within reconnect_limit().
    streamless_since_ = std::chrono::steady_clock::now();
    streamless_why_ = why.message();
    REMORA_LOG(kWarn,
               "endpoint {} to {}: every data stream is retired; chunks wait until one is connected again "
               "(at most {} ms)",
               static_cast<uint64_t>(params_.id), params_.peer,
               std::chrono::duration_cast<std::chrono::milliseconds>(reconnect_limit()).count());
  }
  append_frame(wire::RetireFrame{.stream = index, .chunks = *read_whole});
  flush_control();
}

void EndpointCore::check_streams(std::chrono::steady_clock::duration timeout) {
  // A stream blocked on a full socket that has drained since, its edge unseen
  // (ChunkScheduler::unblock_drained): written on from here.
  if (state_ == State::kActive && chunks_.unblock_drained() > 0) pump();
  if (state_ != State::kActive || !chunks_.failover()) return;
  check_resume();
  if (state_ != State::kActive) return;
  if (streamless_since_ && std::chrono::steady_clock::now() - *streamless_since_ >= reconnect_limit()) {
    fail_locked(Status(StatusCode::kPeerFailed,
                       fmt::format("every data stream to {} broke (the last: {}) and none was connected again {}",
                                   params_.peer, streamless_why_, reconnect_limit_words(rejoin_error_))));
    return;
  }
  maybe_rejoin();
  // While the control stream is down or its resumption unfinished no RECEIVED can come,
  // so every stream with chunks outstanding looks stalled and an idle one on the dead
  // rail looks like it works: no verdicts until the resumption ends (it restarts the
  // clocks, handle_handled).
  if (!control_.valid() || resuming_since_ || resume_handshake_) return;
  const std::vector<uint16_t> stalled = chunks_.stalled(std::chrono::steady_clock::now(), timeout);
  if (stalled.empty()) return;
  // Nor while the control connection's own bytes go unacknowledged for a quarter of the
  // peer timeout, its break not yet noticed: the confirmations stopped with it, so a
  // stream on a working rail looks stalled too, and on a loaded host its own kernel's
  // acknowledgements were seen half a second apart then (the CI's tsan run retired it).
  // The silence verdict resumes the control stream first; the streams are judged after.
  if (net::tcp_path_stalled(control_.get(), config_.peer_timeout_ms / 4)) return;
  // Confirmations say the chunks arrived; their absence alone does not say where they
  // stopped. A RECEIVED can be late because the peer's process is (a slow or loaded
  // host), or because the control connection's own path went quiet and nobody has
  // noticed yet: then the stream's kernel still has its bytes acknowledged. Only a
  // stream whose bytes its kernel holds unacknowledged has lost its path.
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  for (uint16_t index : stalled) {
    const std::optional<std::string> path = net::tcp_path_stalled(chunks_.fd(index), config_.peer_timeout_ms / 2);
    if (!path) continue;
    retire_stream(index, Status(StatusCode::kTimeout,
                                fmt::format("no chunk on it confirmed for {} ms (REMORA_PEER_TIMEOUT_MS) while another "
                                            "stream worked, and {}",
                                            ms, *path)));
    if (state_ != State::kActive) return;
  }
}

void EndpointCore::maybe_rejoin() {
  if (!rejoiner_) return;
  const auto now = std::chrono::steady_clock::now();
  for (uint16_t i = 0; i < data_watch_.size() && state_ == State::kActive; ++i) {
    // The backoff spares transfers a flapping rail while others work; with none left
    // there is nothing to spare, and every retired stream is tried each tick.
    const bool due = streamless_since_.has_value() || rejoin_backoff_[i].due(now);
    if (!chunks_.rejoinable(i) || rejoining_[i] || !due) continue;
    rejoining_[i] = true;
    rejoin_backoff_[i].attempted(now);
    rejoiner_(i);
  }
}

void EndpointCore::rejoin_done(uint16_t index, net::Fd fd, const Status& why) {
  if (index >= data_watch_.size()) return;
  rejoining_[index] = false;
  rejoin_error_ = why.is_ok() ? std::string() : why.message();
  if (!why.is_ok()) {
    REMORA_LOG(kDebug, "endpoint {} to {}: data stream {} not connected again yet: {}",
               static_cast<uint64_t>(params_.id), params_.peer, index, why.message());
    return;
  }
  if (state_ != State::kActive || !chunks_.rejoinable(index)) return;  // the socket closes
  const int raw = fd.get();
  if (Status s = chunks_.reinstate(index, std::move(fd), /*tx=*/true); !s) {
    fail_locked(s);
    return;
  }
  if (Status s = paths_.zero_copy_streams().adopt(raw); !s) {
    fail_locked(s.with_context("devmem TX on data stream " + std::to_string(index) + " connected again"));
    return;
  }
  auto hid = engine_->add(raw, data_watch_[index].handler.get());
  if (!hid) {
    fail_locked(hid.status());
    return;
  }
  data_watch_[index].hid = *hid;
  streamless_since_.reset();
  rejoin_backoff_[index].rejoined(std::chrono::steady_clock::now());
  REMORA_LOG(kWarn, "endpoint {} to {}: data stream {} connected again; chunks go on it again",
             static_cast<uint64_t>(params_.id), params_.peer, index);
  // Before any CHUNK that names it: the peer sends on the stream only after this.
  append_frame(wire::RejoinedFrame{.stream = index});
  flush_control();
  if (state_ == State::kActive) pump();
}

bool EndpointCore::rejoin_wanted(uint64_t token, uint16_t index) const noexcept {
  return rejoin_token_ != 0 && token == rejoin_token_ && state_ == State::kActive && index < data_watch_.size() &&
         chunks_.rejoinable(index);
}

Status EndpointCore::rejoin_accept(uint16_t index, net::Fd fd) {
  if (!rejoin_wanted(rejoin_token_, index)) {
    return Status(StatusCode::kInvalidArgument, "data stream " + std::to_string(index) + " cannot be connected again");
  }
  const int raw = fd.get();
  REMORA_RETURN_IF_ERROR(chunks_.reinstate(index, std::move(fd), /*tx=*/false));
  if (Status s = paths_.zero_copy_streams().adopt(raw); !s) {
    fail_locked(s.with_context("devmem TX on data stream " + std::to_string(index) + " connected again"));
    return s;
  }
  auto hid = engine_->add(raw, data_watch_[index].handler.get());
  if (!hid) {
    fail_locked(hid.status());
    return hid.status();
  }
  data_watch_[index].hid = *hid;
  streamless_since_.reset();
  REMORA_LOG(kWarn, "endpoint {} to {}: data stream {} connected again by the peer", static_cast<uint64_t>(params_.id),
             params_.peer, index);
  return Status::ok();
}

void EndpointCore::handle_rejoined(const wire::RejoinedFrame& f) {
  if (rejoin_token_ == 0 || f.stream >= data_watch_.size() || !chunks_.enable_tx(f.stream)) {
    protocol_error(fmt::format("REJOINED names data stream {}, which this side did not take back", f.stream));
    return;
  }
  pump();
}

void EndpointCore::handle_received(const wire::ReceivedFrame& f) {
  if (std::string violation = chunks_.confirmed(f.stream, f.chunks); !violation.empty()) {
    protocol_error(std::move(violation));
  }
}

void EndpointCore::handle_retire(const wire::RetireFrame& f) {
  if (!chunks_.failover() || f.stream >= data_watch_.size()) {
    protocol_error(chunks_.failover() ? fmt::format("RETIRE names data stream {} of {}", f.stream, data_watch_.size())
                                      : std::string("RETIRE on an endpoint without failover"));
    return;
  }
  // The peer gave the stream up: so does this side (its RETIRE says what it read).
  retire_stream(f.stream, Status(StatusCode::kPeerFailed, "the peer retired it"));
  if (state_ != State::kActive) return;
  if (std::string violation = chunks_.peer_retired(f.stream, f.chunks); !violation.empty()) {
    protocol_error(std::move(violation));
    return;
  }
  // With no stream left, transfers wait for a rejoin: try now rather than at the next
  // heartbeat tick (a quarter of the peer timeout).
  if (state_ == State::kActive && streamless_since_) maybe_rejoin();
  if (state_ == State::kActive) pump();
}

void EndpointCore::chunk_read(uint16_t index, uint64_t chunks) {
  // RECEIVED, coalesced: while the last frame queued is a RECEIVED of the same stream
  // not yet offered to the socket, its count is raised in place (the chunks of one
  // stream are read in order). Offered bytes stay as they are: a sealing layer may hold
  // them sealed already, and the peer would read the old count.
  constexpr size_t kSize = wire::kFrameHeaderSize + wire::kReceivedBodySize;
  const size_t at = received_at_;
  if (at != SIZE_MAX && at >= std::max(ctl_tx_off_, ctl_tx_offered_) && at + kSize == ctl_tx_.size() &&
      ctl_tx_[at] == std::byte{static_cast<uint8_t>(wire::FrameType::kReceived)}) {
    const wire::ReceivedFrame f{.stream = index, .chunks = chunks};
    std::array<std::byte, kSize> bytes;
    wire::encode(f, bytes);
    if (std::equal(bytes.begin(), bytes.begin() + wire::kFrameHeaderSize + 2,
                   ctl_tx_.begin() + static_cast<ptrdiff_t>(at))) {
      std::copy(bytes.begin(), bytes.end(), ctl_tx_.begin() + static_cast<ptrdiff_t>(at));
      return;
    }
  }
  received_at_ = ctl_tx_.size();
  append_frame(wire::ReceivedFrame{.stream = index, .chunks = chunks});
}

void EndpointCore::stream_ended(uint16_t index) {
  if (state_ == State::kActive && control_.valid()) {
    // A peer closing orderly hands GOODBYE and its control stream's FIN to the
    // kernel before it ends its data streams, but this side may see a data stream
    // end first (its event was harvested first; on a network the streams race).
    // Read the control stream before judging: a GOODBYE there makes this the
    // orderly close it is. (read_control may end the endpoint's active state and
    // re-read this stream itself; then there is nothing left to do here.)
    read_control();
    if (state_ == State::kActive && peer_goodbye_.has_value()) {
      handle_control_eof(Status(StatusCode::kPeerFailed, "peer " + params_.peer + " said GOODBYE"));
    }
    if (state_ != State::kActive) return;
  }
  const Status why(StatusCode::kPeerFailed, "peer " + params_.peer + " closed data stream " + std::to_string(index) +
                                                " in the middle of a message");
  if (chunks_.failover() && state_ == State::kActive) {
    retire_stream(index, why);
    return;
  }
  fail_locked(why);
}

// ---------------------------------------------------------------------------
// The data paths reporting back
// ---------------------------------------------------------------------------

void EndpointCore::staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) {
  if (state_ == State::kActive || state_ == State::kDraining) chunks_.chunk_placed(&t, length, status);
}

void EndpointCore::staging_progressed() {
  std::erase_if(staged_failing_, [](auto& entry) {
    if (entry.first->end.in_flight() > 0) return false;
    entry.first->req->complete(entry.second, entry.first->in.received);
    return true;
  });
  std::erase_if(staged_sends_ending_, [](auto& entry) {
    if (entry.first->end.in_flight() > 0) return false;
    const uint64_t written = entry.first->out.written;
    release_then_complete(std::move(entry.first), std::move(entry.second), written);
    return true;
  });
  initiator_.staging_progressed();
  if (state_ != State::kActive && state_ != State::kDraining) return;
  chunks_.unstall();
  if (state_ == State::kDraining) maybe_finalize();
  if (state_ == State::kActive) pump();
}

void EndpointCore::zero_copy_released(uint64_t id) {
  if (id & kDevmemPutCookie) {
    initiator_.zero_copy_released(id & ~kDevmemPutCookie);
    return;
  }
  if (id & kDevmemServedGetCookie) {
    target_.zero_copy_released(id & ~kDevmemServedGetCookie);
    return;
  }
  auto it = sends_.find(id);
  if (it == sends_.end() || !it->second->end.zero_copy()) return;  // failed already
  SendOp* op = it->second.get();
  op->end.released();
  if (op->awaiting_release && op->end.unreleased() == 0) {
    count_completed(stats_, op->end, op->out.length);
    complete_send(op, Status::ok());
  }
}

// ---------------------------------------------------------------------------
// A data stream's events
// ---------------------------------------------------------------------------

void EndpointCore::on_data_event(uint16_t index, uint32_t events) {
  if (state_ != State::kActive && state_ != State::kDraining) {
    if (linger_) linger_->progress();  // closed: the sockets are draining (see close)
    return;
  }
  if (events & EPOLLIN) liveness_.heard();
  DevmemTxStreams& zero_copy = paths_.zero_copy_streams();
  if ((events & EPOLLERR) && zero_copy.enabled(chunks_.fd(index))) {
    // Zero-copy completions of devmem sends (a socket error, if that is what this is,
    // is read below as before).
    Status s = zero_copy.drain(chunks_.fd(index), [this](uint64_t id) { zero_copy_released(id); });
    if (!s) {
      fail_locked(s.with_context("devmem TX completions on data stream " + std::to_string(index)));
      return;
    }
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (events & (EPOLLRDHUP | EPOLLHUP)) chunks_.hung_up(index);
    read_stream(index);
  }
  if (state_ == State::kActive && (events & EPOLLOUT)) {
    chunks_.writable(index);
    if (state_ == State::kActive) pump();
  }
  // Finishing a chunk may have queued a reply (a served PUT's RESP).
  if (state_ == State::kActive && ctl_tx_off_ < ctl_tx_.size()) flush_control();
}

}  // namespace remora::detail
