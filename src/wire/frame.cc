// wire/frame.cc — control-frame codec. Layout: docs/protocol.md, "Control frames".
#include "wire/frame.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <utility>
#include <type_traits>

#include "core/little_endian.h"

namespace remora::wire {
namespace {

using core::load_u16;
using core::load_u32;
using core::load_u64;
using core::load_u8;
using core::store_u16;
using core::store_u32;
using core::store_u64;
using core::store_u8;

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
static_assert(kKeySize == 40, "a serialized RemoteKey");
static_assert(kPutBodySize == 8 + kKeySize + 8 + 8 + 8, "PUT: op_id, key, offset, length, notify");
static_assert(kGetBodySize == 8 + kKeySize + 8 + 8, "GET: op_id, key, offset, length");
static_assert(kAtomicBodySize == 8 + kKeySize + 8 + 4 + 4 + 8 + 8,
              "ATOMIC: op_id, key, offset, opcode, reserved, operand, compare");
static_assert(kRespBodySize == 8 + 4 + 4 + 8, "RESP: op_id, status, reserved, value");
static_assert(kMaxFixedFrameSize == kFrameHeaderSize + kAtomicBodySize);
static_assert(kEagerCreditOverhead == 64);
static_assert(kHeartbeatBodySize == 8, "HEARTBEAT: seq");
static_assert(kCrcSize == 4 && kCrcFlag == 0x80, "CRC: a u32 after the fixed body, flag bit 7");
static_assert(kHostBodySize == 4 + 4 + 16 + 8 + 8 + 8,
              "HOST: pid, reserved, boot_id, netns, probe_address, probe_value");
static_assert(kPullBodySize == 8 + 8 + 4 + 4 + 8, "PULL: recv_id, offset, length, reserved, address");
static_assert(kPulledBodySize == 8 + 4 + 4, "PULLED: recv_id, length, reserved");
static_assert(kShmBodySize == 4 + 4 + 4 + 4, "SHM: op, ring_fd, wake_fd, code");
static_assert(kReceivedBodySize == 2 + 2 + 4 + 8 && kRetireBodySize == 2 + 2 + 4 + 8,
              "RECEIVED, RETIRE: stream, reserved (6 bytes), chunks");
static_assert(static_cast<uint8_t>(FrameType::kEager) == 1 && static_cast<uint8_t>(FrameType::kPlacedShort) == 23);
static_assert(kMapBodySize == 4 + 4 + 4 + 4 + 8 + kKeySize, "MAP: op, fd, code, reserved, region_bytes, key");
static_assert(kPlacedBodySize == kKeySize + 8 + 8 + 8, "PLACED: key, offset, length, notify");
static_assert(kPlacedShortBodySize == 4 + 4 + 8 + 8 + 8, "PLACED_SHORT: grant, length, offset, notify, handled");
static_assert(kRejoinedBodySize == 2 + 2 + 4 + 8, "REJOINED keeps the layout of RETIRE, its count reserved");
static_assert(std::is_same_v<std::underlying_type_t<Tag>, uint64_t>, "tags are u64 on the wire");

// Largest body_length encode can describe for an EAGER frame.
constexpr uint64_t kMaxEagerWirePayload = UINT32_MAX - kEagerBodySize;

Status protocol_error(std::string message) { return {StatusCode::kProtocol, std::move(message)}; }

bool is_known_type(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kEager) && type <= static_cast<uint8_t>(FrameType::kPlacedShort);
}

/// Types whose flags byte carries a ChunkKind (0..2).
bool carries_kind(FrameType type) {
  return type == FrameType::kChunk || type == FrameType::kAbort || type == FrameType::kPull ||
         type == FrameType::kPulled;
}

/// Flag bits each type may carry; any other bit set is a protocol error.
uint8_t allowed_flags(FrameType type) {
  switch (type) {
    case FrameType::kChunk: return 0x03 | kChunkResend | kCrcFlag;  // the ChunkKind (0..2; 3 is refused by validate_header)
    case FrameType::kAbort: return 0x03;
    case FrameType::kEager: return kCrcFlag;
    case FrameType::kPut: return kPutNotify | kPutInline | kRmaSegments | kCrcFlag;
    case FrameType::kGet: return kRmaSegments;
    case FrameType::kResp: return kRespInline | kCrcFlag;
    case FrameType::kHeartbeat: return kHeartbeatReply;
    case FrameType::kHandled: return kHandledResumed;
    case FrameType::kHost: return kHostCanPull;
    case FrameType::kPull: return 0x03 | kCrcFlag;
    case FrameType::kPulled: return 0x03;
    default: return 0;
  }
}

/// Types whose body is a fixed part followed by an optional inline payload.
bool has_inline_payload(FrameType type, uint8_t flags) {
  return type == FrameType::kEager || (type == FrameType::kPut && (flags & kPutInline) != 0) ||
         (type == FrameType::kResp && (flags & kRespInline) != 0);
}

/// PUT and GET with a segment list after the fixed body.
bool has_segments(FrameType type, uint8_t flags) {
  return (type == FrameType::kPut || type == FrameType::kGet) && (flags & kRmaSegments) != 0;
}

/// Bytes the CRC adds after the fixed body.
size_t crc_size(uint8_t flags) { return (flags & kCrcFlag) != 0 ? kCrcSize : 0; }

/// Fixed body size of a type, or 0 for EAGER (variable).
size_t fixed_body_size(FrameType type) {
  switch (type) {
    case FrameType::kEager: return 0;
    case FrameType::kRts: return kRtsBodySize;
    case FrameType::kCts: return kCtsBodySize;
    case FrameType::kChunk: return kChunkBodySize;
    case FrameType::kCredit: return kCreditBodySize;
    case FrameType::kGoodbye: return kGoodbyeBodySize;
    case FrameType::kPut: return kPutBodySize;
    case FrameType::kGet: return kGetBodySize;
    case FrameType::kAtomic: return kAtomicBodySize;
    case FrameType::kResp: return kRespBodySize;
    case FrameType::kAbort: return kAbortBodySize;
    case FrameType::kHeartbeat: return kHeartbeatBodySize;
    case FrameType::kHost: return kHostBodySize;
    case FrameType::kPull: return kPullBodySize;
    case FrameType::kPulled: return kPulledBodySize;
    case FrameType::kShm: return kShmBodySize;
    case FrameType::kReceived: return kReceivedBodySize;
    case FrameType::kRetire: return kRetireBodySize;
    case FrameType::kRejoined: return kRejoinedBodySize;
    case FrameType::kHandled: return kHandledBodySize;
    case FrameType::kMap: return kMapBodySize;
    case FrameType::kPlaced: return kPlacedBodySize;
    case FrameType::kPlacedShort: return kPlacedShortBodySize;
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
    const auto type = static_cast<FrameType>(load_u8(&in[kTypeOffset]));
    const uint8_t flags = load_u8(&in[kFlagsOffset]);
    if ((flags & ~allowed_flags(type)) != 0) {
      return protocol_error(fmt::format("{} frame: flags 0x{:02x} has undefined bits", to_string(type), flags));
    }
    if (carries_kind(type) && (flags & 0x03) > static_cast<uint8_t>(ChunkKind::kGet)) {
      return protocol_error(fmt::format("{} frame: unknown kind {}", to_string(type), flags & 0x03));
    }
    // A CRC covers a payload: a PUT or RESP without inline data has none on this stream.
    if ((type == FrameType::kPut && (flags & kCrcFlag) != 0 && (flags & kPutInline) == 0) ||
        (type == FrameType::kResp && (flags & kCrcFlag) != 0 && (flags & kRespInline) == 0)) {
      return protocol_error(fmt::format("{} frame: CRC flag without INLINE", to_string(type)));
    }
    if (type == FrameType::kPut && (flags & kRmaSegments) != 0 && (flags & (kPutInline | kPutNotify)) != 0) {
      return protocol_error(
          fmt::format("PUT frame: SEGMENTS with {} (a segmented put travels in chunks, without a "
                      "notification)",
                      (flags & kPutInline) != 0 ? "INLINE" : "NOTIFY"));
    }
  }
  for (size_t i = kHeaderReservedOffset; i < kBodyLengthOffset && i < in.size(); ++i) {
    const uint8_t reserved = load_u8(&in[i]);
    if (reserved != 0) {
      return protocol_error(fmt::format("frame header: reserved byte {} is 0x{:02x}, must be 0", i, reserved));
    }
  }
  if (in.size() < kFrameHeaderSize) return Status::ok();

  const auto type = static_cast<FrameType>(load_u8(&in[kTypeOffset]));
  const uint8_t flags = load_u8(&in[kFlagsOffset]);
  const uint32_t body_length = load_u32(&in[kBodyLengthOffset]);
  if (has_inline_payload(type, flags)) {
    const size_t fixed = (type == FrameType::kEager ? kEagerBodySize : fixed_body_size(type)) + crc_size(flags);
    if (body_length < fixed) {
      return protocol_error(fmt::format("{} frame: body_length {} is shorter than its {}-byte fixed part",
                                        to_string(type), body_length, fixed));
    }
    const uint32_t payload = body_length - static_cast<uint32_t>(fixed);
    if (payload > limits.max_eager_payload) {
      return protocol_error(fmt::format("{} frame: inline payload of {} bytes (body_length {}) exceeds eager_limit {}",
                                        to_string(type), payload, body_length, limits.max_eager_payload));
    }
    return Status::ok();
  }
  if (has_segments(type, flags)) {
    const size_t fixed = fixed_body_size(type);
    const size_t list = body_length < fixed ? 0 : body_length - fixed;
    if (body_length < fixed || list % kSegmentSize != 0 || list == 0 || list > kMaxSegments * kSegmentSize) {
      return protocol_error(fmt::format("{} frame: body_length {} is not its {}-byte fixed part and 1 to {} segments",
                                        to_string(type), body_length, fixed, kMaxSegments));
    }
    return Status::ok();
  }
  const size_t expected = fixed_body_size(type) + crc_size(flags);
  if (body_length != expected) {
    return protocol_error(fmt::format("{} frame: body_length {}, expected {}", to_string(type), body_length, expected));
  }
  return Status::ok();
}

/// Decodes the body of a complete frame; `body` holds exactly body_length bytes.
KeyBytes load_key(const std::byte* p) {
  KeyBytes key;
  std::copy(p, p + kKeySize, key.begin());
  return key;
}

/// The segment list after a PUT's or GET's fixed body, checked against the frame's
/// offset and length: offset 0, no empty segment, no end past 2^64, lengths summing to
/// `length`.
Result<SegmentList> decode_segments(std::string_view what, uint64_t offset, uint64_t length,
                                    std::span<const std::byte> list) {
  if (offset != 0) return protocol_error(fmt::format("{} frame: offset {} with SEGMENTS (must be 0)", what, offset));
  const SegmentList segments(list);
  uint64_t sum = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment seg = segments[i];
    if (seg.length == 0) return protocol_error(fmt::format("{} frame: segment {} is empty", what, i));
    if (seg.offset > UINT64_MAX - seg.length) {
      return protocol_error(fmt::format("{} frame: segment {} ends past 2^64", what, i));
    }
    if (seg.length > UINT64_MAX - sum) return protocol_error(fmt::format("{} frame: segment lengths overflow", what));
    sum += seg.length;
  }
  if (sum != length) {
    return protocol_error(fmt::format("{} frame: length {} but its segments hold {} bytes", what, length, sum));
  }
  return segments;
}

