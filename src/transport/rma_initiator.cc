// transport/rma_initiator.cc — see rma_initiator.h. The wire rules are in
// docs/protocol.md ("One-sided operations"); the semantics users see are in
// include/remora/endpoint.h.
#include "transport/rma_initiator.h"

#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "datapath/checksum.h"

namespace remora::detail {

using wire::AtomicOp;
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
    case RmaStatus::kChecksum: return "the data failed its checksum (CRC-32C) at the target";
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
    case RmaStatus::kChecksum: return StatusCode::kDataCorrupt;
  }
  return StatusCode::kInternal;
}

const char* op_name(uint8_t kind) {
  static constexpr const char* kNames[] = {"put", "get", "atomic"};
  return kNames[kind];
}

}  // namespace

RmaInitiator::RmaInitiator(Owner& owner, std::shared_ptr<engine::ProgressEngine> engine, uint64_t peer_window,
                           std::string peer, EndpointStats& stats)
    : owner_(owner), engine_(std::move(engine)), peer_window_(peer_window), peer_(std::move(peer)), stats_(stats) {}

RmaInitiator::~RmaInitiator() = default;

// ---------------------------------------------------------------------------
// Posting
// ---------------------------------------------------------------------------

std::unique_ptr<RmaInitiator::Op> RmaInitiator::new_op(Op::Kind kind, const RemoteKey& key, uint64_t offset,
                                                      uint64_t length, bool inline_class) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->key = key.serialize();
  op->offset = offset;
  op->length = length;
  op->inline_class = inline_class;
  return op;
}

RmaInitiator::Posted RmaInitiator::put(PathEnd source, const RemoteKey& key, uint64_t offset, const PutOptions& options,
                                       std::vector<std::byte> segments) {
  auto op = new_op(Op::Kind::kPut, key, offset, source.length(), source.travels_inline());
  op->end = std::move(source);
  op->segments = std::move(segments);
  op->has_notify = options.notify.has_value();
  op->notify = options.notify.value_or(0);
  return post(std::move(op));
}

RmaInitiator::Posted RmaInitiator::get(PathEnd sink, const RemoteKey& key, uint64_t offset,
                                       std::vector<std::byte> segments) {
  auto op = new_op(Op::Kind::kGet, key, offset, sink.length(), sink.travels_inline());
  op->end = std::move(sink);
  op->segments = std::move(segments);
  op->in.kind = wire::ChunkKind::kGet;
  op->in.length = op->length;
  op->in.sink = op->end.sink(op->in);
  return post(std::move(op));
}

RmaInitiator::Posted RmaInitiator::atomic(uint64_t* result, const RemoteKey& key, uint64_t offset, AtomicOp kind,
                                          uint64_t operand, uint64_t compare) {
  // The operands travel in the ATOMIC frame, the result in the RESP.
  auto op = new_op(Op::Kind::kAtomic, key, offset, sizeof(uint64_t), /*inline_class=*/true);
  op->atomic = kind;
  op->operand = operand;
  op->compare = kind == AtomicOp::kCompareSwap ? compare : 0;
  op->result = result;
  return post(std::move(op));
}

RmaInitiator::Posted RmaInitiator::post(std::unique_ptr<Op> op) {
  op->req = RequestState::make(engine_, Tag{});
  op->id = next_id_++;
  if (op->kind != Op::Kind::kGet) {
    op->seq = next_seq_++;
    seq_done_.push_back(false);
  } else {
    op->in.id = op->id;
  }
  Posted posted{.request = detail::make_request(op->req)};
  Op* raw = op.get();
  ops_.emplace(raw->id, std::move(op));
  if (waiting_.empty() && issued_ < peer_window_) {
    posted.issued = true;
    posted.pushes_data = raw->kind == Op::Kind::kPut && !raw->inline_class;
    issue(raw);
  } else {
    waiting_.push_back(raw);
  }
  return posted;
}

