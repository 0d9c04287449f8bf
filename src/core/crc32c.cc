// core/crc32c.cc — see crc32c.h.
#include "core/crc32c.h"

#include <algorithm>

#if defined(REMORA_HAVE_ISAL)
#include <isa-l/crc.h>
#endif

namespace remora::core {

bool crc32c_available() noexcept {
#if defined(REMORA_HAVE_ISAL)
  return true;
#else
  return false;
#endif
}

uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> bytes) noexcept {
#if defined(REMORA_HAVE_ISAL)
  // ISA-L works on the register as is (no inversion in or out) and takes an int length:
  // invert around it, and feed at most 1 GiB per call.
  constexpr size_t kMaxPiece = size_t{1} << 30;
  uint32_t reg = ~crc;
  // crc32_iscsi takes a non-const pointer but only reads it.
  auto* p = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(bytes.data()));
  size_t left = bytes.size();
  while (left > 0) {
    const size_t n = std::min(left, kMaxPiece);
    reg = crc32_iscsi(p, static_cast<int>(n), reg);
    p += n;
    left -= n;
  }
  return ~reg;
#else
  (void)bytes;
  return crc;
#endif
}

uint32_t crc32c(std::span<const std::byte> bytes) noexcept { return crc32c_extend(0, bytes); }

}  // namespace remora::core
