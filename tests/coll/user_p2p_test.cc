// The communicator's receive from any rank (Communicator::irecv_any) and its one-sided
// operations (Communicator::put with a notification, wait_notification), over real
// loopback meshes in one process.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "mesh.h"

namespace remora {
namespace {

using namespace std::chrono_literals;
using test::make_ranks;
using test::run_ranks;

TEST(CommRecvAny, EveryRankReceivesEveryOtherRanksMessagesOnceAndInOrder) {
  for (int n : {2, 4}) {
    auto ranks = make_ranks(n);
    run_ranks(ranks, [n](int r, Communicator& c) {
      constexpr int kPerPeer = 3;
      // Every rank sends kPerPeer messages to every other (value: sender * 100 + seq);
      // then takes (n - 1) * kPerPeer messages from any rank.
      std::vector<int64_t> out;
      out.reserve(static_cast<size_t>(n * kPerPeer));
      std::vector<Request> sends;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        for (int k = 0; k < kPerPeer; ++k) {
          out.push_back(r * 100 + k);
          sends.push_back(c.isend(&out.back(), 1, DataType::kInt64, p, Tag{3}));
        }
      }
      std::map<int, int> next;
      for (int i = 0; i < (n - 1) * kPerPeer; ++i) {
        int64_t got = -1;
        int source = -1;
        Request rr = c.irecv_any(&got, 1, DataType::kInt64, Tag{3}, &source);
        Status st = rr.wait(20s);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        ASSERT_GE(source, 0);
        ASSERT_LT(source, n);
        ASSERT_NE(source, r);
        EXPECT_EQ(got, source * 100 + next[source]) << "rank " << r << " from " << source;
        ++next[source];
      }
      for (int p = 0; p < n; ++p) {
        if (p != r) {
          EXPECT_EQ(next[p], kPerPeer);
        }
      }
      ASSERT_TRUE(wait_all(sends, 20s).is_ok());
      // Nothing was taken twice or left behind: a barrier then a tagged exchange works.
      ASSERT_TRUE(c.barrier().is_ok());
    });
  }
}

TEST(CommRecvAny, MixesWithReceivesFromOneRankAndKeepsEachRanksOrder) {
  auto ranks = make_ranks(3);
  run_ranks(ranks, [](int r, Communicator& c) {
    if (r != 0) {
      // Ranks 1 and 2 each send 0, 1, 2, 3 with one tag.
      std::vector<int32_t> v = {r * 10 + 0, r * 10 + 1, r * 10 + 2, r * 10 + 3};
      for (auto& x : v) ASSERT_TRUE(c.send(&x, 1, DataType::kInt32, 0, Tag{8}).is_ok());
      return;
    }
    // Rank 0: one from rank 2 by name, then any, then the rest by name: every rank's
    // messages still come in send order.
    std::map<int, std::vector<int32_t>> got;
    int32_t x = -1;
    ASSERT_TRUE(c.recv(&x, 1, DataType::kInt32, 2, Tag{8}).is_ok());
    got[2].push_back(x);
    for (int i = 0; i < 3; ++i) {
      int source = -1;
      ASSERT_TRUE(c.irecv_any(&x, 1, DataType::kInt32, Tag{8}, &source).wait(20s).is_ok());
      got[source].push_back(x);
    }
    for (int p : {1, 2}) {
      while (got[p].size() < 4) {
        ASSERT_TRUE(c.recv(&x, 1, DataType::kInt32, p, Tag{8}).is_ok());
        got[p].push_back(x);
      }
      EXPECT_EQ(got[p], (std::vector<int32_t>{p * 10, p * 10 + 1, p * 10 + 2, p * 10 + 3}));
    }
  });
}

TEST(CommRecvAny, ArgumentErrorsBreakNothing) {
  auto ranks = make_ranks(2);
  run_ranks(ranks, [](int r, Communicator& c) {
    int source = -1;
    int32_t v = 0;
    EXPECT_EQ(c.irecv_any(nullptr, 1, DataType::kInt32, Tag{1}, &source).wait(1s).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.irecv_any(&v, 1, DataType::kInt32, Tag{uint64_t{1} << 32}, &source).wait(1s).code(),
              StatusCode::kInvalidArgument);
    EXPECT_TRUE(c.failure().is_ok());
    ASSERT_TRUE(c.barrier().is_ok());
    (void)r;
  });
}

/// A registered buffer per rank and every rank's key to it (exchanged by allgather).
struct Windows {
  std::vector<std::vector<uint64_t>> memory;
  std::vector<Region> regions;
  std::vector<std::vector<std::byte>> keys;  ///< per rank: every rank's serialized key
};

TEST(CommPut, PutsWithNotificationsFromEveryRankToEveryOtherAreCountedPerSender) {
  for (int n : {2, 4}) {
    auto ranks = make_ranks(n);
    constexpr size_t kWords = 4096;  // 32 KiB per rank's block: inline and chunked puts
    Windows w;
    w.memory.assign(static_cast<size_t>(n), std::vector<uint64_t>(kWords * static_cast<size_t>(n), 0));
    w.regions.resize(static_cast<size_t>(n));
    w.keys.resize(static_cast<size_t>(n));
    run_ranks(ranks, [&](int r, Communicator& c) {
      auto& mem = w.memory[static_cast<size_t>(r)];
      auto region = ranks[static_cast<size_t>(r)].ctx->register_memory(mem.data(), mem.size() * 8,
                                                                       Access::kLocalWrite | Access::kRemoteWrite);
      ASSERT_TRUE(region.is_ok()) << region.status().to_string();
      auto mine = region->remote_key().serialize();
      std::vector<std::byte> all(RemoteKey::kSerializedSize * static_cast<size_t>(n));
      ASSERT_TRUE(c.allgather(mine.data(), all.data(), mine.size(), DataType::kUint8).is_ok());
      w.regions[static_cast<size_t>(r)] = std::move(*region);
      // Rank r writes block r of every other rank's memory in two puts (a small one with
      // notification 1 and the rest with 2), then a notification alone (3).
      std::vector<uint64_t> src(kWords);
      for (size_t i = 0; i < kWords; ++i) src[i] = (uint64_t{static_cast<uint32_t>(r)} << 32) | i;
      std::vector<Request> puts;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        auto key = RemoteKey::deserialize(
            std::span(all).subspan(RemoteKey::kSerializedSize * static_cast<size_t>(p), RemoteKey::kSerializedSize));
        ASSERT_TRUE(key.is_ok());
        const uint64_t base = kWords * 8 * static_cast<uint64_t>(r);
        auto bytes = std::as_bytes(std::span(src));
        puts.push_back(c.put(p, bytes.first(64), *key, base, 1u));
        puts.push_back(c.put(p, bytes.subspan(64), *key, base + 64, 2u));
        puts.push_back(c.put(p, {}, *key, 0, 3u));
      }
      ASSERT_TRUE(wait_all(puts, 20s).is_ok());
      // Three notifications from every other rank, no more: the puts above completed
      // only once their target had queued the notification.
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        std::vector<uint32_t> values;
        for (int k = 0; k < 3; ++k) {
          auto v = c.wait_notification(p, 20s);
          ASSERT_TRUE(v.is_ok()) << v.status().to_string();
          values.push_back(*v);
        }
        std::sort(values.begin(), values.end());
        EXPECT_EQ(values, (std::vector<uint32_t>{1, 2, 3})) << "rank " << r << " from " << p;
      }
      ASSERT_TRUE(c.barrier().is_ok());
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        auto v = c.wait_notification(p, 50ms);
        EXPECT_EQ(v.status().code(), StatusCode::kTimeout) << "an extra notification from " << p;
        for (size_t i = 0; i < kWords; ++i) {
          ASSERT_EQ(mem[kWords * static_cast<size_t>(p) + i], (uint64_t{static_cast<uint32_t>(p)} << 32) | i)
              << "rank " << r << " block " << p << " word " << i;
        }
      }
      for (size_t i = 0; i < kWords; ++i) ASSERT_EQ(mem[kWords * static_cast<size_t>(r) + i], 0u);  // own block
      ASSERT_TRUE(c.barrier().is_ok());
    });
  }
}

