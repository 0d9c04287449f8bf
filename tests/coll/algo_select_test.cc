// Algorithm selection (algo_select.cc) and its public face, Communicator::algorithm:
// the answer follows size and rank count, the REMORA_*_ALGO overrides, and it names
// what actually runs (a ring allreduce moves its data with puts, recursive doubling
// with sends only).
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "coll/algorithms.h"
#include "coll/comm_core.h"
#include "mesh.h"
#include "scoped_env.h"

namespace remora {
namespace {

using coll::Algo;
using coll::algorithm_steps;
using coll::CollConfig;
using coll::select_algorithm;
using test::make_ranks;
using test::run_ranks;

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

TEST(SelectAlgorithm, DefaultsBySizeAndRankCount) {
  const CollConfig c;  // ring threshold 2 MiB at 2 ranks and 64 KiB above, pipeline 1 MiB
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 2, 4 * kKiB), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 2, 2 * kMiB - 4), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 2, 2 * kMiB), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 3, 64 * kKiB - 4), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 3, 64 * kKiB), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 4, 16 * kMiB), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 1, 16 * kMiB), Algo::kLocal);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 4, 0), Algo::kLocal);
  // reduce_scatter decides on the whole input: 4 ranks x 16 KiB blocks reach the threshold.
  EXPECT_EQ(select_algorithm(CollectiveKind::kReduceScatter, c, 4, 8 * kKiB), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kReduceScatter, c, 4, 16 * kKiB), Algo::kRing);
  // The chain needs more than 2 ranks (reduce: from the threshold; broadcast: 4 pieces).
  EXPECT_EQ(select_algorithm(CollectiveKind::kReduce, c, 2, 16 * kMiB), Algo::kTree);
  EXPECT_EQ(select_algorithm(CollectiveKind::kReduce, c, 3, 16 * kMiB), Algo::kChain);
  EXPECT_EQ(select_algorithm(CollectiveKind::kBroadcast, c, 3, 2 * kMiB), Algo::kTree);
  EXPECT_EQ(select_algorithm(CollectiveKind::kBroadcast, c, 3, 4 * kMiB), Algo::kChain);
  EXPECT_EQ(select_algorithm(CollectiveKind::kBroadcast, c, 2, 64 * kMiB), Algo::kTree);
  // allgather: log rounds up to a 64 KiB result, recursive doubling or Bruck by n.
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllgather, c, 4, 16 * kKiB), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllgather, c, 3, 16 * kKiB), Algo::kBruck);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllgather, c, 4, 17 * kKiB), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kGather, c, 3, kMiB), Algo::kLinear);
  EXPECT_EQ(select_algorithm(CollectiveKind::kScatter, c, 3, 0), Algo::kLinear);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAlltoall, c, 5, 8), Algo::kPairwise);
  EXPECT_EQ(select_algorithm(CollectiveKind::kBarrier, c, 5, 0), Algo::kDissemination);
  // A size whose n-fold total does not fit size_t saturates instead of wrapping to small.
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllgather, c, 4, SIZE_MAX / 2), Algo::kRing);
}

TEST(SelectAlgorithm, ConfigOverridesWin) {
  CollConfig c;
  c.allreduce = Algo::kRing;
  c.allgather = Algo::kRecursiveDoubling;
  c.broadcast = Algo::kChain;
  c.reduce = Algo::kChain;
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 2, 8), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kReduceScatter, c, 2, 8), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllgather, c, 8, 64 * kMiB), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllgather, c, 6, 64 * kMiB), Algo::kBruck);
  EXPECT_EQ(select_algorithm(CollectiveKind::kBroadcast, c, 2, 8), Algo::kChain);
  EXPECT_EQ(select_algorithm(CollectiveKind::kReduce, c, 2, 8), Algo::kChain);
  c.ring_threshold = 1;
  c.allreduce = Algo::kRecursiveDoubling;
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 4, 64 * kMiB), Algo::kRecursiveDoubling);
  // A threshold that is set applies at every rank count, 2 included.
  CollConfig t;
  t.ring_threshold = 16 * kKiB;
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, t, 2, 16 * kKiB - 4), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, t, 2, 16 * kKiB), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, t, 5, 16 * kKiB), Algo::kRing);
  EXPECT_EQ(select_algorithm(CollectiveKind::kReduce, t, 3, 16 * kKiB), Algo::kChain);
}

