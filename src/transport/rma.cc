// transport/rma.cc — one-sided operations on an endpoint: the initiator side (put,
// get, atomics, flush, the peer's request window) and the passive target side
// (validate the key before touching a byte, place or read the bytes inside
// RegionAccess brackets, reply with RESP), plus notification delivery.
//
// The wire rules are in docs/protocol.md ("One-sided operations"); the semantics
// users see are in include/remora/endpoint.h.
#include <atomic>
#include <cstring>
#include <utility>

#include "core/log.h"
#include "transport/endpoint_core.h"

namespace remora {
namespace detail {

using wire::AtomicFrame;
using wire::AtomicOp;
using wire::ChunkKind;
using wire::GetFrame;
using wire::PutFrame;
using wire::RespFrame;
using wire::RmaStatus;

namespace {

std::string_view describe(RmaStatus s) {
  switch (s) {
    case RmaStatus::kOk: return "ok";
    case RmaStatus::kInvalidKey: return "invalid key (forged, stale or unknown)";
    case RmaStatus::kOutOfRange: return "range outside the key's window or the region";
    case RmaStatus::kAccessDenied: return "the key or region lacks the access right";
    case RmaStatus::kMisaligned: return "atomic word not 8-byte aligned";
    case RmaStatus::kNoResource: return "the target's notification queue is full";
    case RmaStatus::kRevoked: return "the region was deregistered during the operation";
    case RmaStatus::kDeviceFailed: return "the target's device memory copy failed";
  }
  return "unknown";
}

StatusCode code_of(RmaStatus s) {
  switch (s) {
    case RmaStatus::kOk: return StatusCode::kOk;
    case RmaStatus::kInvalidKey: return StatusCode::kInvalidKey;
    case RmaStatus::kOutOfRange: return StatusCode::kOutOfRange;
    case RmaStatus::kAccessDenied: return StatusCode::kAccessDenied;
    case RmaStatus::kMisaligned: return StatusCode::kInvalidArgument;
    case RmaStatus::kNoResource: return StatusCode::kNoResource;
    case RmaStatus::kRevoked: return StatusCode::kInvalidKey;
    case RmaStatus::kDeviceFailed: return StatusCode::kDeviceFailed;
  }
  return StatusCode::kInternal;
}

RmaStatus verdict_of(StatusCode code) {
  switch (code) {
    case StatusCode::kOutOfRange: return RmaStatus::kOutOfRange;
    case StatusCode::kAccessDenied: return RmaStatus::kAccessDenied;
    default: return RmaStatus::kInvalidKey;
  }
}

const char* op_name(uint8_t kind) {
  static constexpr const char* kNames[] = {"put", "get", "atomic"};
  return kNames[kind];
}

}  // namespace

// ---------------------------------------------------------------------------
// Initiator: posting
// ---------------------------------------------------------------------------

Request EndpointCore::put(std::span<const std::byte> local, const RemoteKey& key, uint64_t offset,
                          const PutOptions& options) {
  auto op = std::make_unique<RmaOp>();
  op->kind = RmaOp::Kind::kPut;
  op->key = key.serialize();
  op->offset = offset;
  op->length = local.size();
  op->src = local.data();
  op->has_notify = options.notify.has_value();
  op->notify = options.notify.value_or(0);
  return post_rma(std::move(op));
}

Request EndpointCore::get(std::span<std::byte> local, const RemoteKey& key, uint64_t offset) {
  auto op = std::make_unique<RmaOp>();
  op->kind = RmaOp::Kind::kGet;
  op->key = key.serialize();
  op->offset = offset;
  op->length = local.size();
  op->dst = local.data();
  op->sink = HostSink(local.data());
  op->in.kind = ChunkKind::kGet;
  op->in.length = local.size();
  op->in.sink = &op->sink;
  return post_rma(std::move(op));
}

Request EndpointCore::atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, AtomicOp kind, uint64_t operand,
                             uint64_t compare) {
  auto op = std::make_unique<RmaOp>();
  op->kind = RmaOp::Kind::kAtomic;
  op->key = key.serialize();
  op->offset = offset;
  op->length = sizeof(uint64_t);
  op->atomic = kind;
  op->operand = operand;
  op->compare = kind == AtomicOp::kCompareSwap ? compare : 0;
  op->result = result;
  return post_rma(std::move(op));
}

Request EndpointCore::post_rma(std::unique_ptr<RmaOp> op) {
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused) return Request(RequestState::completed(std::move(refused), 0, Tag{}));
  op->req = RequestState::make(engine_, Tag{});
  op->id = next_rma_id_++;
  op->inline_class = op->kind == RmaOp::Kind::kAtomic || op->length <= eager_limit_;
  if (op->kind != RmaOp::Kind::kGet) {
    op->seq = next_rma_seq_++;
    seq_done_.push_back(false);
  } else {
    op->in.id = op->id;
  }
  Request r(op->req);
  RmaOp* raw = op.get();
  rma_ops_.emplace(raw->id, std::move(op));
  ++outstanding_;
  if (rma_waiting_.empty() && rma_issued_ < params_.peer_rma_window) {
    const bool pushes_data = raw->kind == RmaOp::Kind::kPut && !raw->inline_class;
    issue_rma(raw);
    // One round at most: the first chunks go out from this thread, and the rest moves
    // on progress rounds (the progress thread's, or a waiting thread's), so posting
    // returns in bounded time however large the put.
    pump(/*one_round=*/true);  // may complete (and free) the op
    if (pushes_data) engine_->driven_by_caller();  // see there: this thread just pushed data
  } else {
    rma_waiting_.push_back(raw);
  }
  return r;
}

