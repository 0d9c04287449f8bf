// Tests of zerocopy/zcrx_ring.cc with completions in the kernel's layout and a refill
// ring over memory of the test's own (the kernel refuses the registration on every
// interface here; io_uring_probe_test tries it for real): completions become fragments
// of the area (the area bits masked off), errors and fragments outside the area are
// refused, and refills write {offset | area token, length} entries at the tail,
// publish the tail, and stop when the kernel's head shows the ring full.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "zerocopy/zcrx_ring.h"

namespace remora::zerocopy {
namespace {

TEST(ZcrxRing, CompletionsBecomeFragmentsOfTheArea) {
  const uint64_t area_bytes = 1 << 20;
  uapi::ZcrxCqe extra{.off = (uint64_t{3} << 48) | 8192, .pad = 0};
  auto f = parse_zcrx_completion(1500, kIoringCqeFMore, extra, area_bytes);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->area_offset, 8192u);
  EXPECT_EQ(f->length, 1500u);
  EXPECT_TRUE(f->more);

  auto eof = parse_zcrx_completion(0, 0, extra, area_bytes);
  ASSERT_TRUE(eof.is_ok());
  EXPECT_EQ(eof->length, 0u);
  EXPECT_FALSE(eof->more);

  auto nobufs = parse_zcrx_completion(-ENOBUFS, 0, extra, area_bytes);
  ASSERT_FALSE(nobufs.is_ok());
  EXPECT_EQ(nobufs.status().code(), StatusCode::kNoResource);

  extra.off = area_bytes - 100;
  auto outside = parse_zcrx_completion(200, 0, extra, area_bytes);
  ASSERT_FALSE(outside.is_ok());
  EXPECT_EQ(outside.status().code(), StatusCode::kProtocol);
}

TEST(ZcrxRing, RefillsAreWrittenAtTheTailUntilTheRingIsFull) {
  constexpr uint32_t kEntries = 4;
  const uapi::ZcrxOffsets offsets{.head = 0, .tail = 64, .rqes = 128, .resv2 = 0, .resv = {0, 0}};
  std::vector<std::byte> region(128 + kEntries * sizeof(uapi::ZcrxRqe));
  const uint64_t token = uint64_t{5} << 48;
  ZcrxRefillRing ring(region.data(), offsets, kEntries, token);
  EXPECT_EQ(ring.free_slots(), kEntries);
  for (uint32_t i = 0; i < kEntries; ++i) EXPECT_TRUE(ring.refill(uint64_t{i} * 4096, 4096));
  EXPECT_FALSE(ring.refill(0, 4096));  // full: the kernel took nothing yet
  uint32_t tail = 0;
  std::memcpy(&tail, region.data() + 64, 4);
  EXPECT_EQ(tail, kEntries);
  for (uint32_t i = 0; i < kEntries; ++i) {
    uapi::ZcrxRqe rqe;
    std::memcpy(&rqe, region.data() + 128 + i * sizeof rqe, sizeof rqe);
    EXPECT_EQ(rqe.off, token | (uint64_t{i} * 4096));
    EXPECT_EQ(rqe.len, 4096u);
  }
  // The kernel takes two: two slots free, the next entry wraps to slot 0.
  const uint32_t head = 2;
  std::memcpy(region.data(), &head, 4);
  EXPECT_EQ(ring.free_slots(), 2u);
  EXPECT_TRUE(ring.refill(12345 | (uint64_t{9} << 48), 10));  // stray area bits are replaced by the token
  uapi::ZcrxRqe rqe;
  std::memcpy(&rqe, region.data() + 128, sizeof rqe);
  EXPECT_EQ(rqe.off, token | 12345u);
  EXPECT_EQ(ring.refilled(), kEntries + 1u);
}

}  // namespace
}  // namespace remora::zerocopy
