// The communicator machinery: mesh, point to point inside a communicator, split,
// asynchronous ordering, failure propagation and argument checks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <numeric>

#include "coll/comm_core.h"
#include "mesh.h"
#include "movement.h"
#include "reference.h"

namespace remora {
namespace {

using test::Bytes;
using test::kSentinel;
using test::make_ranks;
using test::pattern;
using test::run_ranks;
using test::same;

TEST(CommCore, PointToPointInsideTheCommunicatorMatchesPeerAndTag) {
  auto ranks = make_ranks(3);
  run_ranks(ranks, [](int r, Communicator& c) {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), 3);
    // Everyone sends its rank*100+peer to every other rank with two tags, posted in
    // reverse tag order on the receiving side.
    std::vector<Request> reqs;
    std::vector<int64_t> out(6), in(6, -1);
    int k = 0;
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      for (uint32_t tag : {7u, 9u}) {
        out[static_cast<size_t>(k)] = r * 100 + p * 10 + tag;
        reqs.push_back(c.isend(&out[static_cast<size_t>(k)], 1, DataType::kInt64, p, Tag{tag}));
        ++k;
      }
    }
    k = 0;
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      for (uint32_t tag : {9u, 7u}) {
        ASSERT_TRUE(c.recv(&in[static_cast<size_t>(k)], 1, DataType::kInt64, p, Tag{tag}).is_ok());
        EXPECT_EQ(in[static_cast<size_t>(k)], p * 100 + r * 10 + tag);
        ++k;
      }
    }
    ASSERT_TRUE(wait_all(reqs, std::chrono::seconds(10)).is_ok());
  });
}

