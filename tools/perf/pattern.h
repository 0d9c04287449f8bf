// tools/perf/pattern.h — deterministic payload patterns, a fast checksum and the byte
// comparison of the data checks, so the demo and the benchmarks can prove that every
// byte they moved arrived intact.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace remora::perf {

/// splitmix64: a cheap, well-mixed step; also used to derive seeds.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Fills `out` with a pattern that depends on `seed` and on every byte's position,
/// so a shifted, truncated or stale buffer never looks right.
inline void fill_pattern(std::span<std::byte> out, uint64_t seed) noexcept {
  uint64_t state = mix64(seed);
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    state += 0x9E3779B97F4A7C15ull;
    const uint64_t word = mix64(state);
    std::memcpy(out.data() + i, &word, 8);
  }
  if (i < out.size()) {
    const uint64_t word = mix64(state + 1);
    std::memcpy(out.data() + i, &word, out.size() - i);
  }
}

/// A 64-bit checksum over `data` (four independent lanes, so it runs at several GB/s;
/// not cryptographic — it detects corruption, reordering and truncation).
inline uint64_t checksum(std::span<const std::byte> data) noexcept {
  constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
  constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t lane[4] = {kPrime1, kPrime2, kPrime1 ^ 1, kPrime2 ^ 1};
  const std::byte* p = data.data();
  size_t n = data.size();
  while (n >= 32) {
    for (uint64_t& l : lane) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      l = (l ^ w) * kPrime1;
      l ^= l >> 29;
      p += 8;
    }
    n -= 32;
  }
  uint64_t h = data.size() * kPrime2;
  for (uint64_t l : lane) h = mix64(h ^ l);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix64(h ^ w);
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  return mix64(h ^ tail ^ (uint64_t{n} << 56));
}

/// "" when `got` equals `want`, else where and how it differs.
inline std::string first_difference(std::span<const std::byte> got, std::span<const std::byte> want) {
  if (got.size() != want.size()) return fmt::format("{} bytes, expected {}", got.size(), want.size());
  const auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin());
  if (g == got.end()) return "";
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i] ? 1 : 0;
  return fmt::format("byte {} is 0x{:02x}, expected 0x{:02x} ({} of {} bytes differ)", g - got.begin(),
                     std::to_integer<unsigned>(*g), std::to_integer<unsigned>(*w), differ, got.size());
}

/// "" when `got` holds fill_pattern(seed), else where it differs (first_difference).
inline std::string check_pattern(std::span<const std::byte> got, uint64_t seed) {
  std::vector<std::byte> want(got.size());
  fill_pattern(want, seed);
  return first_difference(got, want);
}

}  // namespace remora::perf
