// wire/frame.cc — control-frame codec. Layout: docs/protocol.md, "Control frames".
#include "wire/frame.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <utility>
#include <type_traits>

#include "wire/little_endian.h"

namespace remora::wire {
namespace {

using internal::load_u16;
using internal::load_u32;
using internal::load_u64;
using internal::load_u8;
using internal::store_u16;
using internal::store_u32;
using internal::store_u64;
using internal::store_u8;

// Header field offsets (docs/protocol.md, frame header table).
constexpr size_t kTypeOffset = 0;
constexpr size_t kFlagsOffset = 1;
constexpr size_t kHeaderReservedOffset = 2;
constexpr size_t kBodyLengthOffset = 4;
constexpr size_t kBodyOffset = kFrameHeaderSize;

// Sizes mirrored from docs/protocol.md; a layout change must change both.
static_assert(kFrameHeaderSize == 1 + 1 + 2 + 4, "header: type, flags, reserved, body_length");
static_assert(kBodyLengthOffset + 4 == kFrameHeaderSize);
static_assert(kEagerBodySize == 8, "EAGER: u64 tag, then the payload");
static_assert(kRtsBodySize == 8 + 8 + 8, "RTS: send_id, tag, length");
static_assert(kCtsBodySize == 8 + 8 + 4 + 4, "CTS: send_id, recv_id, status, reserved");
static_assert(kChunkBodySize == 8 + 8 + 4 + 2 + 2, "CHUNK: recv_id, offset, length, stream, reserved");
static_assert(kCreditBodySize == 8, "CREDIT: bytes");
static_assert(kGoodbyeBodySize == 4 + 4, "GOODBYE: reason, reserved");
static_assert(kMaxFixedFrameSize == kFrameHeaderSize + kRtsBodySize);
static_assert(kMaxFixedFrameSize == kFrameHeaderSize + kCtsBodySize);
static_assert(kMaxFixedFrameSize == kFrameHeaderSize + kChunkBodySize);
static_assert(kEagerCreditOverhead == 64);
static_assert(static_cast<uint8_t>(FrameType::kEager) == 1 && static_cast<uint8_t>(FrameType::kGoodbye) == 6);
static_assert(std::is_same_v<std::underlying_type_t<Tag>, uint64_t>, "tags are u64 on the wire");

// Largest body_length encode can describe for an EAGER frame.
constexpr uint64_t kMaxEagerWirePayload = UINT32_MAX - kEagerBodySize;

Status protocol_error(std::string message) { return {StatusCode::kProtocol, std::move(message)}; }

bool is_known_type(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kEager) && type <= static_cast<uint8_t>(FrameType::kGoodbye);
}

/// Fixed body size of a type, or 0 for EAGER (variable).
size_t fixed_body_size(FrameType type) {
  switch (type) {
    case FrameType::kEager: return 0;
    case FrameType::kRts: return kRtsBodySize;
    case FrameType::kCts: return kCtsBodySize;
    case FrameType::kChunk: return kChunkBodySize;
    case FrameType::kCredit: return kCreditBodySize;
    case FrameType::kGoodbye: return kGoodbyeBodySize;
  }
  return 0;
}

/// Validates whatever part of the 8-byte header `in` holds, so a frame that can never be
/// valid is refused as soon as the offending byte arrives. Returns ok when no header byte
/// present so far is wrong.
Status validate_header(std::span<const std::byte> in, const DecodeLimits& limits) {
  if (in.size() > kTypeOffset) {
    const uint8_t type = load_u8(&in[kTypeOffset]);
    if (!is_known_type(type)) return protocol_error(fmt::format("frame header: unknown type {}", type));
  }
  if (in.size() > kFlagsOffset) {
    const uint8_t flags = load_u8(&in[kFlagsOffset]);
    if (flags != 0) return protocol_error(fmt::format("frame header: flags 0x{:02x} must be 0 in v1", flags));
  }
  for (size_t i = kHeaderReservedOffset; i < kBodyLengthOffset && i < in.size(); ++i) {
    const uint8_t reserved = load_u8(&in[i]);
    if (reserved != 0) {
      return protocol_error(fmt::format("frame header: reserved byte {} is 0x{:02x}, must be 0", i, reserved));
    }
  }
  if (in.size() < kFrameHeaderSize) return Status::ok();

  const auto type = static_cast<FrameType>(load_u8(&in[kTypeOffset]));
  const uint32_t body_length = load_u32(&in[kBodyLengthOffset]);
  if (type == FrameType::kEager) {
    if (body_length < kEagerBodySize) {
      return protocol_error(
          fmt::format("EAGER frame: body_length {} is shorter than its {}-byte tag", body_length, kEagerBodySize));
    }
    const uint32_t payload = body_length - static_cast<uint32_t>(kEagerBodySize);
    if (payload > limits.max_eager_payload) {
      return protocol_error(fmt::format("EAGER frame: payload of {} bytes (body_length {}) exceeds eager_limit {}",
                                        payload, body_length, limits.max_eager_payload));
    }
    return Status::ok();
  }
  const size_t expected = fixed_body_size(type);
  if (body_length != expected) {
    return protocol_error(fmt::format("{} frame: body_length {}, expected {}", to_string(type), body_length, expected));
  }
  return Status::ok();
}

/// Decodes the body of a complete frame; `body` holds exactly body_length bytes.
Result<Frame> decode_body(FrameType type, std::span<const std::byte> body) {
  const std::byte* p = body.data();
  switch (type) {
    case FrameType::kEager:
      return Frame{EagerFrame{.tag = static_cast<Tag>(load_u64(p)), .payload = body.subspan(kEagerBodySize)}};
    case FrameType::kRts:
      return Frame{RtsFrame{.send_id = load_u64(p), .tag = static_cast<Tag>(load_u64(p + 8)), .length = load_u64(p + 16)}};
    case FrameType::kCts: {
      const uint32_t status = load_u32(p + 16);
      const uint32_t reserved = load_u32(p + 20);
      if (status > static_cast<uint32_t>(CtsStatus::kTruncated)) {
        return protocol_error(fmt::format("CTS frame: unknown status {}", status));
      }
      if (reserved != 0) return protocol_error(fmt::format("CTS frame: reserved 0x{:08x}, must be 0", reserved));
      return Frame{CtsFrame{.send_id = load_u64(p), .recv_id = load_u64(p + 8), .status = static_cast<CtsStatus>(status)}};
    }
    case FrameType::kChunk: {
      const uint32_t length = load_u32(p + 16);
      const uint16_t reserved = load_u16(p + 22);
      if (length == 0) return protocol_error("CHUNK frame: length 0 (chunks are never empty)");
      if (reserved != 0) return protocol_error(fmt::format("CHUNK frame: reserved 0x{:04x}, must be 0", reserved));
      return Frame{ChunkFrame{.recv_id = load_u64(p), .offset = load_u64(p + 8), .length = length, .stream = load_u16(p + 20)}};
    }
    case FrameType::kCredit:
      return Frame{CreditFrame{.bytes = load_u64(p)}};
    case FrameType::kGoodbye: {
      const uint32_t reserved = load_u32(p + 4);
      if (reserved != 0) return protocol_error(fmt::format("GOODBYE frame: reserved 0x{:08x}, must be 0", reserved));
      return Frame{GoodbyeFrame{.reason = load_u32(p)}};
    }
  }
  return Status(StatusCode::kInternal, "decode_body: unvalidated frame type");
}

void store_header(std::byte* p, FrameType type, uint32_t body_length) {
  store_u8(p + kTypeOffset, static_cast<uint8_t>(type));
  store_u8(p + kFlagsOffset, 0);
  store_u16(p + kHeaderReservedOffset, 0);
  store_u32(p + kBodyLengthOffset, body_length);
}

FrameType type_of(const Frame& frame) {
  // The variant's alternatives are in FrameType order, starting at 1.
  return static_cast<FrameType>(frame.index() + 1);
}
static_assert(std::is_same_v<std::variant_alternative_t<0, Frame>, EagerFrame>);
static_assert(std::is_same_v<std::variant_alternative_t<5, Frame>, GoodbyeFrame>);

}  // namespace