TEST(CommCore, BadPeerOrBufferIsAnInvalidArgumentThatBreaksNothing) {
  auto ranks = make_ranks(2);
  run_ranks(ranks, [](int r, Communicator& c) {
    int32_t v = r;
    EXPECT_EQ(c.send(&v, 1, DataType::kInt32, r, Tag{0}).code(), StatusCode::kInvalidArgument);  // self
    EXPECT_EQ(c.send(&v, 1, DataType::kInt32, 2, Tag{0}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.send(nullptr, 1, DataType::kInt32, 1 - r, Tag{0}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.send(&v, 1, DataType::kInt32, 1 - r, Tag{uint64_t{1} << 32}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.allreduce(&v, &v, 1, DataType::kInt32, ReduceOp::kAvg).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.broadcast(&v, 1, DataType::kInt32, 5).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(c.failure().is_ok());
    int32_t got = -1;
    Request rr = c.irecv(&got, 1, DataType::kInt32, 1 - r, Tag{1});
    ASSERT_TRUE(c.send(&v, 1, DataType::kInt32, 1 - r, Tag{1}).is_ok());
    ASSERT_TRUE(rr.wait(std::chrono::seconds(10)).is_ok());
    EXPECT_EQ(got, 1 - r);
  });
}

TEST(CommCore, SplitGroupsByColourAndOrdersByKeyThenRank) {
  auto ranks = make_ranks(5);
  std::vector<std::unique_ptr<Communicator>> subs(5);
  run_ranks(ranks, [&](int r, Communicator& c) {
    // colours: even ranks 0, odd ranks 1, rank 4 opts out; key reverses the order.
    int color = r == 4 ? Communicator::kUndefined : r % 2;
    auto sub = c.split(color, -r);
    ASSERT_TRUE(sub.is_ok()) << sub.status().to_string();
    subs[static_cast<size_t>(r)] = std::move(*sub);
  });
  ASSERT_EQ(subs[4], nullptr);
  // {0, 2} reversed: 2 is rank 0. {1, 3} reversed: 3 is rank 0.
  EXPECT_EQ(subs[2]->rank(), 0);
  EXPECT_EQ(subs[0]->rank(), 1);
  EXPECT_EQ(subs[3]->rank(), 0);
  EXPECT_EQ(subs[1]->rank(), 1);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(subs[static_cast<size_t>(r)]->size(), 2);
    EXPECT_NE(subs[static_cast<size_t>(r)]->id(), 0u);
  }
  EXPECT_EQ(subs[0]->id(), subs[2]->id());
  EXPECT_EQ(subs[1]->id(), subs[3]->id());
  EXPECT_NE(subs[0]->id(), subs[1]->id());
  // Traffic in a sub-communicator uses its own ranks and does not mix with the world's.
  run_ranks(ranks, [&](int r, Communicator& world) {
    if (r == 4) return;
    Communicator& sub = *subs[static_cast<size_t>(r)];
    int64_t mine = 1000 + r, theirs = -1, w_mine = r, w_theirs = -1;
    const int peer = 1 - sub.rank();
    const int world_peer = r ^ 1;  // 0<->1, 2<->3: a different pairing than the sub's
    Request a = sub.irecv(&theirs, 1, DataType::kInt64, peer, Tag{5});
    Request b = world.irecv(&w_theirs, 1, DataType::kInt64, world_peer, Tag{5});
    ASSERT_TRUE(world.send(&w_mine, 1, DataType::kInt64, world_peer, Tag{5}).is_ok());
    ASSERT_TRUE(sub.send(&mine, 1, DataType::kInt64, peer, Tag{5}).is_ok());
    ASSERT_TRUE(a.wait(std::chrono::seconds(10)).is_ok());
    ASSERT_TRUE(b.wait(std::chrono::seconds(10)).is_ok());
    EXPECT_EQ(theirs, 1000 + (r ^ 2));
    EXPECT_EQ(w_theirs, world_peer);
  });
  // A split of a split gets a fresh id too.
  std::vector<std::unique_ptr<Communicator>> subsubs(4);
  run_ranks(ranks, [&](int r, Communicator&) {
    if (r == 4) return;
    auto s = subs[static_cast<size_t>(r)]->split(0, 0);
    ASSERT_TRUE(s.is_ok());
    subsubs[static_cast<size_t>(r)] = std::move(*s);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(subsubs[static_cast<size_t>(r)]->id(), subs[static_cast<size_t>(r)]->id());
    EXPECT_NE(subsubs[static_cast<size_t>(r)]->id(), 0u);
  }
}

TEST(CommCore, AsynchronousOperationsRunInPostingOrder) {
  auto ranks = make_ranks(2);
  run_ranks(ranks, [](int r, Communicator& c) {
    // Each posted body records its index; they must run 0..N-1 on both ranks.
    std::vector<int> order;
    std::vector<Request> reqs;
    for (int i = 0; i < 20; ++i) {
      reqs.push_back(coll::CommAccess::core(c).post([&order, i, r](coll::Op& op) {
        order.push_back(i);
        int64_t v = i * 10 + r, got = -1;
        Status s = op.sendrecv(1 - r, &v, sizeof v, 1 - r, &got, sizeof got);
        if (!s.is_ok()) return s;
        return got == i * 10 + (1 - r) ? Status::ok() : Status(StatusCode::kInternal, "crossed operations");
      }));
    }
    // A blocking operation after them runs after all of them.
    ASSERT_TRUE(
        coll::CommAccess::core(c)
            .run([&](coll::Op&) { return order.size() == 20 ? Status::ok() : Status(StatusCode::kInternal, "early"); })
            .is_ok());
    ASSERT_TRUE(wait_all(reqs, std::chrono::seconds(10)).is_ok());
    for (int i = 0; i < 20; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  });
}

TEST(CommCore, AFailedOperationBreaksEveryRankInsteadOfHanging) {
  auto ranks = make_ranks(3, std::chrono::seconds(20));
  run_ranks(ranks, [](int r, Communicator& c) {
    // Rank 0 aborts; ranks 1 and 2 wait on a message from rank 1 -> 2 -> ... that
    // depends on rank 0: they must fail (peer closed), not wait out the timeout.
    if (r == 0) {
      c.abort();
      EXPECT_EQ(c.failure().code(), StatusCode::kAborted);
      return;
    }
    Status s = coll::CommAccess::core(c).run([r](coll::Op& op) {
      int64_t v = 0;
      if (r == 1) return op.sendrecv(-1, nullptr, 0, 0, &v, sizeof v);  // waits for rank 0
      // rank 2 waits for rank 1, which never sends: it learns through rank 1's failure.
      return op.sendrecv(-1, nullptr, 0, 1, &v, sizeof v);
    });
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.code(), StatusCode::kTimeout) << s.to_string();
    EXPECT_FALSE(c.failure().is_ok());
    // Later operations fail at once with the first failure.
    int64_t v = 0;
    EXPECT_FALSE(coll::CommAccess::core(c)
                     .run([&](coll::Op& op) { return op.sendrecv(-1, nullptr, 0, 0, &v, sizeof v); })
                     .is_ok());
  });
}

TEST(CommCore, AnOperationThatNeverCompletesTimesOut) {
  auto ranks = make_ranks(2, std::chrono::milliseconds(300));
  run_ranks(ranks, [](int r, Communicator& c) {
    if (r == 1) return;  // never takes part
    int64_t v = 0;
    Status s =
        coll::CommAccess::core(c).run([&](coll::Op& op) { return op.sendrecv(-1, nullptr, 0, 1, &v, sizeof v); });
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
  });
}

// CollectiveOptions::timeout bounds one call (blocking and asynchronous) in place of the
// communicator's timeout (here 60 s, which the test would not wait out).
TEST(CommCore, APerCallTimeoutBoundsTheCollective) {
  for (bool async : {false, true}) {
    auto ranks = make_ranks(2, std::chrono::seconds(60));
    run_ranks(ranks, [&](int r, Communicator& c) {
      if (r == 1) return;  // never takes part
      const CollectiveOptions options{.timeout = std::chrono::milliseconds(200)};
      const Status s = async ? c.ibarrier(options).wait(std::chrono::seconds(30)) : c.barrier(options);
      EXPECT_EQ(s.code(), StatusCode::kTimeout) << (async ? "ibarrier: " : "barrier: ") << s.to_string();
    });
  }
}

// An asynchronous collective's Request is completed by the communicator's worker, not
// by a progress engine; a wait on it without a timeout still ends at the context's
// bound (Config::wait_timeout_ms), not the collective's, and says which bound it was.
TEST(CommCore, AWaitWithoutATimeoutOnAnAsynchronousCollectiveEndsAtTheContextsBound) {
  auto ranks = make_ranks(2, std::chrono::seconds(20), {.wait_timeout_ms = 300, .ignore_env = true});
  std::promise<void> rank0_waited;
  std::shared_future<void> waited = rank0_waited.get_future().share();
  run_ranks(ranks, [&](int r, Communicator& c) {
    if (r == 1) {
      waited.wait();  // joins the barrier only once rank 0's wait gave up
      EXPECT_TRUE(c.barrier().is_ok());
      return;
    }
    const Request b = c.ibarrier();
    const Status s = b.wait();
    rank0_waited.set_value();
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    EXPECT_NE(s.message().find("REMORA_WAIT_TIMEOUT_MS"), std::string::npos) << s.to_string();
    EXPECT_TRUE(b.wait(std::chrono::seconds(10)).is_ok()) << "the barrier itself went on";
  });
}

TEST(CommCore, NotificationsAreRoutedToTheirCommunicator) {
  auto ranks = make_ranks(2);
  std::vector<std::vector<std::byte>> mem(2, std::vector<std::byte>(64));
  std::vector<Region> regions;
  std::vector<RemoteKey> keys;
  for (int r = 0; r < 2; ++r) {
    auto reg = ranks[static_cast<size_t>(r)].ctx->register_memory(mem[static_cast<size_t>(r)].data(), 64, kAllAccess);
    ASSERT_TRUE(reg.is_ok());
    keys.push_back(*reg->remote_key(0, 64, Access::kRemoteWrite));
    regions.push_back(std::move(*reg));
  }
  run_ranks(ranks, [&](int r, Communicator& c) {
    Status s = coll::CommAccess::core(c).run([&](coll::Op& op) {
      uint64_t word = 0x1111 * (r + 1);
      Request p = op.endpoint(1 - r).value()->put(std::as_bytes(std::span(&word, 1)), keys[static_cast<size_t>(1 - r)],
                                                  8, {.notify = op.notify_value(static_cast<uint16_t>(r))});
      coll::World::Incoming in;
      Status w = op.wait_notification(&in, {1 - r});
      if (!w.is_ok()) return w;
      if (in.from != 1 - r || (in.note.value & 0xFFFF) != static_cast<uint64_t>(1 - r) || in.note.offset != 8) {
        return Status(StatusCode::kInternal, "wrong notification");
      }
      return op.wait(p);
    });
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    uint64_t got = 0;
    std::memcpy(&got, mem[static_cast<size_t>(r)].data() + 8, 8);
    EXPECT_EQ(got, 0x1111u * static_cast<uint64_t>(2 - r));
  });
}

// --- a rank that leaves first ---------------------------------------------------------
//
// Three ranks. Rank 0 finishes first: it sends rank 1 a message and destroys its
// communicator, which closes its endpoints orderly. Rank 1, still at work, must be able
// to receive that message and to wait for a notification from rank 2: a rank that
// finished is not a failure. Only waits that need rank 0 fail, and at once.

/// Rank 1's scratch and the key rank 2 puts into it.
struct Scratch {
  std::vector<std::byte> mem = std::vector<std::byte>(64);
  Region region;
  RemoteKey key;
};

Scratch register_scratch(Context& ctx) {
  Scratch s;
  auto reg = ctx.register_memory(s.mem.data(), s.mem.size(), kAllAccess);
  EXPECT_TRUE(reg.is_ok()) << reg.status().to_string();
  if (!reg.is_ok()) return s;
  s.key = *reg->remote_key(0, s.mem.size(), Access::kRemoteWrite);
  s.region = std::move(*reg);
  return s;
}

/// Rank 0 of these tests: a message for rank 1 (tag 7), then it leaves (or aborts).
void rank0_sends_and_leaves(std::vector<test::Rank>& ranks, bool abort) {
  const uint64_t word = 0xF00D;
  EXPECT_TRUE(ranks[0].comm->isend(&word, 1, DataType::kUint64, 1, Tag{7}).wait(std::chrono::seconds(5)).is_ok());
  if (abort) ranks[0].comm->abort();
  ranks[0].comm.reset();
}

/// Rank 1 returns once its endpoint to rank 0 has seen rank 0 go.
Status wait_until_rank0_gone(Communicator& c) {
  uint64_t never = 0;
  return c.irecv(&never, 1, DataType::kUint64, 0, Tag{99}).wait(std::chrono::seconds(10));
}

TEST(CommCore, ARankThatLeavesFirstDoesNotFailTheRanksStillAtWork) {
  auto ranks = make_ranks(3);
  Scratch scratch = register_scratch(*ranks[1].ctx);
  std::promise<void> waiting, done;
  run_ranks(ranks, [&](int r, Communicator& c) {
    if (r == 0) return rank0_sends_and_leaves(ranks, false);
    if (r == 2) {
      ASSERT_EQ(waiting.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
      Status s = coll::CommAccess::core(c).run([&](coll::Op& op) {
        const uint64_t word = 0xBEEF;
        return op.wait(op.endpoint(1).value()->put(std::as_bytes(std::span(&word, 1)), scratch.key, 16,
                                                   {.notify = op.notify_value(2)}));
      });
      EXPECT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_EQ(done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
      return;
    }
    const Status gone = wait_until_rank0_gone(c);
    EXPECT_EQ(gone.code(), StatusCode::kPeerFailed) << gone.to_string();
    uint64_t got = 0;
    Status s = c.irecv(&got, 1, DataType::kUint64, 0, Tag{7}).wait(std::chrono::seconds(5));
    EXPECT_TRUE(s.is_ok()) << "the message rank 0 sent before it left: " << s.to_string();
    EXPECT_EQ(got, 0xF00Du);
    waiting.set_value();
    s = coll::CommAccess::core(c).run([&](coll::Op& op) {
      coll::World::Incoming in;
      REMORA_RETURN_IF_ERROR(op.wait_notification(&in, {2}));
      if (in.from != 2 || (in.note.value & 0xFFFF) != 2 || in.note.offset != 16) {
        return Status(StatusCode::kInternal, "wrong notification");
      }
      return Status::ok();
    });
    EXPECT_TRUE(s.is_ok()) << "waiting for rank 2 after rank 0 left: " << s.to_string();
    uint64_t word = 0;
    std::memcpy(&word, scratch.mem.data() + 16, 8);
    EXPECT_EQ(word, 0xBEEFu);
    // A wait that needs rank 0 fails with rank 0's close, not at the deadline.
    s = coll::CommAccess::core(c).run([&](coll::Op& op) {
      coll::World::Incoming in;
      return op.wait_notification(&in, {0, 2});
    });
    EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << s.to_string();
    done.set_value();
  });
}

TEST(CommCore, ARankThatLeftIsNotMistakenForAFailureUntilTheDeadline) {
  // Nothing comes from rank 2: the wait ends at the deadline, as a timeout, rather
  // than early with rank 0's close.
  auto ranks = make_ranks(3, std::chrono::milliseconds(300));
  std::promise<void> done;
  run_ranks(ranks, [&](int r, Communicator& c) {
    if (r == 0) return rank0_sends_and_leaves(ranks, false);
    if (r == 2) {  // stays, silent, until rank 1 is done
      EXPECT_EQ(done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
      return;
    }
    EXPECT_EQ(wait_until_rank0_gone(c).code(), StatusCode::kPeerFailed);
    Status s = coll::CommAccess::core(c).run([&](coll::Op& op) {
      coll::World::Incoming in;
      return op.wait_notification(&in, {2});
    });
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    done.set_value();
  });
}

TEST(CommCore, ARankThatAbortsFailsAWaitForAnotherRankAtOnce) {
  auto ranks = make_ranks(3, std::chrono::seconds(30));
  std::promise<void> done;
  run_ranks(ranks, [&](int r, Communicator& c) {
    if (r == 0) return rank0_sends_and_leaves(ranks, true);
    if (r == 2) {
      EXPECT_EQ(done.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
      return;
    }
    // Fails with rank 0's abort, not at the deadline (kTimeout).
    Status s = coll::CommAccess::core(c).run([&](coll::Op& op) {
      coll::World::Incoming in;
      return op.wait_notification(&in, {2});
    });
    EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << s.to_string();
    EXPECT_NE(s.message().find("aborted"), std::string::npos) << s.to_string();
    done.set_value();
  });
}

// --- asynchronous forms of different operations, at every rank count ---------------

class AsyncOrderTest : public test::MovementTest {};

TEST_P(AsyncOrderTest, AsynchronousFormsRunInOrder) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  const auto un = static_cast<size_t>(n());
  run_ranks(ranks, [&](int r, Communicator& c) {
    const size_t count = 1009;
    Bytes b = r == n() - 1 ? pattern(n() - 1, count) : Bytes(count, kSentinel);
    Bytes mine = pattern(r, count), all(un * count, kSentinel), want;
    for (int p = 0; p < n(); ++p) {
      Bytes x = pattern(p, count);
      want.insert(want.end(), x.begin(), x.end());
    }
    std::vector<Request> reqs{c.ibroadcast(b.data(), count, DataType::kUint8, n() - 1), c.ibarrier(),
                              c.iallgather(mine.data(), all.data(), count, DataType::kUint8)};
    ASSERT_TRUE(wait_all(reqs, std::chrono::seconds(10)).is_ok());
    EXPECT_TRUE(same(b, pattern(n() - 1, count)));
    EXPECT_TRUE(same(all, want));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AsyncOrderTest, ::testing::ValuesIn(test::kRankCounts), test::rank_count_name);

}  // namespace
}  // namespace remora
