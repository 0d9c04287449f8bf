// datapath/checksum.h — end-to-end integrity (REMORA_CHECKSUM=crc32c, issue 21): what
// the handshake advertises, the rule that both sides of an endpoint agree, and the
// error a mismatch reports. Where each CRC travels and who checks it is in
// docs/protocol.md ("Checksums"); the chunk scheduler checks chunks, the endpoint and
// the RMA parts check inline payloads.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "remora/config.h"
#include "remora/status.h"

namespace remora::detail {

/// The capability bits a side with this configuration sets for checksums
/// (wire::kCapChecksumCrc32c or 0).
uint64_t checksum_capability(const Config& config) noexcept;

/// ok when this side and a peer that advertised `peer_capabilities` checksum alike;
/// otherwise kUnsupported, naming both settings and the fix. Checked by both sides of
/// the control handshake: the server refuses such a HELLO, the client fails connect.
Status checksum_agreement(const Config& config, uint64_t peer_capabilities, std::string_view peer);

/// The CRC-32C of `bytes` (core::crc32c).
uint32_t checksum_of(std::span<const std::byte> bytes) noexcept;

/// The kDataCorrupt status of a mismatch: `what` names the operation ("receive (tag
/// 7)", "put 12", ...), `offset` and `length` the chunk (or inline payload) within it.
Status checksum_mismatch(std::string_view what, uint64_t offset, uint64_t length, uint32_t announced,
                         uint32_t computed, std::string_view peer);

}  // namespace remora::detail
