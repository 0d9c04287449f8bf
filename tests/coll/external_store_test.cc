// init_communicator: ranks on threads meet through an ExternalStore (here a map shared
// by the threads, as an application's own store would be) and run collectives over
// real loopback sockets; a rank that never publishes is a kTimeout naming it; bad
// arguments are refused before anything is published.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "remora/remora.h"

namespace remora {
namespace {

/// A key-value map shared by threads; get waits on a condition variable.
class MapStore : public ExternalStore {
 public:
  Status set(std::string_view key, std::span<const std::byte> value) override {
    std::lock_guard lock(mu_);
    map_[std::string(key)] = std::vector<std::byte>(value.begin(), value.end());
    cv_.notify_all();
    return Status::ok();
  }
  Result<std::vector<std::byte>> get(std::string_view key, Duration timeout) override {
    std::unique_lock lock(mu_);
    const std::string k(key);
    if (!cv_.wait_for(lock, timeout, [&] { return map_.count(k) > 0; })) {
      return Status(StatusCode::kTimeout, "no key " + k);
    }
    return map_[k];
  }
  size_t keys() {
    std::lock_guard lock(mu_);
    return map_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::byte>> map_;
};

/// Rank `rank` of `size`, listening on `host`.
ExternalBootstrap boot_of(int rank, int size, std::string host = "127.0.0.1") {
  ExternalBootstrap boot;
  boot.rank = rank;
  boot.size = size;
  boot.host = std::move(host);
  return boot;
}

TEST(ExternalStore, RanksMeetThroughTheStoreAndRunCollectives) {
  constexpr int n = 3;
  MapStore store;
  std::vector<std::unique_ptr<Context>> ctxs;
  for (int r = 0; r < n; ++r) {
    auto ctx = Context::create(ContextOptions{.ignore_env = true});
    ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
    ctxs.push_back(std::move(*ctx));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ExternalBootstrap boot = boot_of(r, n);
      boot.local_size = n;
      boot.key_prefix = "pg0/";
      auto comm = init_communicator(*ctxs[static_cast<size_t>(r)], store, boot, {.timeout = std::chrono::seconds(30)});
      ASSERT_TRUE(comm.is_ok()) << comm.status().to_string();
      EXPECT_EQ((*comm)->rank(), r);
      EXPECT_EQ((*comm)->size(), n);
      int64_t v = r + 1, sum = 0;
      ASSERT_TRUE((*comm)->allreduce(&v, &sum, 1, DataType::kInt64, ReduceOp::kSum).is_ok());
      EXPECT_EQ(sum, 6);
      std::vector<int32_t> all(n, -1);
      const int32_t mine = 10 * r;
      ASSERT_TRUE((*comm)->allgather(&mine, all.data(), 1, DataType::kInt32).is_ok());
      EXPECT_EQ(all, (std::vector<int32_t>{0, 10, 20}));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.keys(), size_t{n});  // one address per rank, under the prefix
}

TEST(ExternalStore, ARankThatNeverPublishesIsATimeoutNamingIt) {
  MapStore store;
  auto ctx = Context::create(ContextOptions{.ignore_env = true});
  ASSERT_TRUE(ctx.is_ok());
  const ExternalBootstrap boot = boot_of(0, 2);
  auto comm = init_communicator(**ctx, store, boot, {.timeout = std::chrono::milliseconds(200)});
  ASSERT_FALSE(comm.is_ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kTimeout);
  EXPECT_NE(comm.status().message().find("rank 1's address"), std::string::npos) << comm.status().to_string();
}

TEST(ExternalStore, BadArgumentsAreRefusedBeforeAnythingIsPublished) {
  MapStore store;
  auto ctx = Context::create(ContextOptions{.ignore_env = true});
  ASSERT_TRUE(ctx.is_ok());
  auto bad_rank = init_communicator(**ctx, store, boot_of(2, 2));
  EXPECT_EQ(bad_rank.status().code(), StatusCode::kInvalidArgument);
  if (std::getenv("REMORA_HOST") == nullptr) {
    auto no_host = init_communicator(**ctx, store, boot_of(0, 2, ""));
    EXPECT_EQ(no_host.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(no_host.status().message().find("REMORA_HOST"), std::string::npos);
  }
  EXPECT_EQ(store.keys(), size_t{0});
}

TEST(ExternalStore, OneRankNeedsNoStore) {
  MapStore store;
  auto ctx = Context::create(ContextOptions{.ignore_env = true});
  ASSERT_TRUE(ctx.is_ok());
  auto comm = init_communicator(**ctx, store, ExternalBootstrap{});
  ASSERT_TRUE(comm.is_ok()) << comm.status().to_string();
  float v = 2.5f, out = 0;
  ASSERT_TRUE((*comm)->allreduce(&v, &out, 1, DataType::kFloat32, ReduceOp::kSum).is_ok());
  EXPECT_EQ(out, 2.5f);
  EXPECT_EQ(store.keys(), size_t{0});
}

}  // namespace
}  // namespace remora
