// The barrier (coll/barrier_dissemination.cc) over real loopback meshes of 1..8 ranks:
// nobody leaves a round before every rank has arrived, blocking and asynchronous.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "coll/comm_core.h"
#include "mesh.h"
#include "movement.h"

namespace remora::test {
namespace {

class BarrierTest : public MovementTest {};

TEST_P(BarrierTest, BarrierLetsNobodyThroughBeforeEveryoneArrived) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  std::atomic<int> arrived{0};
  run_ranks(ranks, [&](int r, Communicator& c) {
    for (int round = 1; round <= 5; ++round) {
      arrived.fetch_add(1);
      ASSERT_TRUE(c.barrier().is_ok()) << "rank " << r;
      EXPECT_GE(arrived.load(), round * n()) << "rank " << r << " left round " << round << " early";
    }
    ASSERT_TRUE(c.ibarrier().wait(std::chrono::seconds(10)).is_ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, BarrierTest, ::testing::ValuesIn(kRankCounts), rank_count_name);

}  // namespace
}  // namespace remora::test
