// Tests for engine/progress.cc: handler registration against real fds (eventfds and
// socketpairs), edge-triggered dispatch, dropping events of removed handlers across slot
// reuse, timers, defer, at_next_round, the progress lock, and the progress thread with
// its park logic. Every wait is bounded; nothing asserts on durations.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/progress.h"

namespace remora::engine {
namespace {

using namespace std::chrono_literals;

/// An eventfd that closes itself.
class EventFd {
 public:
  EventFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~EventFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  int fd() const { return fd_; }
  void raise() const {
    uint64_t one = 1;
    ASSERT_EQ(::write(fd_, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  /// Reads the counter (0 when it was not raised).
  uint64_t drain() const {
    uint64_t v = 0;
    return ::read(fd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v) ? v : 0;
  }

 private:
  int fd_;
};

/// Counts its events (the progress lock is held when on_event runs); optionally drains
/// its eventfd, and runs `also` on each event.
class CountingHandler : public EventHandler {
 public:
  explicit CountingHandler(const EventFd* drain = nullptr) : drain_(drain) {}
  void on_event(uint32_t events) override {
    last_events.store(events);
    if (drain_ != nullptr) (void)drain_->drain();
    if (also) also();
    calls.fetch_add(1);
  }
  std::atomic<int> calls{0};
  std::atomic<uint32_t> last_events{0};
  std::function<void()> also;

 private:
  const EventFd* drain_;
};

std::shared_ptr<ProgressEngine> make_engine(ProgressEngine::Options o = {}) {
  auto e = ProgressEngine::create(o);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return e.is_ok() ? *e : nullptr;
}

/// Whether another thread could take the progress lock now (asked from a fresh thread:
/// try_lock on a mutex the caller holds is undefined).
bool lock_is_free(ProgressEngine& e) {
  bool free = false;
  std::thread([&] {
    if (e.mutex().try_lock()) {
      free = true;
      e.mutex().unlock();
    }
  }).join();
  return free;
}

/// Drives try_progress from this thread until `done` or 10 s have passed.
bool drive_until(ProgressEngine& e, const std::function<bool()>& done) {
  const auto deadline = Clock::now() + 10s;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    (void)e.try_progress();
  }
  return true;
}

/// Waits without driving progress (another thread must) until `done` or 10 s.
bool wait_until(const std::function<bool()>& done) {
  const auto deadline = Clock::now() + 10s;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ProgressEngine, CreateGivesAStoppedEngineThatPollsNothing) {
  auto e = make_engine();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->try_progress(), 0);
  EXPECT_EQ(e->options().spin_us, ProgressEngine::Options{}.spin_us);
}

TEST(ProgressEngine, AddedHandlerGetsItsFdsEventAndHandlerIdsAreValid) {
  auto e = make_engine();
  EventFd efd;
  CountingHandler h(&efd);
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    auto r = e->add(efd.fd(), &h, EPOLLIN);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    id = *r;
  }
  EXPECT_TRUE(id.valid());
  EXPECT_FALSE(HandlerId{}.valid());
  EXPECT_EQ(e->try_progress(), 0);  // nothing ready yet
  EXPECT_EQ(h.calls.load(), 0);
  efd.raise();
  ASSERT_TRUE(drive_until(*e, [&] { return h.calls.load() == 1; }));
  EXPECT_NE(h.last_events.load() & EPOLLIN, 0u);
  std::lock_guard lock(e->mutex());
  e->remove(efd.fd(), id);
}

TEST(ProgressEngine, AddOfABadFdFailsAndFreesTheSlot) {
  auto e = make_engine();
  CountingHandler h;
  ProgressEngine::Guard g(*e);
  auto bad = e->add(-1, &h, EPOLLIN);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNoResource);
  EventFd efd;
  auto good = e->add(efd.fd(), &h, EPOLLIN);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(good->slot, 0u);  // the failed add gave its slot back
  e->remove(efd.fd(), *good);
}

// Edge-triggered: an fd that stays readable (nobody reads it) is reported once, not on
// every round; new data raises a new edge.
TEST(ProgressEngine, DispatchIsEdgeTriggered) {
  auto e = make_engine();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  CountingHandler h;  // never reads
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    id = e->add(sv[0], &h, EPOLLIN).value();
  }
  ASSERT_EQ(::write(sv[1], "a", 1), 1);
  ASSERT_TRUE(drive_until(*e, [&] { return h.calls.load() == 1; }));
  for (int i = 0; i < 100; ++i) (void)e->try_progress();
  EXPECT_EQ(h.calls.load(), 1) << "a level-triggered registration would report the unread byte again";
  ASSERT_EQ(::write(sv[1], "b", 1), 1);
  ASSERT_TRUE(drive_until(*e, [&] { return h.calls.load() == 2; }));
  {
    ProgressEngine::Guard g(*e);
    e->remove(sv[0], id);
  }
  ::close(sv[0]);
  ::close(sv[1]);
}

