// tests/wire/wire_invariants.h — properties every decoder result must have, whatever
// the input. Shared by the randomized robustness test and the libFuzzer harness, so
// both check exactly the same thing. Each function returns "" when the invariants
// hold and a description of the violation otherwise.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "remora/status.h"
#include "remora/version.h"
#include "wire/auth.h"
#include "wire/frame.h"
#include "wire/handshake.h"

namespace remora::wire::testing {

/// An inline payload (EAGER, PUT, RESP) must be a view into the input right after the
/// fixed body (and its CRC, when the frame carries one), and within the limit.
inline std::string check_inline_payload(const char* what, std::span<const std::byte> payload,
                                        std::span<const std::byte> in, size_t fixed_body,
                                        const DecodeLimits& limits) {
  if (payload.size() > limits.max_eager_payload) return std::string(what) + " payload over the limit";
  if (payload.data() != in.data() + kFrameHeaderSize + fixed_body) {
    return std::string(what) + " payload does not point into the input";
  }
  return "";
}

/// A segmented PUT's or GET's list (docs/protocol.md "Segments"): right after the fixed
/// body, 1 to kMaxSegments segments, none empty or ending past 2^64, lengths summing to
/// the frame's length, offset 0.
inline std::string check_segments(const char* what, const SegmentList& segments, uint64_t offset, uint64_t length,
                                  std::span<const std::byte> in, size_t fixed_body) {
  if (segments.empty()) return "";
  if (segments.size() > kMaxSegments) return std::string(what) + " with more segments than allowed";
  if (segments.bytes().data() != in.data() + kFrameHeaderSize + fixed_body) {
    return std::string(what) + " segments do not point into the input";
  }
  if (offset != 0) return std::string(what) + " with segments and an offset";
  uint64_t sum = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment seg = segments[i];
    if (seg.length == 0 || seg.offset > UINT64_MAX - seg.length || seg.length > UINT64_MAX - sum) {
      return std::string(what) + " with an empty or overflowing segment";
    }
    sum += seg.length;
  }
  return sum == length ? "" : std::string(what) + " whose segments do not sum to its length";
}

/// Semantic rules of the RMA frames (docs/protocol.md) that a decoded frame must obey.
inline std::string check_rma_rules(const Frame& frame, std::span<const std::byte> in, const DecodeLimits& limits) {
  if (const auto* chunk = std::get_if<ChunkFrame>(&frame)) {
    if (static_cast<uint8_t>(chunk->kind) > static_cast<uint8_t>(ChunkKind::kGet)) return "CHUNK with kind > 2";
    if (chunk->length == 0) return "empty CHUNK";
  } else if (const auto* get = std::get_if<GetFrame>(&frame)) {
    return check_segments("GET", get->segments, get->offset, get->length, in, kGetBodySize);
  } else if (const auto* put = std::get_if<PutFrame>(&frame)) {
    if (!put->has_notify && put->notify != 0) return "PUT notify value without NOTIFY";
    if (!put->segments.empty() && (put->inline_data || put->has_notify)) return "segmented PUT inline or notified";
    if (const std::string bad = check_segments("PUT", put->segments, put->offset, put->length, in, kPutBodySize);
        !bad.empty()) {
      return bad;
    }
    if (put->inline_data) {
      if (put->payload.size() != put->length) return "inline PUT payload size != length";
      return check_inline_payload("PUT", put->payload, in, kPutBodySize + (put->has_crc ? kCrcSize : 0), limits);
    }
    if (!put->payload.empty()) return "non-inline PUT with a payload";
    if (put->has_crc) return "non-inline PUT with a CRC";
  } else if (const auto* atomic = std::get_if<AtomicFrame>(&frame)) {
    if (atomic->op != AtomicOp::kFetchAdd && atomic->op != AtomicOp::kCompareSwap) return "ATOMIC opcode unknown";
    if (atomic->op == AtomicOp::kFetchAdd && atomic->compare != 0) return "fetch_add with a compare value";
  } else if (const auto* resp = std::get_if<RespFrame>(&frame)) {
    if (static_cast<uint32_t>(resp->status) > static_cast<uint32_t>(RmaStatus::kChecksum)) return "RESP status unknown";
    if (resp->inline_data) {
      if (resp->status != RmaStatus::kOk) return "inline RESP with a failure status";
      return check_inline_payload("RESP", resp->payload, in, kRespBodySize + (resp->has_crc ? kCrcSize : 0), limits);
    }
    if (!resp->payload.empty()) return "non-inline RESP with a payload";
    if (resp->has_crc) return "non-inline RESP with a CRC";
  }
  return "";
}