Result<Frame> decode_body(FrameType type, uint8_t flags, std::span<const std::byte> body) {
  const std::byte* p = body.data();
  switch (type) {
    case FrameType::kEager: {
      const bool has_crc = (flags & kCrcFlag) != 0;
      return Frame{EagerFrame{.tag = static_cast<Tag>(load_u64(p)),
                              .payload = body.subspan(kEagerBodySize + crc_size(flags)),
                              .has_crc = has_crc,
                              .crc = has_crc ? load_u32(p + kEagerBodySize) : 0}};
    }
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
      const bool has_crc = (flags & kCrcFlag) != 0;
      return Frame{ChunkFrame{.recv_id = load_u64(p),
                              .offset = load_u64(p + 8),
                              .length = length,
                              .stream = load_u16(p + 20),
                              .kind = static_cast<ChunkKind>(flags & 0x03),
                              .has_crc = has_crc,
                              .crc = has_crc ? load_u32(p + kChunkBodySize) : 0,
                              .resend = (flags & kChunkResend) != 0}};
    }
    case FrameType::kCredit:
      return Frame{CreditFrame{.bytes = load_u64(p)}};
    case FrameType::kGoodbye: {
      const uint32_t reserved = load_u32(p + 4);
      if (reserved != 0) return protocol_error(fmt::format("GOODBYE frame: reserved 0x{:08x}, must be 0", reserved));
      return Frame{GoodbyeFrame{.reason = load_u32(p)}};
    }
    case FrameType::kPut: {
      PutFrame f{.op_id = load_u64(p),
                 .key = load_key(p + 8),
                 .offset = load_u64(p + 48),
                 .length = load_u64(p + 56),
                 .has_notify = (flags & kPutNotify) != 0,
                 .notify = load_u64(p + 64),
                 .inline_data = (flags & kPutInline) != 0,
                 .payload = {}};
      if (!f.has_notify && f.notify != 0) return protocol_error("PUT frame: notify value without the NOTIFY flag");
      if ((flags & kCrcFlag) != 0) {
        f.has_crc = true;
        f.crc = load_u32(p + kPutBodySize);
      }
      if (f.inline_data) {
        f.payload = body.subspan(kPutBodySize + crc_size(flags));
        if (f.payload.size() != f.length) {
          return protocol_error(fmt::format("PUT frame: length {} but {} inline bytes", f.length, f.payload.size()));
        }
      }
      if (has_segments(type, flags)) {
        REMORA_ASSIGN_OR_RETURN(f.segments, decode_segments("PUT", f.offset, f.length, body.subspan(kPutBodySize)));
      }
      return Frame{f};
    }
    case FrameType::kGet: {
      GetFrame f{.op_id = load_u64(p), .key = load_key(p + 8), .offset = load_u64(p + 48), .length = load_u64(p + 56)};
      if (has_segments(type, flags)) {
        REMORA_ASSIGN_OR_RETURN(f.segments, decode_segments("GET", f.offset, f.length, body.subspan(kGetBodySize)));
      }
      return Frame{f};
    }
    case FrameType::kAtomic: {
      const uint32_t op = load_u32(p + 56);
      const uint32_t reserved = load_u32(p + 60);
      if (op != static_cast<uint32_t>(AtomicOp::kFetchAdd) && op != static_cast<uint32_t>(AtomicOp::kCompareSwap)) {
        return protocol_error(fmt::format("ATOMIC frame: unknown opcode {}", op));
      }
      if (reserved != 0) return protocol_error(fmt::format("ATOMIC frame: reserved 0x{:08x}, must be 0", reserved));
      AtomicFrame f{.op_id = load_u64(p),
                    .key = load_key(p + 8),
                    .offset = load_u64(p + 48),
                    .op = static_cast<AtomicOp>(op),
                    .operand = load_u64(p + 64),
                    .compare = load_u64(p + 72)};
      if (f.op == AtomicOp::kFetchAdd && f.compare != 0) {
        return protocol_error("ATOMIC frame: fetch_add with a nonzero compare field");
      }
      return Frame{f};
    }
    case FrameType::kResp: {
      const uint32_t status = load_u32(p + 8);
      const uint32_t reserved = load_u32(p + 12);
      if (status > static_cast<uint32_t>(RmaStatus::kChecksum)) {
        return protocol_error(fmt::format("RESP frame: unknown status {}", status));
      }
      if (reserved != 0) return protocol_error(fmt::format("RESP frame: reserved 0x{:08x}, must be 0", reserved));
      RespFrame f{.op_id = load_u64(p),
                  .status = static_cast<RmaStatus>(status),
                  .value = load_u64(p + 16),
                  .inline_data = (flags & kRespInline) != 0,
                  .payload = {}};
      if ((flags & kCrcFlag) != 0) {
        f.has_crc = true;
        f.crc = load_u32(p + kRespBodySize);
      }
      if (f.inline_data) {
        f.payload = body.subspan(kRespBodySize + crc_size(flags));
        if (f.status != RmaStatus::kOk) return protocol_error("RESP frame: inline data with a failure status");
      }
      return Frame{f};
    }
    case FrameType::kAbort: {
      const uint8_t code = load_u8(p + 8);
      for (size_t i = 9; i < kAbortBodySize; ++i) {
        if (load_u8(p + i) != 0) return protocol_error(fmt::format("ABORT frame: reserved byte {} is not 0", i));
      }
      if (code <= static_cast<uint8_t>(StatusCode::kInProgress) || code > static_cast<uint8_t>(StatusCode::kDeviceFailed)) {
        return protocol_error(fmt::format("ABORT frame: code {} is not an error", code));
      }
      return Frame{AbortFrame{.id = load_u64(p), .kind = static_cast<ChunkKind>(flags), .code = static_cast<StatusCode>(code)}};
    }
    case FrameType::kHeartbeat:
      return Frame{HeartbeatFrame{.seq = load_u64(p), .reply = (flags & kHeartbeatReply) != 0}};
    case FrameType::kHost: {
      const uint32_t reserved = load_u32(p + 4);
      if (reserved != 0) return protocol_error(fmt::format("HOST frame: reserved 0x{:08x}, must be 0", reserved));
      HostFrame f{.pid = load_u32(p),
                  .boot_id = {},
                  .netns = load_u64(p + 24),
                  .probe_address = load_u64(p + 32),
                  .probe_value = load_u64(p + 40),
                  .can_pull = (flags & kHostCanPull) != 0};
      std::copy(p + 8, p + 24, f.boot_id.begin());
      return Frame{f};
    }
    case FrameType::kPull: {
      const uint32_t length = load_u32(p + 16);
      const uint32_t reserved = load_u32(p + 20);
      if (length == 0) return protocol_error("PULL frame: length 0 (chunks are never empty)");
      if (reserved != 0) return protocol_error(fmt::format("PULL frame: reserved 0x{:08x}, must be 0", reserved));
      const bool has_crc = (flags & kCrcFlag) != 0;
      return Frame{PullFrame{.recv_id = load_u64(p),
                             .offset = load_u64(p + 8),
                             .length = length,
                             .address = load_u64(p + 24),
                             .kind = static_cast<ChunkKind>(flags & ~kCrcFlag),
                             .has_crc = has_crc,
                             .crc = has_crc ? load_u32(p + kPullBodySize) : 0}};
    }
    case FrameType::kPulled: {
      const uint32_t length = load_u32(p + 8);
      const uint32_t reserved = load_u32(p + 12);
      if (length == 0) return protocol_error("PULLED frame: length 0 (chunks are never empty)");
      if (reserved != 0) return protocol_error(fmt::format("PULLED frame: reserved 0x{:08x}, must be 0", reserved));
      return Frame{PulledFrame{.recv_id = load_u64(p), .length = length, .kind = static_cast<ChunkKind>(flags)}};
    }
    case FrameType::kShm: {
      const uint32_t op = load_u32(p);
      const uint32_t ring_fd = load_u32(p + 4);
      const uint32_t wake_fd = load_u32(p + 8);
      const uint32_t code = load_u32(p + 12);
      if (op < static_cast<uint32_t>(ShmOp::kOffer) || op > static_cast<uint32_t>(ShmOp::kDecline)) {
        return protocol_error(fmt::format("SHM frame: unknown op {}", op));
      }
      const auto shm_op = static_cast<ShmOp>(op);
      if (shm_op == ShmOp::kOffer ? (ring_fd > INT32_MAX || wake_fd > INT32_MAX || ring_fd == wake_fd)
                                  : (ring_fd != 0 || wake_fd != 0)) {
        return protocol_error(fmt::format("SHM frame: descriptors {} and {} do not fit op {}", ring_fd, wake_fd, op));
      }
      const bool error_code = code > static_cast<uint32_t>(StatusCode::kInProgress) &&
                              code <= static_cast<uint32_t>(StatusCode::kDataCorrupt);
      if (shm_op == ShmOp::kDecline ? !error_code : code != 0) {
        return protocol_error(fmt::format("SHM frame: code {} does not fit op {}", code, op));
      }
      return Frame{
          ShmFrame{.op = shm_op, .ring_fd = ring_fd, .wake_fd = wake_fd, .code = static_cast<StatusCode>(code)}};
    }
    case FrameType::kReceived:
    case FrameType::kRetire: {
      const uint16_t reserved16 = load_u16(p + 2);
      const uint32_t reserved32 = load_u32(p + 4);
      if (reserved16 != 0 || reserved32 != 0) {
        return protocol_error(fmt::format("{} frame: reserved bytes not 0", to_string(type)));
      }
      if (type == FrameType::kReceived) return Frame{ReceivedFrame{.stream = load_u16(p), .chunks = load_u64(p + 8)}};
      return Frame{RetireFrame{.stream = load_u16(p), .chunks = load_u64(p + 8)}};
    }
    case FrameType::kRejoined: {
      if (load_u16(p + 2) != 0 || load_u32(p + 4) != 0 || load_u64(p + 8) != 0) {
        return protocol_error("REJOINED frame: reserved bytes not 0");
      }
      return Frame{RejoinedFrame{.stream = load_u16(p)}};
    }
    case FrameType::kHandled:
      return Frame{HandledFrame{.bytes = load_u64(p), .resumed = (flags & kHandledResumed) != 0}};
    case FrameType::kMap: {
      const uint32_t op = load_u32(p);
      const uint32_t fd = load_u32(p + 4);
      const uint32_t code = load_u32(p + 8);
      const uint64_t bytes = load_u64(p + 16);
      if (op < static_cast<uint32_t>(MapOp::kRequest) || op > static_cast<uint32_t>(MapOp::kAck)) {
        return protocol_error(fmt::format("MAP frame: unknown op {}", op));
      }
      const uint32_t grant = load_u32(p + 12);
      const auto map_op = static_cast<MapOp>(op);
      if (grant > (map_op == MapOp::kGrant ? kMaxGrantNumber : 0)) {
        return protocol_error(fmt::format("MAP frame: grant number {} with op {}", grant, op));
      }
      const bool error_code = code > static_cast<uint32_t>(StatusCode::kInProgress) &&
                              code <= static_cast<uint32_t>(StatusCode::kDataCorrupt);
      const KeyBytes key = load_key(p + 24);
      bool fits = false;
      switch (map_op) {
        case MapOp::kRequest: fits = fd == 0 && code == 0 && bytes == 0; break;
        case MapOp::kGrant: fits = fd <= INT32_MAX && code == 0 && bytes > 0; break;
        case MapOp::kRefuse: fits = fd == 0 && bytes == 0 && error_code; break;
        case MapOp::kCredit:
          fits = fd == 0 && code == 0 && bytes > 0 && bytes <= kMaxPlacedCredits && key == KeyBytes{};
          break;
        case MapOp::kAck: fits = fd == 0 && code == 0 && bytes > 0 && key == KeyBytes{}; break;
      }
      if (!fits) {
        return protocol_error(fmt::format(
            "MAP frame: descriptor {}, code {}, size or count {} and key do not fit op {}", fd, code, bytes, op));
      }
      const bool counted = map_op == MapOp::kCredit || map_op == MapOp::kAck;
      return Frame{MapFrame{.op = map_op,
                            .fd = fd,
                            .code = static_cast<StatusCode>(code),
                            .grant = grant,
                            .region_bytes = counted ? 0 : bytes,
                            .count = counted ? bytes : 0,
                            .key = key}};
    }
    case FrameType::kPlaced: {
      const uint64_t offset = load_u64(p + 40), length = load_u64(p + 48);
      if (length > UINT64_MAX - offset) {
        return protocol_error(fmt::format("PLACED frame: {} bytes at offset {} end past 2^64", length, offset));
      }
      return Frame{PlacedFrame{.key = load_key(p), .offset = offset, .length = length, .notify = load_u64(p + 56)}};
    }
    case FrameType::kPlacedShort: {
      const uint32_t grant = load_u32(p), length = load_u32(p + 4);
      const uint64_t offset = load_u64(p + 8);
      if (grant == 0 || grant > kMaxGrantNumber) {
        return protocol_error(fmt::format("PLACED_SHORT frame: grant number {} outside 1..{}", grant, kMaxGrantNumber));
      }
      if (length > UINT64_MAX - offset) {
        return protocol_error(fmt::format("PLACED_SHORT frame: {} bytes at offset {} end past 2^64", length, offset));
      }
      return Frame{PlacedShortFrame{
          .grant = grant, .length = length, .offset = offset, .notify = load_u64(p + 16), .handled = load_u64(p + 24)}};
    }
  }
  return Status(StatusCode::kInternal, "decode_body: unvalidated frame type");
}

