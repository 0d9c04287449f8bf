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
#include "wire/frame.h"
#include "wire/handshake.h"

namespace remora::wire::testing {

inline std::string check_frame_invariants(std::span<const std::byte> in, const DecodeLimits& limits) {
  auto r = decode_frame(in, limits);
  if (!r.is_ok()) {
    const Status s = r.status();
    if (s.code() == StatusCode::kProtocol) {
      return s.message().empty() ? "protocol error without a message" : "";
    }
    if (s.code() != StatusCode::kInProgress) return "unexpected status " + s.to_string();
    // Waiting is only legal while the input is shorter than the longest legal frame.
    const size_t longest = std::max<size_t>(kMaxFixedFrameSize,
                                            kFrameHeaderSize + kEagerBodySize + limits.max_eager_payload);
    if (in.size() >= longest) return "kInProgress with " + std::to_string(in.size()) + " bytes buffered";
    return "";
  }
  const Decoded& d = *r;
  if (d.consumed > in.size()) return "consumed > input size";
  if (d.consumed < kFrameHeaderSize) return "consumed less than a header";
  if (encoded_size(d.frame) != d.consumed) return "encoded_size != consumed";
  if (const auto* eager = std::get_if<EagerFrame>(&d.frame)) {
    if (eager->payload.size() > limits.max_eager_payload) return "EAGER payload over the limit";
    if (eager->payload.data() != in.data() + kFrameHeaderSize + kEagerBodySize) {
      return "EAGER payload does not point into the input";
    }
  }
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
  const auto encoded = encode_hello_ack(*r);
  const size_t compared = r->version == kWireVersion ? kHelloAckSize : 8;  // magic, version, status
  if (!std::equal(encoded.begin(), encoded.begin() + static_cast<std::ptrdiff_t>(compared), in.begin())) {
    return "HELLO_ACK re-encoding differs";
  }
  return "";
}

}  // namespace remora::wire::testing