// modify changes what the fd is watched for; adding an event that is already ready
// raises its edge at once. An unknown id is refused.
TEST(ProgressEngine, ModifyChangesInterestAndRaisesAReadyEdge) {
  auto e = make_engine();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  CountingHandler h;
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    id = e->add(sv[0], &h, EPOLLIN).value();  // writable at once, but not asked for
  }
  for (int i = 0; i < 50; ++i) (void)e->try_progress();
  EXPECT_EQ(h.calls.load(), 0);
  {
    ProgressEngine::Guard g(*e);
    ASSERT_TRUE(e->modify(sv[0], id, EPOLLOUT).is_ok());
  }
  ASSERT_TRUE(drive_until(*e, [&] { return h.calls.load() == 1; }));
  EXPECT_NE(h.last_events.load() & EPOLLOUT, 0u);
  {
    ProgressEngine::Guard g(*e);
    EXPECT_EQ(e->modify(sv[0], HandlerId{id.slot, id.generation + 1}, EPOLLIN).code(), StatusCode::kInternal);
    EXPECT_EQ(e->modify(sv[0], HandlerId{}, EPOLLIN).code(), StatusCode::kInternal);
    e->remove(sv[0], id);
    EXPECT_EQ(e->modify(sv[0], id, EPOLLIN).code(), StatusCode::kInternal) << "modify after remove";
  }
  ::close(sv[0]);
  ::close(sv[1]);
}

// An event harvested in the same round as the remove that precedes it must not reach the
// removed handler, and neither may one for the slot's next occupant's old generation: the
// first handler, when dispatched, removes the second and gives its slot to a third.
TEST(ProgressEngine, EventForARemovedHandlerIsNeverDispatched) {
  auto e = make_engine();
  EventFd a, b, c;
  CountingHandler ha(&a), hb(&b), hc(&c);
  HandlerId id_a, id_b;
  HandlerId id_c;
  {
    ProgressEngine::Guard g(*e);
    id_a = e->add(a.fd(), &ha, EPOLLIN).value();
    id_b = e->add(b.fd(), &hb, EPOLLIN).value();
  }
  ha.also = [&] {
    // Lock held (dispatch). Whichever of a/b comes first removes the other.
    e->remove(b.fd(), id_b);
    id_c = e->add(c.fd(), &hc, EPOLLIN).value();
  };
  hb.also = [&] {
    e->remove(a.fd(), id_a);
  };
  a.raise();
  b.raise();
  ASSERT_TRUE(drive_until(*e, [&] { return ha.calls.load() + hb.calls.load() >= 1; }));
  for (int i = 0; i < 50; ++i) (void)e->try_progress();
  EXPECT_EQ(ha.calls.load() + hb.calls.load(), 1) << "the handler removed in the same round was dispatched";
  if (ha.calls.load() == 1) {
    EXPECT_EQ(id_c.slot, id_b.slot);
    EXPECT_NE(id_c.generation, id_b.generation) << "a reused slot must take a new generation";
    EXPECT_EQ(hc.calls.load(), 0) << "b's pending event reached c, the slot's new occupant";
    c.raise();
    ASSERT_TRUE(drive_until(*e, [&] { return hc.calls.load() == 1; }));
    ProgressEngine::Guard g(*e);
    e->remove(a.fd(), id_a);
    e->remove(c.fd(), id_c);
  } else {
    ProgressEngine::Guard g(*e);
    e->remove(b.fd(), id_b);
  }
}

