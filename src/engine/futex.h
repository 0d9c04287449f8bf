// engine/futex.h — thin wrappers over futex(2) for 32-bit atomics, with timeouts
// (std::atomic::wait has none).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace remora::engine {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

/// Whether the word may be waited on from other processes too (it lives in memory they
/// map: net/shared_memory.h); private futexes are cheaper.
enum class FutexScope { kProcess, kShared };

/// Sleeps while *word == expected, at most `timeout` (negative = forever). Spurious
/// wake-ups happen; callers re-check.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout,
                       FutexScope scope = FutexScope::kProcess) {
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout.count() >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
    tsp = &ts;
  }
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), scope == FutexScope::kShared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE,
            expected, tsp, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t>* word, FutexScope scope = FutexScope::kProcess) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), scope == FutexScope::kShared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE,
            0x7fffffff, nullptr, nullptr, 0);
}

}  // namespace remora::engine
