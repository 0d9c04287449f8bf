// tests/device/require_cuda.h — for tests that need CUDA memory but no particular GPU:
// the process's CUDA domain, or a skip with the driver's reason where there is none
// (a machine without a GPU), unless REMORA_TEST_REQUIRE_CUDA=1 says a driver is there
// (CTest sets it with the emulated driver, a GPU run with the real one): then its
// absence is a failure.
#pragma once

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "remora/cuda.h"

/// Sets `domain` (a MemoryDomain*) to the CUDA domain, or skips / fails the test as
/// above. Use in SetUp or a test body (it returns from the function on a skip).
#define REMORA_CUDA_DOMAIN_OR_SKIP(domain)                                                       \
  do {                                                                                           \
    auto remora_cuda_found = ::remora::cuda_domain();                                            \
    if (!remora_cuda_found.is_ok()) {                                                            \
      const char* remora_cuda_required = std::getenv("REMORA_TEST_REQUIRE_CUDA");                \
      ASSERT_FALSE(remora_cuda_required != nullptr && std::string(remora_cuda_required) == "1")  \
          << "REMORA_TEST_REQUIRE_CUDA=1 but " << remora_cuda_found.status().to_string();        \
      GTEST_SKIP() << "needs a CUDA driver (a GPU, or REMORA_CUDA_DRIVER=the emulated driver): " \
                   << remora_cuda_found.status().message();                                      \
    }                                                                                            \
    (domain) = *remora_cuda_found;                                                               \
  } while (false)
