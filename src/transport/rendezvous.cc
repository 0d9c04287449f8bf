// transport/rendezvous.cc — the rendezvous protocol: a message that does not go eager
// is announced by an RTS; once a matching receive exists its side answers CTS (or CTS
// truncated), and the sender's chunks move on the data streams through the source and
// sink each side holds (the chunk scheduler announces each with a CHUNK frame). The send
// completes when the kernel has its last byte (and, for zero-copy sends, the NIC
// released it); the receive when its last chunk is placed. An operation whose copies of
// device memory are still in flight when it fails completes only once they ended.
#include <utility>

#include "transport/endpoint_core.h"

namespace remora::detail {

Request EndpointCore::send_rendezvous(const TransferMemory& memory, Tag tag) {
  auto op = std::make_unique<SendOp>();
  op->req = RequestState::make(engine_, tag);
  op->tag = tag;
  op->id = next_send_id_++;
  // A zero-copy send reports its sendmsgs done under the send's id.
  Result<PathEnd> source = paths_.choose(
      {.direction = Direction::kSend, .cls = TransferClass::kChunked, .memory = memory, .zero_copy_id = op->id});
  if (!source) return failed_request(source.status(), tag);
  op->end = std::move(*source);
  count_posted(stats_, op->end);
  op->out.kind = wire::ChunkKind::kMessage;
  op->out.owner = op->id;
  op->out.length = memory.length;
  op->out.source = op->end.source();
  Request r = detail::make_request(op->req);
  append_frame(wire::RtsFrame{op->id, tag, op->out.length});
  sends_.emplace(op->id, std::move(op));
  ++outstanding_;
  ++stats_.rendezvous_sent;
  flush_control();
  return r;
}

void EndpointCore::handle_rts(const wire::RtsFrame& f) {
  size_t dropped = 0;
  std::unique_ptr<RecvOp> op = matcher_.take_posted(f.tag, &dropped);
  outstanding_ -= dropped;
  if (op) {
    match_rendezvous(std::move(op), f.send_id, f.length);
    return;
  }
  if (!matcher_.add_rts(f.tag, f.send_id, f.length, config_.max_unexpected)) {
    protocol_error("more than " + std::to_string(config_.max_unexpected) +
                   " unexpected message announcements (REMORA_MAX_UNEXPECTED)");
  }
}

void EndpointCore::match_rendezvous(std::unique_ptr<RecvOp> op, uint64_t send_id, uint64_t length) {
  // op is counted in outstanding_.
  if (length > op->capacity) {
    append_frame(wire::CtsFrame{send_id, 0, wire::CtsStatus::kTruncated});
    ++stats_.messages_received;
    --outstanding_;
    op->req->complete(truncated(length, op->capacity, op->tag), length);
    return;
  }
  op->in.id = next_recv_id_++;
  op->in.length = length;
  append_frame(wire::CtsFrame{send_id, op->in.id, wire::CtsStatus::kProceed});
  if (length == 0) {
    ++stats_.messages_received;
    --outstanding_;
    op->req->complete(Status::ok(), 0);
    return;
  }
  count_posted(stats_, op->end);
  const uint64_t id = op->in.id;
  recvs_.emplace(id, std::move(op));
}

void EndpointCore::handle_cts(const wire::CtsFrame& f) {
  auto it = sends_.find(f.send_id);
  if (it == sends_.end() || it->second->recv_id != 0) {
    protocol_error("CTS for unknown send id " + std::to_string(f.send_id));
    return;
  }
  SendOp* op = it->second.get();
  if (f.status == wire::CtsStatus::kTruncated) {
    complete_send(op, Status(StatusCode::kTruncated, "the peer's receive buffer is smaller than the " +
                                                         std::to_string(op->out.length) + "-byte message (tag " +
                                                         std::to_string(static_cast<uint64_t>(op->tag)) + ")"));
    return;
  }
  if (f.recv_id == 0) {
    protocol_error("CTS with receive id 0");
    return;
  }
  op->recv_id = f.recv_id;
  op->out.chunk_id = f.recv_id;
  ++stats_.messages_sent;
  if (op->out.length == 0) {
    complete_send(op, Status::ok());
    return;
  }
  chunks_.ready(&op->out);
}

void EndpointCore::message_sent(TxTransfer& out) {
  auto it = sends_.find(out.owner);
  if (it == sends_.end()) return;
  SendOp* op = it->second.get();
  if (!out.failure.is_ok()) {
    // Its source failed after part of it was announced: the receiver must hear that
    // nothing more comes.
    append_frame(wire::AbortFrame{.id = out.chunk_id, .kind = out.kind, .code = out.failure.code()});
    complete_send(op, out.failure);
    return;
  }
  if (op->end.unreleased() > 0) {
    // Complete once the NIC has read every byte (zero_copy_released).
    op->awaiting_release = true;
    return;
  }
  count_completed(stats_, op->end, out.length);
  complete_send(op, Status::ok());
}

void EndpointCore::complete_send(SendOp* op, const Status& s) {
  if (s.is_ok()) stats_.bytes_sent += op->out.length;
  --outstanding_;
  const uint64_t bytes = s.is_ok() ? op->out.length : op->out.written;
  auto node = sends_.extract(op->id);
  finish_staged_send(std::move(node.mapped()), s, bytes);
}

void EndpointCore::finish_staged_send(std::unique_ptr<SendOp> op, const Status& why, uint64_t bytes) {
  if (op->end.in_flight() > 0) {
    staged_sends_ending_.emplace_back(std::move(op), why);  // staging_progressed completes it
    return;
  }
  release_then_complete(std::move(op), Status(why), bytes);  // why may live in op: copied first
}

void EndpointCore::release_then_complete(std::unique_ptr<SendOp> op, Status status, uint64_t bytes) {
  // What the send held (a devmem binding of its own) goes before the caller hears it
  // ended: the caller may free or deregister the memory at once.
  std::shared_ptr<RequestState> req = std::move(op->req);
  op.reset();
  req->complete(status, bytes);
}

void EndpointCore::finish_recv(RecvOp* op) {
  if (!op->in.failure.is_ok()) {
    op->req->complete(op->in.failure, op->in.received);  // a chunk failed, or the sender aborted
  } else if (op->in.doomed) {
    op->req->complete(failure_.is_ok() ? Status(StatusCode::kPeerFailed, "peer went away mid-message") : failure_,
                      op->in.received);
  } else {
    ++stats_.messages_received;
    stats_.bytes_received += op->in.length;
    count_completed(stats_, op->end, op->in.length);
    op->req->complete(Status::ok(), op->in.length);
  }
  --outstanding_;
  recvs_.erase(op->in.id);
}

void EndpointCore::fail_staged_recv(std::unique_ptr<RecvOp> op, const Status& why) {
  if (op->end.in_flight() > 0) {
    staged_failing_.emplace_back(std::move(op), why);  // staging_progressed completes it
    return;
  }
  op->req->complete(why, op->in.received);
}

}  // namespace remora::detail
