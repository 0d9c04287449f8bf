// transport/messages.cc — tagged send and receive on an endpoint: admission, the
// choice of eager or rendezvous for a send, the source or sink each operation holds
// (DataPaths::choose), and a posted receive meeting what already arrived. The two
// protocols are eager.cc (EAGER, CREDIT) and rendezvous.cc (RTS, CTS, the chunks);
// docs/protocol.md has their bytes.
#include <utility>

#include "transport/endpoint_core.h"

namespace remora::detail {

Request EndpointCore::failed_request(Status why, Tag tag) {
  return detail::make_request(RequestState::completed(std::move(why), 0, tag));
}

Request EndpointCore::send(std::span<const std::byte> data, Tag tag) {
  engine::ProgressEngine::Guard guard(*engine_);
  if (Status refused = admission(); !refused) return failed_request(std::move(refused), tag);
  const TransferMemory memory = paths_.memory_of(data.data(), data.size());
  const uint64_t cost = data.size() + wire::kEagerCreditOverhead;
  // Device memory always goes by rendezvous: its bytes move chunk by chunk (staged, or
  // by devmem TX).
  if (memory.on_host() && transfer_class(data.size()) == TransferClass::kInline && tx_credit_ >= cost) {
    return send_eager(memory, tag, cost);
  }
  return send_rendezvous(memory, tag);
}

Request EndpointCore::recv(std::span<std::byte> buffer, Tag tag) {
  engine::ProgressEngine::Guard guard(*engine_);
  // After the peer's orderly close, what it sent before is still ours to receive.
  const bool arrived_only = keep_arrived_;
  if (!arrived_only) {
    if (Status refused = admission(); !refused) return failed_request(std::move(refused), tag);
  }
  auto made = make_recv(buffer, tag, spare_recv_states_.take(engine_, tag));
  if (!made) return failed_request(made.status(), tag);
  std::unique_ptr<RecvOp> op = std::move(*made);
  Request r = detail::make_request(op->req);

  if (std::optional<Unexpected> u = matcher_.take_unexpected(tag)) {
    match_unexpected(std::move(op), std::move(*u), arrived_only);
    flush_control();
    return r;
  }
  if (arrived_only) {
    op->req->complete(failure_, 0);
    return r;
  }
  ++outstanding_;
  outstanding_ -= matcher_.post(std::move(op));
  return r;
}

Result<std::unique_ptr<RecvOp>> EndpointCore::make_recv(std::span<std::byte> buffer, Tag tag,
                                                        std::shared_ptr<RequestState> req) {
  std::unique_ptr<RecvOp> op;
  if (spare_recvs_.empty()) {
    op = std::make_unique<RecvOp>();
  } else {
    op = std::move(spare_recvs_.back());
    spare_recvs_.pop_back();
  }
  op->req = std::move(req);
  op->capacity = buffer.size();
  op->tag = tag;
  op->in.kind = wire::ChunkKind::kMessage;
  // The sender decides whether its message comes eager or in chunks; device memory is
  // always sent in chunks, so a receive asks for the chunked class, and its sink places
  // an eager message as well.
  Result<PathEnd> sink = paths_.choose({.direction = Direction::kReceive,
                                        .cls = TransferClass::kChunked,
                                        .memory = paths_.memory_of(buffer.data(), buffer.size())});
  if (!sink) return sink.status();
  op->end = std::move(*sink);
  op->in.sink = op->end.sink(op->in);
  return op;
}

void EndpointCore::recycle(std::unique_ptr<RecvOp> op) {
  if (spare_recvs_.size() >= kSpareRecvs) return;
  // What make_recv does not set again is let go or reset here, as a delete would.
  if (op->req != nullptr && op->req->done()) spare_recv_states_.keep(std::move(op->req));
  op->req.reset();
  op->end = PathEnd();
  op->in = RxTransfer();
  op->claim.reset();
  op->claim_index = 0;
  spare_recvs_.push_back(std::move(op));
}

void EndpointCore::post_claimed(std::span<std::byte> buffer, Tag tag, const std::shared_ptr<RecvClaim>& claim,
                                int index) {
  engine::ProgressEngine::Guard guard(*engine_);
  if (claim->decided()) return;
  const bool arrived_only = keep_arrived_;
  if (!arrived_only) {
    if (Status refused = admission(); !refused) {
      if (claim->take(index)) claim->req->complete(std::move(refused), 0);
      return;
    }
  }
  // Taken only when this endpoint wins the claim: a message left here stays for the
  // next receive. Under this endpoint's lock, nothing else takes it meanwhile.
  if (matcher_.has_unexpected(tag)) {
    if (!claim->take(index)) return;
    auto made = make_recv(buffer, tag, claim->req);
    if (!made) {
      claim->req->complete(made.status(), 0);
      return;
    }
    match_unexpected(std::move(*made), std::move(*matcher_.take_unexpected(tag)), arrived_only);
    flush_control();
    return;
  }
  if (arrived_only) return;  // the peer closed: nothing more will come from it
  auto made = make_recv(buffer, tag, claim->req);
  if (!made) {
    if (claim->take(index)) claim->req->complete(made.status(), 0);
    return;
  }
  (*made)->claim = claim;
  (*made)->claim_index = index;
  claim->live.fetch_add(1, std::memory_order_acq_rel);
  ++outstanding_;
  outstanding_ -= matcher_.post(std::move(*made));
}

void EndpointCore::match_unexpected(std::unique_ptr<RecvOp> op, Unexpected u, bool arrived_only) {
  if (!u.eager) {
    ++outstanding_;
    match_rendezvous(std::move(op), u.send_id, u.length);
    return;
  }
  if (u.corrupt.is_ok()) {
    deliver_eager(*op, u.payload);
  } else {
    ++stats_.messages_received;
    op->req->complete(u.corrupt, 0);
  }
  recycle(std::move(op));
  if (!arrived_only) return_credit(u.payload.size() + wire::kEagerCreditOverhead);
}

Status EndpointCore::truncated(uint64_t length, uint64_t capacity, Tag tag) {
  return Status(StatusCode::kTruncated, "message of " + std::to_string(length) +
                                            " bytes does not fit the receive buffer of " + std::to_string(capacity) +
                                            " bytes (tag " + std::to_string(static_cast<uint64_t>(tag)) + ")");
}

}  // namespace remora::detail
