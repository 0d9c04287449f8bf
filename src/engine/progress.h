// engine/progress.h — the progress engine: one epoll set, one progress thread, and
// the progress lock that every thread touching transport state takes.
//
// Threads:
// - The progress thread sleeps in epoll_wait when nobody else drives progress, so an
//   idle context burns no CPU.
// - A thread waiting on a Request spins for a bounded time, driving progress itself
//   (try_lock + epoll_wait(0)): on this class of VM a cross-CPU wake-up costs
//   50–150 µs, so completing in the waiting thread is what makes latency low.
// - While waiters spin (and for progress_linger after the last one left), the
//   progress thread parks instead of competing for the CPU: spinners poll every
//   socket themselves. It sleeps until a timer that fires a linger period after the
//   last waiter's activity; waiters push that timer further out (at most once per
//   half a linger period, one timerfd_settime) instead of letting it fire, since a
//   wake-up puts the progress thread on a CPU a spinner is using. It never parks
//   while a thread is blocked waiting for it (block_begin/block_end): such a thread
//   wakes it first.
// - Otherwise, once it has served something, the progress thread keeps polling
//   (epoll_wait with no timeout) for poll_us before it sleeps in epoll again, so a
//   passive target answering a stream of requests (one-sided gets, puts) is not woken
//   from the kernel for each one. A context with nothing to do still sleeps.
//
// Handlers are registered per fd with edge-triggered interest and are identified on
// the wire of epoll by (slot, generation), so events for a removed handler are
// dropped, never dispatched to freed memory.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "core/log.h"
#include "remora/config.h"
#include "remora/status.h"

namespace remora::engine {

using Clock = std::chrono::steady_clock;

/// Receives readiness events; called with the progress lock held.
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void on_event(uint32_t events) = 0;
  /// Handlers whose socket may be read without an event (it is edge-triggered and
  /// read until EAGAIN anyway) say so, and implement poll_read.
  virtual bool pollable() const { return false; }
  /// Reads whatever is there without an event: 1 if anything was read, 0 if not, -1
  /// if the handler would rather be left to epoll now (nothing was done).
  virtual int poll_read() { return -1; }
  /// Handlers of memory a peer writes without a system call (a shared-memory ring,
  /// poll_every_round): poll_round reads what is there, in every progress round of any
  /// thread, without asking to be woken; arm_for_sleep asks the writer to wake this
  /// side (an eventfd registered here) and reads once more, before the progress thread
  /// sleeps. Both return 1 if anything was read, else 0. Lock held.
  virtual int poll_round() { return 0; }
  virtual int arm_for_sleep() { return 0; }
};

/// Opaque registration handle.
struct HandlerId {
  uint32_t slot = 0;
  uint32_t generation = 0;
  bool valid() const noexcept { return generation != 0; }
};

class ProgressEngine {
 public:
  struct Options {
    uint32_t spin_us = 200;
    uint32_t linger_us = 1000;
    uint32_t poll_us = 100;
    /// Bound of a wait given kDefaultTimeout on this context (engine/wait_bound.h).
    uint32_t wait_timeout_ms = Config{}.wait_timeout_ms;
  };

  static Result<std::shared_ptr<ProgressEngine>> create(Options options);
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  /// Starts / stops (joins) the progress thread. stop() is idempotent.
  void start();
  void stop();

  /// The progress lock. Every access to transport state holds it. Take it with
  /// Guard (not lock_guard) from anything but a spinning waiter: a Guard tells
  /// spinners to step aside, so the progress thread (which may hold harvested
  /// edge-triggered events) and application calls get the lock promptly instead of
  /// losing a race to a tight try_lock loop.
  std::mutex& mutex() noexcept { return mutex_; }
  class Guard {
   public:
    explicit Guard(ProgressEngine& e) : e_(e) {
      if (e_.mutex_.try_lock()) return;  // free: no one to tell (two atomic operations fewer)
      e_.lock_waiters_.fetch_add(1, std::memory_order_acq_rel);
      e_.mutex_.lock();
      e_.lock_waiters_.fetch_sub(1, std::memory_order_acq_rel);
    }
    ~Guard() { e_.mutex_.unlock(); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    ProgressEngine& e_;
  };

  /// Registers `fd` (edge-triggered; EPOLLIN|EPOLLOUT|EPOLLRDHUP by default). Lock held.
  Result<HandlerId> add(int fd, EventHandler* handler, uint32_t events = EPOLLIN | EPOLLOUT | EPOLLRDHUP);
  /// Changes the events `fd` is watched for (edge-triggered still). Adding one that is
  /// already ready raises its edge at once. Lock held.
  Status modify(int fd, HandlerId id, uint32_t events);
  /// Unregisters; pending events for it are dropped. Lock held. Does not close fd.
  void remove(int fd, HandlerId id);
  /// Polls `id`'s handler in every progress round (EventHandler::poll_round) and arms
  /// it before the progress thread sleeps (arm_for_sleep): a peer's writes then cost no
  /// wake-up while any thread drives progress. Lock held; remove() ends it.
  void poll_every_round(HandlerId id);

