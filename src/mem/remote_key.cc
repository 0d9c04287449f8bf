// mem/remote_key.cc — the 40-byte little-endian wire form of a RemoteKey.
//
//   0 u8  version (1)      1 u8  memory kind     2 u16 access bits
//   4 u32 region id        8 u32 generation     12 u32 reserved (0)
//  16 u64 secret          24 u64 offset         32 u64 length
//
// Packed byte by byte so the layout does not depend on the host's endianness or on
// struct padding. deserialize() trusts nothing: every field is checked.
#include <cstring>

#include "core/log.h"
#include "remora/memory.h"

namespace remora {
namespace {

constexpr size_t kVersionAt = 0;
constexpr size_t kKindAt = 1;
constexpr size_t kAccessAt = 2;
constexpr size_t kRegionAt = 4;
constexpr size_t kGenerationAt = 8;
constexpr size_t kReservedAt = 12;
constexpr size_t kSecretAt = 16;
constexpr size_t kOffsetAt = 24;
constexpr size_t kLengthAt = 32;
static_assert(kLengthAt + 8 == RemoteKey::kSerializedSize, "RemoteKey wire layout is 40 bytes");

template <typename T>
void put_le(std::byte* out, T value) noexcept {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>((static_cast<uint64_t>(value) >> (8 * i)) & 0xFF);
}

template <typename T>
T get_le(const std::byte* in) noexcept {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return static_cast<T>(value);
}

bool known_kind(uint8_t kind) noexcept {
  switch (static_cast<MemoryKind>(kind)) {
    case MemoryKind::kHost:
    case MemoryKind::kCuda:
    case MemoryKind::kDmabuf: return true;
  }
  return false;
}

Status malformed(std::string_view what) {
  return Status(StatusCode::kInvalidArgument, fmt::format("malformed remote key: {}", what));
}

}  // namespace

std::array<std::byte, RemoteKey::kSerializedSize> RemoteKey::serialize() const noexcept {
  std::array<std::byte, kSerializedSize> out{};
  put_le<uint8_t>(out.data() + kVersionAt, kVersion);
  put_le<uint8_t>(out.data() + kKindAt, static_cast<uint8_t>(kind));
  put_le<uint16_t>(out.data() + kAccessAt, static_cast<uint16_t>(static_cast<uint32_t>(access)));
  put_le<uint32_t>(out.data() + kRegionAt, static_cast<uint32_t>(region));
  put_le<uint32_t>(out.data() + kGenerationAt, generation);
  put_le<uint32_t>(out.data() + kReservedAt, 0);
  put_le<uint64_t>(out.data() + kSecretAt, secret);
  put_le<uint64_t>(out.data() + kOffsetAt, offset);
  put_le<uint64_t>(out.data() + kLengthAt, length);
  return out;
}

Result<RemoteKey> RemoteKey::deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() != kSerializedSize) {
    return malformed(fmt::format("size is {} bytes, expected {}", bytes.size(), kSerializedSize));
  }
  const std::byte* in = bytes.data();
  const auto version = get_le<uint8_t>(in + kVersionAt);
  if (version != kVersion) return malformed(fmt::format("version is {}, expected {}", version, kVersion));
  const auto kind = get_le<uint8_t>(in + kKindAt);
  if (!known_kind(kind)) return malformed(fmt::format("unknown memory kind {}", kind));
  const auto access = get_le<uint16_t>(in + kAccessAt);
  if ((access & ~static_cast<uint32_t>(kAllAccess)) != 0) {
    return malformed(fmt::format("unknown access bits {:#x}", access));
  }
  const auto reserved = get_le<uint32_t>(in + kReservedAt);
  if (reserved != 0) return malformed(fmt::format("reserved field is {:#x}, expected 0", reserved));

  RemoteKey key;
  key.kind = static_cast<MemoryKind>(kind);
  key.access = static_cast<Access>(access);
  key.region = static_cast<RegionId>(get_le<uint32_t>(in + kRegionAt));
  key.generation = get_le<uint32_t>(in + kGenerationAt);
  key.secret = get_le<uint64_t>(in + kSecretAt);
  key.offset = get_le<uint64_t>(in + kOffsetAt);
  key.length = get_le<uint64_t>(in + kLengthAt);
  if (key.offset > UINT64_MAX - key.length) {
    return malformed(fmt::format("window offset {} + length {} overflows", key.offset, key.length));
  }
  return key;
}

}  // namespace remora