TEST(CommPut, NotificationsBelongToTheirCommunicatorAndDieWithIt) {
  auto ranks = make_ranks(2);
  std::vector<std::unique_ptr<Communicator>> subs(2);
  std::vector<std::vector<uint64_t>> mem(2, std::vector<uint64_t>(8, 0));
  std::vector<Region> regions(2);
  std::vector<RemoteKey> peer_key(2);
  run_ranks(ranks, [&](int r, Communicator& c) {
    auto sub = c.split(0, r);
    ASSERT_TRUE(sub.is_ok());
    subs[static_cast<size_t>(r)] = std::move(*sub);
    auto region = ranks[static_cast<size_t>(r)].ctx->register_memory(mem[static_cast<size_t>(r)].data(), 64,
                                                                     Access::kLocalWrite | Access::kRemoteWrite);
    ASSERT_TRUE(region.is_ok());
    auto mine = region->remote_key().serialize();
    std::array<std::byte, RemoteKey::kSerializedSize> theirs{};
    Request rr = c.irecv(theirs.data(), theirs.size(), DataType::kUint8, 1 - r, Tag{1});
    ASSERT_TRUE(c.send(mine.data(), mine.size(), DataType::kUint8, 1 - r, Tag{1}).is_ok());
    ASSERT_TRUE(rr.wait(10s).is_ok());
    peer_key[static_cast<size_t>(r)] = RemoteKey::deserialize(theirs).value();
    regions[static_cast<size_t>(r)] = std::move(*region);
  });
  run_ranks(ranks, [&](int r, Communicator& c) {
    Communicator& sub = *subs[static_cast<size_t>(r)];
    uint64_t word = 77;
    // Into the sub-communicator: the world does not see it, the sub does.
    ASSERT_TRUE(
        sub.put(1 - r, std::as_bytes(std::span(&word, 1)), peer_key[static_cast<size_t>(r)], 0, 5u).wait(10s).is_ok());
    ASSERT_TRUE(c.barrier().is_ok());
    EXPECT_EQ(c.wait_notification(1 - r, 50ms).status().code(), StatusCode::kTimeout);
    auto v = sub.wait_notification(1 - r, 10s);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(*v, 5u);
    EXPECT_EQ(mem[static_cast<size_t>(r)][0], 77u);
  });
  // A notification left in a communicator that is then destroyed is not delivered to
  // anything else, and the world's still work.
  run_ranks(ranks, [&](int r, Communicator& c) {
    uint64_t word = 1;
    ASSERT_TRUE(subs[static_cast<size_t>(r)]
                    ->put(1 - r, std::as_bytes(std::span(&word, 1)), peer_key[static_cast<size_t>(r)], 8, 6u)
                    .wait(10s)
                    .is_ok());
    ASSERT_TRUE(c.barrier().is_ok());
    subs[static_cast<size_t>(r)].reset();
    ASSERT_TRUE(
        c.put(1 - r, std::as_bytes(std::span(&word, 1)), peer_key[static_cast<size_t>(r)], 16, 7u).wait(10s).is_ok());
    auto v = c.wait_notification(1 - r, 10s);
    ASSERT_TRUE(v.is_ok());
    EXPECT_EQ(*v, 7u);
  });
}