  /// Runs `fn` (with the lock held) at or after `when`. Lock held.
  void add_timer(Clock::time_point when, std::function<void()> fn);
  /// Runs `fn` soon WITHOUT the lock held, on whichever thread next drives progress
  /// (application callbacks that may call back into remora). Lock held.
  void defer(std::function<void()> fn);
  /// Runs `fn` WITH the lock held at the start of the next progress round of any
  /// thread: a spinning waiter's next poll, or the progress thread's (at once when it
  /// is serving; within linger_us when it is parked for spinners). No wake-up is
  /// sent: for work that may wait until someone drives progress again. Lock held.
  void at_next_round(std::function<void()> fn);

  /// Runs `fn` WITH the lock held at the start of the next progress round, and wakes
  /// the progress thread for it. The one call here that may be made from any thread
  /// without the lock: a memory domain's copy-completion thread reports through it.
  void post(std::function<void()> fn);

  /// Drives progress once if the lock is free: harvests ready events without
  /// blocking and dispatches them, polls the handlers polled every round, runs due
  /// timers. Returns the number of events dispatched plus the polled handlers that
  /// read something (0 when idle or when another thread held the lock). A caller that
  /// has just read the clock passes `now`, by which due timers are then found (a
  /// spinning waiter's poll is cheaper by one reading of the clock).
  int try_progress(Clock::time_point now = Clock::time_point{});

