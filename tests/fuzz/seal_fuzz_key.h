// tests/fuzz/seal_fuzz_key.h — the key seal_fuzz opens records with, and the seed
// generator (make_seeds.cc) seals its seed records under.
#pragma once

#include <cstddef>

#include "net/seal.h"

namespace remora::fuzz {

inline net::SealKey seal_fuzz_key() {
  net::SealKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::byte>(0xA5 ^ i);
  return k;
}

}  // namespace remora::fuzz
