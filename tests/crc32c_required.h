// tests/crc32c_required.h — the checksum tests need CRC-32C, which comes with ISA-L.
// A build without ISA-L skips them and says why; a build that found ISA-L
// (REMORA_TEST_BUILT_WITH_ISAL, set by tests/CMakeLists.txt) fails them instead, so a
// library that lost its CRC-32C cannot pass by skipping.
#pragma once

#include <gtest/gtest.h>

#include "core/crc32c.h"

#ifndef REMORA_TEST_BUILT_WITH_ISAL
#define REMORA_TEST_BUILT_WITH_ISAL 0
#endif

#define REMORA_SKIP_WITHOUT_CRC32C()                                                                    \
  do {                                                                                                  \
    if (!::remora::core::crc32c_available()) {                                                          \
      if (REMORA_TEST_BUILT_WITH_ISAL) FAIL() << "built with ISA-L, yet crc32c_available() is false";    \
      GTEST_SKIP() << "built without ISA-L (libisal-dev): no CRC-32C";                                  \
    }                                                                                                   \
  } while (0)
