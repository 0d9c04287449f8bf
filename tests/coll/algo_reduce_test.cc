// The reduction collectives (algo_reduce.cc) against a sequential reference: every
// type × op for allreduce, scan and exscan at 1, 2, 3, 4, 5 and 8 ranks, a
// representative matrix for reduce and reduce_scatter, counts 0, 1, primes and sizes
// around the pipeline piece and the ring's block boundaries, both algorithm choices,
// in place.
//
// The inputs and the reference are in reference.h (small exact integers, so the
// reference matches bit for bit whatever the order of combination).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "mesh.h"
#include "reference.h"

namespace remora {
namespace {

using test::first_diff;
using test::kAllOps;
using test::kAllTypes;
using test::make_ranks;
using test::rank_input;
using test::reference;
using test::run_ranks;
using test::valid;

constexpr size_t kPipeline = 4096;  // small pieces, so few bytes cross piece and slot boundaries

/// A communicator per rank over the same mesh with `config` (algorithm choices).
std::vector<std::unique_ptr<Communicator>> with_config(std::vector<test::Rank>& ranks, coll::CollConfig config,
                                                       uint32_t id) {
  std::vector<std::unique_ptr<Communicator>> out;
  const int n = static_cast<int>(ranks.size());
  std::vector<int> members(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) members[static_cast<size_t>(i)] = i;
  for (int r = 0; r < n; ++r) {
    auto& core = coll::CommAccess::core(*ranks[static_cast<size_t>(r)].comm);
    out.push_back(coll::CommAccess::make(std::make_shared<coll::CommCore>(core.world_ptr(), id, members, r, config)));
  }
  return out;
}

coll::CollConfig small_config() {
  coll::CollConfig c;
  c.timeout = std::chrono::seconds(10);
  c.pipeline_bytes = kPipeline;
  return c;
}
coll::CollConfig ring_config() {  // ring / chain at any size
  coll::CollConfig c = small_config();
  c.allreduce = coll::Algo::kRing;
  c.reduce = coll::Algo::kChain;
  c.ring_threshold = 0;
  return c;
}
coll::CollConfig rd_config() {  // recursive doubling / tree at any size
  coll::CollConfig c = small_config();
  c.allreduce = coll::Algo::kRecursiveDoubling;
  c.reduce = coll::Algo::kTree;
  c.ring_threshold = SIZE_MAX;
  return c;
}

/// Counts around pieces and ring blocks for type t at n ranks: the interesting edges
/// are a block of exactly one piece and more pieces per block than the ring's slots.
std::vector<size_t> boundary_counts(DataType t, int n) {
  const size_t piece = kPipeline / size_of(t);
  const size_t nn = static_cast<size_t>(n);
  return {piece - 1, piece * nn - 1, piece * nn, piece * nn + 1, piece * 5 * nn + 13};
}

struct Fixture {
  std::vector<test::Rank> ranks;
  std::vector<std::unique_ptr<Communicator>> ring, rd;
  explicit Fixture(int n) : ranks(make_ranks(n)) {
    ring = with_config(ranks, ring_config(), 100);
    rd = with_config(ranks, rd_config(), 101);
  }
  /// body(rank, communicator, algorithm name) for both algorithm choices.
  void run(const std::function<void(int, Communicator&, const char*)>& body) {
    run_ranks(ranks, [&](int r, Communicator&) {
      body(r, *ring[static_cast<size_t>(r)], "ring");
      if (::testing::Test::HasFatalFailure()) return;
      body(r, *rd[static_cast<size_t>(r)], "rd");
    });
  }
};

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
  Fixture f(GetParam());
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
  Fixture f(n);
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

// --- reduce ------------------------------------------------------------------------------

void check_reduce(int r, Communicator& c, const char* algo, DataType t, ReduceOp op, size_t count, int root,
                  bool in_place) {
  const int n = c.size();
  const size_t es = size_of(t);
  auto in = rank_input(r, count, t, op, n);
  std::vector<std::byte> out(count * es, std::byte{0x5A});
  Status s;
  if (r == root && in_place) {
    out = in;
    s = c.reduce(kInPlace, out.data(), count, t, op, root);
  } else {
    s = c.reduce(in.data(), r == root ? out.data() : nullptr, count, t, op, root);
  }
  const std::string what = fmt::format("reduce {} {} {} n={} count={} root={} in_place={} rank {}", algo,
                                       to_string(t), to_string(op), n, count, root, in_place, r);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  if (r == root) {
    ASSERT_EQ(first_diff(reference(0, n - 1, 0, count, t, op, n), out.data(), out.size(), es), -1) << what;
  }
  if (!(r == root && in_place)) {
    EXPECT_EQ(first_diff(rank_input(r, count, t, op, n), in.data(), in.size(), es), -1) << what << ": send changed";
  }
}

class ReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(ReduceTest, TreeAndChainToEveryKindOfRoot) {
  const int n = GetParam();
  Fixture f(n);
  f.run([n](int r, Communicator& c, const char* algo) {
    const bool all_types = n == 3 || n == 5;
    int k = 0;
    for (DataType t : kAllTypes) {
      if (!all_types && t != DataType::kInt32 && t != DataType::kFloat16 && t != DataType::kFloat64) continue;
      for (ReduceOp op : kAllOps) {
        if (!valid(t, op)) continue;
        const size_t piece = kPipeline / size_of(t);
        for (size_t count : {size_t{0}, size_t{1}, size_t{13}, piece, 4 * piece + 1, 9 * piece + 7}) {
          const int root = (k++) % n;
          check_reduce(r, c, algo, t, op, count, root, (k % 3) == 0);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReduceTest, ::testing::Values(1, 2, 3, 4, 5, 8));

// --- reduce_scatter ------------------------------------------------------------------------

void check_reduce_scatter(int r, Communicator& c, const char* algo, DataType t, ReduceOp op, size_t count,
                          bool in_place) {
  const int n = c.size();
  const size_t es = size_of(t);
  const size_t total = count * static_cast<size_t>(n);
  auto in = rank_input(r, total, t, op, n);
  std::vector<std::byte> out(count * es, std::byte{0x5A});
  Status s;
  if (in_place) {
    out = in;
    s = c.reduce_scatter(kInPlace, out.data(), count, t, op);
  } else {
    s = c.reduce_scatter(in.data(), out.data(), count, t, op);
  }
  const std::string what = fmt::format("reduce_scatter {} {} {} n={} count={} in_place={} rank {}", algo,
                                       to_string(t), to_string(op), n, count, in_place, r);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  auto want = reference(0, n - 1, count * static_cast<size_t>(r), count, t, op, n);
  ASSERT_EQ(first_diff(want, out.data(), count * es, es), -1) << what;
}

class ReduceScatterTest : public ::testing::TestWithParam<int> {};

TEST_P(ReduceScatterTest, RingAndRecursiveDoublingGiveEachRankItsBlock) {
  const int n = GetParam();
  Fixture f(n);
  f.run([n](int r, Communicator& c, const char* algo) {
    const bool all_types = n == 3 || n == 5;
    int k = 0;
    for (DataType t : kAllTypes) {
      if (!all_types && t != DataType::kUint8 && t != DataType::kBFloat16 && t != DataType::kFloat32) continue;
      for (ReduceOp op : kAllOps) {
        if (!valid(t, op)) continue;
        const size_t piece = kPipeline / size_of(t);
        for (size_t count : {size_t{0}, size_t{1}, size_t{11}, piece, 5 * piece + 3}) {
          check_reduce_scatter(r, c, algo, t, op, count, (k++ % 2) == 1);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReduceScatterTest, ::testing::Values(1, 2, 3, 4, 5, 8));

// --- scan / exscan ----------------------------------------------------------------------------

void check_scan(int r, Communicator& c, bool exclusive, DataType t, ReduceOp op, size_t count, bool in_place) {
  const int n = c.size();
  const size_t es = size_of(t);
  auto in = rank_input(r, count, t, op, n);
  std::vector<std::byte> out(count * es, std::byte{0x5A});
  if (in_place) out = in;
  const std::vector<std::byte> before = out;
  const void* send = in_place ? kInPlace : in.data();
  Status s = exclusive ? c.exscan(send, out.data(), count, t, op) : c.scan(send, out.data(), count, t, op);
  const std::string what = fmt::format("{} {} {} n={} count={} in_place={} rank {}", exclusive ? "exscan" : "scan",
                                       to_string(t), to_string(op), n, count, in_place, r);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  if (exclusive && r == 0) {
    ASSERT_EQ(first_diff(before, out.data(), out.size(), es), -1) << what << ": rank 0's recv was touched";
    return;
  }
  auto want = reference(0, exclusive ? r - 1 : r, 0, count, t, op, n);
  ASSERT_EQ(first_diff(want, out.data(), out.size(), es), -1) << what;
}

class ScanTest : public ::testing::TestWithParam<int> {};

TEST_P(ScanTest, InclusiveAndExclusivePrefixes) {
  const int n = GetParam();
  auto ranks = make_ranks(n);
  run_ranks(ranks, [](int r, Communicator& c) {
    int k = 0;
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        if (!valid(t, op)) continue;
        if (op == ReduceOp::kAvg) {
          // Refused before anything is sent: the communicator stays usable.
          std::vector<std::byte> buf(8 * size_of(t));
          EXPECT_EQ(c.scan(kInPlace, buf.data(), 8, t, op).code(), StatusCode::kInvalidArgument);
          EXPECT_EQ(c.exscan(kInPlace, buf.data(), 8, t, op).code(), StatusCode::kInvalidArgument);
          continue;
        }
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1031}}) {
          for (bool exclusive : {false, true}) {
            check_scan(r, c, exclusive, t, op, count, (k++ % 3) == 1);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ScanTest, ::testing::Values(1, 2, 3, 4, 5, 8));

}  // namespace
}  // namespace remora
