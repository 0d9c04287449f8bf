// wire/frame.h — control-stream frames: pure encode/decode, no I/O.
// The byte layout is specified in docs/protocol.md; static_asserts in frame.cc
// mirror it. Decoding never trusts its input: every malformed frame kind is a
// kProtocol error with a message naming the field.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "remora/status.h"
#include "remora/types.h"

namespace remora::wire {

enum class FrameType : uint8_t {
  kEager = 1,
  kRts = 2,
  kCts = 3,
  kChunk = 4,
  kCredit = 5,
  kGoodbye = 6,
  kPut = 7,
  kGet = 8,
  kAtomic = 9,
  kResp = 10,
  kAbort = 11,
  kHeartbeat = 12,  ///< liveness probe and its reply; only to a peer that advertised kCapHeartbeat
  // Same-host pulls (docs/protocol.md "Same-host pulls"); only between peers that both
  // advertised kCapSameHost.
  kHost = 13,    ///< who this side is on its host, and whether it can read the peer's memory
  kPull = 14,    ///< a chunk the receiver reads out of the sender's memory itself
  kPulled = 15,  ///< the receiver has read a PULL's bytes: the sender's memory is free again
  /// Shared-memory channel set-up (docs/protocol.md "Shared-memory channel"); only
  /// between peers that both advertised kCapSameHost and kCapShmChannel.
  kShm = 16,
  kReceived = 17,  ///< chunks read whole on a data stream so far (failover: the sender may let go of them)
  kRetire = 18,    ///< a data stream is given up; its chunks the sender lacks confirmation for are sent again
  kRejoined = 19,  ///< a retired data stream was connected again (kCapRejoin): the listener may send on it
  kHandled = 20,   ///< bytes of the peer's control stream handled so far (kCapResume): its replay buffer's end
  /// A same-host initiator asks for the memory behind a key, to put and get through a
  /// mapping of its own (kCapDirectMap; docs/protocol.md "Direct mappings").
  kMap = 21,
  /// A same-host initiator put bytes through its mapping and sends the put's
  /// notification (kCapDirectMap; docs/protocol.md "Direct mappings").
  kPlaced = 22,
  /// PLACED in short: the key by the number its GRANT gave it, and the sender's own
  /// count of PLACED frames handled, so an answer carries the ACK (kCapPlacedShort).
  kPlacedShort = 23,
};

inline constexpr size_t kFrameHeaderSize = 8;
inline constexpr size_t kEagerBodySize = 8;  // tag; the payload follows
inline constexpr size_t kRtsBodySize = 24;
inline constexpr size_t kCtsBodySize = 24;
inline constexpr size_t kChunkBodySize = 24;
inline constexpr size_t kCreditBodySize = 8;
inline constexpr size_t kGoodbyeBodySize = 8;
inline constexpr size_t kKeySize = 40;       // a serialized RemoteKey, opaque to wire/
inline constexpr size_t kPutBodySize = 72;   // op_id, key, offset, length, notify; INLINE payload follows
inline constexpr size_t kGetBodySize = 64;   // op_id, key, offset, length
inline constexpr size_t kAtomicBodySize = 80;  // op_id, key, offset, opcode, reserved, operand, compare
inline constexpr size_t kRespBodySize = 24;  // op_id, status, reserved, value; INLINE payload follows
inline constexpr size_t kAbortBodySize = 16;  // id, code, reserved
inline constexpr size_t kHeartbeatBodySize = 8;  // seq
inline constexpr size_t kHostBodySize = 48;      // pid, reserved, boot_id, netns, probe_address, probe_value
inline constexpr size_t kPullBodySize = 32;      // recv_id, offset, length, reserved, address
inline constexpr size_t kPulledBodySize = 16;    // recv_id, length, reserved
inline constexpr size_t kShmBodySize = 16;       // op, ring_fd, wake_fd, code
inline constexpr size_t kReceivedBodySize = 16;  // stream, reserved, chunks
inline constexpr size_t kRetireBodySize = 16;    // stream, reserved, chunks
inline constexpr size_t kRejoinedBodySize = 16;  // stream, reserved
inline constexpr size_t kHandledBodySize = 8;    // bytes
inline constexpr size_t kMapBodySize = 64;       // op, fd, code, reserved, region_bytes (or credits), key
inline constexpr size_t kPlacedBodySize = 64;    // key, offset, length, notify
inline constexpr size_t kPlacedShortBodySize = 32;  // grant, length, offset, notify, handled
/// Largest fixed-size frame (header + body), handy for stack buffers.
inline constexpr size_t kMaxFixedFrameSize = kFrameHeaderSize + kAtomicBodySize;
/// A PUT's data and a GET's reply travel inline only up to this many bytes, whatever
/// the eager limit: inline bytes are copied through both sides' control stream buffers
/// on one connection, where chunks go from memory to memory over the data streams, so
/// above this a window of gets, or a list of puts, moves fewer bytes per second inline.
inline constexpr size_t kMaxInlineRma = size_t{16} << 10;
/// Bytes of credit an EAGER message costs on top of its payload.
inline constexpr size_t kEagerCreditOverhead = 64;

enum class CtsStatus : uint32_t { kProceed = 0, kTruncated = 1 };

/// CHUNK flags byte: whose id `recv_id` is and what the bytes are for.
enum class ChunkKind : uint8_t {
  kMessage = 0,  ///< a rendezvous message; recv_id is the receiver's id from CTS
  kPut = 1,      ///< data of a PUT; recv_id is the initiator's op id from the PUT frame
  kGet = 2,      ///< data answering a GET; recv_id is the initiator's op id from the GET frame
};

/// CRC flag of EAGER, CHUNK, PUT (with INLINE) and RESP (with INLINE): a u32 CRC-32C of
/// the payload follows the fixed body (before any inline payload). Sent only on an
/// endpoint whose sides both advertised wire::kCapChecksumCrc32c, and then always.
inline constexpr uint8_t kCrcFlag = 0x80;
/// CHUNK: a chunk sent again after the data stream it was first announced on was retired
/// (failover); it must be exactly a chunk the receiver is owed.
inline constexpr uint8_t kChunkResend = 0x40;
inline constexpr size_t kCrcSize = 4;
/// PUT flags.
inline constexpr uint8_t kPutNotify = 0x01;  ///< the notify field carries a notification
inline constexpr uint8_t kPutInline = 0x02;  ///< the payload (exactly `length` bytes) follows the body
/// PUT and GET (kCapSegments): a segment list follows the body; never with INLINE or NOTIFY.
inline constexpr uint8_t kRmaSegments = 0x04;
/// One segment on the wire: u64 offset, u64 length.
inline constexpr size_t kSegmentSize = 16;
/// Most segments one PUT or GET names (its list: 16 KiB).
inline constexpr size_t kMaxSegments = 1024;
/// RESP flags.
inline constexpr uint8_t kRespInline = 0x01;  ///< the GET's data follows the body
/// HEARTBEAT flags.
inline constexpr uint8_t kHeartbeatReply = 0x01;  ///< the answer to a probe (echoes its seq)
/// HOST flags.
inline constexpr uint8_t kHandledResumed = 0x01;  ///< the first frame on a resumed control connection (not counted)
inline constexpr uint8_t kHostCanPull = 0x01;  ///< the sender read the peer's probe: PULLs to it are welcome

enum class AtomicOp : uint32_t { kFetchAdd = 1, kCompareSwap = 2 };

/// The target's verdict in a RESP frame.
enum class RmaStatus : uint32_t {
  kOk = 0,
  kInvalidKey = 1,    ///< malformed, forged, stale or unknown key
  kOutOfRange = 2,    ///< [offset, offset+length) not inside the key's window / region
  kAccessDenied = 3,  ///< key or region lacks the right
  kMisaligned = 4,    ///< atomic on a word that is not 8-byte aligned
  kNoResource = 5,    ///< the target's notification queue is full
  kRevoked = 6,       ///< the region was deregistered while the operation ran
  kDeviceFailed = 7,  ///< the target could not copy between the network and its device memory
  kChecksum = 8,      ///< a PUT's data failed its CRC-32C at the target; value = the bad chunk's offset
};

struct EagerFrame {
  Tag tag{};
  std::span<const std::byte> payload;  ///< decode: points into the input buffer
  bool has_crc = false;                ///< kCrcFlag: `crc` is the payload's CRC-32C
  uint32_t crc = 0;
};
struct RtsFrame {
  uint64_t send_id = 0;
  Tag tag{};
  uint64_t length = 0;
};
struct CtsFrame {
  uint64_t send_id = 0;
  uint64_t recv_id = 0;
  CtsStatus status = CtsStatus::kProceed;
};
struct ChunkFrame {
  uint64_t recv_id = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint16_t stream = 0;
  ChunkKind kind = ChunkKind::kMessage;
  bool has_crc = false;  ///< kCrcFlag: `crc` is the CRC-32C of the chunk's bytes
  uint32_t crc = 0;
  bool resend = false;   ///< kChunkResend
};
struct CreditFrame {
  uint64_t bytes = 0;
};
/// Why a GOODBYE's sender closes. The receiver rejects any other value.
enum class GoodbyeReason : uint32_t {
  kClosed = 0,   ///< Endpoint::close(): the application is done with the endpoint
  kAborted = 1,  ///< Endpoint::abort(): the application gave up after a failure
};
struct GoodbyeFrame {
  uint32_t reason = 0;  ///< a GoodbyeReason
};

using KeyBytes = std::array<std::byte, kKeySize>;

/// A piece of a key's window that a segmented PUT writes or GET reads: the operation's
/// bytes are its segments' in list order, back to back (docs/protocol.md "Segments").
struct Segment {
  uint64_t offset = 0;  ///< from the start of the key's window
  uint64_t length = 0;  ///< never 0
};

/// A segment list as it travels (kSegmentSize bytes per segment, little endian); a
/// view, valid as long as the bytes it was made of.
class SegmentList {
 public:
  SegmentList() noexcept = default;
  explicit SegmentList(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}
  size_t size() const noexcept { return bytes_.size() / kSegmentSize; }
  bool empty() const noexcept { return bytes_.empty(); }
  Segment operator[](size_t i) const noexcept;
  std::span<const std::byte> bytes() const noexcept { return bytes_; }

