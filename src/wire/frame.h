// wire/frame.h — control-stream frames: pure encode/decode, no I/O.
// The byte layout is specified in docs/protocol.md; static_asserts in frame.cc
// mirror it. Decoding never trusts its input: every malformed frame kind is a
// kProtocol error with a message naming the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "remora/status.h"
#include "remora/types.h"

namespace remora::wire {

enum class FrameType : uint8_t {
  kEager = 1,
  kRts = 2,
  kCts = 3,
  kChunk = 4,
  kCredit = 5,
  kGoodbye = 6,
};

inline constexpr size_t kFrameHeaderSize = 8;
inline constexpr size_t kEagerBodySize = 8;  // tag; the payload follows
inline constexpr size_t kRtsBodySize = 24;
inline constexpr size_t kCtsBodySize = 24;
inline constexpr size_t kChunkBodySize = 24;
inline constexpr size_t kCreditBodySize = 8;
inline constexpr size_t kGoodbyeBodySize = 8;
/// Largest fixed-size frame (header + body), handy for stack buffers.
inline constexpr size_t kMaxFixedFrameSize = kFrameHeaderSize + 24;
/// Bytes of credit an EAGER message costs on top of its payload.
inline constexpr size_t kEagerCreditOverhead = 64;

enum class CtsStatus : uint32_t { kProceed = 0, kTruncated = 1 };

struct EagerFrame {
  Tag tag{};
  std::span<const std::byte> payload;  ///< decode: points into the input buffer
};
struct RtsFrame {
  uint64_t send_id = 0;
  Tag tag{};
  uint64_t length = 0;
};
struct CtsFrame {
  uint64_t send_id = 0;
  uint64_t recv_id = 0;
  CtsStatus status = CtsStatus::kProceed;
};
struct ChunkFrame {
  uint64_t recv_id = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint16_t stream = 0;
};
struct CreditFrame {
  uint64_t bytes = 0;
};
struct GoodbyeFrame {
  uint32_t reason = 0;
};

using Frame = std::variant<EagerFrame, RtsFrame, CtsFrame, ChunkFrame, CreditFrame, GoodbyeFrame>;

struct DecodeLimits {
  uint32_t max_eager_payload = 0;  ///< this side's eager_limit
};

struct Decoded {
  Frame frame;
  size_t consumed = 0;  ///< bytes of the input this frame occupied
};

/// Decodes the first frame in `in`.
/// - ok: the frame (an EAGER payload is a view into `in`) and its size;
/// - kInProgress: `in` holds a valid prefix but not the whole frame yet (read more);
/// - kProtocol: malformed (unknown type, nonzero flags/reserved, wrong body length,
///   EAGER payload over the limit, CTS status unknown), with a message naming why.
/// The header is validated as soon as its 8 bytes are present, so an absurd length is
/// rejected before anyone waits for its body.
Result<Decoded> decode_frame(std::span<const std::byte> in, const DecodeLimits& limits);

/// Bytes `encode` writes for this frame (header + body + payload).
size_t encoded_size(const Frame& frame) noexcept;

/// Writes `frame` into `out` (which must hold encoded_size(frame) bytes) and returns
/// the bytes written.
size_t encode(const Frame& frame, std::span<std::byte> out) noexcept;

/// Writes only the header and tag of an EAGER frame carrying `payload_len` bytes
/// (kFrameHeaderSize + kEagerBodySize bytes), so the payload can be appended without
/// an intermediate copy.
size_t encode_eager_prefix(Tag tag, uint32_t payload_len, std::span<std::byte> out) noexcept;

std::string_view to_string(FrameType type) noexcept;

}  // namespace remora::wire
