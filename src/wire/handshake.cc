// wire/handshake.cc — HELLO / HELLO_ACK codec. Layout: docs/protocol.md, "Connections".
#include "wire/handshake.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/little_endian.h"
#include "remora/version.h"

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

// Offsets shared by HELLO and HELLO_ACK (docs/protocol.md). They differ only at 6..7:
// HELLO has role (u8) + reserved (u8), HELLO_ACK has status (u16).
constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 4;
constexpr size_t kRoleOffset = 6;
constexpr size_t kHelloReservedOffset = 7;
constexpr size_t kStatusOffset = 6;
constexpr size_t kCapabilitiesOffset = 8;
constexpr size_t kEndpointIdOffset = 16;
constexpr size_t kAttachTokenOffset = 24;
constexpr size_t kStreamIndexOffset = 32;
constexpr size_t kStreamCountOffset = 34;
constexpr size_t kEagerLimitOffset = 36;
constexpr size_t kEagerCreditOffset = 40;
constexpr size_t kRmaWindowOffset = 44;

static_assert(kHelloSize == 48 && kHelloAckSize == 48);
static_assert(kMagicOffset + 4 == kVersionOffset && kVersionOffset + 2 == kRoleOffset);
static_assert(kRoleOffset + 1 == kHelloReservedOffset && kHelloReservedOffset + 1 == kCapabilitiesOffset);
static_assert(kStatusOffset + 2 == kCapabilitiesOffset);
static_assert(kCapabilitiesOffset + 8 == kEndpointIdOffset && kEndpointIdOffset + 8 == kAttachTokenOffset);
static_assert(kAttachTokenOffset + 8 == kStreamIndexOffset && kStreamIndexOffset + 2 == kStreamCountOffset);
static_assert(kStreamCountOffset + 2 == kEagerLimitOffset && kEagerLimitOffset + 4 == kEagerCreditOffset);
static_assert(kEagerCreditOffset + 4 == kRmaWindowOffset && kRmaWindowOffset + 4 == kHelloSize);
constexpr uint32_t kMaxRmaWindow = 65536;
// "RMRA" as bytes 52 4D 52 41, read little-endian.
static_assert(kMagic == (0x52u | 0x4Du << 8 | 0x52u << 16 | 0x41u << 24));

Status protocol_error(std::string message) { return {StatusCode::kProtocol, std::move(message)}; }

/// Size and magic checks shared by both messages; returns the version on success.
Result<uint16_t> decode_preamble(std::string_view what, std::span<const std::byte> in, size_t expected_size) {
  if (in.size() != expected_size) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: decode needs exactly {} bytes, got {}", what, expected_size, in.size()));
  }
  const uint32_t magic = load_u32(&in[kMagicOffset]);
  if (magic != kMagic) {
    return protocol_error(fmt::format("{}: magic 0x{:08x} is not 0x{:08x} (not a remora peer)", what, magic, kMagic));
  }
  return load_u16(&in[kVersionOffset]);
}

/// The fields after offset 8, identical in both messages.
struct CommonTail {
  uint64_t capabilities;
  uint64_t endpoint_id;
  uint64_t attach_token;
  uint16_t stream_index;
  uint16_t stream_count;
  uint32_t eager_limit;
  uint32_t eager_credit;
  uint32_t rma_window;
};

void store_tail(std::byte* p, const CommonTail& t) {
  store_u64(p + kCapabilitiesOffset, t.capabilities);
  store_u64(p + kEndpointIdOffset, t.endpoint_id);
  store_u64(p + kAttachTokenOffset, t.attach_token);
  store_u16(p + kStreamIndexOffset, t.stream_index);
  store_u16(p + kStreamCountOffset, t.stream_count);
  store_u32(p + kEagerLimitOffset, t.eager_limit);
  store_u32(p + kEagerCreditOffset, t.eager_credit);
  store_u32(p + kRmaWindowOffset, t.rma_window);
}

CommonTail load_tail(const std::byte* p) {
  return {.capabilities = load_u64(p + kCapabilitiesOffset),
          .endpoint_id = load_u64(p + kEndpointIdOffset),
          .attach_token = load_u64(p + kAttachTokenOffset),
          .stream_index = load_u16(p + kStreamIndexOffset),
          .stream_count = load_u16(p + kStreamCountOffset),
          .eager_limit = load_u32(p + kEagerLimitOffset),
          .eager_credit = load_u32(p + kEagerCreditOffset),
          .rma_window = load_u32(p + kRmaWindowOffset)};
}

}  // namespace

Status check_magic_prefix(std::string_view what, std::span<const std::byte> first) {
  std::array<std::byte, 4> magic{};
  store_u32(magic.data(), kMagic);
  const size_t n = std::min(first.size(), magic.size());
  if (std::equal(first.begin(), first.begin() + static_cast<ptrdiff_t>(n), magic.begin())) return Status::ok();
  std::string seen;
  for (size_t i = 0; i < n; ++i) seen += fmt::format("{:02x}", std::to_integer<unsigned>(first[i]));
  return protocol_error(
      fmt::format("{}: its first bytes {} are not the magic \"RMRA\" (not a remora peer)", what, seen));
}

