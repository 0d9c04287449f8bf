// core/cpus.h — the CPUs this process may run on, and the threads a context takes by
// default for them.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace remora::core {

/// The CPUs in this process's affinity mask (1 where it cannot be read).
inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

/// The threads a context moves data-stream bytes with when REMORA_PROGRESS_THREADS is 0
/// (the default, docs/rails.md): one per rail, so that one core does not cap several
/// NICs, but at most half of `cpus`, since the application and the kernel's TCP work need
/// the rest (on the 2-vCPU development VM a worker cost bandwidth:
/// bench/results/rails.md); at least 1, at most 64.
inline uint32_t progress_threads_for(size_t rails, int cpus) noexcept {
  const size_t half = static_cast<size_t>(cpus > 2 ? cpus / 2 : 1);
  return static_cast<uint32_t>(std::clamp<size_t>(std::min(rails, half), 1, 64));
}

}  // namespace remora::core
