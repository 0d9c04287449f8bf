// tests/fuzz/fuzz_check.h — the one way a libFuzzer harness reports a broken invariant:
// it names the harness and what broke, and aborts, so that libFuzzer keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>

#define REMORA_FUZZ_CHECK(cond, what)                                                        \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: invariant broken: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
