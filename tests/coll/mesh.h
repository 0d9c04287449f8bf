// tests/coll/mesh.h — N ranks in one test process: N Contexts (each with its own
// progress thread), a full mesh of real loopback endpoints between them, and one
// world Communicator per rank. run_ranks() runs a body per rank on its own thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "remora/remora.h"

namespace remora::test {

struct Rank {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Communicator> comm;
};

/// Builds `n` ranks. `timeout` bounds every collective (keep it short in tests so a
/// bug fails instead of hanging the suite).
inline std::vector<Rank> make_ranks(int n, Duration timeout = std::chrono::seconds(30),
                                    ContextOptions options = {.ignore_env = true}) {
  std::vector<Rank> ranks(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Listener>> listeners(static_cast<size_t>(n));
  std::vector<std::string> addresses(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto ctx = Context::create(options);
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().to_string();
    ranks[static_cast<size_t>(r)].ctx = std::move(*ctx);
    auto l = ranks[static_cast<size_t>(r)].ctx->listen("127.0.0.1:0");
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    addresses[static_cast<size_t>(r)] = (*l)->address();
    listeners[static_cast<size_t>(r)] = std::move(*l);
  }
  auto config = coll::CollConfig::from_env({.timeout = timeout});
  EXPECT_TRUE(config.is_ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto& rk = ranks[static_cast<size_t>(r)];
      auto peers = coll::connect_mesh(*rk.ctx, *listeners[static_cast<size_t>(r)], r, addresses,
                                      coll::Clock::now() + std::chrono::seconds(30));
      ASSERT_TRUE(peers.is_ok()) << peers.status().to_string();
      auto world = std::make_shared<coll::World>(*rk.ctx, r, n, std::move(*peers));
      std::vector<int> members(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) members[static_cast<size_t>(i)] = i;
      rk.comm = coll::CommAccess::make(std::make_shared<coll::CommCore>(world, 0, members, r, *config));
    });
  }
  for (auto& t : threads) t.join();
  return ranks;
}

/// Runs body(rank index, communicator) on one thread per rank and joins them.
inline void run_ranks(std::vector<Rank>& ranks, const std::function<void(int, Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] { body(static_cast<int>(r), *ranks[r].comm); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace remora::test