void EndpointCore::issue_rma(RmaOp* op) {
  op->issued = true;
  ++rma_issued_;
  switch (op->kind) {
    case RmaOp::Kind::kPut:
      ++stats_.puts;
      append_frame(PutFrame{.op_id = op->id,
                            .key = op->key,
                            .offset = op->offset,
                            .length = op->length,
                            .has_notify = op->has_notify,
                            .notify = op->notify,
                            .inline_data = op->inline_class,
                            .payload = op->inline_class ? std::span(op->src, op->length) : std::span<const std::byte>()});
      if (!op->inline_class) {
        op->source = HostSource(op->src);
        op->out.kind = ChunkKind::kPut;
        op->out.owner = op->id;
        op->out.chunk_id = op->id;
        op->out.length = op->length;
        op->out.source = &op->source;
        chunks_.ready(&op->out);
      }
      return;
    case RmaOp::Kind::kGet:
      ++stats_.gets;
      append_frame(GetFrame{.op_id = op->id, .key = op->key, .offset = op->offset, .length = op->length});
      return;
    case RmaOp::Kind::kAtomic:
      ++stats_.atomics;
      append_frame(AtomicFrame{.op_id = op->id,
                               .key = op->key,
                               .offset = op->offset,
                               .op = op->atomic,
                               .operand = op->operand,
                               .compare = op->compare});
      return;
  }
}

void EndpointCore::issue_waiting_rma() {
  while (!rma_waiting_.empty() && rma_issued_ < params_.peer_rma_window && alive()) {
    RmaOp* op = rma_waiting_.front();
    rma_waiting_.pop_front();
    issue_rma(op);
  }
}

Request EndpointCore::flush() {
  engine::ProgressEngine::Guard guard(*engine_);
  if (state_ != State::kActive) {
    return Request(RequestState::completed(
        failure_.is_ok() ? Status(StatusCode::kAborted, "endpoint is not active") : failure_, 0, Tag{}));
  }
  const uint64_t covers = next_rma_seq_ - 1;
  Status earlier = std::exchange(unflushed_failure_, Status::ok());
  flushed_through_ = covers;
  if (!pending_through(covers)) {
    return Request(RequestState::completed(std::move(earlier), 0, Tag{}));
  }
  Flush f;
  f.covers = covers;
  f.first_error = std::move(earlier);
  f.req = RequestState::make(engine_, Tag{});
  Request r(f.req);
  flushes_.push_back(std::move(f));
  return r;
}

