// transport/same_host_channel.cc — the shared-memory channel on an endpoint
// (docs/protocol.md, "Shared-memory channel"): SHM frames set it up once the peer passed
// the same-host checks (same_host_pulls.cc); then the control stream's bytes go through
// rings in shared memory (shm_channel.h) and the TCP control socket only says whether
// the peer lives.
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "core/log.h"
#include "mem/region_access.h"
#include "transport/endpoint_core.h"

namespace remora::detail {

bool EndpointCore::shm_negotiated() const noexcept {
  // A sealed endpoint (REMORA_ENCRYPT, which both sides must agree on) keeps its control
  // stream sealed on TCP: the rings would carry it in clear.
  return same_host_negotiated() && (params_.peer_capabilities & wire::kCapShmChannel) != 0 &&
         config_.encrypt == EncryptMode::kOff;
}

void EndpointCore::offer_shm() {
  if (!shm_negotiated()) {
    shm_reason_ = config_.encrypt != EncryptMode::kOff
                      ? "REMORA_ENCRYPT: the control stream stays sealed on TCP"
                      : "the peer does not offer a shared-memory channel (an older remora)";
    return;
  }
  auto channel = std::make_shared<ShmChannel>();
  auto offer = channel->create_rx();
  if (!offer) {
    shm_reason_ = "this side could not make its ring: " + offer.status().message();
    return;  // the peer's OFFER is declined (no shm_)
  }
  auto hid = engine_->add(channel->rx_wake_fd(), &ring_handler_, EPOLLIN);
  if (!hid) {
    shm_reason_ = "this side could not watch its ring: " + hid.status().message();
    return;
  }
  channel->hid = *hid;
  channel->registered = true;
  // Every progress round reads the ring (poll_ring), so the peer's writes wake this
  // side only once its progress thread is about to sleep: an eventfd write and an
  // epoll event per frame cost more than the frame (issue 37's latency).
  engine_->poll_every_round(*hid);
  shm_ = std::move(channel);
  // The control stream may move into shared memory, where a reset means the peer's
  // process is gone: not resumed (resume.cc), so nothing is kept for a replay.
  resume_ok_ = false;
  append_frame(*offer);
}

void EndpointCore::handle_shm(const wire::ShmFrame& f) {
  if (!shm_negotiated()) {
    protocol_error("SHM on an endpoint without a shared-memory channel negotiated");
    return;
  }
  const bool offered = shm_ != nullptr && shm_->offered();
  switch (f.op) {
    case wire::ShmOp::kOffer: {
      if (shm_peer_offered_) {
        protocol_error("a second SHM OFFER");
        return;
      }
      shm_peer_offered_ = true;
      if (!offered) {
        // This side refused the peer (same_host_reason_) or could not make its ring.
        append_frame(wire::ShmFrame{.op = wire::ShmOp::kDecline, .code = StatusCode::kUnsupported});
        return;
      }
      if (Status s = shm_->adopt_tx(static_cast<pid_t>(peer_pid_), f); !s.is_ok()) {
        shm_reason_ = "this side could not take the peer's ring: " + s.message();
        REMORA_LOG(kDebug, "endpoint to {}: control stays on TCP: {}", params_.peer, shm_reason_);
        append_frame(wire::ShmFrame{.op = wire::ShmOp::kDecline, .code = s.code()});
        return;
      }
      append_frame(wire::ShmFrame{.op = wire::ShmOp::kAccept});
      maybe_switch_tx();
      return;
    }
    case wire::ShmOp::kAccept:
      if (!offered || shm_peer_accepted_) {
        protocol_error(offered ? "a second SHM ACCEPT" : "SHM ACCEPT of a ring this side never offered");
        return;
      }
      shm_peer_accepted_ = true;
      maybe_switch_tx();
      return;
    case wire::ShmOp::kDecline:
      if (!offered || shm_peer_accepted_) {
        protocol_error("SHM DECLINE of a ring this side never offered, or after ACCEPT");
        return;
      }
      if (shm_reason_.empty()) {
        shm_reason_ = fmt::format("the peer could not take this side's ring ({})", to_string(f.code));
      }
      release_shm();
      return;
    case wire::ShmOp::kSwitch:
      if (!offered || !shm_peer_accepted_ || shm_->rx_on()) {
        protocol_error("SHM SWITCH before the peer took this side's ring, or twice");
        return;
      }
      shm_->rx_switched();
      shm_rx_switch_now_ = true;  // read_control reads the ring after this frame
      stats_.shm_rx = true;
      return;
  }
}

void EndpointCore::maybe_switch_tx() {
  if (shm_ == nullptr || !shm_->adopted() || !shm_peer_accepted_ || shm_->tx_on() || shm_->tx_switch_pending()) return;
  append_frame(wire::ShmFrame{.op = wire::ShmOp::kSwitch});
  shm_->switch_tx_at(ctl_tx_.size());  // every later byte goes into the peer's ring
  stats_.shm_tx = true;
  REMORA_LOG(kDebug, "endpoint to {}: control stream moves into shared memory", params_.peer);
}

void EndpointCore::on_ring_event(uint32_t /*events*/) {
  if (state_ != State::kActive) {
    if (linger_) linger_->progress();  // closed: the ring drains (see close)
    return;
  }
  if (ctl_blocked_ && shm_ != nullptr && shm_->tx_on()) {
    ctl_blocked_ = false;  // the peer read: room in its ring
    flush_control();
  }
  if (state_ == State::kActive) read_control();
}

void EndpointCore::control_event_after_switch(uint32_t events) {
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) return;
  std::byte probe[64];
  const net::IoResult r = net::recv_some(control_.get(), probe, sizeof probe);
  if (r.would_block()) return;
  if (r.moved()) {
    protocol_error("bytes on the TCP control connection after the peer's SHM SWITCH");
    return;
  }
  // The peer is gone. What it wrote into the ring before is there: read it first (a
  // GOODBYE, the last eager messages), as TCP would have delivered it before the FIN.
  read_control();
  if (state_ != State::kActive) return;
  handle_control_eof(r.eof() ? Status(StatusCode::kPeerFailed, "peer " + params_.peer + " closed the connection")
                             : net::errno_status(r.err, "recv on control stream from " + params_.peer));
}

