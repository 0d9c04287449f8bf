// Single huge messages over loopback: 1 GiB (this process sends, the peer checks the
// XXH3 of what it received against the regenerated stream) and 4 GiB + 4097 bytes
// (the peer sends; this process checks the full XXH3 plus boundary regions around
// 2^31 and 2^32 byte by byte). Receive buffers end right before a PROT_NONE page and
// do not start page aligned, so an overrun faults instead of passing silently.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <chrono>

#include "itest_util.h"
#include "support/exchange.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

constexpr Tag kBigTag{9};
constexpr uint64_t kGiB = uint64_t{1} << 30;

std::optional<uint64_t> read_hash(Process& peer, std::chrono::seconds timeout) {
  auto line = peer.read_line(timeout);
  if (!line || line->rfind("HASH ", 0) != 0) return std::nullopt;
  return std::stoull(line->substr(5), nullptr, 16);
}

TEST(LargeMessage, OneGiBVerifiedByChecksum) {
  const uint64_t size = scaled<uint64_t>(kGiB, 128 << 20);
  const uint64_t seed = 4242;
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  GuardedBuffer buf(size);
  ASSERT_TRUE(buf.ok());
  fill_stream(seed, 0, buf.span());
  const uint64_t sent_hash = XXH3_64bits(buf.data(), buf.size());
  PeerSession s = start_listening_peer(*ctx, {"--scenario=big-recv", "--seed=" + std::to_string(seed),
                                              "--size=" + std::to_string(size), "--close=follow"});
  ASSERT_TRUE(s.ep);
  const auto t0 = std::chrono::steady_clock::now();
  Request r = s.ep->send(buf.span(), kBigTag);
  const Status st = r.wait(std::chrono::seconds(120));
  EXPECT_TRUE(st.is_ok()) << describe(st);
  EXPECT_EQ(r.bytes(), size);
  auto peer_hash = read_hash(*s.peer, std::chrono::seconds(120));
  ASSERT_TRUE(peer_hash) << "the peer printed no HASH line (its stderr is above)";
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[          ] %llu bytes in %.2f s (%.2f GB/s incl. the peer's checksum)\n",
              static_cast<unsigned long long>(size), secs, static_cast<double>(size) / secs / 1e9);
  EXPECT_EQ(hex64(*peer_hash), hex64(sent_hash)) << "the peer received different bytes than were sent";
  if (st.is_ok()) {
    EXPECT_EQ(close_handshake(*s.ep, true, std::chrono::seconds(30)), "");
  }
  s.ep.reset();
  expect_peer_success(*s.peer);
}

TEST(LargeMessage, Over4GiBVerifiedByChecksumAndBoundaries) {
  const uint64_t size = 4 * kGiB + 4097;
  const uint64_t avail = mem_available_bytes();
  if (avail < 12 * kGiB) {
    GTEST_SKIP() << "needs ~12 GiB available (a 4 GiB buffer on each side plus slack); MemAvailable is "
                 << avail / (1 << 20) << " MiB";
  }
  if (kSanitized) {
    std::printf("[          ] ASan build: the >4 GiB message runs anyway (buffers are mmap'd, not malloc'd)\n");
  }
  const uint64_t seed = 0x4000000001ull;
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  GuardedBuffer buf(size);
  ASSERT_TRUE(buf.ok());
  PeerSession s = start_listening_peer(*ctx, {"--scenario=big-send", "--seed=" + std::to_string(seed),
                                              "--size=" + std::to_string(size), "--close=follow"});
  ASSERT_TRUE(s.ep);
  const auto t0 = std::chrono::steady_clock::now();
  Request r = s.ep->recv(buf.span(), kBigTag);
  auto peer_hash = read_hash(*s.peer, std::chrono::seconds(120));
  const Status st = r.wait(std::chrono::seconds(150));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(st.is_ok()) << describe(st);
  EXPECT_EQ(r.bytes(), size);
  std::printf("[          ] %llu bytes in %.2f s (including the peer filling its buffer)\n",
              static_cast<unsigned long long>(size), secs);

  // Boundary regions first: they say *where* a problem is.
  struct Region {
    uint64_t at, len;
  };
  const uint64_t kWin = 1 << 20;
  std::vector<Region> regions = {{0, kWin},
                                 {(uint64_t{1} << 31) - kWin, 2 * kWin},
                                 {(uint64_t{1} << 32) - kWin, kWin + 4097},  // across 2^32 to the end
                                 {size - kWin - 4097, kWin + 4097}};
  Rng rng(seed);
  for (int i = 0; i < 64; ++i) regions.push_back({rng.uniform(0, size - 65536), 65536});
  for (const Region& g : regions) {
    ASSERT_LE(g.at + g.len, size);
    const size_t bad = first_mismatch(seed, g.at, buf.span().subspan(g.at, g.len));
    EXPECT_EQ(bad, SIZE_MAX) << "first differing byte at offset " << g.at + bad;
    if (bad != SIZE_MAX) break;
  }
  const uint64_t got = XXH3_64bits(buf.data(), buf.size());
  ASSERT_TRUE(peer_hash) << "the peer printed no HASH line";
  EXPECT_EQ(hex64(got), hex64(*peer_hash)) << "checksum of the received 4 GiB + 4097 bytes differs from the sender's";
  if (got != *peer_hash) {
    const size_t bad = first_mismatch(seed, 0, buf.span());
    ADD_FAILURE() << "first differing byte at offset " << bad;
  }
  EXPECT_EQ(close_handshake(*s.ep, true, std::chrono::seconds(30)), "");
  s.ep.reset();
  expect_peer_success(*s.peer, std::chrono::seconds(120));
}

}  // namespace
}  // namespace remora::itest