void RmaInitiator::issue(Op* op) {
  op->issued = true;
  ++issued_;
  switch (op->kind) {
    case Op::Kind::kPut: issue_put(op); return;
    case Op::Kind::kGet:
      ++stats_.gets;
      owner_.queue_request(wire::GetFrame{.op_id = op->id,
                                          .key = op->key,
                                          .offset = op->offset,
                                          .length = op->length,
                                          .segments = wire::SegmentList(op->segments)});
      return;
    case Op::Kind::kAtomic:
      ++stats_.atomics;
      owner_.queue_request(wire::AtomicFrame{.op_id = op->id,
                                             .key = op->key,
                                             .offset = op->offset,
                                             .op = op->atomic,
                                             .operand = op->operand,
                                             .compare = op->compare});
      return;
  }
}

void RmaInitiator::issue_put(Op* op) {
  ++stats_.puts;
  auto frame = [op](std::span<const std::byte> payload) {
    return wire::PutFrame{.op_id = op->id,
                          .key = op->key,
                          .offset = op->offset,
                          .length = op->length,
                          .has_notify = op->has_notify,
                          .notify = op->notify,
                          .inline_data = op->inline_class,
                          .payload = payload,
                          .segments = wire::SegmentList(op->segments)};
  };
  if (op->inline_class) {
    // The endpoint posts an inline put only once its bytes can be read at once.
    (void)op->end.read_inline([&](std::span<const std::byte> bytes) { owner_.queue_request(frame(bytes)); },
                              [] { return ChunkSource::InlineLater(); });
    return;
  }
  owner_.queue_request(frame({}));
  op->out.kind = wire::ChunkKind::kPut;
  op->out.owner = op->id;
  op->out.chunk_id = op->id;
  op->out.length = op->length;
  op->out.source = op->end.source();
  owner_.send_chunks(&op->out);
}

void RmaInitiator::issue_waiting() {
  while (!waiting_.empty() && issued_ < peer_window_) {
    Op* op = waiting_.front();
    waiting_.pop_front();
    issue(op);
  }
}

Request RmaInitiator::flush() {
  const uint64_t covers = next_seq_ - 1;
  Status earlier = std::exchange(unflushed_failure_, Status::ok());
  flushed_through_ = covers;
  if (!pending_through(covers)) {
    return detail::make_request(RequestState::completed(std::move(earlier), 0, Tag{}));
  }
  Flush f;
  f.covers = covers;
  f.first_error = std::move(earlier);
  f.req = RequestState::make(engine_, Tag{});
  Request r = detail::make_request(f.req);
  flushes_.push_back(std::move(f));
  return r;
}

// ---------------------------------------------------------------------------
// Completion
// ---------------------------------------------------------------------------

void RmaInitiator::seq_completed(uint64_t seq, const Status& s) {
  seq_done_[seq - seq_base_] = true;
  while (!seq_done_.empty() && seq_done_.front()) {
    seq_done_.pop_front();
    ++seq_base_;
  }
  if (!s.is_ok()) {
    for (Flush& f : flushes_) {
      if (f.covers >= seq && f.first_error.is_ok()) f.first_error = s;
    }
    if (seq > flushed_through_ && unflushed_failure_.is_ok()) unflushed_failure_ = s;
  }
}

void RmaInitiator::complete(Op* op, const Status& s) {
  if (op->kind != Op::Kind::kGet) seq_completed(op->seq, s);
  if (s.is_ok()) {
    if (op->kind == Op::Kind::kPut) stats_.rma_bytes_put += op->length;
    if (op->kind == Op::Kind::kGet) stats_.rma_bytes_got += op->length;
    count_completed(stats_, op->end, op->length);
  }
  op->req->complete(s, s.is_ok() ? op->length : 0);
  ops_.erase(op->id);
  finish_flushes();
}

void RmaInitiator::finish_flushes() {
  while (!flushes_.empty() && !pending_through(flushes_.front().covers)) {
    flushes_.front().req->complete(flushes_.front().first_error, 0);
    flushes_.pop_front();
  }
}

Request RmaInitiator::placed(uint64_t length) {
  Placed p{.seq = next_seq_++, .length = length, .req = spare_placed_.take(engine_, Tag{})};
  seq_done_.push_back(false);
  ++placed_sent_;
  Request r = detail::make_request(p.req);
  placed_.push_back(std::move(p));
  return r;
}