// ---------------------------------------------------------------------------
// Initiator: completion
// ---------------------------------------------------------------------------

void EndpointCore::complete_rma(RmaOp* op, const Status& s) {
  if (op->kind != RmaOp::Kind::kGet) {
    seq_done_[op->seq - seq_base_] = true;
    while (!seq_done_.empty() && seq_done_.front()) {
      seq_done_.pop_front();
      ++seq_base_;
    }
    if (!s.is_ok()) {
      for (Flush& f : flushes_) {
        if (f.covers >= op->seq && f.first_error.is_ok()) f.first_error = s;
      }
      if (op->seq > flushed_through_ && unflushed_failure_.is_ok()) unflushed_failure_ = s;
    }
  }
  if (s.is_ok()) {
    if (op->kind == RmaOp::Kind::kPut) stats_.rma_bytes_put += op->length;
    if (op->kind == RmaOp::Kind::kGet) stats_.rma_bytes_got += op->length;
  }
  op->req->complete(s, s.is_ok() ? op->length : 0);
  --outstanding_;
  rma_ops_.erase(op->id);
  while (!flushes_.empty() && !pending_through(flushes_.front().covers)) {
    flushes_.front().req->complete(flushes_.front().first_error, 0);
    flushes_.pop_front();
  }
}

void EndpointCore::maybe_finish_get(RmaOp* op) {
  if (!op->responded || op->in.placed != op->in.announced) return;
  complete_rma(op, op->in.failure.is_ok() ? op->status : op->in.failure);
}

void EndpointCore::handle_resp(const RespFrame& f) {
  auto it = rma_ops_.find(f.op_id);
  if (it == rma_ops_.end() || !it->second->issued || it->second->responded) {
    protocol_error("RESP for unknown operation id " + std::to_string(f.op_id));
    return;
  }
  RmaOp* op = it->second.get();
  const auto kind = static_cast<uint8_t>(op->kind);
  if (f.inline_data && !(op->kind == RmaOp::Kind::kGet && op->inline_class)) {
    protocol_error(std::string("RESP with inline data for a ") + op_name(kind) +
                   (op->kind == RmaOp::Kind::kGet ? " of " + std::to_string(op->length) + " bytes" : ""));
    return;
  }
  if (f.value != 0 && op->kind != RmaOp::Kind::kAtomic) {
    protocol_error(std::string("RESP with a value for a ") + op_name(kind));
    return;
  }
  if (f.status == RmaStatus::kMisaligned && op->kind != RmaOp::Kind::kAtomic) {
    protocol_error(std::string("RESP 'misaligned' for a ") + op_name(kind));
    return;
  }
  op->responded = true;
  --rma_issued_;
  op->status = f.status == RmaStatus::kOk
                   ? Status::ok()
                   : Status(code_of(f.status), fmt::format("{} of {} bytes at offset {} refused by peer {}: {}",
                                                           op_name(kind), op->length, op->offset, params_.peer,
                                                           describe(f.status)));
  switch (op->kind) {
    case RmaOp::Kind::kPut:
      if (!op->inline_class && op->out.written != op->length) {
        protocol_error("RESP for put " + std::to_string(op->id) + " before all of its data was sent");
        return;
      }
      complete_rma(op, op->status);
      break;
    case RmaOp::Kind::kAtomic:
      if (f.status == RmaStatus::kOk && op->result != nullptr) *op->result = f.value;
      complete_rma(op, op->status);
      break;
    case RmaOp::Kind::kGet:
      if (op->inline_class) {
        if (f.status == RmaStatus::kOk) {
          if (!f.inline_data || f.payload.size() != op->length) {
            protocol_error(fmt::format("RESP for a {}-byte get carries {} inline bytes", op->length,
                                       f.inline_data ? f.payload.size() : 0));
            return;
          }
          if (op->length > 0) std::memcpy(op->dst, f.payload.data(), op->length);
        }
        complete_rma(op, op->status);
      } else {
        if (f.status == RmaStatus::kOk && op->in.announced != op->length) {
          protocol_error(fmt::format("RESP ok for get {} after {} of {} bytes were announced", op->id,
                                     op->in.announced, op->length));
          return;
        }
        maybe_finish_get(op);
      }
      break;
  }
  issue_waiting_rma();
}

