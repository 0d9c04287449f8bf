// tools/perf/perf_test.cc — the perf library's pure parts: sizes, patterns, checksums,
// iteration counts, the collective benchmark's bus factors and option checks.
// The tool end to end (spawned follower, every mode) runs as CTest tests in
// tools/programs.cmake.
#include <gtest/gtest.h>

#include <vector>

#include "pattern.h"
#include "perf.h"
#include "session.h"

namespace remora::perf {
namespace {

TEST(ParseSize, AcceptsBytesAndBinarySuffixes) {
  EXPECT_EQ(parse_size("8").value(), 8u);
  EXPECT_EQ(parse_size("4K").value(), 4096u);
  EXPECT_EQ(parse_size("16m").value(), size_t{16} << 20);
  EXPECT_EQ(parse_size("1G").value(), size_t{1} << 30);
  EXPECT_EQ(parse_size("0").value(), 0u);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "K", "3X", "-1", "1.5M", "12345678901234"}) {
    auto r = parse_size(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FormatSize, RoundTripsWithParse) {
  for (size_t s : {size_t{1}, size_t{1000}, size_t{4096}, size_t{3} << 20, size_t{64} << 20, size_t{2} << 30}) {
    EXPECT_EQ(parse_size(format_size(s)).value(), s) << format_size(s);
  }
  EXPECT_EQ(format_size(1536), "1536");
}

TEST(Checksum, SeesEveryKindOfDamage) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{33}, size_t{4097}}) {
    std::vector<std::byte> a(n + 1);
    fill_pattern(std::span(a).first(n), 42);
    const uint64_t good = checksum(std::span(a).first(n));
    EXPECT_EQ(checksum(std::span(a).first(n)), good);
    EXPECT_NE(checksum(std::span(a).first(n + 1)), good) << "longer, n=" << n;
    if (n == 0) continue;
    EXPECT_NE(checksum(std::span(a).first(n - 1)), good) << "truncated, n=" << n;
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      std::vector<std::byte> b(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
      b[at] ^= std::byte{0x10};
      EXPECT_NE(checksum(b), good) << "bit flip at " << at << ", n=" << n;
    }
    EXPECT_NE(checksum(std::span(a).subspan(1, n)), good) << "shifted, n=" << n;
  }
}

TEST(FillPattern, DependsOnSeedAndPosition) {
  std::vector<std::byte> a(4096), b(4096);
  fill_pattern(a, 1);
  fill_pattern(b, 2);
  EXPECT_NE(a, b);
  fill_pattern(b, 1);
  EXPECT_EQ(a, b);
  // No period of one word: a stale copy shifted by 8 bytes must not look right.
  EXPECT_FALSE(std::equal(a.begin(), a.end() - 8, a.begin() + 8));
}

TEST(WindowSlots, DistinctBuffersUpTo64MiB) {
  EXPECT_EQ(internal::window_slots(8, 64), 64u);
  EXPECT_EQ(internal::window_slots(size_t{1} << 20, 64), 64u);
  EXPECT_EQ(internal::window_slots(size_t{16} << 20, 64), 4u);
  EXPECT_EQ(internal::window_slots(size_t{1} << 30, 64), 1u);
  EXPECT_EQ(internal::window_slots(0, 8), 8u);
}

TEST(RmaMode, ParsesItsOwnNames) {
  for (RmaMode m : {RmaMode::kPutBandwidth, RmaMode::kGetBandwidth, RmaMode::kPutLatency, RmaMode::kGetLatency,
                    RmaMode::kPutRate}) {
    EXPECT_EQ(parse_rma_mode(to_string(m)).value(), m) << to_string(m);
  }
  EXPECT_EQ(parse_rma_mode("bw").status().code(), StatusCode::kInvalidArgument);
}