int EndpointCore::poll_ring(bool arm) {
  if (state_ != State::kActive) {
    // Closed: the lingering close drains the ring (see close), asking to be woken.
    if (arm && linger_) linger_->progress();
    return 0;
  }
  if (shm_ == nullptr || !shm_->rx_on()) return 0;
  ring_arm_ = arm;
  const bool got = read_control();
  ring_arm_ = false;
  return got ? 1 : 0;
}

void EndpointCore::release_shm() {
  if (shm_ == nullptr) return;
  if (shm_->registered) {
    engine_->remove(shm_->rx_wake_fd(), shm_->hid);
    shm_->registered = false;
  }
  shm_.reset();
}

DirectMaps::Found EndpointCore::direct_target(const RemoteKey& key, uint64_t offset, uint64_t length, Access needed,
                                              std::span<const std::byte> local) {
  // Only with the control stream in shared memory both ways (the peer is this host's and
  // alive).
  if (state_ != State::kActive || shm_ == nullptr || !shm_->tx_on() || !shm_->rx_on()) return {};
  // The key first: one the peer refused (memory it does not share) costs no more here.
  const DirectMaps::Found found = direct_.find(key, offset, length, needed);
  if (found.at == nullptr && !found.unknown) return {};
  // With none of this side's one-sided operations in flight the usual way (a direct put
  // must not overtake an earlier put to the same bytes, nor an atomic an earlier one),
  // and from host memory.
  if (initiator_.outstanding() != 0 || !admission().is_ok() ||
      (local.data() != nullptr && !paths_.memory_of(local.data(), local.size()).on_host())) {
    return {};
  }
  if (found.unknown) {
    if (auto bytes = direct_.ask(key)) {
      append_frame(wire::MapFrame{.op = wire::MapOp::kRequest, .key = *bytes});
      flush_control();
    }
    return {};  // this one goes the usual way; the answer comes before its reply
  }
  return found;
}