TEST(CommPut, ARevokedKeyFailsThePutAndDeliversNothing) {
  auto ranks = make_ranks(2);
  std::vector<uint64_t> target(512, 0);
  std::vector<uint64_t> src(512, 0xABCDu);
  RemoteKey key;
  Region region;
  {
    auto reg =
        ranks[1].ctx->register_memory(target.data(), target.size() * 8, Access::kLocalWrite | Access::kRemoteWrite);
    ASSERT_TRUE(reg.is_ok());
    key = reg->remote_key();
    region = std::move(*reg);
  }
  region.deregister();
  Request put = ranks[0].comm->put(1, std::as_bytes(std::span(src)), key, 0, 9u);
  EXPECT_EQ(put.wait(10s).code(), StatusCode::kInvalidKey);
  EXPECT_EQ(ranks[1].comm->wait_notification(0, 50ms).status().code(), StatusCode::kTimeout);
  for (uint64_t w : target) ASSERT_EQ(w, 0u);
}

TEST(CommPut, BadArgumentsAndADeadPeer) {
  auto ranks = make_ranks(2);
  uint64_t word = 0;
  RemoteKey key;
  EXPECT_EQ(ranks[0].comm->put(0, std::as_bytes(std::span(&word, 1)), key, 0).wait(1s).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks[0].comm->put(2, std::as_bytes(std::span(&word, 1)), key, 0).wait(1s).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks[0].comm->wait_notification(0, 1s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks[0].comm->wait_notification(1, -1s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ranks[0].comm->failure().is_ok());
  // Rank 1 goes away: a wait on it ends with its endpoint's failure, not the timeout.
  ranks[1].comm.reset();
  ranks[1].ctx.reset();
  auto v = ranks[0].comm->wait_notification(1, 60s);
  EXPECT_FALSE(v.is_ok());
  EXPECT_NE(v.status().code(), StatusCode::kTimeout) << v.status().to_string();
}

}  // namespace
}  // namespace remora