TEST(DefaultStep, ScalesBySizeAndKeepsOverrides) {
  using internal::default_step;
  using internal::StepKind;
  // A window of 64 x 16M is 1 GiB: the floor of 5 windows; small sizes hit the ceiling.
  EXPECT_EQ(default_step(StepKind::kWindow, size_t{16} << 20, 64, {}, {}).iters, 5u);
  EXPECT_EQ(default_step(StepKind::kWindow, 8, 64, {}, {}).iters, 100u);
  EXPECT_EQ(default_step(StepKind::kRate, 8, 64, {}, {}).iters, 2000u);
  EXPECT_EQ(default_step(StepKind::kPingPong, 8, 1, {}, {}).iters, 10000u);
  EXPECT_EQ(default_step(StepKind::kPingPong, 8, 1, {}, {}).warmup, 1000u);
  const auto st = default_step(StepKind::kWindow, 8, 64, 7, 0);
  EXPECT_EQ(st.iters, 7u);
  EXPECT_EQ(st.warmup, 0u);
}

TEST(DefaultStep, CollectivesMoveAbout256MiBPerSize) {
  using internal::default_step;
  using internal::StepKind;
  EXPECT_EQ(default_step(StepKind::kCollective, size_t{64} << 20, 1, {}, {}).iters, 5u);
  EXPECT_EQ(default_step(StepKind::kCollective, size_t{16} << 20, 1, {}, {}).iters, 16u);
  EXPECT_EQ(default_step(StepKind::kCollective, 4096, 1, {}, {}).iters, 1000u);
  EXPECT_EQ(default_step(StepKind::kCollective, 0, 1, {}, {}).iters, 1000u);  // barrier
  EXPECT_EQ(default_step(StepKind::kCollective, 4096, 1, {}, {}).warmup, 20u);
  EXPECT_EQ(default_step(StepKind::kCollective, size_t{64} << 20, 1, {}, {}).warmup, 1u);
  EXPECT_EQ(default_step(StepKind::kCollective, 4096, 1, 3, 0).iters, 3u);
}

TEST(BusFactor, AsNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllreduce, 2), 1.0);
  for (auto op : {CollectiveKind::kAllgather, CollectiveKind::kReduceScatter, CollectiveKind::kAlltoall,
                  CollectiveKind::kGather, CollectiveKind::kScatter}) {
    EXPECT_DOUBLE_EQ(bus_factor(op, 4), 0.75) << to_string(op);
  }
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kBroadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kReduce, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllreduce, 1), 0.0);
}

TEST(CollValidate, RefusesWhatNoRankCouldRun) {
  CollOptions o;
  o.sizes = {4096};
  EXPECT_TRUE(validate(o, 2).is_ok());
  o.ops = {CollectiveKind::kGather};
  o.root = 2;
  EXPECT_NE(validate(o, 2).message().find("--root 2 is not a rank of 2 ranks"), std::string::npos);
  EXPECT_TRUE(validate(o, 3).is_ok());
  o.ops = {CollectiveKind::kAllreduce};  // not rooted: the root does not matter
  EXPECT_TRUE(validate(o, 2).is_ok());
  o.redop = ReduceOp::kAvg;
  o.type = DataType::kInt32;
  EXPECT_EQ(validate(o, 2).code(), StatusCode::kInvalidArgument);
  o.type = DataType::kBFloat16;
  EXPECT_TRUE(validate(o, 2).is_ok());
  o.expect_ranks = 3;
  EXPECT_NE(validate(o, 2).message().find("-n 3 but the launcher started 2 ranks"), std::string::npos);
  o.expect_ranks.reset();
  o.sizes.clear();
  EXPECT_EQ(validate(o, 2).code(), StatusCode::kInvalidArgument);
}

TEST(SummarizeLatency, NearestRankAndDivisor) {
  std::vector<double> us;
  for (int i = 100; i >= 1; --i) us.push_back(i);
  const LatencySummary one_way = internal::summarize_latency(us, 2);
  EXPECT_DOUBLE_EQ(one_way.avg_us, 25.25);
  EXPECT_DOUBLE_EQ(one_way.p50_us, 25);
  EXPECT_DOUBLE_EQ(one_way.p99_us, 49.5);
  EXPECT_DOUBLE_EQ(one_way.min_us, 0.5);
  EXPECT_DOUBLE_EQ(one_way.max_us, 50);
  EXPECT_DOUBLE_EQ(internal::summarize_latency(us, 1).p50_us, 50);
  EXPECT_DOUBLE_EQ(internal::summarize_latency({}, 1).avg_us, 0);
}

}  // namespace
}  // namespace remora::perf
