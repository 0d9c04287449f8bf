// transport/rma_initiator.cc — see rma_initiator.h. The wire rules are in
// docs/protocol.md ("One-sided operations"); the semantics users see are in
// include/remora/endpoint.h.
#include "transport/rma_initiator.h"

#include <algorithm>
#include <cstring>
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

RmaInitiator::Posted RmaInitiator::put(std::span<const std::byte> local, const RemoteKey& key, uint64_t offset,
                                       const PutOptions& options, bool inline_class, const StagingContext* staging,
                                       std::vector<std::byte> bounce, std::unique_ptr<DevmemTxSend> devmem,
                                       DevmemTxStreams* streams) {
  auto op = new_op(Op::Kind::kPut, key, offset, local.size(), inline_class);
  op->src = local.data();
  if (devmem != nullptr && streams != nullptr && !inline_class) {
    op->id = next_id_++;  // the completions name it
    op->devmem = std::move(devmem);
    op->devmem_source = std::make_unique<DevmemSource>(*op->devmem, *streams, kDevmemPutCookie | op->id);
  }
  if (!bounce.empty()) {
    op->bounce = std::move(bounce);
    op->src = op->bounce.data();
  }
  if (staging != nullptr && !inline_class) {
    op->staged_source = std::make_unique<StagingSource>(*staging, local.data(), local.size());
    // Start staging now: the copies overlap the PUT's way to the target.
    (void)op->staged_source->prepare(0, std::min<uint64_t>(staging->chunk_bytes, local.size()));
  }
  op->has_notify = options.notify.has_value();
  op->notify = options.notify.value_or(0);
  return post(std::move(op));
}