TEST(AlgorithmSteps, CountsSequentialRounds) {
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllreduce, Algo::kRing, 4), 6);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kReduceScatter, Algo::kRing, 4), 3);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllgather, Algo::kRing, 4), 3);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllreduce, Algo::kRecursiveDoubling, 2), 1);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllreduce, Algo::kRecursiveDoubling, 4), 2);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllreduce, Algo::kRecursiveDoubling, 3), 3);  // fold in, 1, fold out
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllreduce, Algo::kRecursiveDoubling, 6), 4);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllgather, Algo::kRecursiveDoubling, 8), 3);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllgather, Algo::kBruck, 5), 3);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kBroadcast, Algo::kTree, 5), 3);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kBroadcast, Algo::kChain, 5), 4);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kBarrier, Algo::kDissemination, 2), 1);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kGather, Algo::kLinear, 5), 1);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAlltoall, Algo::kPairwise, 5), 4);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllreduce, Algo::kLocal, 5), 0);
  EXPECT_EQ(algorithm_steps(CollectiveKind::kAllreduce, Algo::kRing, 1), 0);
}

TEST(CollectiveKind, NamesRoundTrip) {
  for (int k = 0; k <= static_cast<int>(CollectiveKind::kAlltoall); ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    EXPECT_EQ(parse_collective_kind(to_string(kind)).value(), kind) << to_string(kind);
  }
  auto bad = parse_collective_kind("allreduce_v");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("reduce_scatter"), std::string::npos) << bad.status().message();
}

/// Puts this rank has started on all its endpoints (a ring allreduce's reduce-scatter
/// moves its pieces with puts; recursive doubling uses sends only).
uint64_t puts_started(Communicator& c) {
  uint64_t puts = 0;
  for (int p = 0; p < c.size(); ++p) {
    if (Endpoint* ep = coll::CommAccess::core(c).world().connected(p)) puts += ep->stats().puts;
  }
  return puts;
}

/// Runs one allreduce of `bytes` on every rank and reports, per rank, what
/// Communicator::algorithm said and whether the run used puts.
struct Observed {
  std::string name;
  int steps = -1;
  bool used_puts = false;
};
std::vector<Observed> observe_allreduce(std::vector<test::Rank>& ranks, size_t bytes,
                                        const CollectiveOptions& options = {}) {
  std::vector<Observed> seen(ranks.size());
  run_ranks(ranks, [&](int r, Communicator& c) {
    const AlgorithmChoice a = c.algorithm(CollectiveKind::kAllreduce, bytes, options);
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    const uint64_t before = puts_started(c);
    ASSERT_TRUE(c.allreduce(kInPlace, data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum, options).is_ok());
    EXPECT_EQ(data.front(), static_cast<float>(c.size()));
    seen[static_cast<size_t>(r)] = {std::string(a.name), a.steps, puts_started(c) > before};
  });
  return seen;
}

// These tests are about the algorithms of messages: without the communicators' shared
// segment, which would take the small calls once set up (shm_segment_test.cc).
TEST(CommunicatorAlgorithm, FollowsSizeAndNamesWhatRuns) {
  testing::ScopedEnv no_segment("REMORA_COLL_SHM", "0");
  auto ranks = make_ranks(3);
  for (const Observed& o : observe_allreduce(ranks, 4 * kKiB)) {
    EXPECT_EQ(o.name, "rd");
    EXPECT_EQ(o.steps, 3);  // 3 ranks: fold in, one exchange, fold out
    EXPECT_FALSE(o.used_puts);
  }
  for (const Observed& o : observe_allreduce(ranks, kMiB)) {
    EXPECT_EQ(o.name, "ring");
    EXPECT_EQ(o.steps, 4);
    EXPECT_TRUE(o.used_puts);
  }
  Communicator& c = *ranks[0].comm;
  EXPECT_EQ(c.algorithm(CollectiveKind::kAllgather, 4 * kKiB).name, "bruck");
  EXPECT_EQ(c.algorithm(CollectiveKind::kAllgather, kMiB).name, "ring");
  EXPECT_EQ(c.algorithm(CollectiveKind::kBarrier, 0).steps, 2);
}

