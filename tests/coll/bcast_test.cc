// Broadcast (coll/bcast_binomial.cc, coll/bcast_chain.cc) over real loopback meshes of
// 1..8 ranks: from every root, with the tree and the chain, against the root's bytes,
// for edge counts (0, 1, a prime, a size that needs many pipeline pieces); and ranks
// that disagree on the length fail with a size error instead of corrupting. The byte
// patterns are in reference.h, the cases in movement.h.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "coll/comm_core.h"
#include "mesh.h"
#include "movement.h"
#include "reference.h"

namespace remora::test {
namespace {

class BroadcastTest : public MovementTest {};

TEST_P(BroadcastTest, BroadcastFromEveryRootWithTreeAndChain) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  run_ranks(ranks, [&](int r, Communicator& world) {
    for_each_variant(world, {{"auto"}, {"tree", coll::Algo::kTree}, {"chain", coll::Algo::kChain}},
                     [&](Communicator& c, const char* algo) {
      for (const Case& k : kCases) {
        const size_t bytes = k.count * size_of(k.type);
        for (int root = 0; root < n(); ++root) {
          Bytes buf = r == root ? pattern(root, bytes) : Bytes(bytes, kSentinel);
          Status s = c.broadcast(buf.data(), k.count, k.type, root);
          ASSERT_TRUE(s.is_ok()) << algo << " " << describe(k) << " root " << root << ": " << s.to_string();
          ASSERT_TRUE(same(buf, pattern(root, bytes))) << algo << " " << describe(k) << " root " << root << " rank " << r;
        }
      }
    });
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, BroadcastTest, ::testing::ValuesIn(kRankCounts), rank_count_name);

// --- ranks that disagree ----------------------------------------------------------

TEST(BroadcastMismatch, LargeBroadcastLongerThanTheReceiverIsTruncatedOnBothSides) {
  auto ranks = make_ranks(2, std::chrono::seconds(5));
  std::vector<Status> results(2);
  constexpr size_t kSent = 200 * 1024, kPosted = 150 * 1024, kGuard = 64;  // rendezvous sizes
  Bytes recv_buf(kPosted + kGuard, kSentinel);
  run_ranks(ranks, [&](int r, Communicator& c) {
    Bytes data = pattern(0, kSent);
    results[static_cast<size_t>(r)] =
        r == 0 ? c.broadcast(data.data(), kSent, DataType::kUint8, 0) : c.broadcast(recv_buf.data(), kPosted, DataType::kUint8, 0);
  });
  EXPECT_TRUE(size_error(results[1])) << results[1].to_string();
  EXPECT_FALSE(results[0].is_ok());
  for (size_t i = kPosted; i < recv_buf.size(); ++i) ASSERT_EQ(recv_buf[i], kSentinel) << "byte " << i;
}

TEST(BroadcastMismatch, LargeChainBroadcastShorterThanExpectedIsAProtocolError) {
  auto ranks = make_ranks(3, std::chrono::seconds(5));
  std::vector<Status> results(3);
  run_ranks(ranks, [&](int r, Communicator& world) {
    coll::CollConfig config = coll::CommAccess::core(world).config();
    config.pipeline_bytes = kPiece;
    config.broadcast = coll::Algo::kChain;
    auto c = with_config(world, 7, config);
    // The root's message ends half a piece early: the last piece is short.
    const size_t count = r == 0 ? 10 * kPiece + kPiece / 2 : 11 * kPiece;
    Bytes buf = pattern(0, count);
    results[static_cast<size_t>(r)] = c->broadcast(buf.data(), count, DataType::kUint8, 0);
  });
  EXPECT_EQ(results[1].code(), StatusCode::kProtocol) << results[1].to_string();
  EXPECT_FALSE(results[2].is_ok());
}

TEST(BroadcastMismatch, ARootBroadcastingNothingToRanksThatExpectDataIsAProtocolError) {
  auto ranks = make_ranks(3, std::chrono::seconds(5));
  std::vector<Status> results(3);
  run_ranks(ranks, [&](int r, Communicator& c) {
    Bytes buf(10, kSentinel);
    results[static_cast<size_t>(r)] = c.broadcast(buf.data(), r == 0 ? 0 : 10, DataType::kUint8, 0);
  });
  EXPECT_EQ(results[1].code(), StatusCode::kProtocol) << results[1].to_string();
  EXPECT_FALSE(results[2].is_ok());
}

}  // namespace
}  // namespace remora::test
