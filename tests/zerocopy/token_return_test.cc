// zerocopy/token_return: coalescing, the kernel's per-call limits exactly at and one over
// (128 ranges, 1024 tokens), short returns and failed calls, checked through an injected
// SO_DEVMEM_DONTNEED that records every batch; and the real setsockopt on real sockets,
// whose refusals (a TCP socket with nothing outstanding, a UDP socket, too many ranges)
// must come back as clear errors.
#include "zerocopy/token_return.h"

#include <sys/socket.h>

#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

using Batch = std::vector<uapi::DmabufToken>;

/// Records each call; frees every token it is given unless told otherwise.
struct Recorder {
  std::vector<Batch> calls;
  std::function<Result<uint32_t>(const Batch&)> answer = [](const Batch& b) -> Result<uint32_t> {
    uint32_t n = 0;
    for (const auto& r : b) n += r.token_count;
    return n;
  };
  DontneedFn fn() {
    return [this](int, std::span<const uapi::DmabufToken> ranges) {
      calls.emplace_back(ranges.begin(), ranges.end());
      return answer(calls.back());
    };
  }
};

uint32_t tokens_in(const Batch& b) {
  return std::accumulate(b.begin(), b.end(), 0u, [](uint32_t n, const auto& r) { return n + r.token_count; });
}

TEST(TokenReturn, AdjacentTokensCoalesceIntoRanges) {
  Recorder rec;
  TokenReturner r(3, rec.fn());
  for (uint32_t t : {5u, 6u, 7u, 9u, 10u, 20u}) r.add(t);
  ASSERT_TRUE(r.flush().is_ok());
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0], (Batch{{5, 3}, {9, 2}, {20, 1}}));
  EXPECT_EQ(r.pending(), 0u);
  EXPECT_EQ(r.stats().returned, 6u);
  EXPECT_EQ(r.stats().calls, 1u);
}

TEST(TokenReturn, OutOfOrderTokensCoalesceAsWell) {
  Recorder rec;
  TokenReturner r(3, rec.fn());
  for (uint32_t t : {10u, 7u, 9u, 5u, 6u, 4294967295u, 4294967294u, 0u}) r.add(t);
  ASSERT_TRUE(r.flush().is_ok());
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.calls[0], (Batch{{0, 1}, {5, 3}, {9, 2}, {4294967294u, 2}}));
}

TEST(TokenReturn, NothingQueuedMeansNoCall) {
  Recorder rec;
  TokenReturner r(3, rec.fn());
  EXPECT_TRUE(r.flush().is_ok());
  EXPECT_TRUE(rec.calls.empty());
}

TEST(TokenReturn, ExactlyTheRangeLimitFitsOneCallAndOneMoreTakesTwo) {
  for (const uint32_t n : {uapi::kMaxDontneedTokens, uapi::kMaxDontneedTokens + 1}) {
    SCOPED_TRACE(n);
    Recorder rec;
    TokenReturner r(3, rec.fn());
    for (uint32_t i = 0; i < n; ++i) r.add(2 * i);  // never adjacent: one range each
    ASSERT_TRUE(r.flush().is_ok());
    ASSERT_EQ(rec.calls.size(), n == uapi::kMaxDontneedTokens ? 1u : 2u);
    EXPECT_EQ(rec.calls[0].size(), uapi::kMaxDontneedTokens);
    if (n > uapi::kMaxDontneedTokens) {
      EXPECT_EQ(rec.calls[1], (Batch{{2 * uapi::kMaxDontneedTokens, 1}}));
    }
    EXPECT_EQ(r.stats().returned, n);
  }
}

TEST(TokenReturn, ExactlyTheTokenLimitFitsOneCallAndOneMoreTakesTwo) {
  for (const uint32_t n : {uapi::kMaxDontneedFrags, uapi::kMaxDontneedFrags + 1}) {
    SCOPED_TRACE(n);
    Recorder rec;
    TokenReturner r(3, rec.fn());
    for (uint32_t i = 0; i < n; ++i) r.add(100 + i);
    ASSERT_TRUE(r.flush().is_ok());
    if (n == uapi::kMaxDontneedFrags) {
      EXPECT_EQ(rec.calls, (std::vector<Batch>{{{100, 1024}}}));
    } else {
      EXPECT_EQ(rec.calls, (std::vector<Batch>{{{100, 1024}}, {{1124, 1}}}));
    }
  }
}

TEST(TokenReturn, RangesNeverPushACallPastTheTokenLimit) {
  Recorder rec;
  TokenReturner r(3, rec.fn());
  for (uint32_t i = 0; i < 1000; ++i) r.add(i);           // {0, 1000}
  for (uint32_t i = 0; i < 24; ++i) r.add(5000 + 2 * i);  // 24 singles: exactly 1024 with the first
  for (uint32_t i = 0; i < 100; ++i) r.add(9000 + i);     // {9000, 100}: must go to the next call
  ASSERT_TRUE(r.flush().is_ok());
  ASSERT_EQ(rec.calls.size(), 2u);
  EXPECT_EQ(tokens_in(rec.calls[0]), 1024u);
  EXPECT_EQ(rec.calls[0].size(), 25u);
  EXPECT_EQ(rec.calls[1], (Batch{{9000, 100}}));
  for (const Batch& b : rec.calls) {
    EXPECT_LE(b.size(), uapi::kMaxDontneedTokens);
    EXPECT_LE(tokens_in(b), uapi::kMaxDontneedFrags);
  }
}

