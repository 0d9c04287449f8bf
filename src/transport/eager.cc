// transport/eager.cc — the eager protocol: a message of at most the negotiated eager
// limit travels in an EAGER frame on the control stream, paid for with credit the
// receiver granted (returned in CREDIT frames as its receives take the payloads). The
// send completes once the payload is copied into the control stream's queue; the
// receive when it is placed (into device memory: when that copy ended). What arrives
// before its receive waits in the matcher, bounded by the credit.
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/checksum.h"
#include "transport/endpoint_core.h"

namespace remora::detail {

Request EndpointCore::send_eager(const TransferMemory& memory, Tag tag, uint64_t cost) {
  Result<PathEnd> source =
      paths_.choose({.direction = Direction::kSend, .cls = TransferClass::kInline, .memory = memory});
  if (!source) return failed_request(source.status(), tag);  // host memory always has its source
  tx_credit_ -= cost;
  const uint64_t length = memory.length;
  (void)source->read_inline(
      [&](std::span<const std::byte> data) {
        const size_t at = ctl_tx_.size();
        const size_t prefix = kEagerPrefix + (checksum_ ? wire::kCrcSize : 0);
        ctl_tx_.resize(at + prefix);
        const uint32_t crc = checksum_ ? checksum_of(data) : 0;
        wire::encode_eager_prefix(tag, static_cast<uint32_t>(data.size()), std::span(ctl_tx_).subspan(at, prefix),
                                  checksum_ ? &crc : nullptr);
        ctl_tx_.insert(ctl_tx_.end(), data.begin(), data.end());  // copied once, not zeroed first
      },
      [] { return ChunkSource::InlineLater(); });
  ++stats_.eager_sent;
  ++stats_.messages_sent;
  stats_.bytes_sent += length;
  flush_control();
  // The payload is copied: the caller's buffer is free now.
  return detail::done_request(length, tag);
}

void EndpointCore::handle_eager(const wire::EagerFrame& f) {
  if (!crc_as_negotiated(f.has_crc, "EAGER")) return;
  uint64_t cost = f.payload.size() + wire::kEagerCreditOverhead;
  rx_credit_used_ += cost;
  if (rx_credit_used_ > config_.eager_credit) {
    protocol_error("eager messages exceed the granted credit of " + std::to_string(config_.eager_credit) + " bytes");
    return;
  }
  // A payload that fails its checksum fails the receive it matches, and nothing else.
  Status corrupt;
  if (f.has_crc) {
    if (const uint32_t got = checksum_of(f.payload); got != f.crc) {
      corrupt = checksum_mismatch(fmt::format("a message (tag {})", static_cast<uint64_t>(f.tag)), 0, f.payload.size(),
                                  f.crc, got, params_.peer);
      REMORA_LOG(kWarn, "{}", corrupt.message());
    }
  }
  size_t dropped = 0;
  std::unique_ptr<RecvOp> op = matcher_.take_posted(f.tag, &dropped);
  outstanding_ -= dropped;
  if (op) {
    --outstanding_;
    if (corrupt.is_ok()) {
      deliver_eager(*op, f.payload);
    } else {
      ++stats_.messages_received;
      op->req->complete(corrupt, 0);
    }
    recycle(std::move(op));
    return_credit(cost);
    return;
  }
  matcher_.add_eager(f.tag, f.payload, std::move(corrupt));
}

void EndpointCore::deliver_eager(RecvOp& op, std::span<const std::byte> payload) {
  ++stats_.messages_received;
  if (payload.size() > op.capacity) {
    op.req->complete(truncated(payload.size(), op.capacity, op.tag), payload.size());
    return;
  }
  stats_.bytes_received += payload.size();
  // Into device memory the payload is copied out of the control stream's buffer first,
  // and the receive completes when the copy into the device has ended.
  paths_.inline_arrival(op.end, payload.size());
  const size_t n = payload.size();
  const Status placed = op.end.place_inline(
      payload, [&] { return [req = op.req, n](const Status& s) { req->complete(s, s.is_ok() ? n : 0); }; });
  if (placed.code() == StatusCode::kInProgress) return;
  op.req->complete(placed, placed.is_ok() ? n : 0);
}

void EndpointCore::return_credit(uint64_t cost) {
  rx_credit_owed_ += cost;
  if (rx_credit_owed_ >= config_.eager_credit / 4) {
    uint64_t owed = rx_credit_owed_;
    rx_credit_owed_ = 0;
    rx_credit_used_ -= owed;
    append_frame(wire::CreditFrame{owed});
  }
}

void EndpointCore::handle_credit(const wire::CreditFrame& f) {
  if (f.bytes > params_.peer_eager_credit || tx_credit_ > params_.peer_eager_credit - f.bytes) {
    protocol_error("CREDIT returns more than was granted");
    return;
  }
  tx_credit_ += f.bytes;
}

}  // namespace remora::detail