void store_placed_short_body(std::byte* body, const PlacedShortFrame& f) {
  store_u32(body, f.grant);
  store_u32(body + 4, f.length);
  store_u64(body + 8, f.offset);
  store_u64(body + 16, f.notify);
  store_u64(body + 24, f.handled);
}

void store_header(std::byte* p, FrameType type, uint32_t body_length, uint8_t flags = 0) {
  store_u8(p + kTypeOffset, static_cast<uint8_t>(type));
  store_u8(p + kFlagsOffset, flags);
  store_u16(p + kHeaderReservedOffset, 0);
  store_u32(p + kBodyLengthOffset, body_length);
}

FrameType type_of(const Frame& frame) {
  // The variant's alternatives are in FrameType order, starting at 1.
  return static_cast<FrameType>(frame.index() + 1);
}
static_assert(std::is_same_v<std::variant_alternative_t<0, Frame>, EagerFrame>);
static_assert(std::is_same_v<std::variant_alternative_t<5, Frame>, GoodbyeFrame>);
static_assert(std::is_same_v<std::variant_alternative_t<9, Frame>, RespFrame>);

SegmentList segments_of(const Frame& frame) {
  if (const auto* put = std::get_if<PutFrame>(&frame)) return put->segments;
  if (const auto* get = std::get_if<GetFrame>(&frame)) return get->segments;
  return {};
}

