// raw_rma.h — a one-sided-operation initiator that speaks the wire by hand, for the
// hostile-peer tests: a control connection and K data connections opened with
// raw_wire's hand-built HELLOs, well-formed PUT/GET/ATOMIC/CHUNK/RESP
// frames from src/wire's encoder, key bytes to tamper with, and a reader that gathers
// RESPs and the data of large GETs. Malformed frames are built by the tests themselves
// (raw_wire.h's Bytes/frame) so the encoder cannot make them well-formed by accident.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/raw_wire.h"
#include "wire/frame.h"

namespace remora::itest::raw {

/// The window this raw initiator announces (it never serves RMA, so any legal value).
inline constexpr uint32_t kRawRmaWindow = 256;
/// Chunk size the raw initiator cuts large PUTs into (uneven on purpose: not a power of two).
inline constexpr size_t kRawChunkBytes = 48 * 1024 + 17;

// ---------------------------------------------------------------------------
// Remote key bytes (docs/protocol.md, "Remote keys")
// ---------------------------------------------------------------------------

using KeyBytes = wire::KeyBytes;

/// Field offsets inside a serialized RemoteKey.
namespace key_field {
inline constexpr size_t kVersion = 0;     // u8
inline constexpr size_t kKind = 1;        // u8
inline constexpr size_t kAccess = 2;      // u16
inline constexpr size_t kRegion = 4;      // u32
inline constexpr size_t kGeneration = 8;  // u32
inline constexpr size_t kReserved = 12;   // u32
inline constexpr size_t kSecret = 16;     // u64
inline constexpr size_t kOffset = 24;     // u64
inline constexpr size_t kLength = 32;     // u64
}  // namespace key_field

/// Writes `size` little-endian bytes of `value` at `at` in a key.
void set_key_field(KeyBytes& key, size_t at, size_t size, uint64_t value);
uint64_t key_field_value(const KeyBytes& key, size_t at, size_t size);

/// Hex (two lowercase digits per byte) <-> key bytes. nullopt for a malformed string.
std::optional<KeyBytes> key_from_hex(std::string_view hex);
std::string key_to_hex(const KeyBytes& key);

// ---------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------

std::string_view to_string(wire::RmaStatus status);

/// Encodes any well-formed frame with src/wire's encoder.
std::vector<uint8_t> encode_frame(const wire::Frame& frame);

std::vector<uint8_t> put_frame(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length,
                               std::optional<uint64_t> notify, bool inline_data,
                               std::span<const std::byte> payload = {});
std::vector<uint8_t> get_frame(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length);
std::vector<uint8_t> atomic_frame(uint64_t op_id, const KeyBytes& key, uint64_t offset, wire::AtomicOp op,
                                  uint64_t operand, uint64_t compare);
std::vector<uint8_t> chunk_frame(uint64_t recv_id, uint64_t offset, uint32_t length, uint16_t stream,
                                 wire::ChunkKind kind);
std::vector<uint8_t> resp_frame(uint64_t op_id, wire::RmaStatus status, uint64_t value);

// ---------------------------------------------------------------------------
// The raw initiator
// ---------------------------------------------------------------------------

/// What the target answered to one operation.
struct Reply {
  uint64_t op_id = 0;
  wire::RmaStatus status = wire::RmaStatus::kOk;
  uint64_t value = 0;
  bool inline_data = false;     ///< the RESP carried the GET's data
  std::vector<std::byte> data;  ///< a GET's data (inline, or gathered from CHUNK kind=get)
  uint64_t chunk_bytes = 0;     ///< bytes that arrived through CHUNK(kind=get) frames
};

/// How a bounded, non-blocking send ended.
enum class Flow {
  kSent,     ///< every byte went out
  kStalled,  ///< the peer stopped reading: no room for `stall` (back-pressure)
  kClosed,   ///< the peer closed or reset the connection
};

/// Sends `data` on `fd` without blocking longer than `stall` at a time. `sent` counts
/// the bytes that went out.
Flow send_bounded(int fd, std::span<const uint8_t> data, std::chrono::milliseconds stall, size_t* sent);

/// One control connection plus K data connections to a remora listener, set up by hand.
/// Not thread-safe. Every I/O is bounded by Options::io_timeout.
class RmaClient {
 public:
  struct Options {
    uint16_t streams = 2;
    uint32_t eager_limit = 16 * 1024;    ///< what this side announces (and accepts inline)
    uint32_t eager_credit = 1024 * 1024;
    uint32_t rma_window = kRawRmaWindow;
    uint64_t capabilities = 0;  ///< HELLO capability bits (wire/handshake.h); 0: an older peer
    std::chrono::milliseconds io_timeout{20'000};
  };

