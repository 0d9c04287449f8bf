// core/little_endian.h — the project's one little-endian codec: explicit loads and
// stores for everything that puts integers on the wire or in a file (frames and the
// handshake, remote keys, the rendezvous store's protocol).
// Byte-by-byte shifts, so the result never depends on the host's byte order or on
// alignment; compilers fold these into single moves on little-endian hosts.
// Callers check bounds; these functions index the pointer they are given (the append_
// forms grow a vector instead).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace remora::core {

template <typename T>
constexpr T load_le(const std::byte* p) noexcept {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value = static_cast<T>(value | (static_cast<T>(std::to_integer<uint8_t>(p[i])) << (8 * i)));
  }
  return value;
}

template <typename T>
constexpr void store_le(std::byte* p, T value) noexcept {
  for (size_t i = 0; i < sizeof(T); ++i) {
    p[i] = static_cast<std::byte>(static_cast<uint8_t>(value >> (8 * i)));
  }
}

inline uint8_t load_u8(const std::byte* p) noexcept { return std::to_integer<uint8_t>(*p); }
inline uint16_t load_u16(const std::byte* p) noexcept { return load_le<uint16_t>(p); }
inline uint32_t load_u32(const std::byte* p) noexcept { return load_le<uint32_t>(p); }
inline uint64_t load_u64(const std::byte* p) noexcept { return load_le<uint64_t>(p); }

inline void store_u8(std::byte* p, uint8_t v) noexcept { *p = static_cast<std::byte>(v); }
inline void store_u16(std::byte* p, uint16_t v) noexcept { store_le(p, v); }
inline void store_u32(std::byte* p, uint32_t v) noexcept { store_le(p, v); }
inline void store_u64(std::byte* p, uint64_t v) noexcept { store_le(p, v); }

/// Appends `value`'s sizeof(T) little-endian bytes to `out`.
template <typename T>
void append_le(std::vector<std::byte>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  store_le(out.data() + at, value);
}

}  // namespace remora::core