TEST(ProgressEngine, RemoveIsIdempotentAndIgnoresStaleIds) {
  auto e = make_engine();
  EventFd a, b;
  CountingHandler ha(&a), hb(&b);
  ProgressEngine::Guard g(*e);
  const HandlerId first = e->add(a.fd(), &ha, EPOLLIN).value();
  e->remove(a.fd(), first);
  const HandlerId second = e->add(b.fd(), &hb, EPOLLIN).value();
  ASSERT_EQ(second.slot, first.slot);
  ASSERT_NE(second.generation, first.generation);
  e->remove(b.fd(), first);  // stale: must leave b registered
  e->remove(a.fd(), first);
  EXPECT_TRUE(e->modify(b.fd(), second, EPOLLIN).is_ok()) << "a stale remove unregistered the slot's new handler";
  e->remove(b.fd(), second);
}

TEST(ProgressEngine, TimersRunInTimeOrderOnceDue) {
  auto e = make_engine();
  std::vector<int> order;
  std::vector<Clock::time_point> ran_at;
  const auto base = Clock::now();
  const Clock::time_point when[] = {base + 30ms, base + 10ms, base + 20ms, base + 10ms};
  {
    ProgressEngine::Guard g(*e);
    for (int i = 0; i < 4; ++i) {
      e->add_timer(when[i], [&, i] {
        order.push_back(i);
        ran_at.push_back(Clock::now());
      });
    }
  }
  ASSERT_TRUE(drive_until(*e, [&] {
    ProgressEngine::Guard g(*e);
    return order.size() == 4;
  }));
  EXPECT_EQ(order, (std::vector<int>{1, 3, 2, 0})) << "by time, then in the order added";
  for (size_t k = 0; k < order.size(); ++k) {
    EXPECT_GE(ran_at[k], when[order[k]]) << "timer " << order[k] << " ran before its time";
  }
}

TEST(ProgressEngine, ATimerInTheFutureDoesNotRunEarly) {
  auto e = make_engine();
  bool ran = false;
  {
    ProgressEngine::Guard g(*e);
    e->add_timer(Clock::now() + 1h, [&] { ran = true; });
  }
  for (int i = 0; i < 100; ++i) (void)e->try_progress();
  ProgressEngine::Guard g(*e);
  EXPECT_FALSE(ran);
}

// defer runs its function after the lock is released, so the function may take it.
TEST(ProgressEngine, DeferRunsWithoutTheLockHeld) {
  auto e = make_engine();
  std::atomic<int> ran{0};
  std::atomic<bool> lock_was_free{false};
  {
    ProgressEngine::Guard g(*e);
    e->defer([&] {
      lock_was_free = lock_is_free(*e);
      if (!lock_was_free) return;  // a Guard here would deadlock
      ProgressEngine::Guard again(*e);  // the function may take the lock
      ran.fetch_add(1);
    });
  }
  ASSERT_TRUE(drive_until(*e, [&] { return ran.load() == 1; }));
  EXPECT_TRUE(lock_was_free.load());
  for (int i = 0; i < 10; ++i) (void)e->try_progress();
  EXPECT_EQ(ran.load(), 1) << "a deferred call ran twice";
}

// at_next_round runs on the next try_progress, with the lock held, once.
TEST(ProgressEngine, AtNextRoundRunsOnTheNextTryProgressWithTheLockHeld) {
  auto e = make_engine();
  int ran = 0;
  bool lock_held = false;
  {
    ProgressEngine::Guard g(*e);
    e->at_next_round([&] {
      ++ran;
      lock_held = !lock_is_free(*e);
    });
    EXPECT_EQ(ran, 0) << "ran at once instead of at the next round";
  }
  (void)e->try_progress();
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(lock_held);
  (void)e->try_progress();
  EXPECT_EQ(ran, 1);
}