uint8_t flags_of(const Frame& frame) {
  if (const auto* e = std::get_if<EagerFrame>(&frame)) return e->has_crc ? kCrcFlag : 0;
  if (const auto* c = std::get_if<ChunkFrame>(&frame)) {
    return static_cast<uint8_t>(static_cast<uint8_t>(c->kind) | (c->resend ? kChunkResend : 0) |
                                (c->has_crc ? kCrcFlag : 0));
  }
  if (const auto* a = std::get_if<AbortFrame>(&frame)) return static_cast<uint8_t>(a->kind);
  if (const auto* put = std::get_if<PutFrame>(&frame)) {
    return static_cast<uint8_t>((put->has_notify ? kPutNotify : 0) | (put->inline_data ? kPutInline : 0) |
                                (put->segments.empty() ? 0 : kRmaSegments) |
                                (put->inline_data && put->has_crc ? kCrcFlag : 0));
  }
  if (const auto* get = std::get_if<GetFrame>(&frame)) return get->segments.empty() ? 0 : kRmaSegments;
  if (const auto* resp = std::get_if<RespFrame>(&frame)) {
    return static_cast<uint8_t>((resp->inline_data ? kRespInline : 0) |
                                (resp->inline_data && resp->has_crc ? kCrcFlag : 0));
  }
  if (const auto* hb = std::get_if<HeartbeatFrame>(&frame)) return hb->reply ? kHeartbeatReply : 0;
  if (const auto* host = std::get_if<HostFrame>(&frame)) return host->can_pull ? kHostCanPull : 0;
  if (const auto* handled = std::get_if<HandledFrame>(&frame)) return handled->resumed ? kHandledResumed : 0;
  if (const auto* pull = std::get_if<PullFrame>(&frame)) {
    return static_cast<uint8_t>(static_cast<uint8_t>(pull->kind) | (pull->has_crc ? kCrcFlag : 0));
  }
  if (const auto* pulled = std::get_if<PulledFrame>(&frame)) return static_cast<uint8_t>(pulled->kind);
  return 0;
}

}  // namespace

