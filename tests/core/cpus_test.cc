// tests/core/cpus_test.cc — the threads a context takes by default (core/cpus.h).
#include "core/cpus.h"

#include <gtest/gtest.h>

namespace remora::core {
namespace {

// REMORA_PROGRESS_THREADS=0, the default: one thread per rail, at most half the usable
// CPUs, at least one (no rails, or no CPU to spare: the progress thread alone).
TEST(ProgressThreadsFor, OnePerRailAtMostHalfTheCpus) {
  EXPECT_EQ(progress_threads_for(0, 16), 1u);  // REMORA_RAILS unset
  EXPECT_EQ(progress_threads_for(1, 16), 1u);
  EXPECT_EQ(progress_threads_for(4, 16), 4u);
  EXPECT_EQ(progress_threads_for(8, 8), 4u);
  EXPECT_EQ(progress_threads_for(2, 4), 2u);
  EXPECT_EQ(progress_threads_for(2, 3), 1u);
  EXPECT_EQ(progress_threads_for(2, 2), 1u);  // the 2-vCPU VM, where a worker cost bandwidth
  EXPECT_EQ(progress_threads_for(4, 1), 1u);
  EXPECT_EQ(progress_threads_for(200, 512), 64u);  // REMORA_PROGRESS_THREADS's own bound
}

}  // namespace
}  // namespace remora::core