/// Rules of the same-host frames (docs/protocol.md, "Same-host pulls"): PULL and PULLED
/// name a kind 0..2 and are never empty, a PULLED never carries a CRC.
inline std::string check_same_host_rules(const Frame& frame) {
  if (const auto* pull = std::get_if<PullFrame>(&frame)) {
    if (static_cast<uint8_t>(pull->kind) > static_cast<uint8_t>(ChunkKind::kGet)) return "PULL with kind > 2";
    if (pull->length == 0) return "empty PULL";
    if (!pull->has_crc && pull->crc != 0) return "PULL with a CRC value but no CRC flag";
  } else if (const auto* pulled = std::get_if<PulledFrame>(&frame)) {
    if (static_cast<uint8_t>(pulled->kind) > static_cast<uint8_t>(ChunkKind::kGet)) return "PULLED with kind > 2";
    if (pulled->length == 0) return "empty PULLED";
  } else if (const auto* shm = std::get_if<ShmFrame>(&frame)) {
    // "Shared-memory channel": descriptors only in an OFFER, a code only in a DECLINE.
    const bool offer = shm->op == ShmOp::kOffer;
    if (offer ? (shm->ring_fd > INT32_MAX || shm->wake_fd > INT32_MAX || shm->ring_fd == shm->wake_fd)
              : (shm->ring_fd != 0 || shm->wake_fd != 0)) {
      return "SHM with descriptors its op does not allow";
    }
    const bool decline = shm->op == ShmOp::kDecline;
    if (decline != (shm->code != StatusCode::kOk)) return "SHM with a code its op does not allow";
    if (decline && (shm->code == StatusCode::kInProgress || shm->code > StatusCode::kDataCorrupt)) {
      return "SHM DECLINE with a code that is no error";
    }
  }
  return "";
}

inline std::string check_frame_invariants(std::span<const std::byte> in, const DecodeLimits& limits) {
  auto r = decode_frame(in, limits);
  if (!r.is_ok()) {
    const Status s = r.status();
    if (s.code() == StatusCode::kProtocol) {
      return s.message().empty() ? "protocol error without a message" : "";
    }
    if (s.code() != StatusCode::kInProgress) return "unexpected status " + s.to_string();
    // Waiting is only legal while the input is shorter than the longest legal frame: the
    // fixed-size ATOMIC, the inline frame with the longest fixed body (PUT), or a PUT
    // naming the most segments.
    constexpr size_t kLongestFixedPart = std::max({kEagerBodySize, kPutBodySize, kRespBodySize}) + kCrcSize;
    constexpr size_t kLongestSegmented = kFrameHeaderSize + kPutBodySize + kMaxSegments * kSegmentSize;
    const size_t longest =
        std::max({kMaxFixedFrameSize, kLongestSegmented,
                  static_cast<size_t>(kFrameHeaderSize + kLongestFixedPart + limits.max_eager_payload)});
    if (in.size() >= longest) return "kInProgress with " + std::to_string(in.size()) + " bytes buffered";
    return "";
  }
  const Decoded& d = *r;
  if (d.consumed > in.size()) return "consumed > input size";
  if (d.consumed < kFrameHeaderSize) return "consumed less than a header";
  if (encoded_size(d.frame) != d.consumed) return "encoded_size != consumed";
  if (const auto* eager = std::get_if<EagerFrame>(&d.frame)) {
    const std::string bad =
        check_inline_payload("EAGER", eager->payload, in, kEagerBodySize + (eager->has_crc ? kCrcSize : 0), limits);
    if (!bad.empty()) return bad;
  }
  if (const std::string bad = check_rma_rules(d.frame, in, limits); !bad.empty()) return bad;
  if (const std::string bad = check_same_host_rules(d.frame); !bad.empty()) return bad;
  std::vector<std::byte> out(d.consumed + 1);
  if (encode(d.frame, out) != d.consumed) return "encode returned a different size";
  if (!std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(d.consumed), in.begin())) {
    return "re-encoding differs from the consumed bytes";
  }
  // The frame alone decodes the same way (the decoder never looks past it).
  auto again = decode_frame(in.first(d.consumed), limits);
  if (!again.is_ok() || again->consumed != d.consumed || again->frame.index() != d.frame.index()) {
    return "decoding exactly the consumed bytes gives another result";
  }
  return "";
}

