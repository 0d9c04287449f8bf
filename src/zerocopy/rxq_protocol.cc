// zerocopy/rxq_protocol.cc — see rxq_protocol.h; the layout is in docs/protocol.md.
#include "zerocopy/rxq_protocol.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace remora::zerocopy::rxq {
namespace {

class Writer {
 public:
  explicit Writer(size_t n) : out_(n) {}
  void u8(size_t at, uint8_t v) { out_.at(at) = std::byte{v}; }
  void u16(size_t at, uint16_t v) {
    for (size_t i = 0; i < 2; ++i) u8(at + i, static_cast<uint8_t>(v >> (8 * i)));
  }
  void u32(size_t at, uint32_t v) {
    for (size_t i = 0; i < 4; ++i) u8(at + i, static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(size_t at, uint64_t v) {
    for (size_t i = 0; i < 8; ++i) u8(at + i, static_cast<uint8_t>(v >> (8 * i)));
  }
  void bytes(size_t at, const void* p, size_t n) { std::memcpy(out_.data() + at, p, n); }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint8_t u8(size_t at) const { return std::to_integer<uint8_t>(in_[at]); }
  uint16_t u16(size_t at) const { return static_cast<uint16_t>(u8(at) | (u8(at + 1) << 8)); }
  uint32_t u32(size_t at) const {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(u8(at + i)) << (8 * i);
    return v;
  }
  uint64_t u64(size_t at) const {
    uint64_t v = 0;
    for (size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(u8(at + i)) << (8 * i);
    return v;
  }
  bool zero(size_t at, size_t n) const {
    for (size_t i = 0; i < n; ++i) {
      if (u8(at + i) != 0) return false;
    }
    return true;
  }

 private:
  std::span<const std::byte> in_;
};

Status bad(std::string_view what, std::string text) {
  return Status(StatusCode::kProtocol, fmt::format("rxq {}: {}", what, text));
}

Status check_head(const Reader& r, uint16_t type, std::string_view what) {
  if (r.u32(0) != kMagic) return bad(what, fmt::format("bad magic {:#010x} (want {:#010x}, \"RXQ1\")", r.u32(0), kMagic));
  if (r.u16(4) != type) return bad(what, fmt::format("message type {:#06x}, want {:#06x}", r.u16(4), type));
  if (r.u16(6) != 0) return bad(what, "reserved bytes 6..7 are not zero");
  return Status::ok();
}

}  // namespace

// Request: magic u32 | type u16 | reserved u16 | family u8 (4, 6) | reserved u8[3] |
//          dst_port u16 | src_port u16 | dst_addr [16] | src_addr [16]       = 48 bytes
std::vector<std::byte> encode(const BindFlowRequest& r) {
  Writer w(kRequestBytes);
  w.u32(0, kMagic);
  w.u16(4, kTypeBindFlow);
  w.u8(8, r.flow.ipv6 ? 6 : 4);
  w.u16(12, r.flow.dst_port);
  w.u16(14, r.flow.src_port);
  w.bytes(16, r.flow.dst_addr.data(), 16);
  w.bytes(32, r.flow.src_addr.data(), 16);
  return w.take();
}

// Bind-dmabuf request: magic u32 | type u16 | reserved u16 | dmabuf_size u64 |
//                      reserved u8[32]                                        = 48 bytes
std::vector<std::byte> encode(const BindDmabufRequest& r) {
  Writer w(kRequestBytes);
  w.u32(0, kMagic);
  w.u16(4, kTypeBindDmabuf);
  w.u64(8, r.dmabuf_size);
  return w.take();
}

// Reserve-queue request: magic u32 | type u16 | reserved u16 | reserved u8[40]  = 48 bytes
std::vector<std::byte> encode(const ReserveQueueRequest&) {
  Writer w(kRequestBytes);
  w.u32(0, kMagic);
  w.u16(4, kTypeReserveQueue);
  return w.take();
}

Result<uint16_t> request_type(std::span<const std::byte> bytes) {
  constexpr std::string_view what = "request";
  if (bytes.size() != kRequestBytes) return bad(what, fmt::format("{} bytes, want {}", bytes.size(), kRequestBytes));
  const Reader r(bytes);
  if (r.u32(0) != kMagic)
    return bad(what, fmt::format("bad magic {:#010x} (want {:#010x}, \"RXQ1\")", r.u32(0), kMagic));
  const uint16_t type = r.u16(4);
  if (type != kTypeBindFlow && type != kTypeBindDmabuf && type != kTypeReserveQueue) {
    return bad(what, fmt::format("message type {:#06x}, want {:#06x}, {:#06x} or {:#06x}", type, kTypeBindFlow,
                                 kTypeBindDmabuf, kTypeReserveQueue));
  }
  return type;
}

Result<ReserveQueueRequest> decode_reserve_queue(std::span<const std::byte> bytes) {
  constexpr std::string_view what = "reserve-queue request";
  if (bytes.size() != kRequestBytes) return bad(what, fmt::format("{} bytes, want {}", bytes.size(), kRequestBytes));
  const Reader r(bytes);
  REMORA_RETURN_IF_ERROR(check_head(r, kTypeReserveQueue, what));
  if (!r.zero(8, 40)) return bad(what, "reserved bytes 8..47 are not zero");
  return ReserveQueueRequest{};
}

Result<BindDmabufRequest> decode_bind_dmabuf(std::span<const std::byte> bytes) {
  constexpr std::string_view what = "bind-dmabuf request";
  if (bytes.size() != kRequestBytes) return bad(what, fmt::format("{} bytes, want {}", bytes.size(), kRequestBytes));
  const Reader r(bytes);
  REMORA_RETURN_IF_ERROR(check_head(r, kTypeBindDmabuf, what));
  if (!r.zero(16, 32)) return bad(what, "reserved bytes 16..47 are not zero");
  BindDmabufRequest out;
  out.dmabuf_size = r.u64(8);
  if (out.dmabuf_size == 0) return bad(what, "dmabuf_size 0");
  return out;
}

Result<BindFlowRequest> decode_request(std::span<const std::byte> bytes) {
  constexpr std::string_view what = "bind-flow request";
  if (bytes.size() != kRequestBytes) return bad(what, fmt::format("{} bytes, want {}", bytes.size(), kRequestBytes));
  const Reader r(bytes);
  REMORA_RETURN_IF_ERROR(check_head(r, kTypeBindFlow, what));
  BindFlowRequest out;
  const uint8_t family = r.u8(8);
  if (family != 4 && family != 6) return bad(what, fmt::format("address family {}, want 4 or 6", family));
  if (!r.zero(9, 3)) return bad(what, "reserved bytes 9..11 are not zero");
  out.flow.ipv6 = family == 6;
  out.flow.dst_port = r.u16(12);
  out.flow.src_port = r.u16(14);
  if (out.flow.dst_port == 0) return bad(what, "dst_port 0: a flow is steered by its receiver's port");
  for (size_t i = 0; i < 16; ++i) {
    out.flow.dst_addr[i] = r.u8(16 + i);
    out.flow.src_addr[i] = r.u8(32 + i);
  }
  if (!out.flow.ipv6 && (!r.zero(20, 12) || !r.zero(36, 12))) {
    return bad(what, "an IPv4 address with nonzero bytes past its first 4");
  }
  return out;
}

// Reply: magic u32 | type u16 | reserved u16 | error i32 | binding_id u32 | queue u32 |
//        rule_location u32 | dmabuf_size u64 | flags u32 | message_len u16 | reserved u16 |
//        message [message_len]                                                = 40 + len
std::vector<std::byte> encode(const BindFlowReply& r) {
  const size_t len = std::min(r.message.size(), kMaxReplyMessage);
  Writer w(kReplyHeaderBytes + len);
  w.u32(0, kMagic);
  w.u16(4, r.type);
  w.u32(8, static_cast<uint32_t>(r.error));
  w.u32(12, r.binding_id);
  w.u32(16, r.queue);
  w.u32(20, r.rule_location);
  w.u64(24, r.dmabuf_size);
  w.u32(32, r.flags);
  w.u16(36, static_cast<uint16_t>(len));
  w.bytes(kReplyHeaderBytes, r.message.data(), len);
  return w.take();
}

Result<BindFlowReply> decode_reply(std::span<const std::byte> bytes) {
  constexpr std::string_view what = "bind-flow reply";
  if (bytes.size() < kReplyHeaderBytes || bytes.size() > kMaxReplyBytes) {
    return bad(what, fmt::format("{} bytes, want {}..{}", bytes.size(), kReplyHeaderBytes, kMaxReplyBytes));
  }
  const Reader r(bytes);
  const uint16_t type = r.u16(4);
  const bool known = type == kTypeBindFlowReply || type == kTypeBindDmabufReply || type == kTypeReserveQueueReply;
  REMORA_RETURN_IF_ERROR(check_head(r, known ? type : kTypeBindFlowReply, what));
  BindFlowReply out;
  out.type = type;
  out.error = static_cast<int32_t>(r.u32(8));
  if (out.error < 0) return bad(what, fmt::format("error {} is negative (errnos are positive)", out.error));
  out.binding_id = r.u32(12);
  out.queue = r.u32(16);
  out.rule_location = r.u32(20);
  out.dmabuf_size = r.u64(24);
  out.flags = r.u32(32);
  if ((out.flags & ~kKnownFlags) != 0) return bad(what, fmt::format("unknown flags {:#x}", out.flags & ~kKnownFlags));
  const size_t len = r.u16(36);
  if (!r.zero(38, 2)) return bad(what, "reserved bytes 38..39 are not zero");
  if (kReplyHeaderBytes + len != bytes.size()) {
    return bad(what, fmt::format("message_len {} but {} bytes follow the header", len, bytes.size() - kReplyHeaderBytes));
  }
  out.message.assign(static_cast<const char*>(static_cast<const void*>(bytes.data() + kReplyHeaderBytes)), len);
  const bool zcrx = (out.flags & kFlagClientZcrx) != 0;
  if (zcrx && (out.flags & kFlagClientDmabuf) != 0) return bad(what, "flags CLIENT_DMABUF and CLIENT_ZCRX together");
  if (out.error == 0) {
    // A zcrx queue's buffer is the client's own io_uring area: rxq knows no size of it.
    if (zcrx && out.dmabuf_size != 0) {
      return bad(what, fmt::format("a zcrx success with dmabuf_size {} (want 0)", out.dmabuf_size));
    }
    if (!zcrx && out.dmabuf_size == 0) return bad(what, "success with a buffer of 0 bytes");
    if (type == kTypeReserveQueueReply && !zcrx) return bad(what, "a reserve-queue success without flag CLIENT_ZCRX");
  }
  return out;
}

}  // namespace remora::zerocopy::rxq