TEST(TokenReturn, ALongRunIsCutAtTheTokenLimit) {
  Recorder rec;
  TokenReturner r(3, rec.fn());
  for (uint32_t i = 0; i < 5000; ++i) r.add(i);
  ASSERT_TRUE(r.flush().is_ok());
  EXPECT_EQ(rec.calls,
            (std::vector<Batch>{{{0, 1024}}, {{1024, 1024}}, {{2048, 1024}}, {{3072, 1024}}, {{4096, 904}}}));
  EXPECT_EQ(r.stats().returned, 5000u);
}

TEST(TokenReturn, AShortReturnIsReportedAndNotRetried) {
  Recorder rec;
  rec.answer = [](const Batch& b) -> Result<uint32_t> { return tokens_in(b) - 1; };
  TokenReturner r(3, rec.fn());
  for (uint32_t t : {1u, 2u, 3u}) r.add(t);
  const Status s = r.flush();
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("freed 2 of 3 devmem tokens"), std::string::npos) << s.message();
  EXPECT_EQ(rec.calls.size(), 1u);  // a retry could free a token id the kernel gave a new fragment
  EXPECT_EQ(r.stats().returned, 2u);
  EXPECT_EQ(r.stats().refused, 1u);
  EXPECT_EQ(r.pending(), 0u);
}

TEST(TokenReturn, AFailedCallDoesNotStrandTheOtherBatches) {
  Recorder rec;
  rec.answer = [&rec](const Batch& b) -> Result<uint32_t> {
    if (rec.calls.size() == 1) return Status(StatusCode::kInternal, "injected failure");
    return tokens_in(b);
  };
  TokenReturner r(3, rec.fn());
  for (uint32_t i = 0; i < 3000; ++i) r.add(i);
  const Status s = r.flush();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("returning 3000 devmem tokens (1976 freed by the kernel): injected failure"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(rec.calls.size(), 3u);
  EXPECT_EQ(r.stats().refused, 1024u);
}

TEST(TokenReturn, ATokenQueuedTwiceIsReturnedOnceAndReported) {
  Recorder rec;
  TokenReturner r(3, rec.fn());
  for (uint32_t t : {8u, 8u, 9u}) r.add(t);
  const Status s = r.flush();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1 of 3 devmem tokens were queued twice"), std::string::npos) << s.message();
  EXPECT_EQ(rec.calls, (std::vector<Batch>{{{8, 2}}}));
}

TEST(TokenReturn, CoalesceHonoursItsCap) {
  std::vector<uint32_t> tokens = {3, 1, 2, 2, 4, 5};
  std::vector<uapi::DmabufToken> ranges;
  EXPECT_EQ(coalesce_tokens(&tokens, &ranges, 2), 1u);
  EXPECT_EQ(ranges, (Batch{{1, 2}, {3, 2}, {5, 1}}));
}

// ---- the real setsockopt ----

TEST(TokenReturnKernel, ATcpSocketWithNothingOutstandingFreesNothing) {
  // A plain TCP connection on loopback has no devmem fragments: the kernel takes the call
  // (it is a TCP socket, within the limits) and frees none of the tokens.
  test::TcpPair p = test::tcp_pair();
  ASSERT_TRUE(p.client.valid());
  const uapi::DmabufToken one[] = {{1, 3}};
  auto raw = devmem_dontneed(p.client.get(), one);
  ASSERT_TRUE(raw.is_ok()) << raw.status().to_string();
  EXPECT_EQ(*raw, 0u);
  TokenReturner r(p.client.get());
  for (uint32_t t : {1u, 2u, 3u}) r.add(t);
  const Status s = r.flush();
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("the kernel freed 0 of 3 devmem tokens"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("not outstanding on this socket"), std::string::npos) << s.message();
}

TEST(TokenReturnKernel, AUdpSocketIsRefusedWithEbadf) {
  net::Fd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(udp.valid());
  const uapi::DmabufToken one[] = {{1, 1}};
  auto r = devmem_dontneed(udp.get(), one);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("EBADF"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("not a TCP socket"), std::string::npos) << r.status().message();
}

TEST(TokenReturnKernel, OneRangeOverTheKernelLimitIsRefusedWithEinval) {
  test::TcpPair p = test::tcp_pair();
  ASSERT_TRUE(p.client.valid());
  std::vector<uapi::DmabufToken> ranges(uapi::kMaxDontneedTokens + 1, {1, 1});
  auto r = devmem_dontneed(p.client.get(), ranges);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("EINVAL"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("more than 128 ranges"), std::string::npos) << r.status().message();
  // Exactly at the limit the kernel takes it (and frees nothing: nothing is outstanding).
  ranges.pop_back();
  auto at = devmem_dontneed(p.client.get(), ranges);
  ASSERT_TRUE(at.is_ok()) << at.status().to_string();
  EXPECT_EQ(*at, 0u);
}

}  // namespace
}  // namespace remora::zerocopy
