// tests/coll/mesh.h — N ranks in one test process: N Contexts (each with its own
// progress thread and rendezvous), one lazy world Communicator per rank whose real
// loopback endpoints open when a collective first needs them, as init's do.
// run_ranks() runs a body per rank on its own thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "coll/rendezvous.h"
#include "remora/remora.h"

namespace remora::test {

struct Rank {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Communicator> comm;
};

/// Builds `n` ranks, rank r's Context made with options_of(r). `timeout` bounds every
/// collective (keep it short in tests so a bug fails instead of hanging the suite).
inline std::vector<Rank> make_ranks(int n, Duration timeout, const std::function<ContextOptions(int)>& options_of) {
  std::vector<Rank> ranks(static_cast<size_t>(n));
  std::vector<std::shared_ptr<coll::Rendezvous>> rendezvous(static_cast<size_t>(n));
  std::vector<std::string> addresses(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto ctx = Context::create(options_of(r));
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().to_string();
    ranks[static_cast<size_t>(r)].ctx = std::move(*ctx);
    auto l = ranks[static_cast<size_t>(r)].ctx->listen("127.0.0.1:0");
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    rendezvous[static_cast<size_t>(r)] = coll::Rendezvous::start(std::move(*l), coll::max_opening_bytes(n));
    addresses[static_cast<size_t>(r)] = rendezvous[static_cast<size_t>(r)]->address();
  }
  auto config = coll::CollConfig::from_env({.timeout = timeout});
  EXPECT_TRUE(config.is_ok());
  std::vector<int> members(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) members[static_cast<size_t>(i)] = i;
  for (int r = 0; r < n; ++r) {
    // A lazy world, as init makes: endpoints open when a collective first needs them.
    auto& rk = ranks[static_cast<size_t>(r)];
    auto world = std::make_shared<coll::World>(*rk.ctx, r, n, rendezvous[static_cast<size_t>(r)],
                                               [addresses](int peer, coll::Clock::time_point) -> Result<std::string> {
                                                 return addresses[static_cast<size_t>(peer)];
                                               });
    world->learn_addresses(addresses);
    world->serve();
    rk.comm = coll::CommAccess::make(std::make_shared<coll::CommCore>(world, 0, members, r, *config));
  }
  return ranks;
}

/// Builds `n` ranks whose Contexts share `options`.
inline std::vector<Rank> make_ranks(int n, Duration timeout = std::chrono::seconds(30),
                                    ContextOptions options = {.ignore_env = true}) {
  return make_ranks(n, timeout, [&](int) { return options; });
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