std::array<std::byte, kHelloSize> encode_hello(const Hello& hello) noexcept {
  std::array<std::byte, kHelloSize> out{};
  std::byte* p = out.data();
  store_u32(p + kMagicOffset, kMagic);
  store_u16(p + kVersionOffset, hello.version);
  store_u8(p + kRoleOffset, static_cast<uint8_t>(hello.role));
  store_u8(p + kHelloReservedOffset, 0);
  store_tail(p, {.capabilities = hello.capabilities,
                 .endpoint_id = hello.endpoint_id,
                 .attach_token = hello.attach_token,
                 .stream_index = hello.stream_index,
                 .stream_count = hello.stream_count,
                 .eager_limit = hello.eager_limit,
                 .eager_credit = hello.eager_credit,
                 .rma_window = hello.rma_window});
  return out;
}

std::array<std::byte, kHelloAckSize> encode_hello_ack(const HelloAck& ack) noexcept {
  std::array<std::byte, kHelloAckSize> out{};
  std::byte* p = out.data();
  store_u32(p + kMagicOffset, kMagic);
  store_u16(p + kVersionOffset, ack.version);
  store_u16(p + kStatusOffset, static_cast<uint16_t>(ack.status));
  store_tail(p, {.capabilities = ack.capabilities,
                 .endpoint_id = ack.endpoint_id,
                 .attach_token = ack.attach_token,
                 .stream_index = ack.stream_index,
                 .stream_count = ack.stream_count,
                 .eager_limit = ack.eager_limit,
                 .eager_credit = ack.eager_credit,
                 .rma_window = ack.rma_window});
  return out;
}

Result<Hello> decode_hello(std::span<const std::byte> in) {
  REMORA_ASSIGN_OR_RETURN(const uint16_t version, decode_preamble("HELLO", in, kHelloSize));
  // Another version may lay the rest out differently: return only what the caller needs
  // to answer "version mismatch".
  if (version != kWireVersion) return Hello{.version = version};

  const std::byte* p = in.data();
  const uint8_t role = load_u8(p + kRoleOffset);
  if (role != static_cast<uint8_t>(Role::kControl) && role != static_cast<uint8_t>(Role::kData) &&
      role != static_cast<uint8_t>(Role::kProbe) && role != static_cast<uint8_t>(Role::kResume)) {
    return protocol_error(fmt::format("HELLO: unknown role {}", role));
  }
  const uint8_t reserved = load_u8(p + kHelloReservedOffset);
  if (reserved != 0) return protocol_error(fmt::format("HELLO: reserved byte 7 is 0x{:02x}, must be 0", reserved));
  const CommonTail t = load_tail(p);
  if (t.rma_window < 1 || t.rma_window > kMaxRmaWindow) {
    return protocol_error(fmt::format("HELLO: rma_window {} outside 1..{}", t.rma_window, kMaxRmaWindow));
  }
  if (t.stream_count < 1 || t.stream_count > kMaxStreams) {
    return protocol_error(fmt::format("HELLO: stream_count {} outside 1..{}", t.stream_count, kMaxStreams));
  }
  if (t.stream_index >= t.stream_count) {
    return protocol_error(
        fmt::format("HELLO: stream_index {} not below stream_count {}", t.stream_index, t.stream_count));
  }
  const bool attaches = role == static_cast<uint8_t>(Role::kData) || role == static_cast<uint8_t>(Role::kResume);
  if (!attaches) {
    if (t.endpoint_id != 0 || t.attach_token != 0 || t.stream_index != 0) {
      return protocol_error(
          fmt::format("HELLO: a {} connection must send endpoint_id, attach_token and stream_index 0, "
                      "got endpoint_id {} attach_token 0x{:x} stream_index {}",
                      role == static_cast<uint8_t>(Role::kControl) ? "control" : "probe", t.endpoint_id, t.attach_token,
                      t.stream_index));
    }
  } else if (t.endpoint_id == 0) {
    return protocol_error(fmt::format("HELLO: {} connection with endpoint_id 0",
                                      role == static_cast<uint8_t>(Role::kData) ? "data" : "resumed control"));
  } else if (role == static_cast<uint8_t>(Role::kResume) && t.stream_index != 0) {
    return protocol_error(
        fmt::format("HELLO: a resumed control connection must send stream_index 0, got {}", t.stream_index));
  }
  return Hello{.version = version,
               .role = static_cast<Role>(role),
               .capabilities = t.capabilities,
               .endpoint_id = t.endpoint_id,
               .attach_token = t.attach_token,
               .stream_index = t.stream_index,
               .stream_count = t.stream_count,
               .eager_limit = t.eager_limit,
               .eager_credit = t.eager_credit,
               .rma_window = t.rma_window};
}

// RAILS: header {magic u32, count u16, reserved u16}; entries {family u8, prefix u8,
// port u16, reserved u32, address [16]}.
constexpr size_t kRailsCountOffset = 4;
constexpr size_t kRailsReservedOffset = 6;
constexpr size_t kRailFamilyOffset = 0;
constexpr size_t kRailPrefixOffset = 1;
constexpr size_t kRailPortOffset = 2;
constexpr size_t kRailReservedOffset = 4;
constexpr size_t kRailAddressOffset = 8;
static_assert(kRailsReservedOffset + 2 == kRailsHeaderSize);
static_assert(kRailAddressOffset + 16 == kRailEntrySize && kRailReservedOffset + 4 == kRailAddressOffset);