Result<Decoded> decode_frame(std::span<const std::byte> in, const DecodeLimits& limits) {
  REMORA_RETURN_IF_ERROR(validate_header(in, limits));
  if (in.size() < kFrameHeaderSize) return Status(StatusCode::kInProgress, "frame header incomplete");

  const auto type = static_cast<FrameType>(load_u8(&in[kTypeOffset]));
  const uint8_t flags = load_u8(&in[kFlagsOffset]);
  const size_t frame_size = kFrameHeaderSize + load_u32(&in[kBodyLengthOffset]);
  if (in.size() < frame_size) return Status(StatusCode::kInProgress, "frame body incomplete");

  REMORA_ASSIGN_OR_RETURN(Frame frame, decode_body(type, flags, in.subspan(kBodyOffset, frame_size - kBodyOffset)));
  return Decoded{.frame = std::move(frame), .consumed = frame_size};
}

size_t encoded_size(const Frame& frame) noexcept {
  const size_t crc = crc_size(flags_of(frame));
  if (const auto* eager = std::get_if<EagerFrame>(&frame)) {
    return kFrameHeaderSize + kEagerBodySize + crc + eager->payload.size();
  }
  return kFrameHeaderSize + fixed_body_size(type_of(frame)) + crc + inline_payload(frame).size() +
         segments_of(frame).bytes().size();
}

