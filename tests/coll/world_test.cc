// The lazy world (coll/world.h) in one process: ranks connect only when they first need
// each other; two ranks that dial each other at the same moment end with exactly one
// endpoint between them, every time; a broken rank makes its dialers fail at once.
#include "coll/world.h"

#include <barrier>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "coll/comm_access.h"
#include "mesh.h"

namespace remora {
namespace {

using namespace std::chrono_literals;

coll::World& world_of(Communicator& c) { return coll::CommAccess::core(c).world(); }

TEST(LazyWorld, NoEndpointUntilSomethingNeedsIt) {
  auto ranks = test::make_ranks(4);
  for (auto& rk : ranks) EXPECT_EQ(rk.comm->connections().peers, 0);
  // A ring exchange touches each rank's two neighbours only.
  test::run_ranks(ranks, [](int r, Communicator& c) {
    const int n = c.size();
    int64_t out = r, in = -1;
    Request rx = c.irecv(&in, 1, DataType::kInt64, (r + n - 1) % n, Tag{1});
    ASSERT_TRUE(c.send(&out, 1, DataType::kInt64, (r + 1) % n, Tag{1}).is_ok());
    ASSERT_TRUE(rx.wait(10s).is_ok());
    EXPECT_EQ(in, (r + n - 1) % n);
  });
  for (auto& rk : ranks) {
    const ConnectionStats s = rk.comm->connections();
    EXPECT_EQ(s.peers, 2);
    EXPECT_EQ(s.sockets, 2u * (1 + rk.ctx->config().streams_per_endpoint));
    EXPECT_GT(s.descriptors, 0u);
    EXPECT_GT(s.descriptor_limit, 0u);
  }
}

// Both ranks of every pair ask for their endpoint at the same instant (a barrier of the
// threads right before), 100 rounds: one endpoint per pair, used by both (a message each
// way arrives on the endpoints each side was given), and no duplicate left over.
TEST(LazyWorld, RanksThatDialEachOtherAtOnceGetOneEndpoint) {
  constexpr int kRanks = 3;
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto ranks = test::make_ranks(kRanks, 10s);
    std::barrier start(kRanks);
    std::vector<std::thread> threads;
    std::vector<std::vector<Endpoint*>> got(kRanks, std::vector<Endpoint*>(kRanks, nullptr));
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        coll::World& w = world_of(*ranks[static_cast<size_t>(r)].comm);
        start.arrive_and_wait();
        for (int p = 0; p < kRanks; ++p) {
          if (p == r) continue;
          auto ep = w.endpoint(p, coll::Clock::now() + 10s);
          ASSERT_TRUE(ep.is_ok()) << ep.status().to_string();
          got[static_cast<size_t>(r)][static_cast<size_t>(p)] = *ep;
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(ranks[static_cast<size_t>(r)].comm->connections().peers, kRanks - 1);
      for (int p = r + 1; p < kRanks; ++p) {
        Endpoint* a = got[static_cast<size_t>(r)][static_cast<size_t>(p)];
        Endpoint* b = got[static_cast<size_t>(p)][static_cast<size_t>(r)];
        ASSERT_TRUE(a != nullptr && b != nullptr);
        // The two ends of one connection: what one sends the other receives.
        uint32_t one = 100 * r + p, two = 0;
        Request rx = b->recv(std::as_writable_bytes(std::span(&two, 1)), Tag{9});
        ASSERT_TRUE(a->send(std::as_bytes(std::span(&one, 1)), Tag{9}).wait(10s).is_ok());
        ASSERT_TRUE(rx.wait(10s).is_ok());
        EXPECT_EQ(two, one);
      }
    }
  }
}

// A rank that has broken its communicators answers a dial with its failure: the dialer
// fails at once, whatever its timeout, instead of waiting for an endpoint.
TEST(LazyWorld, DialingABrokenRankFailsAtOnce) {
  auto ranks = test::make_ranks(2, 60s);
  ranks[0].comm->abort();
  // A dialer that waited for an endpoint instead would end with kTimeout at the deadline.
  auto ep = world_of(*ranks[1].comm).endpoint(0, coll::Clock::now() + 20s);
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kPeerFailed) << ep.status().to_string();
  EXPECT_NE(ep.status().message().find("broken its communicators"), std::string::npos) << ep.status().to_string();
}

}  // namespace
}  // namespace remora
