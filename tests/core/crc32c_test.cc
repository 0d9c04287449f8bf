// tests/core/crc32c_test.cc — CRC-32C against its published check value and the
// properties the transport relies on (chaining, sensitivity to one flipped bit).
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include "crc32c_required.h"

#include <cstring>
#include <numeric>
#include <string_view>
#include <vector>

namespace remora::core {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

TEST(Crc32c, KnownAnswer) {
  REMORA_SKIP_WITHOUT_CRC32C();
  // The check value of CRC-32C (Castagnoli), as in RFC 3720 and every CRC catalogue.
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
  // RFC 3720 B.4: 32 bytes of zeros, and of 0xFF.
  std::vector<std::byte> zeros(32, std::byte{0});
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  std::vector<std::byte> ones(32, std::byte{0xFF});
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
}

TEST(Crc32c, ExtendChainsPieces) {
  REMORA_SKIP_WITHOUT_CRC32C();
  std::vector<std::byte> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  const uint32_t whole = crc32c(data);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{4095}, size_t{65536}, data.size()}) {
    const std::span<const std::byte> all(data);
    EXPECT_EQ(crc32c_extend(crc32c(all.first(cut)), all.subspan(cut)), whole) << "cut at " << cut;
  }
}

TEST(Crc32c, OneFlippedBitChangesIt) {
  REMORA_SKIP_WITHOUT_CRC32C();
  std::vector<std::byte> data(512 * 1024, std::byte{0x5A});
  const uint32_t before = crc32c(data);
  data[data.size() / 2] ^= std::byte{0x01};
  EXPECT_NE(crc32c(data), before);
}

}  // namespace
}  // namespace remora::core
