// Communicator::init through a real rendezvous store on loopback: the check for more
// ranks on this host than CPUs, which switches waiting threads to yield after every
// empty poll (see engine/progress.h, yield_polls).
#include <gtest/gtest.h>
#include <sched.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_of.h"
#include "engine/progress.h"
#include "net_util.h"
#include "remora/remora.h"

namespace remora {
namespace {

/// Pins the calling thread to the first CPU it may use, so that it sees one CPU.
void pin_to_one_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  int first = 0;
  while (!CPU_ISSET(first, &set)) ++first;
  CPU_ZERO(&set);
  CPU_SET(first, &set);
  ASSERT_EQ(::sched_setaffinity(0, sizeof set, &set), 0);
}

/// Two ranks, each initialised on its own thread pinned to one CPU and claiming
/// `local_size` ranks on its host; both run an allreduce (the communicator works);
/// returns each context's yield_polls afterwards.
std::vector<uint32_t> init_two_pinned_ranks(int local_size) {
  constexpr int n = 2;
  const std::string store = "127.0.0.1:" + std::to_string(test::free_tcp_port());
  std::vector<std::unique_ptr<Context>> ctxs;
  for (int r = 0; r < n; ++r) {
    // Created here, unpinned: the progress threads keep every CPU.
    auto ctx = Context::create(ContextOptions{.ignore_env = true});
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().to_string();
    ctxs.push_back(std::move(*ctx));
  }
  std::vector<uint32_t> polls(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      pin_to_one_cpu();
      LaunchInfo info;
      info.rank = r;
      info.size = n;
      info.local_rank = local_size == n ? r : 0;
      info.local_size = local_size;
      info.launcher = "test";
      info.store_address = store;
      auto comm = Communicator::init(*ctxs[static_cast<size_t>(r)], info, {.timeout = std::chrono::seconds(30)});
      ASSERT_TRUE(comm.is_ok()) << comm.status().to_string();
      int64_t v = r + 1, sum = 0;
      ASSERT_TRUE((*comm)->allreduce(&v, &sum, 1, DataType::kInt64, ReduceOp::kSum).is_ok());
      EXPECT_EQ(sum, 3);
      polls[static_cast<size_t>(r)] = detail::engine_of(*ctxs[static_cast<size_t>(r)])->yield_polls();
    });
  }
  for (auto& t : threads) t.join();
  return polls;
}

TEST(Oversubscription, MoreRanksOnTheHostThanCpusMakeWaitersYieldAfterEveryEmptyPoll) {
  // Two local ranks, one usable CPU each.
  EXPECT_EQ(init_two_pinned_ranks(2), (std::vector<uint32_t>{1, 1}));
}

TEST(Oversubscription, ARankAloneOnItsCpusKeepsSpinningBetweenYields) {
  // Each rank says it is alone on its host: one rank, one CPU.
  EXPECT_EQ(init_two_pinned_ranks(1), (std::vector<uint32_t>{32, 32}));
}

}  // namespace
}  // namespace remora