using testing::ScopedEnv;

TEST(CommunicatorAlgorithm, FollowsTheEnvironmentOverride) {
  {
    ScopedEnv ring("REMORA_ALLREDUCE_ALGO", "ring");  // read when the communicators are made
    auto ranks = make_ranks(2);
    for (const Observed& o : observe_allreduce(ranks, 4 * kKiB)) {
      EXPECT_EQ(o.name, "ring");
      EXPECT_EQ(o.steps, 2);
      EXPECT_TRUE(o.used_puts);
    }
  }
  {
    ScopedEnv rd("REMORA_ALLREDUCE_ALGO", "rd");
    auto ranks = make_ranks(2);
    for (const Observed& o : observe_allreduce(ranks, kMiB)) {
      EXPECT_EQ(o.name, "rd");
      EXPECT_EQ(o.steps, 1);
      EXPECT_FALSE(o.used_puts);
    }
  }
  {
    ScopedEnv threshold("REMORA_RING_THRESHOLD", "1M");
    auto ranks = make_ranks(2);
    EXPECT_EQ(ranks[0].comm->algorithm(CollectiveKind::kAllreduce, 512 * kKiB).name, "rd");
    EXPECT_EQ(ranks[0].comm->algorithm(CollectiveKind::kAllreduce, kMiB).name, "ring");
  }
}

// CollectiveOptions::algorithm picks what runs for that one call: the ring (puts) on a
// size where the communicator would run recursive doubling, and recursive doubling
// (sends only) where the environment asks for the ring.
TEST(CommunicatorAlgorithm, APerCallAlgorithmSelectsWhatRuns) {
  testing::ScopedEnv no_segment("REMORA_COLL_SHM", "0");
  auto ranks = make_ranks(2);
  for (const Observed& o : observe_allreduce(ranks, 4 * kKiB, {.algorithm = CollAlgorithm::kRing})) {
    EXPECT_EQ(o.name, "ring");
    EXPECT_TRUE(o.used_puts);
  }
  for (const Observed& o : observe_allreduce(ranks, 4 * kKiB)) {  // the next call is back to auto
    EXPECT_EQ(o.name, "rd");
    EXPECT_FALSE(o.used_puts);
  }
  {
    ScopedEnv ring("REMORA_ALLREDUCE_ALGO", "ring");
    auto env_ranks = make_ranks(2);
    for (const Observed& o : observe_allreduce(env_ranks, kMiB, {.algorithm = CollAlgorithm::kRecursiveDoubling})) {
      EXPECT_EQ(o.name, "rd");
      EXPECT_FALSE(o.used_puts);
    }
  }
  // The asynchronous form takes the same options.
  run_ranks(ranks, [&](int, Communicator& c) {
    std::vector<float> data(1024, 1.0f);
    const uint64_t before = puts_started(c);
    Request r = c.iallreduce(kInPlace, data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum,
                             {.algorithm = CollAlgorithm::kRing});
    ASSERT_TRUE(r.wait(std::chrono::seconds(30)).is_ok());
    EXPECT_GT(puts_started(c), before);
    EXPECT_EQ(data.back(), 2.0f);
  });
}

