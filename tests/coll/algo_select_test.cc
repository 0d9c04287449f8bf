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
  const CollConfig c;  // ring threshold 64 KiB, pipeline 1 MiB
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 2, 4 * kKiB), Algo::kRecursiveDoubling);
  EXPECT_EQ(select_algorithm(CollectiveKind::kAllreduce, c, 2, 64 * kKiB), Algo::kRing);
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
    if (p != c.rank()) puts += c.core().world().peer(p).stats().puts;
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
std::vector<Observed> observe_allreduce(std::vector<test::Rank>& ranks, size_t bytes) {
  std::vector<Observed> seen(ranks.size());
  run_ranks(ranks, [&](int r, Communicator& c) {
    const AlgorithmChoice a = c.algorithm(CollectiveKind::kAllreduce, bytes);
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    const uint64_t before = puts_started(c);
    ASSERT_TRUE(c.allreduce(kInPlace, data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum).is_ok());
    EXPECT_EQ(data.front(), static_cast<float>(c.size()));
    seen[static_cast<size_t>(r)] = {std::string(a.name), a.steps, puts_started(c) > before};
  });
  return seen;
}

TEST(CommunicatorAlgorithm, FollowsSizeAndNamesWhatRuns) {
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

/// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

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

}  // namespace
}  // namespace remora
