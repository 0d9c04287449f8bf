// Allreduce (coll/allreduce_ring.cc, coll/allreduce_recursive_doubling.cc) against a
// sequential reference: every type × op at 1, 2, 3, 4, 5 and 8 ranks, counts 0, 1,
// primes and sizes around the pipeline piece and the ring's block boundaries, the ring
// and recursive doubling, in place or not, and the communicator's choice by size, which
// takes small vectors through its shared segment; kAuto choosing each by size, and a
// rank that aborts failing the ring on the others before the timeout.
//
// The inputs and the reference are in reference.h (small exact integers, so the
// reference matches bit for bit whatever the order of combination); the communicators
// of each algorithm choice in reduction.h.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "mesh.h"
#include "reduction.h"
#include "reference.h"

namespace remora::test {
namespace {

/// One allreduce case on rank r: checks the result bit for bit against the reference.
void check_allreduce(int r, Communicator& c, const char* algo, DataType t, ReduceOp op, size_t count, bool in_place) {
  const int n = c.size();
  const size_t es = size_of(t);
  auto in = rank_input(r, count, t, op, n);
  std::vector<std::byte> out(count * es, std::byte{0x5A});
  if (in_place) out = in;
  Status s = in_place ? c.allreduce(kInPlace, out.data(), count, t, op) : c.allreduce(in.data(), out.data(), count, t, op);
  const std::string what = fmt::format("allreduce {} {} {} n={} count={} in_place={} rank {}", algo, to_string(t),
                                       to_string(op), n, count, in_place, r);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  auto want = reference(0, n - 1, 0, count, t, op, n);
  long d = first_diff(want, out.data(), out.size(), es);
  ASSERT_EQ(d, -1) << what << ": first wrong element";
  if (!in_place) {
    EXPECT_EQ(first_diff(rank_input(r, count, t, op, n), in.data(), in.size(), es), -1) << what << ": send changed";
  }
}

class AllreduceTest : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceTest, EveryTypeAndOpMatchesTheSequentialReference) {
  BothAlgorithms f(GetParam(), /*with_shm=*/true);
  f.run([](int r, Communicator& c, const char* algo) {
    int k = 0;
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        if (!valid(t, op)) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{97}}) {
          check_allreduce(r, c, algo, t, op, count, (k++ % 2) == 1);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  });
}

TEST_P(AllreduceTest, SizesAroundPiecesAndBlocksInPlaceOrNot) {
  const int n = GetParam();
  BothAlgorithms f(n, /*with_shm=*/true);
  f.run([n](int r, Communicator& c, const char* algo) {
    // Fewer types at 8 ranks keeps the suite quick; every element size is covered.
    std::vector<DataType> types = {DataType::kInt8, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
    if (n <= 4) types.insert(types.end(), {DataType::kUint32, DataType::kFloat16, DataType::kInt64});
    int k = 0;
    for (DataType t : types) {
      for (size_t count : boundary_counts(t, n)) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          if (!valid(t, op)) continue;
          check_allreduce(r, c, algo, t, op, count, (k++ % 2) == 0);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllreduceTest, ::testing::Values(1, 2, 3, 4, 5, 8));

TEST(Allreduce, AutoChoosesRingForLargeAndRecursiveDoublingForSmallAndBothAgree) {
  // The default config with a small threshold: both paths under kAuto, back to back,
  // also asynchronously (the worker thread runs them).
  auto ranks = make_ranks(3);
  coll::CollConfig cfg = small_config();
  cfg.ring_threshold = 4 * kPipeline;
  auto comms = with_config(ranks, cfg, 102);
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    for (size_t count : {size_t{5}, size_t{4 * kPipeline / 4}, size_t{3 * kPipeline + 3}}) {
      auto in = rank_input(r, count, DataType::kFloat32, ReduceOp::kSum, 3);
      std::vector<std::byte> a(in.size()), b(in.size());
      Request ra = c.iallreduce(in.data(), a.data(), count, DataType::kFloat32, ReduceOp::kSum);
      Request rb = c.iallreduce(in.data(), b.data(), count, DataType::kFloat32, ReduceOp::kSum);
      ASSERT_TRUE(ra.wait(std::chrono::seconds(30)).is_ok());
      ASSERT_TRUE(rb.wait(std::chrono::seconds(30)).is_ok());
      auto want = reference(0, 2, 0, count, DataType::kFloat32, ReduceOp::kSum, 3);
      EXPECT_EQ(first_diff(want, a.data(), a.size(), 4), -1) << count;
      EXPECT_EQ(first_diff(want, b.data(), b.size(), 4), -1) << count;
    }
  });
}

TEST(Allreduce, ARankThatAbortsFailsTheRingOnTheOthersBeforeTheTimeout) {
  // After one good ring allreduce (scratch registered, keys exchanged; run_ranks joins,
  // so every rank has finished it), rank 0 aborts instead of joining the next; the
  // others block in the ring (on a notification or a message) and must learn of it
  // through the closed endpoints.
  auto ranks = make_ranks(3);
  auto comms = with_config(ranks, ring_config(), 103);
  const size_t count = 8 * kPipeline;
  run_ranks(ranks, [&](int r, Communicator&) {
    auto in = rank_input(r, count, DataType::kFloat32, ReduceOp::kSum, 3);
    std::vector<std::byte> out(in.size());
    ASSERT_TRUE(comms[static_cast<size_t>(r)]->allreduce(in.data(), out.data(), count, DataType::kFloat32,
                                                          ReduceOp::kSum).is_ok());
  });
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    if (r == 0) {
      c.abort();
      return;
    }
    auto in = rank_input(r, count, DataType::kFloat32, ReduceOp::kSum, 3);
    std::vector<std::byte> out(in.size());
    Status s = c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.code(), StatusCode::kTimeout) << s.to_string();
  });
}

}  // namespace
}  // namespace remora::test