Status RmaInitiator::placed_acked(uint64_t handled) {
  if (handled <= placed_handled_ || handled > placed_sent_) {
    return Status(StatusCode::kProtocol, fmt::format("MAP ACK of {} PLACED frames handled, after {} of {} sent",
                                                     handled, placed_handled_, placed_sent_));
  }
  for (; placed_handled_ < handled; ++placed_handled_) {
    Placed p = std::move(placed_.front());
    placed_.pop_front();
    seq_completed(p.seq, Status::ok());
    stats_.rma_bytes_put += p.length;
    p.req->complete(Status::ok(), p.length);
    spare_placed_.keep(std::move(p.req));
  }
  finish_flushes();
  return Status::ok();
}

void RmaInitiator::maybe_finish_get(Op* op) {
  if (!op->responded || op->in.placed != op->in.announced) return;
  complete(op, op->in.failure.is_ok() ? op->status : op->in.failure);
}

void RmaInitiator::reply_placed(uint64_t op_id, const Status& placed) {
  if (auto it = ops_.find(op_id); it != ops_.end()) {
    Op* op = it->second.get();
    complete(op, placed.is_ok() ? op->status : placed);
    return;
  }
  staging_progressed();  // it failed meanwhile: it may wait for this copy (draining_)
}

void RmaInitiator::staging_progressed() {
  std::erase_if(draining_, [](auto& entry) {
    if (entry.first->end.in_flight() > 0) return false;
    entry.first->req->complete(entry.second, 0);
    return true;
  });
}

RxTransfer* RmaInitiator::get_transfer(uint64_t op_id) {
  auto it = ops_.find(op_id);
  if (it == ops_.end()) return nullptr;
  Op* op = it->second.get();
  if (op->kind != Op::Kind::kGet || op->inline_class || !op->issued || op->responded) return nullptr;
  return &op->in;
}

void RmaInitiator::get_received(uint64_t op_id) {
  auto it = ops_.find(op_id);
  if (it != ops_.end()) maybe_finish_get(it->second.get());
}

bool RmaInitiator::resp_fits(const Op& op, const wire::RespFrame& f) {
  const auto kind = static_cast<uint8_t>(op.kind);
  if (f.inline_data && !(op.kind == Op::Kind::kGet && op.inline_class)) {
    owner_.protocol_error(std::string("RESP with inline data for a ") + op_name(kind) +
                          (op.kind == Op::Kind::kGet ? " of " + std::to_string(op.length) + " bytes" : ""));
    return false;
  }
  if (f.status == RmaStatus::kChecksum && op.kind != Op::Kind::kPut) {
    owner_.protocol_error(std::string("RESP 'checksum' for a ") + op_name(kind));
    return false;
  }
  if (f.status == RmaStatus::kChecksum && (op.inline_class ? f.value != 0 : f.value >= op.length)) {
    owner_.protocol_error(
        fmt::format("RESP 'checksum' for put {} names offset {} of its {} bytes", op.id, f.value, op.length));
    return false;
  }
  if (f.value != 0 && op.kind != Op::Kind::kAtomic && f.status != RmaStatus::kChecksum) {
    owner_.protocol_error(std::string("RESP with a value for a ") + op_name(kind));
    return false;
  }
  if (f.status == RmaStatus::kMisaligned && op.kind != Op::Kind::kAtomic) {
    owner_.protocol_error(std::string("RESP 'misaligned' for a ") + op_name(kind));
    return false;
  }
  return true;
}

