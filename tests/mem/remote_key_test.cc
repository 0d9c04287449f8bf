// Tests for the RemoteKey wire form: exact layout, round trip, and rejection of every
// malformed field.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "remora/memory.h"

namespace remora {
namespace {

RemoteKey sample_key() {
  RemoteKey key;
  key.region = static_cast<RegionId>(0x04030201u);
  key.generation = 0x08070605u;
  key.secret = 0x1817161514131211ull;
  key.offset = 0x2827262524232221ull;
  key.length = 0x0000000000001000ull;
  key.access = Access::kRemoteRead | Access::kRemoteAtomic;
  key.kind = MemoryKind::kDmabuf;
  return key;
}

using Bytes = std::array<std::byte, RemoteKey::kSerializedSize>;

StatusCode decode_code(const Bytes& bytes) { return RemoteKey::deserialize(bytes).status().code(); }

TEST(RemoteKey, SerializesToTheDocumentedLittleEndianLayout) {
  const Bytes bytes = sample_key().serialize();
  const uint8_t expected[40] = {
      0x01, 0x02, 0x0A, 0x00,                          // version, kind, access (read|atomic = 0xA)
      0x01, 0x02, 0x03, 0x04,                          // region id
      0x05, 0x06, 0x07, 0x08,                          // generation
      0x00, 0x00, 0x00, 0x00,                          // reserved
      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,  // secret
      0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,  // offset
      0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // length
  };
  for (size_t i = 0; i < bytes.size(); ++i) {
    EXPECT_EQ(static_cast<uint8_t>(bytes[i]), expected[i]) << "byte " << i;
  }
}

TEST(RemoteKey, RoundTrips) {
  const RemoteKey key = sample_key();
  auto decoded = RemoteKey::deserialize(key.serialize());
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().to_string();
  EXPECT_EQ(*decoded, key);

  RemoteKey edge;
  edge.region = static_cast<RegionId>(UINT32_MAX);
  edge.generation = UINT32_MAX;
  edge.secret = UINT64_MAX;
  edge.offset = UINT64_MAX - 5;
  edge.length = 5;  // ends exactly at 2^64 - 1: allowed
  edge.access = kAllAccess;
  edge.kind = MemoryKind::kHost;
  auto edge_decoded = RemoteKey::deserialize(edge.serialize());
  ASSERT_TRUE(edge_decoded.is_ok()) << edge_decoded.status().to_string();
  EXPECT_EQ(*edge_decoded, edge);

  auto empty = RemoteKey::deserialize(RemoteKey{}.serialize());
  ASSERT_TRUE(empty.is_ok());
  EXPECT_EQ(*empty, RemoteKey{});
}

TEST(RemoteKey, RejectsWrongSizes) {
  const Bytes good = sample_key().serialize();
  std::vector<std::byte> shorter(good.begin(), good.end() - 1);
  std::vector<std::byte> longer(good.begin(), good.end());
  longer.push_back(std::byte{0});
  EXPECT_EQ(RemoteKey::deserialize(shorter).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RemoteKey::deserialize(longer).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RemoteKey::deserialize({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(RemoteKey, RejectsEachMalformedField) {
  const Bytes good = sample_key().serialize();
  auto with = [&](size_t at, uint8_t value) {
    Bytes b = good;
    b[at] = static_cast<std::byte>(value);
    return b;
  };
  auto message = [](const Bytes& b) { return RemoteKey::deserialize(b).status().message(); };

  EXPECT_EQ(decode_code(with(0, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_code(with(0, 2)), StatusCode::kInvalidArgument);
  EXPECT_NE(message(with(0, 2)).find("version"), std::string::npos);

  EXPECT_EQ(decode_code(with(1, 4)), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_code(with(1, 0xFF)), StatusCode::kInvalidArgument);
  EXPECT_NE(message(with(1, 4)).find("kind"), std::string::npos);

  EXPECT_EQ(decode_code(with(2, 0x10)), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_code(with(2, 0x8A)), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_code(with(3, 0x01)), StatusCode::kInvalidArgument);  // high byte of access
  EXPECT_NE(message(with(2, 0x10)).find("access"), std::string::npos);

  for (size_t at = 12; at < 16; ++at) {
    EXPECT_EQ(decode_code(with(at, 1)), StatusCode::kInvalidArgument) << "reserved byte " << at;
    EXPECT_NE(message(with(at, 1)).find("reserved"), std::string::npos);
  }

  // offset + length overflows: offset = 2^64 - 2, length = 4.
  RemoteKey wrapping = sample_key();
  wrapping.offset = UINT64_MAX - 1;
  wrapping.length = 4;
  EXPECT_EQ(decode_code(wrapping.serialize()), StatusCode::kInvalidArgument);
  EXPECT_NE(message(wrapping.serialize()).find("overflow"), std::string::npos);
  RemoteKey huge = sample_key();
  huge.offset = 1;
  huge.length = UINT64_MAX;
  EXPECT_EQ(decode_code(huge.serialize()), StatusCode::kInvalidArgument);

  // Every other field accepts any value.
  for (size_t at : {4u, 7u, 8u, 11u, 16u, 23u}) {
    EXPECT_TRUE(RemoteKey::deserialize(with(at, 0xFF)).is_ok()) << "byte " << at;
  }
}

}  // namespace
}  // namespace remora
