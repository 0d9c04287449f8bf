// coll/store_protocol.h — the rendezvous store's wire format (docs/protocol.md,
// "Rendezvous store"): requests and replies encoded and decoded byte by byte, with no
// I/O, so that the server, the client and the fuzzer (tests/fuzz/store_fuzz.cc) share
// one reading of the bytes a peer sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remora/status.h"

namespace remora::detail::store_protocol {

enum class Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kCheck = 5, kRemove = 6 };
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kInvalidArgument = 2, kUnauthenticated = 3 };

inline constexpr size_t kMaxKey = 1024;
inline constexpr size_t kMaxValue = size_t{64} << 20;
/// op u8 + key length u32 + value length u32 + timeout u64.
inline constexpr size_t kFixedRequestBytes = 1 + 4 + 4 + 8;
inline constexpr size_t kMaxRequest = kFixedRequestBytes + kMaxKey + kMaxValue;
/// status u8 + payload length u32.
inline constexpr size_t kReplyHeaderBytes = 1 + 4;
/// The longest reply payload a client accepts: a value, or a message about up to a
/// request's worth of keys.
inline constexpr size_t kMaxReplyPayload = kMaxValue + 64 * 1024;
/// A timeout field of all ones: wait without a deadline.
inline constexpr uint64_t kNoTimeout = ~uint64_t{0};

/// One request as it lies in the input: key and value are views into it.
struct Request {
  Op op = Op::kSet;
  std::string_view key;
  std::span<const std::byte> value;
  uint64_t timeout_ms = 0;
  size_t consumed = 0;  ///< bytes of the input this request took
};

/// Decodes the request at the front of `in` (which may hold more behind it).
/// kInProgress: not all of it has arrived yet. kProtocol, with the reason: an unknown op,
/// a key over kMaxKey, a key length of 0 outside wait (or another one in wait), a value
/// over kMaxValue; each refused as soon as its field has arrived, the rest unread.
/// What each op makes of its value (decode_wait_keys, an add's 8 bytes) is the server's.
Result<Request> decode_request(std::span<const std::byte> in);

/// Appends one request. The caller keeps key and value within the limits.
void encode_request(std::vector<std::byte>& out, Op op, std::string_view key, std::span<const std::byte> value,
                    uint64_t timeout_ms);

/// A wait's value: (key length u32, key)* with each key 1..kMaxKey bytes, at least one.
/// kProtocol when it is anything else.
Result<std::vector<std::string>> decode_wait_keys(std::span<const std::byte> value);
/// Appends the keys as a wait's value. The caller keeps each key 1..kMaxKey bytes.
void encode_wait_keys(std::vector<std::byte>& out, std::span<const std::string> keys);

struct ReplyHeader {
  Reply status = Reply::kOk;
  uint32_t payload_bytes = 0;
};

/// Decodes a reply's kReplyHeaderBytes header (a shorter input is kInProgress). kProtocol
/// on an unknown status or a payload over kMaxReplyPayload.
Result<ReplyHeader> decode_reply_header(std::span<const std::byte> in);
/// Appends a reply: its header and payload.
void encode_reply(std::vector<std::byte>& out, Reply status, std::span<const std::byte> payload);

}  // namespace remora::detail::store_protocol