RmaInitiator::Posted RmaInitiator::get(std::span<std::byte> local, const RemoteKey& key, uint64_t offset,
                                       bool inline_class, const StagingContext* staging,
                                       std::shared_ptr<DevmemRxContext> devmem_rx) {
  auto op = new_op(Op::Kind::kGet, key, offset, local.size(), inline_class);
  op->dst = local.data();
  op->sink = HostSink(local.data());
  op->in.kind = wire::ChunkKind::kGet;
  op->in.length = local.size();
  op->in.sink = &op->sink;
  if (staging != nullptr) {
    op->staging = *staging;
    if (!inline_class && devmem_rx != nullptr) {
      op->zcrx_rx = devmem_rx->kind == DataPathKind::kZcrx;
      op->staged_sink =
          std::make_unique<DevmemSink>(std::move(devmem_rx), &staging->pool->domain(), local.data(), &op->in);
      op->devmem_rx = true;
      op->in.sink = op->staged_sink.get();
    } else if (!inline_class) {
      op->staged_sink = std::make_unique<StagingSink>(*staging, local.data(), &op->in);
      op->in.sink = op->staged_sink.get();
    }
  }
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
  if (op->id == 0) op->id = next_id_++;
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
    case Op::Kind::kPut:
      ++stats_.puts;
      owner_.queue_request(
          wire::PutFrame{.op_id = op->id,
                         .key = op->key,
                         .offset = op->offset,
                         .length = op->length,
                         .has_notify = op->has_notify,
                         .notify = op->notify,
                         .inline_data = op->inline_class,
                         .payload = op->inline_class ? std::span(op->src, op->length) : std::span<const std::byte>()});
      if (!op->inline_class) {
        op->source = HostSource(op->src);
        op->out.kind = wire::ChunkKind::kPut;
        op->out.owner = op->id;
        op->out.chunk_id = op->id;
        op->out.length = op->length;
        op->out.source = op->staged_source   ? static_cast<ChunkSource*>(op->staged_source.get())
                         : op->devmem_source ? static_cast<ChunkSource*>(op->devmem_source.get())
                                             : &op->source;
        owner_.send_chunks(&op->out);
      }
      return;
    case Op::Kind::kGet:
      ++stats_.gets;
      owner_.queue_request(wire::GetFrame{.op_id = op->id, .key = op->key, .offset = op->offset, .length = op->length});
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

void RmaInitiator::complete(Op* op, const Status& s) {
  if (op->kind != Op::Kind::kGet) {
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
    if (op->kind == Op::Kind::kPut) stats_.rma_bytes_put += op->length;
    if (op->devmem_source || op->devmem_rx) ++(op->zcrx_rx ? stats_.zcrx_transfers : stats_.devmem_transfers);
    if (op->kind == Op::Kind::kGet) stats_.rma_bytes_got += op->length;
    if (!op->devmem_rx && (op->staged_source || op->staged_sink || !op->bounce.empty() || op->staging)) {
      stats_.staged_bytes += op->length;
    }
  }
  op->req->complete(s, s.is_ok() ? op->length : 0);
  ops_.erase(op->id);
  while (!flushes_.empty() && !pending_through(flushes_.front().covers)) {
    flushes_.front().req->complete(flushes_.front().first_error, 0);
    flushes_.pop_front();
  }
}

void RmaInitiator::maybe_finish_get(Op* op) {
  if (!op->responded || op->in.placed != op->in.announced) return;
  complete(op, op->in.failure.is_ok() ? op->status : op->in.failure);
}

void RmaInitiator::copy_reply_into_device(Op* op, std::span<const std::byte> payload) {
  MemoryDomain& domain = op->staging->pool->domain();
  // The reply lives in the control stream's buffer only for this call: the copy takes
  // its own (an inline reply is at most the eager limit).
  auto held = std::make_shared<std::vector<std::byte>>(payload.begin(), payload.end());
  auto copy = domain.copy_from_host(op->dst, held->data(), held->size());
  if (!copy) {
    complete(op, copy.status().with_context(fmt::format("get of {} bytes into {} memory", op->length, domain.name())));
    return;
  }
  op->copying = true;
  when_copied(op->staging->engine, std::move(*copy),
              [weak = std::weak_ptr<RmaInitiator*>(self_), id = op->id, held](const Status& s) {
                if (auto self = weak.lock()) (*self)->reply_copied(id, s);
              });
}

void RmaInitiator::reply_copied(uint64_t op_id, const Status& copy) {
  if (auto it = ops_.find(op_id); it != ops_.end()) {
    Op* op = it->second.get();
    op->copying = false;
    complete(op, copy.is_ok() ? op->status : copy);
    return;
  }
  for (auto& [op, why] : draining_) {
    if (op->id == op_id) op->copying = false;
  }
  staging_progressed();
}

void RmaInitiator::staging_progressed() {
  std::erase_if(draining_, [](auto& entry) {
    if (writing_device(*entry.first)) return false;
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

void RmaInitiator::handle_resp(const wire::RespFrame& f) {
  auto it = ops_.find(f.op_id);
  if (it == ops_.end() || !it->second->issued || it->second->responded) {
    owner_.protocol_error("RESP for unknown operation id " + std::to_string(f.op_id));
    return;
  }
  Op* op = it->second.get();
  const auto kind = static_cast<uint8_t>(op->kind);
  if (f.inline_data && !(op->kind == Op::Kind::kGet && op->inline_class)) {
    owner_.protocol_error(std::string("RESP with inline data for a ") + op_name(kind) +
                          (op->kind == Op::Kind::kGet ? " of " + std::to_string(op->length) + " bytes" : ""));
    return;
  }
  if (f.status == RmaStatus::kChecksum && op->kind != Op::Kind::kPut) {
    owner_.protocol_error(std::string("RESP 'checksum' for a ") + op_name(kind));
    return;
  }
  if (f.status == RmaStatus::kChecksum && (op->inline_class ? f.value != 0 : f.value >= op->length)) {
    owner_.protocol_error(fmt::format("RESP 'checksum' for put {} names offset {} of its {} bytes", op->id, f.value,
                                      op->length));
    return;
  }
  if (f.value != 0 && op->kind != Op::Kind::kAtomic && f.status != RmaStatus::kChecksum) {
    owner_.protocol_error(std::string("RESP with a value for a ") + op_name(kind));
    return;
  }
  if (f.status == RmaStatus::kMisaligned && op->kind != Op::Kind::kAtomic) {
    owner_.protocol_error(std::string("RESP 'misaligned' for a ") + op_name(kind));
    return;
  }
  op->responded = true;
  --issued_;
  op->status =
      f.status == RmaStatus::kOk
          ? Status::ok()
          : Status(code_of(f.status), fmt::format("{} of {} bytes at offset {} refused by peer {}: {}", op_name(kind),
                                                  op->length, op->offset, peer_, describe(f.status)));
  if (f.status == RmaStatus::kChecksum) {
    op->status = Status(StatusCode::kDataCorrupt,
                        fmt::format("checksum mismatch (CRC-32C): peer {} found the data of put {} ({} bytes to offset "
                                    "{}) corrupted in the chunk at offset {}; the put failed, and its target range "
                                    "holds unspecified bytes",
                                    peer_, op->id, op->length, op->offset, f.value));
  }
  switch (op->kind) {
    case Op::Kind::kPut:
      if (!op->out.failure.is_ok()) {
        // Its device memory could not be staged: it was cut short (ABORT), and the
        // target's verdict is about the bytes it never got.
        complete(op, op->out.failure);
        break;
      }
      if (!op->inline_class && op->out.written != op->length) {
        owner_.protocol_error("RESP for put " + std::to_string(op->id) + " before all of its data was sent");
        return;
      }
      if (op->devmem_source && op->devmem_source->pending() > 0) {
        // The target has the bytes; the NIC may still be reading the memory.
        op->awaiting_completions = true;
        break;
      }
      complete(op, op->status);
      break;
    case Op::Kind::kAtomic:
      if (f.status == RmaStatus::kOk && op->result != nullptr) *op->result = f.value;
      complete(op, op->status);
      break;
    case Op::Kind::kGet:
      if (op->inline_class) {
        if (f.status == RmaStatus::kOk) {
          if (!f.inline_data || f.payload.size() != op->length) {
            owner_.protocol_error(fmt::format("RESP for a {}-byte get carries {} inline bytes", op->length,
                                              f.inline_data ? f.payload.size() : 0));
            return;
          }
          if (f.has_crc) {
            // Checked before a byte reaches the destination: a corrupt reply writes nothing.
            if (const uint32_t got = checksum_of(f.payload); got != f.crc) {
              complete(op, checksum_mismatch(fmt::format("the inline reply to get {}", op->id), 0, op->length, f.crc,
                                             got, peer_));
              break;
            }
          }
          if (op->staging && op->length > 0) {
            copy_reply_into_device(op, f.payload);
            break;
          }
          if (op->length > 0) std::memcpy(op->dst, f.payload.data(), op->length);
        }
        complete(op, op->status);
      } else {
        if (f.status == RmaStatus::kOk && op->in.announced != op->length) {
          owner_.protocol_error(fmt::format("RESP ok for get {} after {} of {} bytes were announced", op->id,
                                            op->in.announced, op->length));
          return;
        }
        maybe_finish_get(op);
      }
      break;
  }
  issue_waiting();
}

void RmaInitiator::devmem_completed(uint64_t op_id) {
  auto it = ops_.find(op_id);
  if (it == ops_.end() || !it->second->devmem_source) return;  // failed already
  Op* op = it->second.get();
  op->devmem_source->completed();
  if (op->awaiting_completions && op->devmem_source->pending() == 0) complete(op, op->status);
}

void RmaInitiator::fail(const Status& why) {
  waiting_.clear();
  for (auto& [id, op] : ops_) {
    if (writing_device(*op)) {
      draining_.emplace_back(std::move(op), why);  // completes when its copies end
    } else {
      op->req->complete(why, 0);
    }
  }
  ops_.clear();
  issued_ = 0;
  seq_done_.clear();
  seq_base_ = next_seq_;
  for (Flush& f : flushes_) f.req->complete(why, 0);
  flushes_.clear();
}

}  // namespace remora::detail