namespace {
size_t encode_frame(const Frame& frame, std::span<std::byte> out, bool with_payload) noexcept {
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
    bool with_payload;
    void operator()(const EagerFrame& f) const {
      store_u64(body, static_cast<uint64_t>(f.tag));
      if (f.has_crc) store_u32(body + kEagerBodySize, f.crc);
      if (with_payload && !f.payload.empty())
        std::copy(f.payload.begin(), f.payload.end(), body + kEagerBodySize + (f.has_crc ? kCrcSize : 0));
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
      if (f.has_crc) store_u32(body + kChunkBodySize, f.crc);
    }
    void operator()(const CreditFrame& f) const { store_u64(body, f.bytes); }
    void operator()(const GoodbyeFrame& f) const {
      store_u32(body, f.reason);
      store_u32(body + 4, 0);
    }
    void operator()(const PutFrame& f) const {
      store_u64(body, f.op_id);
      std::copy(f.key.begin(), f.key.end(), body + 8);
      store_u64(body + 48, f.offset);
      store_u64(body + 56, f.length);
      store_u64(body + 64, f.has_notify ? f.notify : 0);
      const bool crc = f.inline_data && f.has_crc;
      if (crc) store_u32(body + kPutBodySize, f.crc);
      if (with_payload && f.inline_data && !f.payload.empty()) {
        std::copy(f.payload.begin(), f.payload.end(), body + kPutBodySize + (crc ? kCrcSize : 0));
      }
      std::ranges::copy(f.segments.bytes(), body + kPutBodySize);
    }
    void operator()(const GetFrame& f) const {
      store_u64(body, f.op_id);
      std::copy(f.key.begin(), f.key.end(), body + 8);
      store_u64(body + 48, f.offset);
      store_u64(body + 56, f.length);
      std::ranges::copy(f.segments.bytes(), body + kGetBodySize);
    }
    void operator()(const AtomicFrame& f) const {
      store_u64(body, f.op_id);
      std::copy(f.key.begin(), f.key.end(), body + 8);
      store_u64(body + 48, f.offset);
      store_u32(body + 56, static_cast<uint32_t>(f.op));
      store_u32(body + 60, 0);
      store_u64(body + 64, f.operand);
      store_u64(body + 72, f.op == AtomicOp::kFetchAdd ? 0 : f.compare);
    }
    void operator()(const RespFrame& f) const {
      store_u64(body, f.op_id);
      store_u32(body + 8, static_cast<uint32_t>(f.status));
      store_u32(body + 12, 0);
      store_u64(body + 16, f.value);
      const bool crc = f.inline_data && f.has_crc;
      if (crc) store_u32(body + kRespBodySize, f.crc);
      if (with_payload && f.inline_data && !f.payload.empty()) {
        std::copy(f.payload.begin(), f.payload.end(), body + kRespBodySize + (crc ? kCrcSize : 0));
      }
    }
    void operator()(const AbortFrame& f) const {
      store_u64(body, f.id);
      store_u8(body + 8, static_cast<uint8_t>(f.code));
      std::fill(body + 9, body + kAbortBodySize, std::byte{0});
    }
    void operator()(const HeartbeatFrame& f) const { store_u64(body, f.seq); }
    void operator()(const HostFrame& f) const {
      store_u32(body, f.pid);
      store_u32(body + 4, 0);
      std::copy(f.boot_id.begin(), f.boot_id.end(), body + 8);
      store_u64(body + 24, f.netns);
      store_u64(body + 32, f.probe_address);
      store_u64(body + 40, f.probe_value);
    }
    void operator()(const PullFrame& f) const {
      store_u64(body, f.recv_id);
      store_u64(body + 8, f.offset);
      store_u32(body + 16, f.length);
      store_u32(body + 20, 0);
      store_u64(body + 24, f.address);
      if (f.has_crc) store_u32(body + kPullBodySize, f.crc);
    }
    void operator()(const PulledFrame& f) const {
      store_u64(body, f.recv_id);
      store_u32(body + 8, f.length);
      store_u32(body + 12, 0);
    }
    void operator()(const ShmFrame& f) const {
      store_u32(body, static_cast<uint32_t>(f.op));
      store_u32(body + 4, f.ring_fd);
      store_u32(body + 8, f.wake_fd);
      store_u32(body + 12, static_cast<uint32_t>(f.code));
    }
    void operator()(const ReceivedFrame& f) const { store_counts(f.stream, f.chunks); }
    void operator()(const RetireFrame& f) const { store_counts(f.stream, f.chunks); }
    void operator()(const RejoinedFrame& f) const { store_counts(f.stream, 0); }
    void operator()(const HandledFrame& f) const { store_u64(body, f.bytes); }
    void operator()(const MapFrame& f) const {
      store_u32(body, static_cast<uint32_t>(f.op));
      store_u32(body + 4, f.fd);
      store_u32(body + 8, static_cast<uint32_t>(f.code));
      store_u32(body + 12, f.grant);
      store_u64(body + 16, f.op == MapOp::kCredit || f.op == MapOp::kAck ? f.count : f.region_bytes);
      std::copy(f.key.begin(), f.key.end(), body + 24);
    }
    void operator()(const PlacedFrame& f) const {
      std::copy(f.key.begin(), f.key.end(), body);
      store_u64(body + 40, f.offset);
      store_u64(body + 48, f.length);
      store_u64(body + 56, f.notify);
    }
    void operator()(const PlacedShortFrame& f) const { store_placed_short_body(body, f); }
    void store_counts(uint16_t stream, uint64_t chunks) const {
      store_u16(body, stream);
      store_u16(body + 2, 0);
      store_u32(body + 4, 0);
      store_u64(body + 8, chunks);
    }
  };

