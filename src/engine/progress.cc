#include "engine/progress.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace remora::engine {
namespace {

constexpr uint64_t kWakeToken = ~uint64_t{0};
constexpr uint64_t kTimerToken = ~uint64_t{0} - 1;
constexpr int kMaxEvents = 64;

/// What epoll hands back for a registered fd: the slot's generation above its index,
/// so an event for a slot that was reused since is recognised and dropped.
epoll_event epoll_registration(uint32_t events, uint32_t slot, uint32_t generation) {
  epoll_event ev{};
  ev.events = events | EPOLLET;
  ev.data.u64 = (uint64_t{generation} << 32) | slot;
  return ev;
}

/// Raises an eventfd (the epoll wake-up, the park wake-up). Best effort: a full
/// counter is already raised.
void raise_eventfd(int eventfd) noexcept {
  uint64_t one = 1;
  ssize_t ignored = ::write(eventfd, &one, sizeof one);
  (void)ignored;
}

/// Arms CLOCK_MONOTONIC timerfd `fd` to expire at `deadline_ns` (absolute); false if
/// the kernel refused.
bool set_timerfd(int fd, int64_t deadline_ns) noexcept {
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(deadline_ns / 1'000'000'000);
  when.it_value.tv_nsec = static_cast<long>(deadline_ns % 1'000'000'000);
  if (when.it_value.tv_sec <= 0 && when.it_value.tv_nsec <= 0) when.it_value.tv_nsec = 1;  // 0 would disarm it
  return ::timerfd_settime(fd, TFD_TIMER_ABSTIME, &when, nullptr) == 0;
}

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

ProgressEngine::ProgressEngine(Options options) : options_(options) {}

Result<std::shared_ptr<ProgressEngine>> ProgressEngine::create(Options options) {
  std::shared_ptr<ProgressEngine> e(new ProgressEngine(options));
  e->epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (e->epfd_ < 0) return Status(StatusCode::kNoResource, std::string("epoll_create1: ") + std::strerror(errno));
  e->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e->wake_fd_ < 0) return Status(StatusCode::kNoResource, std::string("eventfd: ") + std::strerror(errno));
  e->park_event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e->park_event_fd_ < 0) return Status(StatusCode::kNoResource, std::string("eventfd: ") + std::strerror(errno));
  e->park_timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);  // steady_clock's clock
  if (e->park_timer_fd_ < 0) {
    return Status(StatusCode::kNoResource, std::string("timerfd_create: ") + std::strerror(errno));
  }
  e->timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (e->timer_fd_ < 0) return Status(StatusCode::kNoResource, std::string("timerfd_create: ") + std::strerror(errno));
  for (auto [fd, token] : {std::pair{e->wake_fd_, kWakeToken}, std::pair{e->timer_fd_, kTimerToken}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = token;
    if (::epoll_ctl(e->epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Status(StatusCode::kInternal, std::string("epoll_ctl(wake-up): ") + std::strerror(errno));
    }
  }
  return e;
}

ProgressEngine::~ProgressEngine() {
  stop();
  for (int fd : {wake_fd_, timer_fd_, park_event_fd_, park_timer_fd_, epfd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void ProgressEngine::start() {
  bool expected = false;
  if (!running_.compare_exchange_strong(expected, true)) return;
  thread_ = std::thread([this] { thread_main(); });
  // Named here, not by the thread itself: what top -H and perf show, and what a caller
  // looking for the thread finds at once, even before a loaded host first runs it.
  pthread_setname_np(thread_.native_handle(), "remora-progress");
}

void ProgressEngine::stop() {
  if (!running_.exchange(false)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  raise_eventfd(wake_fd_);
  raise_eventfd(park_event_fd_);
  if (thread_.joinable()) thread_.join();
}

Result<HandlerId> ProgressEngine::add(int fd, EventHandler* handler, uint32_t events) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back(Slot{});
  }
  Slot& s = slots_[slot];
  s.handler = handler;
  s.live = true;
  epoll_event ev = epoll_registration(events, slot, s.generation);
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    int err = errno;
    s.live = false;
    s.handler = nullptr;
    free_slots_.push_back(slot);
    return Status(StatusCode::kNoResource, std::string("epoll_ctl(ADD): ") + std::strerror(err));
  }
  return HandlerId{slot, s.generation};
}

Status ProgressEngine::modify(int fd, HandlerId id, uint32_t events) {
  if (!id.valid() || id.slot >= slots_.size() || !slots_[id.slot].live || slots_[id.slot].generation != id.generation) {
    return Status(StatusCode::kInternal, "modify of a handler that is not registered");
  }
  epoll_event ev = epoll_registration(events, id.slot, id.generation);
  if (::epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) != 0) {
    return Status(StatusCode::kInternal, std::string("epoll_ctl(MOD): ") + std::strerror(errno));
  }
  return Status::ok();
}

void ProgressEngine::remove(int fd, HandlerId id) {
  if (!id.valid() || id.slot >= slots_.size()) return;
  Slot& s = slots_[id.slot];
  if (!s.live || s.generation != id.generation) return;
  if (fd >= 0) ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  if (s.polled) {
    const uint64_t token = (uint64_t{s.generation} << 32) | id.slot;
    polled_.erase(std::find(polled_.begin(), polled_.end(), token));
    polled_count_.store(static_cast<uint32_t>(polled_.size()), std::memory_order_relaxed);
    s.polled = false;
  }
  s.live = false;
  s.handler = nullptr;
  if (++s.generation == 0) s.generation = 1;
  free_slots_.push_back(id.slot);
}

void ProgressEngine::poll_every_round(HandlerId id) {
  if (!id.valid() || id.slot >= slots_.size()) return;
  Slot& s = slots_[id.slot];
  if (!s.live || s.generation != id.generation || s.polled) return;
  s.polled = true;
  polled_.push_back((uint64_t{id.generation} << 32) | id.slot);
  polled_count_.store(static_cast<uint32_t>(polled_.size()), std::memory_order_relaxed);
}

int ProgressEngine::poll_polled(bool arm, uint64_t skip) {
  int found = 0;
  // By index: a handler may register or remove handlers (this one too) meanwhile; one
  // skipped this round is polled in the next.
  for (size_t i = 0; i < polled_.size(); ++i) {
    const uint64_t token = polled_[i];
    const auto slot = static_cast<uint32_t>(token);
    if (token == skip || slot >= slots_.size() || !slots_[slot].live ||
        slots_[slot].generation != static_cast<uint32_t>(token >> 32)) {
      continue;
    }
    EventHandler* h = slots_[slot].handler;
    found += arm ? h->arm_for_sleep() : h->poll_round();
  }
  return found;
}

int ProgressEngine::arm_polled() {
  if (polled_count_.load(std::memory_order_relaxed) == 0) return 0;
  std::vector<std::function<void()>> deferred;
  int found = 0;
  {
    Guard guard(*this);
    run_next_round();
    found = poll_polled(/*arm=*/true);
    run_posted();
    run_timers();
    deferred = take_deferred();
  }
  run_deferred(deferred);
  return found;
}

void ProgressEngine::add_timer(Clock::time_point when, std::function<void()> fn) {
  timers_.push(Timer{when, timer_seq_++, std::move(fn)});
  has_timers_.store(true, std::memory_order_relaxed);
  // The kernel keeps the earliest deadline (timer_fd_, in the epoll set): whichever
  // thread harvests its expiry runs the timers. A wake-up for the progress thread to
  // compute a new epoll timeout instead could be taken by a spinning waiter's
  // epoll_wait; the progress thread then slept on with no timeout while the waiter
  // blocked, and the timer never ran.
  if (when < timer_armed_) arm_timer_fd(when);
}

void ProgressEngine::arm_timer_fd(Clock::time_point when) {
  if (!set_timerfd(timer_fd_,
                   std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count())) {
    // Cannot happen with a valid descriptor and time; the timers then run only when
    // someone drives progress, so say so.
    REMORA_LOG(kError, "timerfd_settime: {}", std::strerror(errno));
    return;
  }
  timer_armed_ = when;
}

void ProgressEngine::defer(std::function<void()> fn) {
  deferred_.push_back(std::move(fn));
  raise_eventfd(wake_fd_);
}

void ProgressEngine::at_next_round(std::function<void()> fn) {
  next_round_.push_back(std::move(fn));
  has_next_round_.store(true, std::memory_order_seq_cst);
  // A progress thread asleep in epoll_wait would not start a round before the next
  // event; wake it. (Parked for spinners, it polls within linger_us anyway.) Pairs
  // with thread_main's store to epoll_sleeping_ then load of has_next_round_.
  if (epoll_sleeping_.load(std::memory_order_seq_cst)) {
    raise_eventfd(wake_fd_);
  }
}

void ProgressEngine::post(std::function<void()> fn) {
  {
    std::lock_guard lock(posted_mutex_);
    posted_.push_back(std::move(fn));
  }
  has_posted_.store(true, std::memory_order_seq_cst);
  has_next_round_.store(true, std::memory_order_seq_cst);
  raise_eventfd(wake_fd_);  // a sleeping progress thread; spinning waiters poll anyway
}

void ProgressEngine::run_posted() {
  if (!has_posted_.load(std::memory_order_acquire)) return;
  std::vector<std::function<void()>> posted;
  {
    std::lock_guard lock(posted_mutex_);
    posted.swap(posted_);
    has_posted_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : posted) fn();
}

void ProgressEngine::run_next_round() {
  run_posted();
  if (!has_next_round_.load(std::memory_order_relaxed)) return;
  // Through a spare vector, so that neither loses its capacity: a call queued round
  // after round (a held RESP's release) allocates no vector.
  std::vector<std::function<void()>> calls = std::move(next_round_spare_);
  calls.swap(next_round_);
  has_next_round_.store(false, std::memory_order_relaxed);
  for (auto& fn : calls) fn();  // may queue more for the round after
  calls.clear();
  next_round_spare_ = std::move(calls);
}

std::vector<std::function<void()>> ProgressEngine::take_deferred() {
  std::vector<std::function<void()>> calls;
  calls.swap(deferred_);
  return calls;
}

void ProgressEngine::run_deferred(std::vector<std::function<void()>>& calls) {
  for (auto& fn : calls) fn();
}

void ProgressEngine::run_timers(Clock::time_point now) {
  if (!has_timers_.load(std::memory_order_relaxed)) return;
  // The timerfd expired (its event was drained): the caller's `now` may predate that,
  // and the kernel does not fire again, so read the clock and arm it anew.
  const bool expired = timer_expired_;
  timer_expired_ = false;
  if (now == Clock::time_point{} || expired) now = Clock::now();
  bool ran = false;
  while (!timers_.empty() && timers_.top().when <= now) {
    auto fn = timers_.top().fn;
    timers_.pop();
    fn();
    ran = true;
  }
  has_timers_.store(!timers_.empty(), std::memory_order_relaxed);
  if (!ran && !expired) return;
  // The armed deadline passed (a timer ran) or fired: the next one, if any.
  timer_armed_ = Clock::time_point::max();
  if (!timers_.empty()) arm_timer_fd(timers_.top().when);
}

void ProgressEngine::dispatch(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    uint64_t token = events[i].data.u64;
    if (token == kWakeToken || token == kTimerToken) {
      uint64_t value;
      ssize_t ignored = ::read(token == kWakeToken ? wake_fd_ : timer_fd_, &value, sizeof value);
      (void)ignored;
      if (token == kTimerToken) timer_expired_ = true;  // run_timers, after this dispatch
      // stop()'s wake-up is the progress thread's: a spinning caller that took it
      // passes it on, or the thread would sleep on and stop() never return.
      if (token == kWakeToken && !running_.load(std::memory_order_acquire)) raise_eventfd(wake_fd_);
      continue;
    }
    uint32_t slot = static_cast<uint32_t>(token);
    uint32_t generation = static_cast<uint32_t>(token >> 32);
    if (slot >= slots_.size()) continue;
    Slot& s = slots_[slot];
    if (!s.live || s.generation != generation) continue;  // removed while the event was pending
    if ((events[i].events & EPOLLIN) != 0 && s.handler->pollable()) hot_token_ = token;
    s.handler->on_event(events[i].events);
  }
}

int ProgressEngine::try_progress(Clock::time_point now) {
  if (lock_waiters_.load(std::memory_order_acquire) != 0 || !mutex_.try_lock()) return 0;
  run_next_round();
  int n = -1;
  uint64_t read_directly = 0;  // the hot handler, when it read (its ring, when it is polled) this round
  if (hot_token_ != 0 && !epoll_busy_ && (++poll_turn_ & (epoll_every_ - 1)) != 0) {
    const auto slot = static_cast<uint32_t>(hot_token_);
    if (slot < slots_.size() && slots_[slot].live && slots_[slot].generation == static_cast<uint32_t>(hot_token_ >> 32)) {
      n = slots_[slot].handler->poll_read();  // -1: epoll_wait after all
      if (n >= 0) read_directly = hot_token_;
    } else {
      hot_token_ = 0;  // removed
    }
  }
  if (n < 0) {
    epoll_event events[kMaxEvents];
    const uint64_t hot = hot_token_;
    const bool rings = !polled_.empty();
    n = ::epoll_wait(epfd_, events, kMaxEvents, 0);
    if (n > 0) dispatch(events, n);
    epoll_busy_ = n > 0;
    // Found something the hot socket's direct reads would not have: epoll_wait every
    // kMinEpollEvery polls again. Found nothing kEmptyEpollsToSlow times in a row: half
    // as often, down to every kMaxEpollEvery polls (kMaxEpollEveryWithRings while rings
    // are polled).
    if (n > 0 && (n > 1 || events[0].data.u64 != hot)) {
      epoll_every_ = kMinEpollEvery;
      empty_epolls_ = 0;
    } else if (n == 0 && ++empty_epolls_ >= kEmptyEpollsToSlow) {
      empty_epolls_ = 0;
      if (epoll_every_ < (rings ? kMaxEpollEveryWithRings : kMaxEpollEvery)) epoll_every_ *= 2;
    }
    if (!rings && epoll_every_ > kMaxEpollEvery) epoll_every_ = kMaxEpollEvery;  // the last ring went
  }
  // Rings a peer writes without waking anyone while threads poll (poll_every_round).
  // While the progress thread sleeps in epoll_wait they stay armed: it armed them, but a
  // wake-up this round took from it (the peer's write cleared the ring's flag and this
  // thread's epoll_wait got the event) must leave them armed again, or the peer's next
  // write would wake nobody once this thread stops polling.
  // A ring the hot handler's direct read just read to its end is not read again (unless
  // it must be armed).
  const bool arm = !polled_.empty() && epoll_sleeping_.load(std::memory_order_seq_cst);
  const int polled = polled_.empty() ? 0 : poll_polled(arm, arm ? 0 : read_directly);
  // A post() whose wake-up this epoll_wait consumed pushed its call before it wrote
  // the eventfd: run it now, or nobody would (the progress thread saw no wake-up).
  run_posted();
  run_timers(now);
  auto deferred = take_deferred();
  mutex_.unlock();
  run_deferred(deferred);
  return (n > 0 ? n : 0) + polled;
}

int ProgressEngine::poll_and_dispatch(int timeout_ms) {
  epoll_event events[kMaxEvents];
  int n = ::epoll_wait(epfd_, events, kMaxEvents, timeout_ms);
  epoll_sleeping_.store(false, std::memory_order_relaxed);
  if (n < 0 && errno != EINTR) {
    REMORA_LOG(kError, "epoll_wait: {}", std::strerror(errno));
  }
  if (n < 0) n = 0;
  // A poll that found nothing needs the lock only for due timers and next-round work
  // (deferred calls come with a wake-up event, so they have n > 0).
  if (n == 0 && timeout_ms == 0 && !has_timers_.load(std::memory_order_relaxed) &&
      !has_next_round_.load(std::memory_order_relaxed) && !has_posted_.load(std::memory_order_relaxed)) {
    return 0;
  }
  std::vector<std::function<void()>> deferred;
  {
    Guard guard(*this);
    run_next_round();
    if (n > 0) dispatch(events, n);
    run_posted();  // see try_progress
    run_timers();
    deferred = take_deferred();
  }
  run_deferred(deferred);
  return n;
}

bool ProgressEngine::should_park() const noexcept {
  if (blocked_waiters_.load(std::memory_order_seq_cst) > 0) return false;  // seq_cst: see park
  if (active_waiters_.load(std::memory_order_acquire) > 0) return true;
  int64_t last = last_waiter_ns_.load(std::memory_order_relaxed);
  return last != 0 && now_ns() - last < int64_t{options_.linger_us} * 1000;
}

bool ProgressEngine::arm_park_timer(int64_t deadline_ns) noexcept { return set_timerfd(park_timer_fd_, deadline_ns); }

void ProgressEngine::push_park_timer(int64_t now_ns) noexcept {
  // With no linger the progress thread parks only while a waiter is inside wait();
  // it then looks around every kMinPark on its own (see park), and a push per
  // waiter would cost a system call per operation.
  const int64_t linger_ns = int64_t{options_.linger_us} * 1000;
  if (linger_ns == 0) return;
  int64_t pushed = park_pushed_ns_.load(std::memory_order_relaxed);
  if (now_ns - pushed < linger_ns / 2) return;
  if (!park_pushed_ns_.compare_exchange_strong(pushed, now_ns, std::memory_order_relaxed)) return;  // another did
  (void)arm_park_timer(now_ns + linger_ns);  // failed: the thread wakes at the older deadline and re-parks
}

void ProgressEngine::park() {
  // Park until a linger period after the last waiter's activity. Spinners poll every
  // socket themselves, and while they keep spinning they push the timer further out
  // (waiter_polling, waiter_exit), so the timer fires only once they have gone quiet
  // for about a linger period: this thread then looks around (try_progress) and, if
  // nobody has waited since, serves the sockets again. A wake-up while they spin
  // would put this thread on a CPU a spinner is using: on this class of VM an
  // interrupt plus the switch costs the spinner tens of microseconds. (Waking once
  // per linger period instead, a 100 000-get ping-pong took 3198 context switches
  // in its two processes; with the pushed timer, 418.)
  constexpr int64_t kMinPark = 50'000;  // ns: with no linger, look around this often
  const int64_t now = now_ns();
  const int64_t linger_ns = std::max<int64_t>(int64_t{options_.linger_us} * 1000, kMinPark);
  const int64_t deadline = std::max(now, last_waiter_ns_.load(std::memory_order_relaxed)) + linger_ns;
  park_pushed_ns_.store(now, std::memory_order_relaxed);
  parked_.store(true, std::memory_order_seq_cst);
  const bool armed = arm_park_timer(deadline);
  // Re-check after announcing the park: a thread that began to block before it saw
  // parked_ has raised blocked_waiters_ by now, and one that begins later writes
  // park_event_fd_, which the poll below sees.
  if (should_park() && running_.load(std::memory_order_acquire)) {
    pollfd fds[2] = {{park_timer_fd_, POLLIN, 0}, {park_event_fd_, POLLIN, 0}};
    const int timeout_ms = armed ? 60'000 : static_cast<int>(linger_ns / 1'000'000) + 1;  // armed: a safety net only
    (void)::poll(fds, 2, timeout_ms);
  }
  parked_.store(false, std::memory_order_relaxed);
  uint64_t drained;
  for (int fd : {park_timer_fd_, park_event_fd_}) {
    ssize_t ignored = ::read(fd, &drained, sizeof drained);  // non-blocking; either may be empty
    (void)ignored;
  }
}

void ProgressEngine::thread_main() {
  const int64_t poll_ns = int64_t{options_.poll_us} * 1000;
  int64_t poll_until = 0;  // keep polling instead of sleeping in epoll until then
  unsigned idle_polls = 0;
  while (running_.load(std::memory_order_acquire)) {
    if (should_park()) {
      // Waiters are spinning and harvesting events themselves; stay off their CPUs
      // until they have been quiet for a linger period (see park), then look around.
      park();
      try_progress();
      poll_until = 0;
      continue;
    }
    if (poll_ns > 0 && now_ns() < poll_until) {
      // Recently busy: the next request is likely close behind, and waking from
      // epoll_wait costs more than a whole small round trip on this class of VM.
      if (try_progress() > 0) {
        poll_until = now_ns() + poll_ns;
        idle_polls = 0;
      } else if (++idle_polls % yield_polls() == 0) {
        sched_yield();  // as a spinning waiter does: let a thread waiting for this CPU run
      }
      continue;
    }
    epoll_sleeping_.store(true, std::memory_order_seq_cst);
    // Posted work counts on its own: a round that ran the next-round calls may have
    // cleared has_next_round_ after a post set it, and drained the post's wake-up.
    const bool pending = has_next_round_.load(std::memory_order_seq_cst) || has_posted_.load(std::memory_order_seq_cst);
    // Timers need no timeout: their deadline is timer_fd_'s, in the epoll set.
    const int timeout_ms = pending ? 0 : -1;
    // About to sleep: rings polled each round ask their writers to wake this thread
    // from now on, and are read once more (what came before the ask).
    if (timeout_ms != 0 && arm_polled() > 0) {
      epoll_sleeping_.store(false, std::memory_order_relaxed);
      if (poll_ns > 0) {
        poll_until = now_ns() + poll_ns;
        idle_polls = 0;
      }
      continue;
    }
    if (poll_and_dispatch(timeout_ms) > 0 && poll_ns > 0) {
      poll_until = now_ns() + poll_ns;
      idle_polls = 0;
    }
  }
}

void ProgressEngine::waiter_enter() noexcept { active_waiters_.fetch_add(1, std::memory_order_acq_rel); }

void ProgressEngine::waiter_exit(Clock::time_point now) noexcept {
  // The time first: a progress thread that sees no waiter sees it recent.
  driven_by_caller(now == Clock::time_point{}
                       ? now_ns()
                       : std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  active_waiters_.fetch_sub(1, std::memory_order_acq_rel);
}

void ProgressEngine::driven_by_caller() noexcept { driven_by_caller(now_ns()); }

void ProgressEngine::driven_by_caller(int64_t now) noexcept {
  last_waiter_ns_.store(now, std::memory_order_relaxed);
  if (parked_.load(std::memory_order_relaxed)) push_park_timer(now);
}

void ProgressEngine::block_begin() noexcept {
  blocked_waiters_.fetch_add(1, std::memory_order_seq_cst);  // before reading parked_: see park
  if (parked_.load(std::memory_order_seq_cst)) raise_eventfd(park_event_fd_);
}

void ProgressEngine::block_end() noexcept { blocked_waiters_.fetch_sub(1, std::memory_order_acq_rel); }

}  // namespace remora::engine
