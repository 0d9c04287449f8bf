// coll/store_protocol.cc — the rendezvous store's requests and replies, byte by byte.
#include "coll/store_protocol.h"

#include <fmt/format.h>

#include "core/little_endian.h"

namespace remora::detail::store_protocol {
namespace {

Status malformed(std::string why) { return Status(StatusCode::kProtocol, std::move(why)); }
Status incomplete() { return Status(StatusCode::kInProgress, "store frame incomplete"); }

void put_bytes(std::vector<std::byte>& out, std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); }
void put_bytes(std::vector<std::byte>& out, std::string_view s) { put_bytes(out, std::as_bytes(std::span(s))); }
std::string_view as_view(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace

Result<Request> decode_request(std::span<const std::byte> in) {
  // Each length is judged as soon as it has arrived, so that a hostile length is refused
  // before the server buffers what it announces.
  if (in.size() < 5) return incomplete();
  const std::byte* p = in.data();
  const uint8_t op_byte = core::load_u8(p);
  if (op_byte < static_cast<uint8_t>(Op::kSet) || op_byte > static_cast<uint8_t>(Op::kRemove)) {
    return malformed(fmt::format("unknown op {}", op_byte));
  }
  const auto op = static_cast<Op>(op_byte);
  const uint32_t key_len = core::load_u32(p + 1);
  if (key_len > kMaxKey) return malformed(fmt::format("key of {} bytes (limit {})", key_len, kMaxKey));
  if ((key_len == 0) != (op == Op::kWait)) return malformed("key length 0 is for wait only, and wait only");
  if (in.size() < 5 + size_t{key_len} + 4) return incomplete();
  const uint32_t value_len = core::load_u32(p + 5 + key_len);
  if (value_len > kMaxValue) return malformed(fmt::format("value of {} bytes (limit {})", value_len, kMaxValue));
  const size_t total = kFixedRequestBytes + key_len + value_len;
  if (in.size() < total) return incomplete();
  Request r;
  r.op = op;
  r.key = as_view(in.subspan(5, key_len));
  r.value = in.subspan(9 + size_t{key_len}, value_len);
  r.timeout_ms = core::load_u64(p + 9 + key_len + value_len);
  r.consumed = total;
  return r;
}

void encode_request(std::vector<std::byte>& out, Op op, std::string_view key, std::span<const std::byte> value,
                    uint64_t timeout_ms) {
  out.reserve(out.size() + kFixedRequestBytes + key.size() + value.size());
  out.push_back(static_cast<std::byte>(op));
  core::append_le<uint32_t>(out, static_cast<uint32_t>(key.size()));
  put_bytes(out, key);
  core::append_le<uint32_t>(out, static_cast<uint32_t>(value.size()));
  put_bytes(out, value);
  core::append_le<uint64_t>(out, timeout_ms);
}

Result<std::vector<std::string>> decode_wait_keys(std::span<const std::byte> value) {
  std::vector<std::string> keys;
  size_t at = 0;
  while (at < value.size()) {
    if (value.size() - at < 4) return malformed("malformed key list in wait");
    const uint32_t n = core::load_u32(value.data() + at);
    at += 4;
    if (n == 0 || n > kMaxKey || value.size() - at < n) return malformed("malformed key list in wait");
    keys.emplace_back(as_view(value.subspan(at, n)));
    at += n;
  }
  if (keys.empty()) return malformed("malformed key list in wait");
  return keys;
}

void encode_wait_keys(std::vector<std::byte>& out, std::span<const std::string> keys) {
  for (const auto& k : keys) {
    core::append_le<uint32_t>(out, static_cast<uint32_t>(k.size()));
    put_bytes(out, k);
  }
}

Result<ReplyHeader> decode_reply_header(std::span<const std::byte> in) {
  if (in.size() < kReplyHeaderBytes) return incomplete();
  const uint8_t status = core::load_u8(in.data());
  const uint32_t len = core::load_u32(in.data() + 1);
  if (status > static_cast<uint8_t>(Reply::kUnauthenticated) || len > kMaxReplyPayload) {
    return malformed("malformed reply (is this a remora store?)");
  }
  return ReplyHeader{static_cast<Reply>(status), len};
}

void encode_reply(std::vector<std::byte>& out, Reply status, std::span<const std::byte> payload) {
  out.push_back(static_cast<std::byte>(status));
  core::append_le<uint32_t>(out, static_cast<uint32_t>(payload.size()));
  put_bytes(out, payload);
}

}  // namespace remora::detail::store_protocol