void EndpointCore::fail_rma_locked(const Status& why) {
  rma_waiting_.clear();
  for (auto& [id, op] : rma_ops_) op->req->complete(why, 0);
  outstanding_ -= std::min<uint64_t>(outstanding_, rma_ops_.size());
  rma_ops_.clear();
  rma_issued_ = 0;
  seq_done_.clear();
  seq_base_ = next_rma_seq_;
  for (Flush& f : flushes_) f.req->complete(why, 0);
  flushes_.clear();
  served_puts_.clear();
  served_gets_.clear();
  notes_promised_ = 0;
  wake_notification_waiters();
}

// ---------------------------------------------------------------------------
// Target
// ---------------------------------------------------------------------------

RmaStatus EndpointCore::check_access(const wire::KeyBytes& key_bytes, uint64_t offset, uint64_t length, Access needed,
                                     RegionAccess* access) {
  auto key = RemoteKey::deserialize(key_bytes);
  if (!key) {
    REMORA_LOG(kDebug, "peer {}: refused a malformed key: {}", params_.peer, key.status().message());
    ++stats_.refused;
    return RmaStatus::kInvalidKey;
  }
  if (params_.registry == nullptr) {
    ++stats_.refused;
    return RmaStatus::kInvalidKey;
  }
  auto granted = acquire_access(*params_.registry, *key, offset, length, needed);
  if (!granted) {
    REMORA_LOG(kDebug, "peer {}: refused access: {}", params_.peer, granted.status().message());
    ++stats_.refused;
    return verdict_of(granted.status().code());
  }
  *access = std::move(*granted);
  return RmaStatus::kOk;
}

bool EndpointCore::admit_served_request(uint64_t op_id) {
  if (served_puts_.contains(op_id) || served_gets_.contains(op_id)) {
    protocol_error("request reuses the id " + std::to_string(op_id) + " of an operation still in service");
    return false;
  }
  if (served_puts_.size() + served_gets_.size() + unsent_resps_.size() >= config_.rma_window) {
    protocol_error("more than " + std::to_string(config_.rma_window) +
                   " one-sided requests in service (REMORA_RMA_WINDOW advertised in the handshake)");
    return false;
  }
  return true;
}

void EndpointCore::send_resp(uint64_t op_id, RmaStatus status, uint64_t value) {
  append_frame(RespFrame{.op_id = op_id, .status = status, .value = value, .inline_data = false, .payload = {}});
  unsent_resps_.push_back(ctl_tx_.size());
}

void EndpointCore::handle_put(const PutFrame& f) {
  if (!admit_served_request(f.op_id)) return;
  const bool inline_class = f.length <= eager_limit_;
  if (f.inline_data != inline_class) {
    protocol_error(fmt::format("PUT of {} bytes {} inline (negotiated eager limit {})", f.length,
                               f.inline_data ? "sent" : "not sent", eager_limit_));
    return;
  }

  RegionAccess access;
  RmaStatus verdict = check_access(f.key, f.offset, f.length, Access::kRemoteWrite, &access);
  const bool queue_full = notes_.size() + note_handler_queue_.size() + notes_promised_ >= config_.max_unexpected;
  if (verdict == RmaStatus::kOk && f.has_notify && queue_full) {
    ++stats_.refused;
    verdict = RmaStatus::kNoResource;
  }

  if (inline_class) {
    if (verdict == RmaStatus::kOk && f.length > 0) {
      if (access.begin()) {
        std::memcpy(access.address(), f.payload.data(), f.length);
        access.end();
      } else {
        verdict = RmaStatus::kRevoked;
      }
    }
    if (verdict == RmaStatus::kOk) {
      ++stats_.served_puts;
      if (f.has_notify) {
        deliver_notification(Notification{.value = f.notify,
                                           .region = access.region(),
                                           .offset = access.region_offset(),
                                           .length = f.length});
      }
    }
    send_resp(f.op_id, verdict);
    return;
  }

  auto sp = std::make_unique<ServedPut>();
  sp->op_id = f.op_id;
  sp->verdict = verdict;
  sp->has_notify = f.has_notify && verdict == RmaStatus::kOk;
  sp->notify = f.notify;
  sp->access = std::move(access);
  sp->in.kind = ChunkKind::kPut;
  sp->in.id = f.op_id;
  sp->in.length = f.length;
  if (verdict == RmaStatus::kOk) {
    sp->sink = RegionSink(&sp->access, &discard_);
    sp->in.sink = &sp->sink;
  } else {
    sp->in.sink = &discard_;  // the initiator sends the bytes anyway; they are drained
  }
  if (sp->has_notify) ++notes_promised_;
  served_puts_.emplace(f.op_id, std::move(sp));
}