std::vector<std::byte> encode_rails(std::span<const RailAddress> rails) {
  const size_t n = std::min(rails.size(), kMaxRailAddresses);
  std::vector<std::byte> out(kRailsHeaderSize + n * kRailEntrySize);
  std::byte* p = out.data();
  store_u32(p + kMagicOffset, kMagic);
  store_u16(p + kRailsCountOffset, static_cast<uint16_t>(n));
  for (size_t i = 0; i < n; ++i) {
    std::byte* e = p + kRailsHeaderSize + i * kRailEntrySize;
    store_u8(e + kRailFamilyOffset, rails[i].family);
    store_u8(e + kRailPrefixOffset, rails[i].prefix_length);
    store_u16(e + kRailPortOffset, rails[i].port);
    std::copy(rails[i].address.begin(), rails[i].address.end(), e + kRailAddressOffset);
  }
  return out;
}

Result<uint16_t> decode_rails_header(std::span<const std::byte> in) {
  if (in.size() != kRailsHeaderSize) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("RAILS: decode needs exactly {} bytes, got {}", kRailsHeaderSize, in.size()));
  }
  if (const uint32_t magic = load_u32(&in[kMagicOffset]); magic != kMagic) {
    return protocol_error(fmt::format("RAILS: magic 0x{:08x} is not 0x{:08x}", magic, kMagic));
  }
  const uint16_t count = load_u16(&in[kRailsCountOffset]);
  if (const uint16_t reserved = load_u16(&in[kRailsReservedOffset]); reserved != 0) {
    return protocol_error(fmt::format("RAILS: reserved field is {}, must be 0", reserved));
  }
  if (count > kMaxRailAddresses) {
    return protocol_error(fmt::format("RAILS: {} addresses, at most {}", count, kMaxRailAddresses));
  }
  return count;
}

Result<RailAddress> decode_rail_entry(std::span<const std::byte> in) {
  if (in.size() != kRailEntrySize) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("RAILS entry: decode needs exactly {} bytes, got {}", kRailEntrySize, in.size()));
  }
  const std::byte* e = in.data();
  RailAddress r;
  r.family = load_u8(e + kRailFamilyOffset);
  r.prefix_length = load_u8(e + kRailPrefixOffset);
  r.port = load_u16(e + kRailPortOffset);
  std::copy(e + kRailAddressOffset, e + kRailEntrySize, r.address.begin());
  if (r.family != 4 && r.family != 6)
    return protocol_error(fmt::format("RAILS entry: family {} is not 4 or 6", r.family));
  if (r.prefix_length > (r.family == 4 ? 32 : 128)) {
    return protocol_error(fmt::format("RAILS entry: prefix length {} for IPv{}", r.prefix_length, r.family));
  }
  if (r.port == 0) return protocol_error("RAILS entry: port 0");
  if (const uint32_t reserved = load_u32(e + kRailReservedOffset); reserved != 0) {
    return protocol_error(fmt::format("RAILS entry: reserved field is 0x{:x}, must be 0", reserved));
  }
  if (r.family == 4 &&
      std::any_of(r.address.begin() + 4, r.address.end(), [](std::byte b) { return b != std::byte{0}; })) {
    return protocol_error("RAILS entry: an IPv4 address with nonzero bytes after its fourth");
  }
  return r;
}

Result<HelloAck> decode_hello_ack(std::span<const std::byte> in) {
  REMORA_ASSIGN_OR_RETURN(const uint16_t version, decode_preamble("HELLO_ACK", in, kHelloAckSize));
  const std::byte* p = in.data();
  const uint16_t status = load_u16(p + kStatusOffset);
  // Another version: version and status only, unvalidated (see decode_hello).
  if (version != kWireVersion) return HelloAck{.version = version, .status = static_cast<HelloStatus>(status)};

  if (status > static_cast<uint16_t>(HelloStatus::kUnauthenticated)) {
    return protocol_error(fmt::format("HELLO_ACK: unknown status {}", status));
  }
  const CommonTail t = load_tail(p);
  if (status == static_cast<uint16_t>(HelloStatus::kAccepted) && (t.rma_window < 1 || t.rma_window > kMaxRmaWindow)) {
    return protocol_error(fmt::format("HELLO_ACK: rma_window {} outside 1..{}", t.rma_window, kMaxRmaWindow));
  }
  return HelloAck{.version = version,
                  .status = static_cast<HelloStatus>(status),
                  .capabilities = t.capabilities,
                  .endpoint_id = t.endpoint_id,
                  .attach_token = t.attach_token,
                  .stream_index = t.stream_index,
                  .stream_count = t.stream_count,
                  .eager_limit = t.eager_limit,
                  .eager_credit = t.eager_credit,
                  .rma_window = t.rma_window};
}

}  // namespace remora::wire
