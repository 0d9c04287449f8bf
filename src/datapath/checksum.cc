// datapath/checksum.cc — see checksum.h.
#include "datapath/checksum.h"

#include <fmt/format.h>

#include "core/crc32c.h"
#include "wire/handshake.h"

namespace remora::detail {

uint64_t checksum_capability(const Config& config) noexcept {
  return config.checksum == ChecksumMode::kCrc32c ? wire::kCapChecksumCrc32c : 0;
}

Status checksum_agreement(const Config& config, uint64_t peer_capabilities, std::string_view peer) {
  const bool ours = config.checksum == ChecksumMode::kCrc32c;
  const bool theirs = (peer_capabilities & wire::kCapChecksumCrc32c) != 0;
  if (ours == theirs) return Status::ok();
  return Status(StatusCode::kUnsupported,
                fmt::format("checksum settings differ: this side has REMORA_CHECKSUM={}, peer {} has {}; set the same "
                            "REMORA_CHECKSUM on both sides",
                            ours ? "crc32c" : "none", peer, theirs ? "crc32c" : "none (or a remora without checksums)"));
}

uint32_t checksum_of(std::span<const std::byte> bytes) noexcept { return core::crc32c(bytes); }

Status checksum_mismatch(std::string_view what, uint64_t offset, uint64_t length, uint32_t announced,
                         uint32_t computed, std::string_view peer) {
  return Status(StatusCode::kDataCorrupt,
                fmt::format("checksum mismatch (CRC-32C) in {} from peer {}: the chunk at offset {} ({} bytes) was sent "
                            "with 0x{:08x}, the bytes received give 0x{:08x}",
                            what, peer, offset, length, announced, computed));
}

}  // namespace remora::detail