  // body_length is a u32 and counts the fixed body too (8 bytes for EAGER, 72 for PUT, 24
  // for RESP): refuse a payload it cannot describe rather than send a wrapped length.
  assert(size - kFrameHeaderSize <= UINT32_MAX);
  if (size - kFrameHeaderSize > UINT32_MAX) return 0;
  store_header(p, type, static_cast<uint32_t>(size - kFrameHeaderSize), flags_of(frame));
  std::visit(Visitor{body, with_payload}, frame);
  return size;
}
}  // namespace

size_t encode(const Frame& frame, std::span<std::byte> out) noexcept { return encode_frame(frame, out, true); }

size_t encode_header(const Frame& frame, std::span<std::byte> out) noexcept { return encode_frame(frame, out, false); }

Segment SegmentList::operator[](size_t i) const noexcept {
  const std::byte* p = bytes_.data() + i * kSegmentSize;
  return Segment{.offset = load_u64(p), .length = load_u64(p + 8)};
}

std::vector<std::byte> encode_segments(std::span<const Segment> segments) {
  std::vector<std::byte> out(segments.size() * kSegmentSize);
  for (size_t i = 0; i < segments.size(); ++i) {
    store_u64(out.data() + i * kSegmentSize, segments[i].offset);
    store_u64(out.data() + i * kSegmentSize + 8, segments[i].length);
  }
  return out;
}