Request EndpointCore::try_direct(Direction direction, std::span<const std::byte> local, const RemoteKey& key,
                                 uint64_t offset, std::optional<uint64_t> notify) {
  if (local.size() > SharedArenaState::kMaxBuffer || !direct_negotiated()) return {};
  engine::ProgressEngine::Guard guard(*engine_);
  const bool put = direction == Direction::kSend;
  const DirectMaps::Found found =
      direct_target(key, offset, local.size(), put ? Access::kRemoteWrite : Access::kRemoteRead, local);
  if (found.at == nullptr) return {};
  // A notification needs one of the places the peer reserved in its queue: without
  // one the put goes the usual way, and the peer answers whether there is room.
  if (notify && !direct_.has_credit()) return {};
  std::byte* at = found.at;
  // (An empty span's data() may be null, which memcpy must not be given.)
  if (put && !local.empty()) std::memcpy(at, local.data(), local.size());
  if (notify) {
    // Behind the bytes: the peer reads the frame after they are in its memory (the
    // ring's release and acquire), queues the notification exactly once, and counts
    // the frame in its next ACK (or PLACED_SHORT), which completes the put. The short
    // form also tells the peer of its PLACED frames this side handled: the answer to
    // a notified put carries the ACK, and both fit beside the ring's head.
    if (found.grant != 0) {
      // Encoded in place, as a message's EAGER prefix is (no dispatch on the frame's type).
      if (grants_.ack_owed()) answers_carry_acks_ = true;  // this one carries an ACK
      const size_t end = ctl_tx_.size();
      ctl_tx_.resize(end + wire::kFrameHeaderSize + wire::kPlacedShortBodySize);
      wire::encode_placed_short(wire::PlacedShortFrame{.grant = found.grant,
                                                       .length = static_cast<uint32_t>(local.size()),
                                                       .offset = offset,
                                                       .notify = *notify,
                                                       .handled = grants_.tell()},
                                std::span(ctl_tx_).subspan(end));
      ctl_resp_only_ = false;
    } else {
      append_frame(wire::PlacedFrame{.key = *found.bytes, .offset = offset, .length = local.size(), .notify = *notify});
    }
    flush_control();
    direct_.spend_credit();
    ++stats_.direct;
    ++stats_.puts;
    return initiator_.placed(local.size());
  }
  if (!put) {
    if (!local.empty()) std::memcpy(const_cast<std::byte*>(local.data()), at, local.size());
    // Deregistered while it copied: the usual way reports it (the peer refuses the key).
    if (!direct_.still_live()) return {};
  }
  ++stats_.direct;
  if (put) {
    ++stats_.puts;
    stats_.rma_bytes_put += local.size();
  } else {
    ++stats_.gets;
    stats_.rma_bytes_got += local.size();
  }
  return detail::done_request(local.size(), Tag{});
}

Request EndpointCore::try_direct_atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, wire::AtomicOp op,
                                        uint64_t operand, uint64_t compare) {
  if (!direct_negotiated()) return {};
  engine::ProgressEngine::Guard guard(*engine_);
  const DirectMaps::Found found = direct_target(key, offset, sizeof(uint64_t), Access::kRemoteAtomic, {});
  // The arena is mapped at a page boundary here and in the peer, so a word misaligned
  // here is misaligned there: the usual way, for the peer's refusal.
  if (found.at == nullptr || reinterpret_cast<uintptr_t>(found.at) % alignof(uint64_t) != 0) return {};
  // The same hardware atomic the peer's target executes (RmaTarget::serve_atomic), on the
  // same physical word: atomic with respect to every other remora atomic on it.
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(found.at));
  uint64_t previous = compare;
  if (op == wire::AtomicOp::kFetchAdd) {
    previous = word.fetch_add(operand, std::memory_order_acq_rel);
  } else {
    word.compare_exchange_strong(previous, operand, std::memory_order_acq_rel);
  }
  if (result != nullptr) *result = previous;
  ++stats_.direct;
  ++stats_.atomics;
  return detail::done_request(sizeof(uint64_t), Tag{});
}