void EndpointCore::finish_served_put(ServedPut* sp) {
  if (sp->has_notify) --notes_promised_;
  if (sp->verdict == RmaStatus::kOk && sp->sink.revoked()) sp->verdict = RmaStatus::kRevoked;
  // A host RegionSink never fails a chunk; a device sink that fails a copy will need a
  // status of its own on the wire (see chunk_io.h). Until then: "no resource".
  if (sp->verdict == RmaStatus::kOk && !sp->in.failure.is_ok()) sp->verdict = RmaStatus::kNoResource;
  if (sp->verdict == RmaStatus::kOk) {
    ++stats_.served_puts;
    if (sp->has_notify) {
      deliver_notification(Notification{.value = sp->notify,
                                         .region = sp->access.region(),
                                         .offset = sp->access.region_offset(),
                                         .length = sp->in.length});
    }
  }
  send_resp(sp->op_id, sp->verdict);
  served_puts_.erase(sp->op_id);
}

void EndpointCore::handle_get(const GetFrame& f) {
  if (!admit_served_request(f.op_id)) return;

  RegionAccess access;
  RmaStatus verdict = check_access(f.key, f.offset, f.length, Access::kRemoteRead, &access);
  if (f.length <= eager_limit_) {
    if (verdict == RmaStatus::kOk) {
      if (access.begin()) {
        append_frame(RespFrame{.op_id = f.op_id,
                               .status = RmaStatus::kOk,
                               .value = 0,
                               .inline_data = true,
                               .payload = std::span<const std::byte>(access.address(), f.length)});
        access.end();
        unsent_resps_.push_back(ctl_tx_.size());
        ++stats_.served_gets;
        return;
      }
      verdict = RmaStatus::kRevoked;
    }
    send_resp(f.op_id, verdict);
    return;
  }
  if (verdict != RmaStatus::kOk) {
    send_resp(f.op_id, verdict);  // nothing announced: the initiator completes on this
    return;
  }
  auto sg = std::make_unique<ServedGet>();
  sg->op_id = f.op_id;
  sg->access = std::move(access);
  sg->source = RegionSource(&sg->access);
  sg->out.kind = ChunkKind::kGet;
  sg->out.owner = f.op_id;
  sg->out.chunk_id = f.op_id;
  sg->out.length = f.length;
  sg->out.source = &sg->source;
  chunks_.ready(&sg->out);
  served_gets_.emplace(f.op_id, std::move(sg));
}

void EndpointCore::handle_atomic(const AtomicFrame& f) {
  if (!admit_served_request(f.op_id)) return;
  RegionAccess access;
  RmaStatus verdict = check_access(f.key, f.offset, sizeof(uint64_t), Access::kRemoteAtomic, &access);
  uint64_t previous = 0;
  if (verdict == RmaStatus::kOk && reinterpret_cast<uintptr_t>(access.address()) % alignof(uint64_t) != 0) {
    ++stats_.refused;
    verdict = RmaStatus::kMisaligned;
  }
  if (verdict == RmaStatus::kOk) {
    if (access.begin()) {
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(access.address()));
      if (f.op == AtomicOp::kFetchAdd) {
        previous = word.fetch_add(f.operand, std::memory_order_acq_rel);
      } else {
        previous = f.compare;
        word.compare_exchange_strong(previous, f.operand, std::memory_order_acq_rel);
      }
      access.end();
      ++stats_.served_atomics;
    } else {
      verdict = RmaStatus::kRevoked;
    }
  }
  send_resp(f.op_id, verdict, verdict == RmaStatus::kOk ? previous : 0);
}

