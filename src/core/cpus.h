// core/cpus.h — the CPUs this process may run on.
#pragma once

#include <sched.h>

#include <algorithm>

namespace remora::core {

/// The CPUs in this process's affinity mask (1 where it cannot be read).
inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace remora::core