std::span<const std::byte> inline_payload(const Frame& frame) noexcept {
  if (const auto* eager = std::get_if<EagerFrame>(&frame)) return eager->payload;
  if (const auto* put = std::get_if<PutFrame>(&frame); put != nullptr && put->inline_data) return put->payload;
  if (const auto* resp = std::get_if<RespFrame>(&frame); resp != nullptr && resp->inline_data) return resp->payload;
  return {};
}

size_t encode_eager_prefix(Tag tag, uint32_t payload_len, std::span<std::byte> out, const uint32_t* crc) noexcept {
  const size_t prefix_size = kFrameHeaderSize + kEagerBodySize + (crc != nullptr ? kCrcSize : 0);
  assert(out.size() >= prefix_size && payload_len <= kMaxEagerWirePayload - kCrcSize);
  if (out.size() < prefix_size || payload_len > kMaxEagerWirePayload - kCrcSize) return 0;
  store_header(out.data(), FrameType::kEager, static_cast<uint32_t>(prefix_size - kFrameHeaderSize + payload_len),
               crc != nullptr ? kCrcFlag : 0);
  store_u64(out.data() + kBodyOffset, static_cast<uint64_t>(tag));
  if (crc != nullptr) store_u32(out.data() + kBodyOffset + kEagerBodySize, *crc);
  return prefix_size;
}

size_t encode_placed_short(const PlacedShortFrame& f, std::span<std::byte> out) noexcept {
  constexpr size_t kSize = kFrameHeaderSize + kPlacedShortBodySize;
  assert(out.size() >= kSize);
  if (out.size() < kSize) return 0;
  store_header(out.data(), FrameType::kPlacedShort, kPlacedShortBodySize);
  store_placed_short_body(out.data() + kBodyOffset, f);
  return kSize;
}

std::string_view to_string(FrameType type) noexcept {
  switch (type) {
    case FrameType::kEager: return "EAGER";
    case FrameType::kRts: return "RTS";
    case FrameType::kCts: return "CTS";
    case FrameType::kChunk: return "CHUNK";
    case FrameType::kCredit: return "CREDIT";
    case FrameType::kGoodbye: return "GOODBYE";
    case FrameType::kPut: return "PUT";
    case FrameType::kGet: return "GET";
    case FrameType::kAtomic: return "ATOMIC";
    case FrameType::kResp: return "RESP";
    case FrameType::kAbort: return "ABORT";
    case FrameType::kHeartbeat: return "HEARTBEAT";
    case FrameType::kHost: return "HOST";
    case FrameType::kPull: return "PULL";
    case FrameType::kPulled: return "PULLED";
    case FrameType::kShm: return "SHM";
    case FrameType::kReceived: return "RECEIVED";
    case FrameType::kRetire: return "RETIRE";
    case FrameType::kRejoined: return "REJOINED";
    case FrameType::kHandled: return "HANDLED";
    case FrameType::kMap: return "MAP";
    case FrameType::kPlaced: return "PLACED";
    case FrameType::kPlacedShort: return "PLACED_SHORT";
  }
  return "unknown";
}

}  // namespace remora::wire