inline std::string check_hello_invariants(std::span<const std::byte> in) {
  auto r = decode_hello(in);
  if (!r.is_ok()) {
    const StatusCode c = r.status().code();
    if (in.size() != kHelloSize) return c == StatusCode::kInvalidArgument ? "" : "wrong size not kInvalidArgument";
    return c == StatusCode::kProtocol ? "" : "unexpected status " + r.status().to_string();
  }
  if (in.size() != kHelloSize) return "ok for a buffer of the wrong size";
  if (r->version == kWireVersion && (r->rma_window < 1 || r->rma_window > 65536)) {
    return "HELLO accepted with rma_window " + std::to_string(r->rma_window);
  }
  const auto encoded = encode_hello(*r);
  if (r->version == kWireVersion) {
    if (!std::equal(encoded.begin(), encoded.end(), in.begin())) return "HELLO re-encoding differs";
  } else if (!std::equal(encoded.begin(), encoded.begin() + 6, in.begin())) {
    return "foreign-version HELLO: magic/version not preserved";
  }
  return "";
}

inline std::string check_hello_ack_invariants(std::span<const std::byte> in) {
  auto r = decode_hello_ack(in);
  if (!r.is_ok()) {
    const StatusCode c = r.status().code();
    if (in.size() != kHelloAckSize) return c == StatusCode::kInvalidArgument ? "" : "wrong size not kInvalidArgument";
    return c == StatusCode::kProtocol ? "" : "unexpected status " + r.status().to_string();
  }
  if (in.size() != kHelloAckSize) return "ok for a buffer of the wrong size";
  if (r->version == kWireVersion && r->status == HelloStatus::kAccepted &&
      (r->rma_window < 1 || r->rma_window > 65536)) {
    return "accepted HELLO_ACK with rma_window " + std::to_string(r->rma_window);
  }
  const auto encoded = encode_hello_ack(*r);
  const size_t compared = r->version == kWireVersion ? kHelloAckSize : 8;  // magic, version, status
  if (!std::equal(encoded.begin(), encoded.begin() + static_cast<std::ptrdiff_t>(compared), in.begin())) {
    return "HELLO_ACK re-encoding differs";
  }
  return "";
}

/// AUTH (wire/auth.h): exactly kAuthSize bytes or kInvalidArgument; a message that
/// decodes re-encodes to exactly its input (the zero fields a step must not carry are
/// checked by the decoder, so nothing is lost).
inline std::string check_auth_invariants(std::span<const std::byte> in) {
  auto r = decode_auth(in);
  if (!r.is_ok()) {
    const StatusCode c = r.status().code();
    if (in.size() != kAuthSize) return c == StatusCode::kInvalidArgument ? "" : "wrong size not kInvalidArgument";
    return c == StatusCode::kProtocol ? "" : "unexpected status " + r.status().to_string();
  }
  if (in.size() != kAuthSize) return "AUTH ok for a buffer of the wrong size";
  const auto encoded = encode_auth(*r);
  if (!std::equal(encoded.begin(), encoded.end(), in.begin())) return "AUTH re-encoding differs";
  return "";
}

}  // namespace remora::wire::testing