// A call queued from inside a round's call runs in the round after, not in the same one.
TEST(ProgressEngine, AtNextRoundQueuedFromARoundRunsInTheFollowingRound) {
  auto e = make_engine();
  std::vector<int> order;
  {
    ProgressEngine::Guard g(*e);
    e->at_next_round([&] {
      order.push_back(1);
      e->at_next_round([&] { order.push_back(2); });
    });
  }
  (void)e->try_progress();
  EXPECT_EQ(order, std::vector<int>{1});
  (void)e->try_progress();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(ProgressEngine, TryProgressReturnsZeroAndDispatchesNothingWhileAnotherThreadHoldsTheLock) {
  auto e = make_engine();
  EventFd efd;
  CountingHandler h(&efd);
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    id = e->add(efd.fd(), &h, EPOLLIN).value();
  }
  efd.raise();
  std::mutex m;
  std::condition_variable cv;
  bool held = false, release = false;
  std::thread holder([&] {
    std::lock_guard lock(e->mutex());
    std::unique_lock l(m);
    held = true;
    cv.notify_all();
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return release; }));
  });
  {
    std::unique_lock l(m);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return held; }));
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(e->try_progress(), 0);
  EXPECT_EQ(h.calls.load(), 0);
  {
    std::lock_guard l(m);
    release = true;
  }
  cv.notify_all();
  holder.join();
  ASSERT_TRUE(drive_until(*e, [&] { return h.calls.load() == 1; }));
  ProgressEngine::Guard g(*e);
  e->remove(efd.fd(), id);
}

TEST(ProgressEngine, StartAndStopAreIdempotent) {
  auto e = make_engine();
  e->stop();  // never started
  e->start();
  e->start();
  e->stop();
  e->stop();
  e->start();  // restartable, and serves again
  EventFd efd;
  CountingHandler h(&efd);
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    id = e->add(efd.fd(), &h, EPOLLIN).value();
  }
  efd.raise();
  EXPECT_TRUE(wait_until([&] { return h.calls.load() == 1; }));
  e->stop();
  ProgressEngine::Guard g(*e);
  e->remove(efd.fd(), id);
}

// Nobody calls try_progress: the progress thread serves handlers, timers and deferred
// calls on its own.
TEST(ProgressEngine, ProgressThreadServesWhenNobodyElseDrives) {
  auto e = make_engine();
  e->start();
  EventFd efd;
  CountingHandler h(&efd);
  std::atomic<bool> timer_ran{false}, deferred_ran{false}, next_round_ran{false};
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    id = e->add(efd.fd(), &h, EPOLLIN).value();
    e->add_timer(Clock::now() + 5ms, [&] { timer_ran = true; });
    e->defer([&] { deferred_ran = true; });
    e->at_next_round([&] { next_round_ran = true; });
  }
  for (int i = 1; i <= 3; ++i) {
    efd.raise();
    EXPECT_TRUE(wait_until([&] { return h.calls.load() == i; })) << "event " << i << " not served";
  }
  EXPECT_TRUE(wait_until([&] { return timer_ran.load(); }));
  EXPECT_TRUE(wait_until([&] { return deferred_ran.load(); }));
  EXPECT_TRUE(wait_until([&] { return next_round_ran.load(); }));
  e->stop();
  ProgressEngine::Guard g(*e);
  e->remove(efd.fd(), id);
}

// A timer set while the progress thread sleeps with none set, by a thread that then
// polls (a waiter's spin): that poll's epoll_wait may take the wake-up meant for the
// progress thread, which must still run the timer once it is due, with nobody else
// driving progress. (An endpoint's liveness tick was lost this way when the thread that
// connected it went on to wait for a notification: the waiter then ran to its own
// timeout instead of failing at the peer timeout.)
TEST(ProgressEngine, ATimerRunsOnTheProgressThreadAfterAnotherThreadTookTheWakeUp) {
  ProgressEngine::Options o;
  o.poll_us = 0;  // the progress thread sleeps in epoll as soon as it is idle
  auto e = make_engine(o);
  e->start();
  constexpr int kRounds = 50;
  for (int r = 0; r < kRounds; ++r) {
    auto ran = std::make_shared<std::atomic<bool>>(false);
    {
      ProgressEngine::Guard g(*e);
      e->add_timer(Clock::now() + 2ms, [ran] { ran->store(true); });
    }
    (void)e->try_progress();
    ASSERT_TRUE(wait_until([&] { return ran->load(); })) << "round " << r << ": the timer never ran";
  }
  e->stop();
}