 private:
  std::span<const std::byte> bytes_;
};

/// `segments` in wire form, for a PutFrame's or GetFrame's `segments`.
std::vector<std::byte> encode_segments(std::span<const Segment> segments);

struct PutFrame {
  uint64_t op_id = 0;
  KeyBytes key{};
  uint64_t offset = 0;  ///< 0 with segments
  uint64_t length = 0;  ///< with segments: their lengths' sum
  bool has_notify = false;
  uint64_t notify = 0;                 ///< 0 unless has_notify
  bool inline_data = false;
  std::span<const std::byte> payload{};  ///< inline_data: exactly `length` bytes; decode: view into the input
  bool has_crc = false;                  ///< kCrcFlag (only with inline_data): the payload's CRC-32C
  uint32_t crc = 0;
  SegmentList segments{};  ///< kRmaSegments (never with inline_data): where the bytes go
};
struct GetFrame {
  uint64_t op_id = 0;
  KeyBytes key{};
  uint64_t offset = 0;     ///< 0 with segments
  uint64_t length = 0;     ///< with segments: their lengths' sum
  SegmentList segments{};  ///< kRmaSegments: where the bytes come from
};
struct AtomicFrame {
  uint64_t op_id = 0;
  KeyBytes key{};
  uint64_t offset = 0;
  AtomicOp op = AtomicOp::kFetchAdd;
  uint64_t operand = 0;  ///< fetch_add: the addend; compare_swap: the desired value
  uint64_t compare = 0;  ///< compare_swap: the expected value; fetch_add: 0
};
struct RespFrame {
  uint64_t op_id = 0;
  RmaStatus status = RmaStatus::kOk;
  uint64_t value = 0;                  ///< atomics: the previous value; else 0
  bool inline_data = false;
  std::span<const std::byte> payload{};  ///< inline GET data; decode: view into the input
  bool has_crc = false;                  ///< kCrcFlag (only with inline_data): the payload's CRC-32C
  uint32_t crc = 0;
};

/// The sender of a chunked transfer sends no more of it: its source failed (a device
/// copy). CHUNKs it announced before still deliver their bytes; the transfer then ends
/// with `code`. `id` is what its CHUNKs name (recv_id), `kind` what they carry.
struct AbortFrame {
  uint64_t id = 0;
  ChunkKind kind = ChunkKind::kMessage;
  StatusCode code = StatusCode::kDeviceFailed;  ///< why: never ok or in_progress
};

/// A liveness probe (reply false) or its answer (reply true, the probe's seq). Sent
/// on the control stream while operations are outstanding (transport/liveness.h).
struct HeartbeatFrame {
  uint64_t seq = 0;
  bool reply = false;
};

/// Who the sender is on its host (sent once by each side of an endpoint whose sides
/// both advertised kCapSameHost), and, with `can_pull`, that the sender read the
/// peer's probe word through process_vm_readv(2): the peer may then announce chunks
/// to it as PULLs. A peer on another host (boot id), in another network namespace or
/// pid namespace, or that the kernel does not let this side read, gets CHUNKs.
struct HostFrame {
  uint32_t pid = 0;                     ///< the sender's pid, in its pid namespace
  std::array<std::byte, 16> boot_id{};  ///< /proc/sys/kernel/random/boot_id, as 16 bytes
  uint64_t netns = 0;                   ///< the inode of the sender's network namespace
  uint64_t probe_address = 0;           ///< where in the sender's memory `probe_value` is
  uint64_t probe_value = 0;             ///< random, fixed for the sender's process
  bool can_pull = false;                ///< kHostCanPull
};
/// A chunk the receiver reads itself, out of the sender's memory at `address`
/// (process_vm_readv), instead of off a data stream. Announced in order with the
/// transfer's CHUNKs (offset == what was announced before); answered by a PULLED once
/// read, in the order the PULLs came.
struct PullFrame {
  uint64_t recv_id = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint64_t address = 0;  ///< the chunk's first byte in the sender's address space
  ChunkKind kind = ChunkKind::kMessage;
  bool has_crc = false;  ///< kCrcFlag: `crc` is the CRC-32C of the chunk's bytes
  uint32_t crc = 0;
};
/// The receiver read the bytes of the oldest PULL it has not answered yet.
struct PulledFrame {
  uint64_t recv_id = 0;
  uint32_t length = 0;
  ChunkKind kind = ChunkKind::kMessage;
};

/// What an SHM frame says.
enum class ShmOp : uint32_t {
  kOffer = 1,    ///< the ring the sender reads and its eventfd: descriptors in the sender's process
  kAccept = 2,   ///< the sender took the receiver's ring and eventfd
  kSwitch = 3,   ///< the sender writes its control stream into the receiver's ring from the next byte on
  kDecline = 4,  ///< the sender cannot use the receiver's offer (`code` says why): both directions stay on TCP
};
/// Shared-memory channel set-up. An OFFER names two descriptors of the sender's process
/// that the receiver takes with pidfd_getfd(2): a sealed memfd holding the ring the
/// sender reads (net/shm_ring.h) and the eventfd that wakes it. Other ops carry no
/// descriptors (0); only a DECLINE carries a code (a StatusCode, an error).
struct ShmFrame {
  ShmOp op = ShmOp::kOffer;
  uint32_t ring_fd = 0;
  uint32_t wake_fd = 0;
  StatusCode code = StatusCode::kOk;
};

/// RECEIVED: the sender of this frame has read `chunks` chunks whole off data stream
/// `stream` since the endpoint began (a running count, never smaller than the last).
struct ReceivedFrame {
  uint16_t stream = 0;
  uint64_t chunks = 0;
};
/// RETIRE: the sender of this frame reads and writes data stream `stream` no more; it
/// had read `chunks` chunks whole off it, all it ever will.
struct RetireFrame {
  uint16_t stream = 0;
  uint64_t chunks = 0;
};
/// REJOINED (connecting side only): retired data stream `stream` is connected again and
/// this side reads and writes it from here on, counting its chunks from 0.
struct RejoinedFrame {
  uint16_t stream = 0;
};
/// HANDLED (kCapResume): the sender of this frame has handled the first `bytes` bytes of
/// the peer's control stream since the endpoint began, whole frames only. The peer may
/// forget what it sent up to there. With `resumed` (kHandledResumed) it is the first frame
/// on a control connection made again: not counted as control-stream bytes itself, it
/// says where the peer's replay starts.
struct HandledFrame {
  uint64_t bytes = 0;
  bool resumed = false;
};

enum class MapOp : uint32_t {
  kRequest = 1,  ///< the sender asks for the memory behind `key`
  kGrant = 2,    ///< `fd` in the sender's process holds the region `key` names: `region_bytes`, then a state page
  kRefuse = 3,   ///< the sender does not share that memory; `code` says why
  kCredit = 4,   ///< the sender reserved `count` more places in its notification queue for PLACED frames
  kAck = 5,      ///< the sender has handled `count` PLACED frames since the endpoint began (a running count)
};
/// MAP (kCapDirectMap, docs/protocol.md "Direct mappings"). A REQUEST names a key the
/// sender holds; the answer echoes it. A GRANT's descriptor is a memfd sealed against
/// shrinking and growing, of `region_bytes` plus 4096 bytes, that the receiver takes
/// with pidfd_getfd(2). A REQUEST carries no fd, code or size; a GRANT no code; a
/// REFUSE no fd or size, and an error code. A CREDIT (1 to kMaxPlacedCredits) and an
/// ACK (not 0) carry only `count`, in the size's place: no fd, code or key.
struct MapFrame {
  MapOp op = MapOp::kRequest;
  uint32_t fd = 0;
  StatusCode code = StatusCode::kOk;
  /// GRANT (kCapPlacedShort): the number PLACED_SHORT frames name the key by, 1 to
  /// kMaxGrantNumber; 0 in every other MAP.
  uint32_t grant = 0;
  uint64_t region_bytes = 0;
  uint64_t count = 0;  ///< CREDIT: places; ACK: PLACED frames handled
  KeyBytes key{};
};
/// Most notification places one side may hold for PLACED frames at a time.
inline constexpr uint64_t kMaxPlacedCredits = 1 << 16;
/// PLACED (kCapDirectMap): the sender wrote `length` bytes at `offset` of `key`'s
/// window through its mapping (a key the receiver granted it), and spends one of the
/// receiver's CREDITs on `notify`, which the receiver queues as that put's notification.
/// The receiver's MAP ACKs count the PLACED frames it handled: the put completes there.
struct PlacedFrame {
  KeyBytes key{};
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t notify = 0;
};
/// Highest number a GRANT gives a key (the granter keeps at most this many).
inline constexpr uint32_t kMaxGrantNumber = 4096;
/// PLACED_SHORT (kCapPlacedShort): a PLACED whose key is the one the receiver's GRANT
/// numbered `grant`, and that also tells the receiver the sender has handled `handled`
/// of its PLACED and PLACED_SHORT frames since the endpoint began (a MAP ACK's count,
/// carried along; the same count as before is no news). 40 bytes with its header: the
/// size a shared-memory ring hands over beside its head.
struct PlacedShortFrame {
  uint32_t grant = 0;
  uint32_t length = 0;
  uint64_t offset = 0;
  uint64_t notify = 0;
  uint64_t handled = 0;
};

/// Alternatives in FrameType order (index + 1 == type).
using Frame =
    std::variant<EagerFrame, RtsFrame, CtsFrame, ChunkFrame, CreditFrame, GoodbyeFrame, PutFrame, GetFrame, AtomicFrame,
                 RespFrame, AbortFrame, HeartbeatFrame, HostFrame, PullFrame, PulledFrame, ShmFrame, ReceivedFrame,
                 RetireFrame, RejoinedFrame, HandledFrame, MapFrame, PlacedFrame, PlacedShortFrame>;

struct DecodeLimits {
  uint32_t max_eager_payload = 0;  ///< this side's eager_limit: bounds EAGER, inline PUT and inline RESP payloads
};

struct Decoded {
  Frame frame;
  size_t consumed = 0;  ///< bytes of the input this frame occupied
};

/// Decodes the first frame in `in`.
/// - ok: the frame (an EAGER payload is a view into `in`) and its size;
/// - kInProgress: `in` holds a valid prefix but not the whole frame yet (read more);
/// - kProtocol: malformed (unknown type, undefined flag bits, CHUNK kind 3, nonzero
///   reserved, wrong body length, EAGER/PUT/RESP inline payload over the limit, unknown
///   CTS/RESP status or ATOMIC opcode, empty CHUNK, PUT length != its inline bytes, PUT
///   notify without NOTIFY, fetch_add with a compare, RESP INLINE with a failure status,
///   SEGMENTS with INLINE or NOTIFY, with an offset, with no or more than kMaxSegments segments, an
///   empty one, one ending past 2^64, or lengths that do not sum to the frame's length),
///   with a message naming why.
/// The header is validated byte by byte as it arrives, so an absurd length (or a type or
/// flags byte that can never be valid) is rejected before anyone waits for the body.
Result<Decoded> decode_frame(std::span<const std::byte> in, const DecodeLimits& limits);

/// Bytes `encode` writes for this frame (header + body + payload).
size_t encoded_size(const Frame& frame) noexcept;

/// Writes `frame` into `out` (which must hold encoded_size(frame) bytes) and returns
/// the bytes written.
size_t encode(const Frame& frame, std::span<std::byte> out) noexcept;

/// A frame's inline payload (EAGER; PUT and RESP with INLINE), which `encode` writes as
/// the frame's last bytes; empty for every other frame.
std::span<const std::byte> inline_payload(const Frame& frame) noexcept;

/// As `encode`, but leaves the frame's last inline_payload(frame).size() bytes as they
/// are: for a caller that has put the payload there already (copied once, not zeroed
/// first). A message's EAGER frame, on the latency path, has encode_eager_prefix below,
/// which skips the variant's dispatch (about 10% of an 8 B one-way time on one host).
size_t encode_header(const Frame& frame, std::span<std::byte> out) noexcept;

/// Writes only the header and tag of an EAGER frame carrying `payload_len` bytes
/// (kFrameHeaderSize + kEagerBodySize bytes, plus kCrcSize with `crc`), so the payload
/// can be appended without an intermediate copy.
size_t encode_eager_prefix(Tag tag, uint32_t payload_len, std::span<std::byte> out,
                           const uint32_t* crc = nullptr) noexcept;

/// Writes a whole PLACED_SHORT frame (kFrameHeaderSize + kPlacedShortBodySize bytes),
/// as encode would, without the variant's dispatch: a notified put through a mapping,
/// on the latency path like a message's EAGER.
size_t encode_placed_short(const PlacedShortFrame& f, std::span<std::byte> out) noexcept;

std::string_view to_string(FrameType type) noexcept;

}  // namespace remora::wire