  /// Connects to 127.0.0.1:port and completes the handshake. Empty string on success,
  /// else why not.
  std::string connect(uint16_t port, const Options& options);
  std::string connect(uint16_t port) { return connect(port, Options{}); }

  /// min(our eager_limit, the target's, wire::kMaxInlineRma): the inline/large boundary
  /// of puts and gets both sides use.
  uint32_t inline_bound() const { return inline_bound_; }
  /// The target's rma_window from its HELLO_ACK.
  uint32_t target_window() const { return target_window_; }
  uint16_t streams() const { return static_cast<uint16_t>(data_.size()); }
  Socket& control() { return control_; }
  Socket& data(size_t stream) { return data_.at(stream); }

  /// Op ids count up from 1, as a real initiator's do.
  uint64_t next_op_id() { return ++last_op_id_; }

  std::string send_control(const std::vector<uint8_t>& bytes);
  std::string send_data(uint16_t stream, std::span<const std::byte> bytes);

  /// A well-formed PUT: INLINE when data.size() <= inline_bound(), else the PUT frame
  /// followed by CHUNK(kind=put) frames and the bytes on the data streams (round robin).
  std::string send_put(uint64_t op_id, const KeyBytes& key, uint64_t offset, std::span<const std::byte> data,
                       std::optional<uint64_t> notify = std::nullopt);
  /// Only the PUT frame of a large put (no data yet).
  std::string send_put_announce(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length,
                                std::optional<uint64_t> notify = std::nullopt);
  /// The CHUNK frames and bytes of a large put already announced; `data` is the whole
  /// put's payload (chunk offsets start at 0).
  std::string send_put_data(uint64_t op_id, std::span<const std::byte> data);
  /// A GET; the reply's data is gathered by read_reply.
  std::string send_get(uint64_t op_id, const KeyBytes& key, uint64_t offset, uint64_t length);
  std::string send_atomic(uint64_t op_id, const KeyBytes& key, uint64_t offset, wire::AtomicOp op, uint64_t operand,
                          uint64_t compare = 0);
  /// Tells read_reply that op `op_id` is a GET of `length` bytes sent by other means
  /// (raw bytes); with keep_data false its bytes are read and dropped.
  void expect_get(uint64_t op_id, uint64_t length, bool keep_data);

  /// Reads control frames until a RESP arrives and returns it. CHUNK(kind=get) frames on
  /// the way are checked against the GETs sent and their bytes read from the named data
  /// stream. Anything else the target sends is an error (described in `error`).
  std::optional<Reply> read_reply(std::string* error);

  /// Send + read_reply for one operation (the reply must name `op_id`).
  std::optional<Reply> put(const KeyBytes& key, uint64_t offset, std::span<const std::byte> data,
                           std::optional<uint64_t> notify, std::string* error);
  std::optional<Reply> get(const KeyBytes& key, uint64_t offset, uint64_t length, std::string* error);
  std::optional<Reply> atomic(const KeyBytes& key, uint64_t offset, wire::AtomicOp op, uint64_t operand,
                              uint64_t compare, std::string* error);

  /// True when the target closed the control connection and every data connection
  /// within `timeout` (what a failed endpoint looks like from outside).
  bool wait_all_closed(std::chrono::milliseconds timeout);

  /// Closes every connection (a peer vanishing without GOODBYE).
  void close();

 private:
  struct PendingGet {
    uint64_t length = 0;
    bool keep = true;
    std::vector<std::byte> data;
    uint64_t received = 0;
  };
  std::optional<Reply> finish(uint64_t op_id, std::optional<Reply> reply, std::string* error);

  Options options_;
  Socket control_;
  std::vector<Socket> data_;
  uint32_t inline_bound_ = 0;
  uint32_t target_window_ = 0;
  uint64_t last_op_id_ = 0;
  uint16_t next_stream_ = 0;
  std::map<uint64_t, PendingGet> gets_;
};

}  // namespace remora::itest::raw