Result<Decoded> decode_frame(std::span<const std::byte> in, const DecodeLimits& limits) {
  REMORA_RETURN_IF_ERROR(validate_header(in, limits));
  if (in.size() < kFrameHeaderSize) return Status(StatusCode::kInProgress, "frame header incomplete");

  const auto type = static_cast<FrameType>(load_u8(&in[kTypeOffset]));
  const size_t frame_size = kFrameHeaderSize + load_u32(&in[kBodyLengthOffset]);
  if (in.size() < frame_size) return Status(StatusCode::kInProgress, "frame body incomplete");

  REMORA_ASSIGN_OR_RETURN(Frame frame, decode_body(type, in.subspan(kBodyOffset, frame_size - kBodyOffset)));
  return Decoded{.frame = std::move(frame), .consumed = frame_size};
}

size_t encoded_size(const Frame& frame) noexcept {
  if (const auto* eager = std::get_if<EagerFrame>(&frame)) {
    return kFrameHeaderSize + kEagerBodySize + eager->payload.size();
  }
  return kFrameHeaderSize + fixed_body_size(type_of(frame));
}

size_t encode(const Frame& frame, std::span<std::byte> out) noexcept {
  const size_t size = encoded_size(frame);
  // Preconditions, not input checks: the caller sized `out` with encoded_size and keeps
  // EAGER payloads within the u32 body_length. Refuse rather than write out of bounds.
  assert(out.size() >= size);
  if (out.size() < size) return 0;
  std::byte* p = out.data();
  std::byte* body = p + kBodyOffset;
  const FrameType type = type_of(frame);

  struct Visitor {
    std::byte* body;
    void operator()(const EagerFrame& f) const {
      store_u64(body, static_cast<uint64_t>(f.tag));
      if (!f.payload.empty()) std::copy(f.payload.begin(), f.payload.end(), body + kEagerBodySize);
    }
    void operator()(const RtsFrame& f) const {
      store_u64(body, f.send_id);
      store_u64(body + 8, static_cast<uint64_t>(f.tag));
      store_u64(body + 16, f.length);
    }
    void operator()(const CtsFrame& f) const {
      store_u64(body, f.send_id);
      store_u64(body + 8, f.recv_id);
      store_u32(body + 16, static_cast<uint32_t>(f.status));
      store_u32(body + 20, 0);
    }
    void operator()(const ChunkFrame& f) const {
      store_u64(body, f.recv_id);
      store_u64(body + 8, f.offset);
      store_u32(body + 16, f.length);
      store_u16(body + 20, f.stream);
      store_u16(body + 22, 0);
    }
    void operator()(const CreditFrame& f) const { store_u64(body, f.bytes); }
    void operator()(const GoodbyeFrame& f) const {
      store_u32(body, f.reason);
      store_u32(body + 4, 0);
    }
  };

  if (type == FrameType::kEager) {
    const size_t payload = std::get<EagerFrame>(frame).payload.size();
    assert(payload <= kMaxEagerWirePayload);
    if (payload > kMaxEagerWirePayload) return 0;
  }
  store_header(p, type, static_cast<uint32_t>(size - kFrameHeaderSize));
  std::visit(Visitor{body}, frame);
  return size;
}

size_t encode_eager_prefix(Tag tag, uint32_t payload_len, std::span<std::byte> out) noexcept {
  constexpr size_t kPrefixSize = kFrameHeaderSize + kEagerBodySize;
  assert(out.size() >= kPrefixSize && payload_len <= kMaxEagerWirePayload);
  if (out.size() < kPrefixSize || payload_len > kMaxEagerWirePayload) return 0;
  store_header(out.data(), FrameType::kEager, static_cast<uint32_t>(kEagerBodySize + payload_len));
  store_u64(out.data() + kBodyOffset, static_cast<uint64_t>(tag));
  return kPrefixSize;
}

std::string_view to_string(FrameType type) noexcept {
  switch (type) {
    case FrameType::kEager: return "EAGER";
    case FrameType::kRts: return "RTS";
    case FrameType::kCts: return "CTS";
    case FrameType::kChunk: return "CHUNK";
    case FrameType::kCredit: return "CREDIT";
    case FrameType::kGoodbye: return "GOODBYE";
  }
  return "unknown";
}

}  // namespace remora::wire
