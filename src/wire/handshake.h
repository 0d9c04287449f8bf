// wire/handshake.h — HELLO / HELLO_ACK, the first bytes on every connection.
// Layout in docs/protocol.md; pure functions, no I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "remora/status.h"

namespace remora::wire {

inline constexpr uint32_t kMagic = 0x41524D52;  // bytes "RMRA"
inline constexpr size_t kHelloSize = 48;
inline constexpr size_t kHelloAckSize = 48;
inline constexpr uint16_t kMaxStreams = 64;

/// HELLO / HELLO_ACK capability bits (docs/protocol.md). A peer ignores bits it does
/// not know, so each feature is used only when both sides advertised it.
inline constexpr uint64_t kCapHeartbeat = uint64_t{1} << 0;  ///< understands HEARTBEAT frames (type 12)
/// This side holds the job secret and authenticates (wire/auth.h). A keyed listener refuses
/// a HELLO without it (status kUnauthenticated); a keyed client refuses a listener that
/// accepts it without authenticating.
inline constexpr uint64_t kCapAuth = uint64_t{1} << 1;
/// Checksums every payload with CRC-32C (REMORA_CHECKSUM=crc32c). Unlike other bits it
/// must match: a control HELLO whose bit differs from the server's is refused.
inline constexpr uint64_t kCapChecksumCrc32c = uint64_t{1} << 2;
/// Understands HOST, PULL and PULLED frames (types 13-15) and may read a peer on its own
/// host out of the peer's memory (REMORA_SAME_HOST, docs/protocol.md "Same-host pulls").
inline constexpr uint64_t kCapSameHost = uint64_t{1} << 3;
/// This side has rails (REMORA_RAILS). When a control HELLO and its accepted HELLO_ACK
/// both set it, the listener's RAILS message (below) follows the HELLO_ACK.
inline constexpr uint64_t kCapRails = uint64_t{1} << 4;
/// Seals every byte after the handshake (REMORA_ENCRYPT, docs/encryption.md) with
/// AES-256-GCM / ChaCha20-Poly1305 / AEGIS-256 (bit 8). A HELLO sets each cipher it may use; an accepted
/// HELLO_ACK sets exactly the one chosen. Like checksums they must agree: a listener
/// refuses a HELLO whose bits it cannot match (and one with bits when it does not
/// encrypt), and a client refuses an ACK without the bit it needs. Only with kCapAuth:
/// the keys come from the AUTH exchange.
inline constexpr uint64_t kCapSealAes256Gcm = uint64_t{1} << 5;
inline constexpr uint64_t kCapSealChacha20Poly1305 = uint64_t{1} << 6;
/// Bits 8 and 9: AEGIS-256 and AEGIS-128L (libsodium 1.0.19 on), the rules of bits 5 and 6.
inline constexpr uint64_t kCapSealAegis256 = uint64_t{1} << 8;
inline constexpr uint64_t kCapSealAegis128l = uint64_t{1} << 9;
inline constexpr uint64_t kCapSealMask =
    kCapSealAes256Gcm | kCapSealChacha20Poly1305 | kCapSealAegis256 | kCapSealAegis128l;
/// Understands SHM frames (type 16) and may move its control stream into a ring in shared
/// memory with a peer on its own host (REMORA_SAME_HOST, docs/protocol.md "Shared-memory
/// channel"). Used only when both sides also advertised kCapSameHost.
inline constexpr uint64_t kCapShmChannel = uint64_t{1} << 7;
/// Understands RECEIVED and RETIRE frames (types 17, 18) and CHUNK's RESEND flag: a data
/// stream that breaks is retired and its unconfirmed chunks are sent again on the others
/// (REMORA_FAILOVER, docs/protocol.md "Failover"). Used when both sides set it and the
/// endpoint has two data streams or more.
inline constexpr uint64_t kCapFailover = uint64_t{1} << 10;
/// With kCapFailover: the connecting side may connect a retired data stream again (a data
/// HELLO for an active endpoint, its id, token and the stream's index) and then says so in
/// a REJOINED frame (type 19); the listener sends on it only after that frame (docs/
/// protocol.md "Failover").
inline constexpr uint64_t kCapRejoin = uint64_t{1} << 11;

/// With kCapFailover and kCapRejoin: the control stream of an endpoint may be connected
/// again after it broke (a resume HELLO, role kResume, with the endpoint's id and token),
/// and each side then replays what the other had not handled (HANDLED frames, type 20;
/// docs/protocol.md "Resuming the control stream").
inline constexpr uint64_t kCapResume = uint64_t{1} << 12;

/// Understands PUT and GET with SEGMENTS (flag 0x04): one request that writes or reads a
/// list of pieces of one key's window, its bytes back to back in its chunks (docs/
/// protocol.md "Segments"). Used when both sides set it.
inline constexpr uint64_t kCapSegments = uint64_t{1} << 13;

/// With kCapShmChannel: understands MAP frames (type 21) and may hand a same-host peer
/// the memory behind its keys, or ask for the peer's, to put and get through a mapping
/// (docs/protocol.md "Direct mappings"). Used when both sides set it and the control
/// stream moved into shared memory.
inline constexpr uint64_t kCapDirectMap = uint64_t{1} << 14;

/// With kCapDirectMap: numbers the keys it GRANTs and understands PLACED_SHORT frames
/// (type 23), which name a key by that number and carry the sender's ACK count (docs/
/// protocol.md "Direct mappings"). Used when both sides set it.
inline constexpr uint64_t kCapPlacedShort = uint64_t{1} << 15;

/// kProbe: a liveness question (Communicator::failed_ranks). The listener answers it with
/// a HELLO_ACK of status 0 and endpoint id 0, before any authentication, and closes; no
/// endpoint is made. Its other fields are a control HELLO's.
/// kResume: the control stream of the active endpoint it names (id and token, as a data
/// HELLO; stream_index 0) connected again (kCapResume).
enum class Role : uint8_t { kControl = 1, kData = 2, kProbe = 3, kResume = 4 };

enum class HelloStatus : uint16_t {
  kAccepted = 0,
  kVersionMismatch = 1,
  kBadRequest = 2,
  kRefused = 3,
  kAuthenticate = 4,     ///< the listener holds a key: an AUTH challenge follows (docs/protocol.md)
  kUnauthenticated = 5,  ///< the listener holds a key and the HELLO did not offer to authenticate
};

struct Hello {
  uint16_t version = 0;
  Role role = Role::kControl;
  uint64_t capabilities = 0;
  uint64_t endpoint_id = 0;
  uint64_t attach_token = 0;
  uint16_t stream_index = 0;
  uint16_t stream_count = 0;
  uint32_t eager_limit = 0;
  uint32_t eager_credit = 0;
  uint32_t rma_window = 0;  ///< RMA requests this side serves concurrently per endpoint (1..65536)
};

struct HelloAck {
  uint16_t version = 0;
  HelloStatus status = HelloStatus::kAccepted;
  uint64_t capabilities = 0;
  uint64_t endpoint_id = 0;
  uint64_t attach_token = 0;
  uint16_t stream_index = 0;
  uint16_t stream_count = 0;
  uint32_t eager_limit = 0;
  uint32_t eager_credit = 0;
  uint32_t rma_window = 0;  ///< RMA requests this side serves concurrently per endpoint (1..65536)
};

/// RAILS (docs/protocol.md, "Rails"): the addresses a listener's endpoints can be
/// reached at, one per rail; an 8-byte header and kRailEntrySize bytes per address.
inline constexpr size_t kRailsHeaderSize = 8;
inline constexpr size_t kRailEntrySize = 24;
inline constexpr size_t kMaxRailAddresses = 16;

/// One advertised address: an IPv4 (the first 4 bytes of `address`, the rest 0) or IPv6
/// address in network byte order, its subnet's prefix length and the listener's port.
struct RailAddress {
  uint8_t family = 4;  ///< 4 or 6
  uint8_t prefix_length = 0;
  uint16_t port = 0;
  std::array<std::byte, 16> address{};
};

/// The header and every entry of `rails` (at most kMaxRailAddresses; more are not sent).
std::vector<std::byte> encode_rails(std::span<const RailAddress> rails);
/// Decodes exactly kRailsHeaderSize bytes: how many entries follow. kProtocol on bad
/// magic, a nonzero reserved field or a count above kMaxRailAddresses.
Result<uint16_t> decode_rails_header(std::span<const std::byte> in);
/// Decodes exactly kRailEntrySize bytes. kProtocol on a family other than 4 or 6, a
/// prefix length beyond the family's bits, port 0, nonzero reserved bytes (and, for
/// IPv4, nonzero bytes after the address's fourth).
Result<RailAddress> decode_rail_entry(std::span<const std::byte> in);

std::array<std::byte, kHelloSize> encode_hello(const Hello& hello) noexcept;
std::array<std::byte, kHelloAckSize> encode_hello_ack(const HelloAck& ack) noexcept;

/// Checks the first bytes of a HELLO or HELLO_ACK as they arrive (any number, even
/// fewer than the magic's 4): kProtocol ("not a remora peer") as soon as one differs
/// from the magic's, so that a foreign peer is refused without waiting for the rest.
Status check_magic_prefix(std::string_view what, std::span<const std::byte> first);

/// Decodes exactly kHelloSize bytes. kProtocol on bad magic ("not a remora peer").
/// A different version is NOT an error here: only magic and version are decoded and
/// returned (the rest of the layout may differ), so the caller can answer
/// kVersionMismatch. For the current version: kProtocol on unknown role, a nonzero
/// reserved byte 7, rma_window outside 1..65536, stream_count outside 1..kMaxStreams,
/// stream_index >= stream_count, a control HELLO with a nonzero endpoint id/token/index,
/// a resume HELLO with a nonzero index,
/// or a data HELLO with a zero endpoint id.
Result<Hello> decode_hello(std::span<const std::byte> in);

/// Decodes exactly kHelloAckSize bytes. kProtocol on bad magic, unknown status (above 5), or an
/// accepted ACK with rma_window outside 1..65536 (a non-accepted ACK may carry any
/// window, 0 included); as with decode_hello, another version returns only version+status.
Result<HelloAck> decode_hello_ack(std::span<const std::byte> in);

}  // namespace remora::wire
