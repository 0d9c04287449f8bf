// lab_util.h — what the kernel lab's tests share: whether they run inside the lab
// (REMORA_TEST_KERNEL_LAB=1, set by scripts/kernel_lab.sh's guest), and the one rule for a
// kernel feature that is missing: inside the lab it is a failure (the lab's kernel has
// it), outside it the test skips and says why.
#pragma once

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace remora::lab {

/// Running inside the kernel lab's guest.
inline bool in_lab() {
  const char* v = std::getenv("REMORA_TEST_KERNEL_LAB");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace remora::lab

/// `what` is missing: fails inside the lab, skips (with the reason) elsewhere.
#define REMORA_LAB_NEEDS(ok, what)                                                                           \
  do {                                                                                                       \
    if (!(ok)) {                                                                                             \
      if (::remora::lab::in_lab()) FAIL() << "the lab's kernel should have this: " << (what);                \
      GTEST_SKIP() << "not in the kernel lab (scripts/kernel_lab.sh), and this kernel lacks it: " << (what); \
    }                                                                                                        \
  } while (0)
