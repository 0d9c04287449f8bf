// Tests of Notifications alone: an engine that is never started (waits block in the
// kernel and are woken by the delivering thread), a recording owner, no endpoint. They
// pin delivery order, the bound with promised ones, waking a waiting thread (and
// telling the owner), the handler taking over the queue and giving back what it had
// not run, and what a waiter sees when the endpoint fails.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "transport/notifications.h"

namespace remora::detail {
namespace {

using namespace std::chrono_literals;

struct RecordingOwner : Notifications::Owner {
  Status down;                       // what inactive() answers
  mutable std::promise<void> asked;  // set the first time a wait looks at the endpoint
  mutable bool asked_set = false;
  int handler_runs = 0;
  int woken = 0;

  Status inactive() const override {
    if (!asked_set) {
      asked_set = true;
      asked.set_value();
    }
    return down;
  }
  void run_handler_later() override { ++handler_runs; }
  void waiter_woken() override { ++woken; }
};

struct Harness {
  Harness() : engine(engine::ProgressEngine::create({}).value()), notes(owner, engine, "peer", stats) {}
  /// deliver() as the RMA target calls it: with the progress lock held.
  void deliver(uint64_t value) {
    engine::ProgressEngine::Guard guard(*engine);
    notes.deliver(Notification{.value = value, .length = value});
  }

  RecordingOwner owner;
  EndpointStats stats;
  std::shared_ptr<engine::ProgressEngine> engine;
  Notifications notes;
};

TEST(NotificationsTest, QueuedInDeliveryOrder) {
  Harness h;
  for (uint64_t v = 1; v <= 3; ++v) h.deliver(v);
  EXPECT_EQ(h.stats.notifications, 3u);
  for (uint64_t v = 1; v <= 3; ++v) {
    auto n = h.notes.poll();
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->value, v);
  }
  EXPECT_FALSE(h.notes.poll().has_value());
  EXPECT_EQ(h.owner.woken, 0) << "nobody was waiting";
}

TEST(NotificationsTest, PromisedOnesCountAgainstTheBound) {
  Harness h;
  EXPECT_FALSE(h.notes.full(2));
  h.notes.promise();
  h.deliver(1);
  EXPECT_TRUE(h.notes.full(2));
  h.notes.settle();
  EXPECT_FALSE(h.notes.full(2));
  h.notes.promise();
  h.notes.fail();  // the endpoint failed: nothing promised will come
  EXPECT_FALSE(h.notes.full(2));
  EXPECT_TRUE(h.notes.full(1)) << "what was delivered stays";
}

TEST(NotificationsTest, AWaitingThreadGetsTheNextOneAndTheOwnerIsTold) {
  Harness h;
  std::future<void> asked = h.owner.asked.get_future();
  auto waiter = std::async(std::launch::async, [&] { return h.notes.wait(10s); });
  asked.wait();  // the waiter holds the lock until it is queued
  h.deliver(42);
  Result<Notification> got = waiter.get();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->value, 42u);
  EXPECT_EQ(h.owner.woken, 1);
}

TEST(NotificationsTest, WaitsOneAfterAnotherEachGetTheirOwnAndDeliverSaysWhoTookIt) {
  // Each wait is handed its notification directly (and the waiter's state is used
  // again by the next wait): the values come in order, one per wait, and deliver()
  // says a waiting thread took it only when one did.
  Harness h;
  for (uint64_t round = 1; round <= 3; ++round) {
    h.owner.asked = std::promise<void>();
    h.owner.asked_set = false;
    std::future<void> asked = h.owner.asked.get_future();
    auto waiter = std::async(std::launch::async, [&] { return h.notes.wait(10s); });
    asked.wait();
    bool taken = false;
    {
      engine::ProgressEngine::Guard guard(*h.engine);
      taken = h.notes.deliver(Notification{.value = 100 + round, .length = round});
    }
    Result<Notification> got = waiter.get();
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->value, 100 + round);
    EXPECT_EQ(got->length, round);
    EXPECT_TRUE(taken);
  }
  EXPECT_EQ(h.owner.woken, 3);
  engine::ProgressEngine::Guard guard(*h.engine);
  EXPECT_FALSE(h.notes.deliver(Notification{.value = 7})) << "nobody waits: queued";
  EXPECT_EQ(h.notes.take()->value, 7u);
}

TEST(NotificationsTest, AWaiterSeesWhyTheEndpointFailed) {
  Harness h;
  std::future<void> asked = h.owner.asked.get_future();
  auto waiter = std::async(std::launch::async, [&] { return h.notes.wait(10s); });
  asked.wait();
  {
    engine::ProgressEngine::Guard guard(*h.engine);
    h.owner.down = Status(StatusCode::kPeerFailed, "peer went away");
    h.notes.fail();
  }
  Result<Notification> got = waiter.get();
  EXPECT_EQ(got.status().code(), StatusCode::kPeerFailed);
}

TEST(NotificationsTest, AWaitTimesOutNamingThePeer) {
  Harness h;
  Result<Notification> got = h.notes.wait(0ms);
  EXPECT_EQ(got.status().code(), StatusCode::kTimeout);
  EXPECT_NE(got.status().message().find("peer"), std::string::npos);
  h.deliver(1);
  EXPECT_EQ(h.owner.woken, 0) << "the timed-out waiter was forgotten";
  EXPECT_TRUE(h.notes.poll().has_value());
}

TEST(NotificationsTest, AHandlerTakesTheQueueAndGivesBackWhatItDidNotRun) {
  Harness h;
  h.deliver(1);
  h.deliver(2);
  std::vector<uint64_t> seen;
  h.notes.set_handler([&](const Notification& n) { seen.push_back(n.value); });
  EXPECT_EQ(h.owner.handler_runs, 1) << "queued ones are due to the handler";
  EXPECT_FALSE(h.notes.poll().has_value()) << "the handler takes them, not poll";
  h.deliver(3);
  EXPECT_EQ(h.owner.handler_runs, 2);
  h.notes.run_handler();  // what the owner runs later, outside the lock
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3}));

  h.deliver(4);
  h.deliver(5);
  h.notes.set_handler(nullptr);  // before the handler ran on them
  h.deliver(6);
  for (uint64_t v = 4; v <= 6; ++v) {
    auto n = h.notes.poll();
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->value, v) << "given back in order, ahead of later ones";
  }
  EXPECT_EQ(seen.size(), 3u);
}

}  // namespace
}  // namespace remora::detail