// ---------------------------------------------------------------------------
// Notifications
// ---------------------------------------------------------------------------

void EndpointCore::deliver_notification(const Notification& n) {
  ++stats_.notifications;
  if (note_handler_) {
    note_handler_queue_.push_back(n);
    if (!note_delivering_) engine_->defer([self = shared_from_this()] { self->run_notification_handler(); });
    return;
  }
  notes_.push_back(n);
  if (!note_waiters_.empty()) {
    note_waiters_.front()->complete(Status::ok(), 0);
    note_waiters_.pop_front();
    hold_resps_ = true;  // its answer will likely carry this put's RESP (see endpoint_core.h)
  }
}

void EndpointCore::wake_notification_waiters() {
  for (auto& w : note_waiters_) w->complete(Status::ok(), 0);
  note_waiters_.clear();
}

void EndpointCore::run_notification_handler() {
  for (;;) {
    std::deque<Notification> batch;
    std::shared_ptr<std::function<void(const Notification&)>> handler;
    {
      engine::ProgressEngine::Guard guard(*engine_);
      if (note_delivering_ || !note_handler_ || note_handler_queue_.empty()) return;
      note_delivering_ = true;
      batch.swap(note_handler_queue_);
      handler = note_handler_;
    }
    for (const Notification& n : batch) (*handler)(n);
    engine::ProgressEngine::Guard guard(*engine_);
    note_delivering_ = false;
  }
}

std::optional<Notification> EndpointCore::poll_notification() {
  engine_->try_progress();
  engine::ProgressEngine::Guard guard(*engine_);
  if (notes_.empty()) return std::nullopt;
  Notification n = notes_.front();
  notes_.pop_front();
  return n;
}

Result<Notification> EndpointCore::wait_notification(Duration timeout) {
  const bool forever = timeout == kForever;
  const auto deadline = forever ? engine::Clock::time_point::max() : engine::Clock::now() + timeout;
  for (;;) {
    std::shared_ptr<RequestState> waiter;
    {
      engine::ProgressEngine::Guard guard(*engine_);
      if (!notes_.empty()) {
        Notification n = notes_.front();
        notes_.pop_front();
        return n;
      }
      if (state_ != State::kActive) {
        return failure_.is_ok() ? Status(StatusCode::kAborted, "endpoint is not active") : failure_;
      }
      waiter = RequestState::make(engine_, Tag{});
      note_waiters_.push_back(waiter);
    }
    Duration left = kForever;
    if (!forever) {
      const auto now = engine::Clock::now();
      left = now >= deadline ? Duration::zero() : std::chrono::duration_cast<Duration>(deadline - now);
    }
    Status st = Request(waiter).wait(left);
    if (st.code() == StatusCode::kTimeout) {
      engine::ProgressEngine::Guard guard(*engine_);
      std::erase(note_waiters_, waiter);
      if (!notes_.empty()) {
        Notification n = notes_.front();
        notes_.pop_front();
        return n;
      }
      return Status(StatusCode::kTimeout, "no notification from " + params_.peer + " within the timeout");
    }
  }
}

void EndpointCore::set_notification_handler(std::function<void(const Notification&)> handler) {
  engine::ProgressEngine::Guard guard(*engine_);
  if (handler) {
    note_handler_ = std::make_shared<std::function<void(const Notification&)>>(std::move(handler));
    note_handler_queue_.insert(note_handler_queue_.end(), notes_.begin(), notes_.end());
    notes_.clear();
    if (!note_handler_queue_.empty()) engine_->defer([self = shared_from_this()] { self->run_notification_handler(); });
  } else {
    note_handler_.reset();
    notes_.insert(notes_.begin(), note_handler_queue_.begin(), note_handler_queue_.end());
    note_handler_queue_.clear();
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Endpoint (public handle): one-sided operations
// ---------------------------------------------------------------------------

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
