// mem/remote_key.cc — the 40-byte little-endian wire form of a RemoteKey.
//
//   0 u8  version (1)      1 u8  memory kind     2 u16 access bits
//   4 u32 region id        8 u32 generation     12 u32 reserved (0)
//  16 u64 secret          24 u64 offset         32 u64 length
//
// Packed byte by byte so the layout does not depend on the host's endianness or on
// struct padding. deserialize() trusts nothing: every field is checked.
#include <cstring>

#include "core/little_endian.h"
#include "core/log.h"
#include "remora/memory.h"
#include "remora/testing/test_device.h"

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

bool known_kind(uint8_t kind) noexcept {
  switch (static_cast<MemoryKind>(kind)) {
    case MemoryKind::kHost:
    case MemoryKind::kCuda:
    case MemoryKind::kDmabuf: return true;
  }
  return static_cast<MemoryKind>(kind) == testing::kTestDeviceKind;
}

Status malformed(std::string_view what) {
  return Status(StatusCode::kInvalidArgument, fmt::format("malformed remote key: {}", what));
}

}  // namespace

std::array<std::byte, RemoteKey::kSerializedSize> RemoteKey::serialize() const noexcept {
  std::array<std::byte, kSerializedSize> out{};
  core::store_le<uint8_t>(out.data() + kVersionAt, kVersion);
  core::store_le<uint8_t>(out.data() + kKindAt, static_cast<uint8_t>(kind));
  core::store_le<uint16_t>(out.data() + kAccessAt, static_cast<uint16_t>(static_cast<uint32_t>(access)));
  core::store_le<uint32_t>(out.data() + kRegionAt, static_cast<uint32_t>(region));
  core::store_le<uint32_t>(out.data() + kGenerationAt, generation);
  core::store_le<uint32_t>(out.data() + kReservedAt, 0);
  core::store_le<uint64_t>(out.data() + kSecretAt, secret);
  core::store_le<uint64_t>(out.data() + kOffsetAt, offset);
  core::store_le<uint64_t>(out.data() + kLengthAt, length);
  return out;
}

Result<RemoteKey> RemoteKey::deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() != kSerializedSize) {
    return malformed(fmt::format("size is {} bytes, expected {}", bytes.size(), kSerializedSize));
  }
  const std::byte* in = bytes.data();
  const auto version = core::load_le<uint8_t>(in + kVersionAt);
  if (version != kVersion) return malformed(fmt::format("version is {}, expected {}", version, kVersion));
  const auto kind = core::load_le<uint8_t>(in + kKindAt);
  if (!known_kind(kind)) return malformed(fmt::format("unknown memory kind {}", kind));
  const auto access = core::load_le<uint16_t>(in + kAccessAt);
  if ((access & ~static_cast<uint32_t>(kAllAccess)) != 0) {
    return malformed(fmt::format("unknown access bits {:#x}", access));
  }
  const auto reserved = core::load_le<uint32_t>(in + kReservedAt);
  if (reserved != 0) return malformed(fmt::format("reserved field is {:#x}, expected 0", reserved));

  RemoteKey key;
  key.kind = static_cast<MemoryKind>(kind);
  key.access = static_cast<Access>(access);
  key.region = static_cast<RegionId>(core::load_le<uint32_t>(in + kRegionAt));
  key.generation = core::load_le<uint32_t>(in + kGenerationAt);
  key.secret = core::load_le<uint64_t>(in + kSecretAt);
  key.offset = core::load_le<uint64_t>(in + kOffsetAt);
  key.length = core::load_le<uint64_t>(in + kLengthAt);
  if (key.offset > UINT64_MAX - key.length) {
    return malformed(fmt::format("window offset {} + length {} overflows", key.offset, key.length));
  }
  return key;
}

}  // namespace remora
