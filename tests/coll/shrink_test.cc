// Communicator::shrink in one process: ranks on threads, each with its own Context,
// meeting through a real rendezvous store on loopback. Argument errors (nothing sent,
// nothing broken), a shrink of a healthy communicator that leaves it usable, a shrink
// of a split, and failed_ranks() of a healthy one. The deaths are in
// tests/integration/coll_shrink_test.cc, with real processes.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net_util.h"
#include "remora/remora.h"

namespace remora {
namespace {

using namespace std::chrono_literals;

/// `n` ranks on threads, each running `body(rank, comm)` on a fresh communicator.
template <typename Body>
void run_ranks(int n, Body body) {
  const std::string store = "127.0.0.1:" + std::to_string(test::free_tcp_port());
  std::vector<std::unique_ptr<Context>> ctxs;
  for (int r = 0; r < n; ++r) {
    auto ctx = Context::create(ContextOptions{.ignore_env = true});
    ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
    ctxs.push_back(std::move(*ctx));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      LaunchInfo info;
      info.rank = r;
      info.size = n;
      info.launcher = "test";
      info.store_address = store;
      auto comm = Communicator::init(*ctxs[static_cast<size_t>(r)], info, {.timeout = 30s});
      ASSERT_TRUE(comm.is_ok()) << comm.status().to_string();
      body(r, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

int64_t sum_of_ranks_plus_one(Communicator& c) {
  int64_t v = c.rank() + 1, sum = 0;
  Status s = c.allreduce(&v, &sum, 1, DataType::kInt64, ReduceOp::kSum);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return sum;
}

TEST(ShrinkInProcess, BadListsAreRefusedBeforeAnythingIsSentAndBreakNothing) {
  run_ranks(2, [](int r, Communicator& c) {
    const int self[] = {r};
    auto mine = c.shrink(self);
    ASSERT_FALSE(mine.is_ok());
    EXPECT_EQ(mine.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(mine.status().message().find("an excluded rank does not call shrink"), std::string::npos);
    const int outside[] = {2};
    auto bad = c.shrink(outside);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    auto zero = c.shrink({}, {.timeout = Duration::zero()});
    EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(c.failure().is_ok());
    EXPECT_EQ(sum_of_ranks_plus_one(c), 3);
    EXPECT_TRUE(c.failed_ranks().empty());
    EXPECT_EQ(c.epoch(), 0u);
  });
}

TEST(ShrinkInProcess, AHealthyCommunicatorShrinksAndStaysUsable) {
  run_ranks(3, [](int r, Communicator& c) {
    if (r != 1) {  // rank 1 is excluded, alive, and does not call shrink
      const int out[] = {1, 1};  // duplicates are ignored
      auto small = c.shrink(out, {.timeout = 30s});
      ASSERT_TRUE(small.is_ok()) << small.status().to_string();
      EXPECT_EQ((*small)->size(), 2);
      EXPECT_EQ((*small)->rank(), r == 0 ? 0 : 1);
      EXPECT_NE((*small)->epoch(), 0u);
      EXPECT_EQ(sum_of_ranks_plus_one(**small), 3);
      EXPECT_TRUE((*small)->barrier().is_ok());
    }
    // The old one was left as it was: all three still run collectives on it.
    EXPECT_EQ(sum_of_ranks_plus_one(c), 6);
  });
}

TEST(ShrinkInProcess, ASplitShrinksToItsOwnSurvivors) {
  run_ranks(4, [](int r, Communicator& c) {
    auto half = c.split(r % 2, r);  // {0, 2} and {1, 3}
    ASSERT_TRUE(half.is_ok()) << half.status().to_string();
    auto whole = (*half)->shrink({}, {.timeout = 30s});  // nobody excluded: a copy over new endpoints
    ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
    EXPECT_EQ((*whole)->size(), 2);
    EXPECT_EQ((*whole)->rank(), (*half)->rank());
    EXPECT_EQ(sum_of_ranks_plus_one(**whole), 3);
  });
}

}  // namespace
}  // namespace remora
