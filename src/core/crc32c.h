// core/crc32c.h — CRC-32C (Castagnoli, the iSCSI/SCTP/ext4 polynomial 0x1EDC6F41), the
// checksum of REMORA_CHECKSUM=crc32c (docs/protocol.md, "Checksums"). Computed by ISA-L
// (libisal-dev), which picks SSE4.2, PCLMUL or AVX-512 code at run time; a build
// without ISA-L has no CRC-32C and says so through crc32c_available().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace remora::core {

/// True when this build computes CRC-32C (it found ISA-L).
bool crc32c_available() noexcept;

/// The standard CRC-32C of `bytes` (initial value and final XOR 0xFFFFFFFF, reflected):
/// crc32c("123456789") == 0xE3069283. Only meaningful when crc32c_available(); returns
/// 0 otherwise. Thread-safe, no allocation.
uint32_t crc32c(std::span<const std::byte> bytes) noexcept;

/// Continues a CRC-32C: crc32c_extend(crc32c(a), b) == crc32c(a ++ b).
uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> bytes) noexcept;

}  // namespace remora::core