// post() from threads that never hold the lock (a copy engine's completion thread):
// every call runs exactly once and under the lock: a counter bumped without atomicity
// by the posted calls and by this thread (holding the lock) loses no update. A sleeping
// progress thread is woken for them; a try_progress caller runs what was posted.
TEST(ProgressEngine, PostFromForeignThreadsRunsEachCallOnceUnderTheLock) {
  auto e = make_engine();
  e->start();
  constexpr int kThreads = 4, kPerThread = 500, kMine = 2000;
  std::atomic<int> counter{0};
  const auto bump = [&] { counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); };
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) e->post(bump);
    });
  }
  // A spinning waiter drives progress too: its epoll_wait may take a post's wake-up
  // from the progress thread, and must then run the post itself.
  std::atomic<bool> spin{true};
  std::thread spinner([&] {
    while (spin.load()) e->try_progress();
  });
  for (int i = 0; i < kMine; ++i) {
    ProgressEngine::Guard g(*e);
    bump();
  }
  for (auto& t : posters) t.join();
  spin.store(false);
  spinner.join();
  EXPECT_TRUE(wait_until([&] { return counter.load() == kThreads * kPerThread + kMine; })) << counter.load();
  e->stop();
  EXPECT_EQ(counter.load(), kThreads * kPerThread + kMine);
  bool later = false;
  e->post([&] { later = true; });
  e->try_progress();
  EXPECT_TRUE(later);
}

// A waiter that entered (the progress thread parks for it instead of competing) and then
// blocks — it stops polling and waits for the progress thread — still gets its event
// served: block_begin wakes a parked thread and keeps it from parking. The linger is long
// (60 s), so a park that block_begin did not cut short would outlast the test's bound.
TEST(ProgressEngine, BlockedWaiterIsServedByTheProgressThreadDespiteParking) {
  ProgressEngine::Options o;
  o.linger_us = 60'000'000;
  auto e = make_engine(o);
  e->start();
  EventFd efd;
  CountingHandler h(&efd);
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    id = e->add(efd.fd(), &h, EPOLLIN).value();
  }
  e->waiter_enter();
  // A spinning waiter serves its own events; the progress thread, woken by the new
  // timer, sees the waiter and parks.
  {
    ProgressEngine::Guard g(*e);
    e->add_timer(Clock::now() + 1h, [] {});
  }
  efd.raise();
  ASSERT_TRUE(drive_until(*e, [&] { return h.calls.load() == 1; }));
  e->waiter_polling(Clock::now());
  e->block_begin();  // from here on this thread only waits
  efd.raise();
  EXPECT_TRUE(wait_until([&] { return h.calls.load() == 2; })) << "blocked waiter's event never served";
  e->block_end();
  efd.raise();
  EXPECT_TRUE(drive_until(*e, [&] { return h.calls.load() == 3; }));
  e->waiter_exit();
  e->stop();  // must not hang on a parked thread
  ProgressEngine::Guard g(*e);
  e->remove(efd.fd(), id);
}

// Many threads entering, polling, blocking and leaving while events arrive: every event
// is served and stop() returns (no deadlock between the park logic and the waiters).
TEST(ProgressEngine, WaitersEnteringAndBlockingConcurrentlyNeverDeadlock) {
  ProgressEngine::Options o;
  o.linger_us = 200;
  auto e = make_engine(o);
  e->start();
  EventFd efd;
  CountingHandler h(&efd);
  HandlerId id;
  {
    ProgressEngine::Guard g(*e);
    id = e->add(efd.fd(), &h, EPOLLIN).value();
  }
  constexpr int kThreads = 4, kRounds = 200;
  std::atomic<int> served_rounds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        e->waiter_enter();
        e->waiter_polling(Clock::now());
        if ((r + t) % 2 == 0) (void)e->try_progress();
        e->block_begin();
        e->block_end();
        e->waiter_exit();
        served_rounds.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(served_rounds.load(), kThreads * kRounds);
  const int before = h.calls.load();
  e->block_begin();
  efd.raise();
  EXPECT_TRUE(wait_until([&] { return h.calls.load() == before + 1; }));
  e->block_end();
  e->stop();
  ProgressEngine::Guard g(*e);
  e->remove(efd.fd(), id);
}

}  // namespace
}  // namespace remora::engine