void RmaInitiator::handle_resp(const wire::RespFrame& f) {
  auto it = ops_.find(f.op_id);
  if (it == ops_.end() || !it->second->issued || it->second->responded) {
    owner_.protocol_error("RESP for unknown operation id " + std::to_string(f.op_id));
    return;
  }
  Op* op = it->second.get();
  if (!resp_fits(*op, f)) return;
  op->responded = true;
  --issued_;
  op->status = f.status == RmaStatus::kOk
                   ? Status::ok()
                   : Status(code_of(f.status), fmt::format("{} of {} bytes at offset {} refused by peer {}: {}",
                                                           op_name(static_cast<uint8_t>(op->kind)), op->length,
                                                           op->offset, peer_, describe(f.status)));
  if (f.status == RmaStatus::kChecksum) {
    op->status = Status(StatusCode::kDataCorrupt,
                        fmt::format("checksum mismatch (CRC-32C): peer {} found the data of put {} ({} bytes to offset "
                                    "{}) corrupted in the chunk at offset {}; the put failed, and its target range "
                                    "holds unspecified bytes",
                                    peer_, op->id, op->length, op->offset, f.value));
  }
  switch (op->kind) {
    case Op::Kind::kPut:
      if (op->out.failure.is_ok() && !op->inline_class && op->out.written != op->length) owner_.settle_sends();
      if (!op->out.failure.is_ok() || op->inline_class || op->out.written == op->length) {
        handle_put_resp(op);
        break;
      }
      owner_.protocol_error("RESP for put " + std::to_string(op->id) + " before all of its data was sent");
      return;
    case Op::Kind::kAtomic:
      if (f.status == RmaStatus::kOk && op->result != nullptr) *op->result = f.value;
      complete(op, op->status);
      break;
    case Op::Kind::kGet:
      if (!handle_get_resp(op, f)) return;
      break;
  }
  issue_waiting();
}

void RmaInitiator::handle_put_resp(Op* op) {
  if (!op->out.failure.is_ok()) {
    // Its source failed (device memory that could not be staged): it was cut short
    // (ABORT), and the target's verdict is about the bytes it never got.
    complete(op, op->out.failure);
  } else if (op->end.unreleased() > 0) {
    // The target has the bytes; the NIC may still be reading the memory.
    op->awaiting_release = true;
  } else {
    complete(op, op->status);
  }
}

bool RmaInitiator::handle_get_resp(Op* op, const wire::RespFrame& f) {
  if (!op->inline_class) {
    if (f.status == RmaStatus::kOk && op->in.announced != op->length) {
      owner_.protocol_error(
          fmt::format("RESP ok for get {} after {} of {} bytes were announced", op->id, op->in.announced, op->length));
      return false;
    }
    maybe_finish_get(op);
    return true;
  }
  if (f.status != RmaStatus::kOk) {
    complete(op, op->status);
    return true;
  }
  if (!f.inline_data || f.payload.size() != op->length) {
    owner_.protocol_error(fmt::format("RESP for a {}-byte get carries {} inline bytes", op->length,
                                      f.inline_data ? f.payload.size() : 0));
    return false;
  }
  if (f.has_crc) {
    // Checked before a byte reaches the destination: a corrupt reply writes nothing.
    if (const uint32_t got = checksum_of(f.payload); got != f.crc) {
      complete(op,
               checksum_mismatch(fmt::format("the inline reply to get {}", op->id), 0, op->length, f.crc, got, peer_));
      return true;
    }
  }
  const Status placed = op->end.place_inline(f.payload, [this, id = op->id] {
    return [weak = std::weak_ptr<RmaInitiator*>(self_), id](const Status& s) {
      if (auto self = weak.lock()) (*self)->reply_placed(id, s);
    };
  });
  if (placed.code() == StatusCode::kInProgress) return true;  // reply_placed completes it
  if (!placed.is_ok()) {
    const std::string_view memory = op->end.device() != nullptr ? op->end.device()->name() : "host";
    complete(op, placed.with_context(fmt::format("get of {} bytes into {} memory", op->length, memory)));
    return true;
  }
  complete(op, op->status);
  return true;
}

void RmaInitiator::zero_copy_released(uint64_t op_id) {
  auto it = ops_.find(op_id);
  if (it == ops_.end() || !it->second->end.zero_copy()) return;  // failed already
  Op* op = it->second.get();
  op->end.released();
  if (op->awaiting_release && op->end.unreleased() == 0) complete(op, op->status);
}

void RmaInitiator::fail(const Status& why) {
  waiting_.clear();
  for (auto& [id, op] : ops_) {
    if (op->end.in_flight() > 0) {
      draining_.emplace_back(std::move(op), why);  // completes when its copies end
    } else {
      op->req->complete(why, 0);
    }
  }
  ops_.clear();
  for (Placed& p : placed_) p.req->complete(why, 0);
  placed_.clear();
  issued_ = 0;
  seq_done_.clear();
  seq_base_ = next_seq_;
  for (Flush& f : flushes_) f.req->complete(why, 0);
  flushes_.clear();
}

}  // namespace remora::detail