void EndpointCore::handle_map(const wire::MapFrame& f) {
  if (!direct_negotiated()) {
    protocol_error("MAP on an endpoint without direct mappings negotiated");
    return;
  }
  if (f.op == wire::MapOp::kCredit || f.op == wire::MapOp::kAck) {
    Status s = f.op == wire::MapOp::kCredit ? direct_.add_credits(f.count) : initiator_.placed_acked(f.count);
    if (!s.is_ok()) protocol_error(s.message());
    return;
  }
  if (f.op == wire::MapOp::kRequest) {
    // Answered for any authentic key of a shared region; the peer checks windows and
    // rights of each access itself, as this side's target would.
    auto key = RemoteKey::deserialize(f.key);
    auto share =
        key ? (params_.registry != nullptr ? region_share(*params_.registry, *key)
                                           : Result<RegionShare>(Status(StatusCode::kInvalidKey, "no registry")))
            : Result<RegionShare>(Status(StatusCode::kInvalidKey, "the key does not parse"));
    const uint32_t number = share ? grants_.grant(*key) : 0;
    if (share && number == 0) {
      share = Status(StatusCode::kNoResource, "this side granted the peer as many keys as it keeps");
    }
    if (!share) {
      append_frame(wire::MapFrame{.op = wire::MapOp::kRefuse, .code = share.status().code(), .key = f.key});
    } else {
      append_frame(wire::MapFrame{.op = wire::MapOp::kGrant,
                                  .fd = static_cast<uint32_t>(share->fd),
                                  .grant = placed_short_negotiated() ? number : 0,
                                  .region_bytes = share->region_bytes,
                                  .key = f.key});
      credit_placed();  // the first grant gives the peer its places; later ones top them up
    }
    flush_control();
    return;
  }
  if (Status s = direct_.answer(static_cast<pid_t>(peer_pid_), f, placed_short_negotiated()); !s.is_ok()) {
    protocol_error(s.message());
    return;
  }
  if (!direct_.last_refusal().empty()) stats_.direct_reason = direct_.last_refusal();
}

void EndpointCore::handle_placed(const wire::PlacedFrame& f) {
  if (!direct_negotiated()) {
    protocol_error("PLACED on an endpoint without direct mappings negotiated");
    return;
  }
  deliver_placed(grants_.placed(f), f.offset, f.length, f.notify);
}

void EndpointCore::handle_placed_short(const wire::PlacedShortFrame& f) {
  if (!placed_short_negotiated()) {
    protocol_error("PLACED_SHORT on an endpoint without it negotiated");
    return;
  }
  // The peer's count of this side's PLACED frames it handled, as a MAP ACK's (the same
  // count as before is no news).
  if (f.handled != initiator_.placed_handled()) {
    if (Status s = initiator_.placed_acked(f.handled); !s.is_ok()) {
      protocol_error(s.message());
      return;
    }
  }
  deliver_placed(grants_.placed(f), f.offset, f.length, f.notify);
}

void EndpointCore::deliver_placed(const Result<RemoteKey>& key, uint64_t offset, uint64_t length, uint64_t notify) {
  if (!key) {
    protocol_error(key.status().message());
    return;
  }
  // The place the peer spent was promised in the queue's bound (credit_placed).
  notifications_.settle();
  const bool woke = notifications_.deliver(
      Notification{.value = notify, .region = key->region, .offset = key->offset + offset, .length = length});
  // A thread woken for it usually answers at once, often with a notified put of its
  // own, whose PLACED_SHORT carries the ACK; what it does not carry goes when this
  // endpoint's control stream is read next (read_control), in any thread's next round.
  // Held only while woken threads' answers carry it (a ping-pong); a thread that takes
  // notifications and answers nothing (or not with a notified put) gets the ACK at
  // once, the hold tried again every 64th time.
  bool hold = woke && placed_short_negotiated();
  if (hold && !answers_carry_acks_) hold = (++acks_not_held_ % 64) == 0;
  if (hold) {
    placed_ack_held_ = true;
  } else {
    ack_placed();
  }
  credit_placed();
}

void EndpointCore::release_placed_ack() {
  placed_ack_held_ = false;
  if (!grants_.ack_owed()) return;  // an answer carried it
  answers_carry_acks_ = false;
  ack_placed();
  flush_control();
}

void EndpointCore::ack_placed() {
  if (grants_.ack_owed()) append_frame(wire::MapFrame{.op = wire::MapOp::kAck, .count = grants_.tell()});
}

void EndpointCore::credit_placed() {
  const uint64_t limit = config_.max_unexpected;
  const uint64_t want = std::min<uint64_t>(DirectGrants::kCredits, limit / 4);
  const uint64_t held = grants_.credits_out();
  // Half the places at a time, so a CREDIT frame goes once per kCredits / 2 puts.
  if (want == 0 || held > want / 2) return;
  uint64_t n = 0;
  while (held + n < want && !notifications_.full(limit)) {
    notifications_.promise();
    ++n;
  }
  if (n == 0) return;
  grants_.credited(n);
  append_frame(wire::MapFrame{.op = wire::MapOp::kCredit, .count = n});
  flush_control();
}

}  // namespace remora::detail