  /// Waiter accounting, used by Request::wait: a spinning waiter harvests events
  /// itself, so the progress thread parks while any spins.
  void waiter_enter() noexcept;
  /// `now`: the time of the waiter's last poll, when it has one (a reading of the
  /// clock fewer).
  void waiter_exit(Clock::time_point now = Clock::time_point{}) noexcept;
  /// A spinning waiter's poll at `now`: keeps a parked progress thread parked (see
  /// push_park_timer). Cheap unless a push is due.
  void waiter_polling(Clock::time_point now) noexcept {
    if (parked_.load(std::memory_order_relaxed)) {
      push_park_timer(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
    }
  }
  /// An application thread just pushed data itself (a put posted with the lock held
  /// writes what the sockets take, and on loopback that goes on while the peer
  /// drains): as after a spinning waiter, the progress thread stays parked for a
  /// linger period. Otherwise, between the puts of a long stream, it would wake and
  /// queue on the lock, and every put's unlock would hand the lock to it and back
  /// (two futex calls and two context switches per put). Lock held or not.
  void driven_by_caller() noexcept;
  void driven_by_caller(int64_t now_ns) noexcept;
  /// A thread is about to block until the progress thread completes something for
  /// it: the progress thread must serve the sockets (never park) until block_end().
  void block_begin() noexcept;
  void block_end() noexcept;
  /// The progress thread is parked now (stepping aside for spinning waiters).
  bool parked() const noexcept { return parked_.load(std::memory_order_relaxed); }

  /// True while some thread waits in Guard for the progress lock (an application
  /// call, the progress thread with harvested events). Long work done under the lock
  /// (pushing or draining a large transfer) checks it after each system call and
  /// gives way, going on at the next round (at_next_round). Spinning waiters take the
  /// lock with try_lock and do not count.
  bool lock_wanted() const noexcept { return lock_waiters_.load(std::memory_order_relaxed) != 0; }

  const Options& options() const noexcept { return options_; }

  /// A spinning thread (a waiter, or the progress thread polling) calls sched_yield
  /// after this many polls in a row that found nothing: 32, or 1 once the process
  /// knows it shares the CPUs with more spinning processes than there are CPUs (the
  /// collectives' bootstrap sets it), where the rank a spinner waits for is often the
  /// one it keeps off the CPU.
  uint32_t yield_polls() const noexcept { return yield_polls_.load(std::memory_order_relaxed); }
  void set_yield_polls(uint32_t polls) noexcept { yield_polls_.store(polls > 0 ? polls : 1, std::memory_order_relaxed); }

 private:
  explicit ProgressEngine(Options options);
  void thread_main();
  /// Harvest with `timeout_ms` and dispatch. Lock NOT held on entry; takes it (only
  /// when there is something to do if timeout_ms is 0). Returns the events dispatched.
  int poll_and_dispatch(int timeout_ms);
  void dispatch(const epoll_event* events, int n);
  /// Runs the timers due at `now` (by default the clock is read, if any timer is set).
  void run_timers(Clock::time_point now = Clock::time_point{});
  void run_next_round();
  /// Runs what post() queued (lock held).
  void run_posted();
  /// Takes the deferred calls (lock held) so they can run after unlocking.
  std::vector<std::function<void()>> take_deferred();
  static void run_deferred(std::vector<std::function<void()>>& calls);
  /// Sets timer_fd_ to expire at `when` (lock held).
  void arm_timer_fd(Clock::time_point when);
  bool should_park() const noexcept;
  /// Parked: sleeps until the park timer fires or park_event_fd_ is written.
  void park();
  /// Moves the park timer to a linger period after `now_ns` if the last move is half
  /// a linger period old (so at most one system call per half period, by any thread).
  void push_park_timer(int64_t now_ns) noexcept;
  bool arm_park_timer(int64_t deadline_ns) noexcept;
  /// poll_round (arm: arm_for_sleep) of every handler polled each round but the one
  /// whose token is `skip`. Lock held.
  int poll_polled(bool arm, uint64_t skip = 0);
  /// Before the progress thread sleeps: arms the polled handlers and runs what they
  /// found. Lock NOT held on entry. Returns what they read (> 0: do not sleep).
  int arm_polled();

  struct Slot {
    EventHandler* handler = nullptr;
    uint32_t generation = 1;
    bool live = false;
    bool polled = false;  // in polled_ (poll_every_round)
  };
  struct Timer {
    Clock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Timer& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };

  Options options_;
  int epfd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop(), defer() and post() wake epoll_wait
  // A CLOCK_MONOTONIC timerfd in the epoll set, armed to the earliest timer (lock held):
  // the kernel holds the deadline, so no thread can take it from the progress thread.
  int timer_fd_ = -1;
  Clock::time_point timer_armed_ = Clock::time_point::max();  ///< timer_fd_'s deadline; max: none
  bool timer_expired_ = false;                                ///< its expiry was harvested (lock held)
  std::mutex mutex_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint64_t> polled_;               // tokens (generation, slot) of poll_every_round handlers
  std::atomic<uint32_t> polled_count_{0};      // polled_.size(), read without the lock
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  uint64_t timer_seq_ = 0;
  std::vector<std::function<void()>> deferred_;
  std::vector<std::function<void()>> next_round_;
  std::vector<std::function<void()>> next_round_spare_;  // empty; run_next_round's
  std::atomic<bool> has_next_round_{false};
  std::mutex posted_mutex_;  // guards posted_ only; taken without (or under) mutex_
  std::vector<std::function<void()>> posted_;
  std::atomic<bool> has_posted_{false};
  std::atomic<bool> epoll_sleeping_{false};  ///< the progress thread is in (or entering) a blocking epoll_wait
  std::atomic<bool> has_timers_{false};

  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<uint32_t> active_waiters_{0};
  std::atomic<int64_t> last_waiter_ns_{0};
  // Parking: a CLOCK_MONOTONIC timerfd that waiters push out while they keep
  // spinning, and an eventfd for wake-ups now (a blocking waiter, stop()).
  int park_timer_fd_ = -1;
  int park_event_fd_ = -1;
  std::atomic<bool> parked_{false};
  std::atomic<int64_t> park_pushed_ns_{0};  ///< when the park timer was last set
  std::atomic<uint32_t> yield_polls_{32};  ///< see yield_polls()
  std::atomic<uint32_t> blocked_waiters_{0};
  std::atomic<uint32_t> lock_waiters_{0};
  // The pollable handler that last got input. Spinning pollers read its socket directly
  // on most polls: when the next message arrives there, one recv finds and reads it
  // where epoll_wait + recv take two system calls (about 2 us per message on this class
  // of VM). Every epoll_every_-th poll is an epoll_wait, so every other socket is still
  // served within a few polls: every 4th while epoll_wait finds input elsewhere, every
  // 8th, then every 16th, after it found nothing 4 times in a row. The epoll_waits
  // slow a ping-pong on the hot socket down: a raw busy-polling TCP ping-pong measured
  // on this class of VM took 1.2-1.5 us longer per round trip with one every 4th poll,
  // 0.8 us with one every 16th. While epoll_wait keeps finding events (a transfer
  // moving on the data streams) every poll is an epoll_wait. Where shared-memory rings
  // are polled (poll_every_round), the traffic of same-host peers is in them and their
  // sockets are mostly silent: there it slows on down to every 128th poll (about 10 us
  // of polling on this class of VM: a socket that wakes after such a silence is served
  // that much later, then every 4th poll again), which took 6-10% off a same-host 8 B
  // ping-pong (bench/results/p2p.md).
  static constexpr uint32_t kMinEpollEvery = 4;  // powers of two
  static constexpr uint32_t kMaxEpollEvery = 16;
  static constexpr uint32_t kMaxEpollEveryWithRings = 128;
  static constexpr uint32_t kEmptyEpollsToSlow = 4;
  uint64_t hot_token_ = 0;
  uint32_t poll_turn_ = 0;
  uint32_t epoll_every_ = kMinEpollEvery;
  uint32_t empty_epolls_ = 0;
  bool epoll_busy_ = false;
};

}  // namespace remora::engine