TEST(CommunicatorAlgorithm, APerCallAlgorithmIsReportedAndRunsCorrectlyForEveryChoice) {
  auto ranks = make_ranks(4);
  Communicator& c0 = *ranks[0].comm;
  EXPECT_EQ(c0.algorithm(CollectiveKind::kAllgather, 8, {.algorithm = CollAlgorithm::kBruck}).name, "bruck");
  EXPECT_EQ(c0.algorithm(CollectiveKind::kAllgather, 8, {.algorithm = CollAlgorithm::kRing}).name, "ring");
  EXPECT_EQ(c0.algorithm(CollectiveKind::kBroadcast, 8, {.algorithm = CollAlgorithm::kChain}).name, "chain");
  EXPECT_EQ(c0.algorithm(CollectiveKind::kReduce, 8, {.algorithm = CollAlgorithm::kChain}).name, "chain");
  EXPECT_EQ(c0.algorithm(CollectiveKind::kReduceScatter, 8, {.algorithm = CollAlgorithm::kRing}).name, "ring");
  EXPECT_EQ(c0.algorithm(CollectiveKind::kAllreduce, 8, {.algorithm = CollAlgorithm::kTree}).name, "invalid");
  run_ranks(ranks, [&](int r, Communicator& c) {
    for (CollAlgorithm a : {CollAlgorithm::kRing, CollAlgorithm::kRecursiveDoubling, CollAlgorithm::kBruck}) {
      std::vector<int32_t> mine(3, r), all(12, -1);
      ASSERT_TRUE(c.allgather(mine.data(), all.data(), 3, DataType::kInt32, {.algorithm = a}).is_ok()) << to_string(a);
      for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int32_t>(i / 3)) << to_string(a);
    }
    for (CollAlgorithm a : {CollAlgorithm::kTree, CollAlgorithm::kChain}) {
      std::vector<int32_t> v(5000, r == 2 ? 7 : 0);
      ASSERT_TRUE(c.broadcast(v.data(), v.size(), DataType::kInt32, 2, {.algorithm = a}).is_ok()) << to_string(a);
      EXPECT_EQ(v.back(), 7) << to_string(a);
      std::vector<int32_t> one(5000, 1), sum(5000, 0);
      ASSERT_TRUE(
          c.reduce(one.data(), sum.data(), one.size(), DataType::kInt32, ReduceOp::kSum, 1, {.algorithm = a}).is_ok())
          << to_string(a);
      if (r == 1) {
        EXPECT_EQ(sum.back(), 4) << to_string(a);
      }
    }
  });
}

TEST(CommunicatorAlgorithm, AnAlgorithmTheOperationDoesNotRunIsAnInvalidArgument) {
  auto ranks = make_ranks(2);
  run_ranks(ranks, [&](int, Communicator& c) {
    std::vector<float> data(16, 1.0f), all(32);
    Status s = c.allreduce(kInPlace, data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum,
                           {.algorithm = CollAlgorithm::kTree});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("allreduce"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("'tree'"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("ring"), std::string::npos) << s.to_string();  // says what would do
    s = c.barrier({.algorithm = static_cast<CollAlgorithm>(200)});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    const size_t counts[] = {16, 16}, displs[] = {0, 16};
    Request r = c.iallgatherv(data.data(), 16, all.data(), counts, displs, DataType::kFloat32,
                              {.algorithm = CollAlgorithm::kRecursiveDoubling});
    EXPECT_EQ(r.wait(std::chrono::seconds(10)).code(), StatusCode::kInvalidArgument);
    s = c.scan(data.data(), all.data(), 16, DataType::kFloat32, ReduceOp::kSum, {.algorithm = CollAlgorithm::kRing});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    s = c.alltoall(all.data(), data.data(), 8, DataType::kFloat32, {.algorithm = CollAlgorithm::kLinear});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    s = c.barrier({.timeout = std::chrono::milliseconds(0)});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    // Refused before anything was sent: the communicator is intact.
    EXPECT_TRUE(c.failure().is_ok());
    EXPECT_TRUE(c.barrier({.algorithm = CollAlgorithm::kDissemination}).is_ok());
  });
  for (int a = 0; a <= static_cast<int>(CollAlgorithm::kBruck); ++a) {
    const auto algorithm = static_cast<CollAlgorithm>(a);
    EXPECT_EQ(parse_coll_algorithm(to_string(algorithm)).value(), algorithm) << to_string(algorithm);
  }
  auto bad = parse_coll_algorithm("butterfly");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("dissemination"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace remora
