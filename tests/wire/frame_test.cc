// tests/wire/frame_test.cc — control-frame codec against docs/protocol.md: golden bytes,
// round trips, truncation and every malformed frame kind, for the two-sided frames
// (EAGER..GOODBYE), the one-sided ones (PUT, GET, ATOMIC, RESP, CHUNK kinds) and the
// same-host ones (HOST, PULL, PULLED).
#include "wire/frame.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace remora::wire {
namespace {

constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kMaxU32 = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kEagerLimit = 4096;
constexpr DecodeLimits kLimits{.max_eager_payload = kEagerLimit};

using Bytes = std::vector<std::byte>;

Bytes bytes(std::initializer_list<int> values) {
  Bytes out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

Bytes encode_to_vector(const Frame& frame) {
  Bytes out(encoded_size(frame));
  EXPECT_EQ(encode(frame, out), out.size());
  return out;
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

// Field-wise equality (the structs have no operator==; payload views compare their bytes).
bool same_frame(const Frame& a, const Frame& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b);
        if constexpr (std::is_same_v<T, EagerFrame>) {
          return x.tag == y.tag && same_bytes(x.payload, y.payload) && x.has_crc == y.has_crc && x.crc == y.crc;
        } else if constexpr (std::is_same_v<T, RtsFrame>) {
          return x.send_id == y.send_id && x.tag == y.tag && x.length == y.length;
        } else if constexpr (std::is_same_v<T, CtsFrame>) {
          return x.send_id == y.send_id && x.recv_id == y.recv_id && x.status == y.status;
        } else if constexpr (std::is_same_v<T, ChunkFrame>) {
          return x.recv_id == y.recv_id && x.offset == y.offset && x.length == y.length && x.stream == y.stream &&
                 x.kind == y.kind && x.has_crc == y.has_crc && x.crc == y.crc && x.resend == y.resend;
        } else if constexpr (std::is_same_v<T, CreditFrame>) {
          return x.bytes == y.bytes;
        } else if constexpr (std::is_same_v<T, GoodbyeFrame>) {
          return x.reason == y.reason;
        } else if constexpr (std::is_same_v<T, PutFrame>) {
          return x.op_id == y.op_id && x.key == y.key && x.offset == y.offset && x.length == y.length &&
                 x.has_notify == y.has_notify && x.notify == y.notify && x.inline_data == y.inline_data &&
                 same_bytes(x.payload, y.payload) && x.has_crc == y.has_crc && x.crc == y.crc &&
                 same_bytes(x.segments.bytes(), y.segments.bytes());
        } else if constexpr (std::is_same_v<T, GetFrame>) {
          return x.op_id == y.op_id && x.key == y.key && x.offset == y.offset && x.length == y.length &&
                 same_bytes(x.segments.bytes(), y.segments.bytes());
        } else if constexpr (std::is_same_v<T, AtomicFrame>) {
          return x.op_id == y.op_id && x.key == y.key && x.offset == y.offset && x.op == y.op &&
                 x.operand == y.operand && x.compare == y.compare;
        } else if constexpr (std::is_same_v<T, RespFrame>) {
          return x.op_id == y.op_id && x.status == y.status && x.value == y.value && x.inline_data == y.inline_data &&
                 same_bytes(x.payload, y.payload) && x.has_crc == y.has_crc && x.crc == y.crc;
        } else if constexpr (std::is_same_v<T, AbortFrame>) {
          return x.id == y.id && x.kind == y.kind && x.code == y.code;
        } else if constexpr (std::is_same_v<T, HeartbeatFrame>) {
          return x.seq == y.seq && x.reply == y.reply;
        } else if constexpr (std::is_same_v<T, HostFrame>) {
          return x.pid == y.pid && x.boot_id == y.boot_id && x.netns == y.netns &&
                 x.probe_address == y.probe_address && x.probe_value == y.probe_value && x.can_pull == y.can_pull;
        } else if constexpr (std::is_same_v<T, PullFrame>) {
          return x.recv_id == y.recv_id && x.offset == y.offset && x.length == y.length && x.address == y.address &&
                 x.kind == y.kind && x.has_crc == y.has_crc && x.crc == y.crc;
        } else if constexpr (std::is_same_v<T, PulledFrame>) {
          return x.recv_id == y.recv_id && x.length == y.length && x.kind == y.kind;
        } else if constexpr (std::is_same_v<T, ShmFrame>) {
          return x.op == y.op && x.ring_fd == y.ring_fd && x.wake_fd == y.wake_fd && x.code == y.code;
        } else if constexpr (std::is_same_v<T, ReceivedFrame>) {
          return x.stream == y.stream && x.chunks == y.chunks;
        } else if constexpr (std::is_same_v<T, RetireFrame>) {
          return x.stream == y.stream && x.chunks == y.chunks;
        } else if constexpr (std::is_same_v<T, RejoinedFrame>) {
          return x.stream == y.stream;
        } else if constexpr (std::is_same_v<T, HandledFrame>) {
          return x.bytes == y.bytes && x.resumed == y.resumed;
        } else if constexpr (std::is_same_v<T, MapFrame>) {
          return x.op == y.op && x.fd == y.fd && x.code == y.code && x.grant == y.grant &&
                 x.region_bytes == y.region_bytes && x.count == y.count && x.key == y.key;
        } else if constexpr (std::is_same_v<T, PlacedFrame>) {
          return x.key == y.key && x.offset == y.offset && x.length == y.length && x.notify == y.notify;
        } else {
          static_assert(std::is_same_v<T, PlacedShortFrame>, "same_frame: a frame type is not compared");
          return x.grant == y.grant && x.length == y.length && x.offset == y.offset && x.notify == y.notify &&
                 x.handled == y.handled;
        }
      },
      a);
}

void expect_round_trip(const Frame& frame, const DecodeLimits& limits = kLimits) {
  const Bytes wire = encode_to_vector(frame);
  auto r = decode_frame(wire, limits);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->consumed, wire.size());
  EXPECT_TRUE(same_frame(r->frame, frame)) << "type " << r->frame.index() + 1;
}

void expect_protocol_error(const Bytes& wire, const std::string& fragment, const DecodeLimits& limits = kLimits) {
  auto r = decode_frame(wire, limits);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos)
      << "message \"" << r.status().message() << "\" lacks \"" << fragment << "\"";
}

// One valid frame of every type, with distinct byte patterns, written by hand from
// docs/protocol.md so that a layout change breaks a test.
struct Golden {
  const char* name;
  Frame frame;
  Bytes wire;
};

const Bytes kEagerPayload = bytes({0xAA, 0xBB, 0xCC});

// RMA frames carry a serialized RemoteKey that wire/ treats as 40 opaque bytes.
KeyBytes test_key() {
  KeyBytes key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(0x40 + i);
  return key;
}
const Bytes kKeyWire = bytes({0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,  //
                              0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F,  //
                              0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57,  //
                              0x58, 0x59, 0x5A, 0x5B, 0x5C, 0x5D, 0x5E, 0x5F,  //
                              0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67});
// Two segments: 0x30000 bytes at 0x1000, then 3 bytes at 0x10.
const Bytes kTwoSegments = bytes({0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // offset
                                  0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,    // length
                                  0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // offset
                                  0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});  // length

// HOST carries the sender's boot id as 16 bytes that wire/ does not interpret.
std::array<std::byte, 16> test_boot_id() {
  std::array<std::byte, 16> id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>(0xB0 + i);
  return id;
}
const Bytes kBootIdWire = bytes({0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7,  //
                                 0xB8, 0xB9, 0xBA, 0xBB, 0xBC, 0xBD, 0xBE, 0xBF});

std::vector<Golden> goldens() {
  return {
      {"eager", EagerFrame{.tag = static_cast<Tag>(0x0102030405060708), .payload = kEagerPayload},
       bytes({0x01, 0x00, 0x00, 0x00, 0x0B, 0x00, 0x00, 0x00,  // type 1, body 8 + 3
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // tag
              0xAA, 0xBB, 0xCC})},
      {"eager_empty", EagerFrame{.tag = static_cast<Tag>(0), .payload = {}},
       bytes({0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,  //
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},
      {"rts",
       RtsFrame{
           .send_id = 0x0102030405060708, .tag = static_cast<Tag>(0x1112131415161718), .length = 0x2122232425262728},
       bytes({0x02, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,     // type 2, body 24
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,     // send_id
              0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,     // tag
              0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21})},  // length
      {"cts", CtsFrame{.send_id = 0x0102030405060708, .recv_id = 0x1112131415161718, .status = CtsStatus::kTruncated},
       bytes({0x03, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,  // type 3, body 24
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // send_id
              0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // recv_id
              0x01, 0x00, 0x00, 0x00,                          // status
              0x00, 0x00, 0x00, 0x00})},                       // reserved
      {"chunk",
       ChunkFrame{.recv_id = 0x0102030405060708, .offset = 0x1112131415161718, .length = 0x21222324, .stream = 0x3132},
       bytes({0x04, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,  // type 4, body 24
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // recv_id
              0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // offset
              0x24, 0x23, 0x22, 0x21,                          // length
              0x32, 0x31,                                      // stream
              0x00, 0x00})},                                   // reserved
      {"credit", CreditFrame{.bytes = 0x0102030405060708},
       bytes({0x05, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,  // type 5, body 8
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01})},
      {"goodbye", GoodbyeFrame{.reason = 0x01020304},
       bytes({0x06, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,  // type 6, body 8
              0x04, 0x03, 0x02, 0x01,                          // reason
              0x00, 0x00, 0x00, 0x00})},                       // reserved
      // --- one-sided (RMA) frames ---
      {"chunk_put", ChunkFrame{.recv_id = 7, .offset = 0x10000, .length = 0x8000, .stream = 2, .kind = ChunkKind::kPut},
       bytes({0x04, 0x01, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,  // type 4, flags = kind 1 (put data), body 24
              0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // recv_id = the initiator's PUT op_id
              0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,  // offset
              0x00, 0x80, 0x00, 0x00,                          // length
              0x02, 0x00,                                      // stream
              0x00, 0x00})},                                   // reserved
      {"chunk_get", ChunkFrame{.recv_id = kMaxU64, .offset = 0, .length = 1, .stream = 0x3F, .kind = ChunkKind::kGet},
       bytes({0x04, 0x02, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,  // type 4, flags = kind 2 (get data), body 24
              0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,  // recv_id = the initiator's GET op_id
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // offset
              0x01, 0x00, 0x00, 0x00,                          // length
              0x3F, 0x00,                                      // stream
              0x00, 0x00})},                                   // reserved
      {"put_inline_notify",
       PutFrame{.op_id = 0x0102030405060708,
                .key = test_key(),
                .offset = 0x1112131415161718,
                .length = 3,
                .has_notify = true,
                .notify = 0x2122232425262728,
                .inline_data = true,
                .payload = kEagerPayload},
       concat({bytes({0x07, 0x03, 0x00, 0x00, 0x4B, 0x00, 0x00, 0x00,    // type 7, NOTIFY|INLINE, body 72 + 3
                      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}),  // op_id
               kKeyWire,                                                 // key
               bytes({0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,    // offset
                      0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // length
                      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,    // notify
                      0xAA, 0xBB, 0xCC})})},                             // payload
      {"put_inline",
       PutFrame{.op_id = 2,
                .key = test_key(),
                .offset = 0x40,
                .length = 1,
                .inline_data = true,
                .payload = std::span(kEagerPayload).first(1)},
       concat({bytes({0x07, 0x02, 0x00, 0x00, 0x49, 0x00, 0x00, 0x00,    // type 7, INLINE, body 72 + 1
                      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // op_id
               kKeyWire,                                                 // key
               bytes({0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // offset
                      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // length
                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // notify (no NOTIFY flag: 0)
                      0xAA})})},                                         // payload
      {"put_inline_empty",
       PutFrame{.op_id = 3,
                .key = test_key(),
                .offset = 0,
                .length = 0,
                .has_notify = true,
                .notify = 1,
                .inline_data = true,
                .payload = {}},
       concat({bytes({0x07, 0x03, 0x00, 0x00, 0x48, 0x00, 0x00, 0x00,       // type 7, NOTIFY|INLINE, body 72 + 0
                      0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),     // op_id
               kKeyWire,                                                    // key
               bytes({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,       // offset
                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,       // length 0: a zero-length put
                      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})})},  // notify
      {"put", PutFrame{.op_id = 4, .key = test_key(), .offset = 0x1000, .length = 0x0000000100000000, .payload = {}},
       concat({bytes({0x07, 0x00, 0x00, 0x00, 0x48, 0x00, 0x00, 0x00,       // type 7, no flags: CHUNKs follow, body 72
                      0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),     // op_id
               kKeyWire,                                                    // key
               bytes({0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,       // offset
                      0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,       // length 4 GiB
                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})})},  // notify
      {"put_notify",
       PutFrame{.op_id = kMaxU64,
                .key = test_key(),
                .offset = kMaxU64,
                .length = 0x123456,
                .has_notify = true,
                .notify = kMaxU64,
                .payload = {}},
       concat({bytes({0x07, 0x01, 0x00, 0x00, 0x48, 0x00, 0x00, 0x00,       // type 7, NOTIFY, body 72
                      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}),     // op_id
               kKeyWire,                                                    // key
               bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,       // offset
                      0x56, 0x34, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00,       // length
                      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})})},  // notify
      {"put_segments",
       PutFrame{.op_id = 5,
                .key = test_key(),
                .offset = 0,
                .length = 0x30003,
                .payload = {},
                .segments = SegmentList(kTwoSegments)},
       concat({bytes({0x07, 0x04, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00,    // type 7, SEGMENTS, body 72 + 2 x 16
                      0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // op_id
               kKeyWire,                                                 // key
               bytes({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // offset: 0 with SEGMENTS
                      0x03, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,    // length: the segments' sum
                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // notify
               kTwoSegments})},
      {"get_segments",
       GetFrame{.op_id = 6, .key = test_key(), .offset = 0, .length = 0x30003, .segments = SegmentList(kTwoSegments)},
       concat({bytes({0x08, 0x04, 0x00, 0x00, 0x60, 0x00, 0x00, 0x00,    // type 8, SEGMENTS, body 64 + 2 x 16
                      0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // op_id
               kKeyWire,                                                 // key
               bytes({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // offset
                      0x03, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00}),  // length
               kTwoSegments})},
      {"get",
       GetFrame{
           .op_id = 0x0102030405060708, .key = test_key(), .offset = 0x1112131415161718, .length = 0x2122232425262728},
       concat({bytes({0x08, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,       // type 8, body 64
                      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}),     // op_id
               kKeyWire,                                                    // key
               bytes({0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,       // offset
                      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21})})},  // length
      {"atomic_fetch_add",
       AtomicFrame{.op_id = 0x0102030405060708,
                   .key = test_key(),
                   .offset = 0x1112131415161718,
                   .op = AtomicOp::kFetchAdd,
                   .operand = 0x2122232425262728,
                   .compare = 0},
       concat({bytes({0x09, 0x00, 0x00, 0x00, 0x50, 0x00, 0x00, 0x00,       // type 9, body 80
                      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}),     // op_id
               kKeyWire,                                                    // key
               bytes({0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,       // offset
                      0x01, 0x00, 0x00, 0x00,                               // opcode 1 = fetch_add
                      0x00, 0x00, 0x00, 0x00,                               // reserved
                      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,       // operand = addend
                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})})},  // compare (0 for fetch_add)
      {"atomic_compare_swap",
       AtomicFrame{.op_id = 9,
                   .key = test_key(),
                   .offset = 0x08,
                   .op = AtomicOp::kCompareSwap,
                   .operand = 0x2122232425262728,
                   .compare = 0x3132333435363738},
       concat({bytes({0x09, 0x00, 0x00, 0x00, 0x50, 0x00, 0x00, 0x00,       // type 9, body 80
                      0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),     // op_id
               kKeyWire,                                                    // key
               bytes({0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,       // offset
                      0x02, 0x00, 0x00, 0x00,                               // opcode 2 = compare_swap
                      0x00, 0x00, 0x00, 0x00,                               // reserved
                      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,       // operand = desired value
                      0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31})})},  // compare = expected value
      {"resp", RespFrame{.op_id = 0x0102030405060708, .status = RmaStatus::kOutOfRange, .value = 0, .payload = {}},
       bytes({0x0A, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,     // type 10, body 24
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,     // op_id
              0x02, 0x00, 0x00, 0x00,                             // status 2 = out_of_range
              0x00, 0x00, 0x00, 0x00,                             // reserved
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},  // value
      {"resp_atomic", RespFrame{.op_id = 5, .status = RmaStatus::kOk, .value = 0x2122232425262728, .payload = {}},
       bytes({0x0A, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,     // type 10, body 24
              0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // op_id
              0x00, 0x00, 0x00, 0x00,                             // status 0 = ok
              0x00, 0x00, 0x00, 0x00,                             // reserved
              0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21})},  // value = the previous value
      {"resp_inline",
       RespFrame{.op_id = 6, .status = RmaStatus::kOk, .value = 0, .inline_data = true, .payload = kEagerPayload},
       bytes({0x0A, 0x01, 0x00, 0x00, 0x1B, 0x00, 0x00, 0x00,  // type 10, INLINE, body 24 + 3
              0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // op_id
              0x00, 0x00, 0x00, 0x00,                          // status 0 = ok
              0x00, 0x00, 0x00, 0x00,                          // reserved
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // value
              0xAA, 0xBB, 0xCC})},                             // the GET's data
      {"resp_inline_empty",
       RespFrame{.op_id = 7, .status = RmaStatus::kOk, .value = 0, .inline_data = true, .payload = {}},
       bytes({0x0A, 0x01, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,     // type 10, INLINE, body 24 + 0
              0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // op_id
              0x00, 0x00, 0x00, 0x00,                             // status 0 = ok
              0x00, 0x00, 0x00, 0x00,                             // reserved
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},  // value
      {"abort", AbortFrame{.id = 0x0102030405060708, .kind = ChunkKind::kGet, .code = StatusCode::kDeviceFailed},
       bytes({0x0B, 0x02, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,  // type 11, kind 2 = get, body 16
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // id
              0x0F,                                            // code 15 = device_failed
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},     // reserved
      // --- with REMORA_CHECKSUM=crc32c: flag 0x80, a u32 CRC-32C after the fixed body ---
      {"eager_crc",
       EagerFrame{.tag = static_cast<Tag>(9), .payload = kEagerPayload, .has_crc = true, .crc = 0xA1B2C3D4},
       bytes({0x01, 0x80, 0x00, 0x00, 0x0F, 0x00, 0x00, 0x00,  // type 1, CRC, body 8 + 4 + 3
              0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // tag
              0xD4, 0xC3, 0xB2, 0xA1,                          // crc
              0xAA, 0xBB, 0xCC})},
      {"chunk_crc",
       ChunkFrame{.recv_id = 3,
                  .offset = 0,
                  .length = 5,
                  .stream = 1,
                  .kind = ChunkKind::kGet,
                  .has_crc = true,
                  .crc = 0x01020304},
       bytes({0x04, 0x82, 0x00, 0x00, 0x1C, 0x00, 0x00, 0x00,  // type 4, CRC | kind 2, body 24 + 4
              0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // recv_id
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // offset
              0x05, 0x00, 0x00, 0x00,                          // length
              0x01, 0x00,                                      // stream
              0x00, 0x00,                                      // reserved
              0x04, 0x03, 0x02, 0x01})},                       // crc of the chunk's bytes
      {"put_inline_crc",
       PutFrame{.op_id = 2,
                .key = test_key(),
                .offset = 0,
                .length = 3,
                .has_notify = false,
                .notify = 0,
                .inline_data = true,
                .payload = kEagerPayload,
                .has_crc = true,
                .crc = 0xCAFEF00D},
       concat({bytes({0x07, 0x82, 0x00, 0x00, 0x4F, 0x00, 0x00, 0x00,    // type 7, INLINE|CRC, body 72 + 4 + 3
                      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // op_id
               kKeyWire,                                                 // key
               bytes({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // offset
                      0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // length
                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,    // notify
                      0x0D, 0xF0, 0xFE, 0xCA,                            // crc
                      0xAA, 0xBB, 0xCC})})},                             // payload
      {"resp_inline_crc",
       RespFrame{.op_id = 6,
                 .status = RmaStatus::kOk,
                 .value = 0,
                 .inline_data = true,
                 .payload = kEagerPayload,
                 .has_crc = true,
                 .crc = 0x11223344},
       bytes({0x0A, 0x81, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00,  // type 10, INLINE|CRC, body 24 + 4 + 3
              0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // op_id
              0x00, 0x00, 0x00, 0x00,                          // status 0 = ok
              0x00, 0x00, 0x00, 0x00,                          // reserved
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // value
              0x44, 0x33, 0x22, 0x11,                          // crc
              0xAA, 0xBB, 0xCC})},                             // the GET's data
      {"resp_checksum",
       RespFrame{.op_id = 8, .status = RmaStatus::kChecksum, .value = 0x80000, .inline_data = false, .payload = {}},
       bytes({0x0A, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,     // type 10, body 24
              0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // op_id
              0x08, 0x00, 0x00, 0x00,                             // status 8 = checksum
              0x00, 0x00, 0x00, 0x00,                             // reserved
              0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00})},  // value: the bad chunk's offset
      // --- liveness ---
      {"heartbeat", HeartbeatFrame{.seq = 0x0102030405060708, .reply = false},
       bytes({0x0C, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,     // type 12, a probe, body 8
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01})},  // seq
      {"heartbeat_reply", HeartbeatFrame{.seq = 1, .reply = true},
       bytes({0x0C, 0x01, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,     // type 12, REPLY, body 8
              0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},  // seq echoed from the probe
      // --- same-host pulls ---
      {"host",
       HostFrame{.pid = 0x01020304,
                 .boot_id = test_boot_id(),
                 .netns = 0x1112131415161718,
                 .probe_address = 0x2122232425262728,
                 .probe_value = 0x3132333435363738,
                 .can_pull = false},
       concat({bytes({0x0D, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00,       // type 13, an ident, body 48
                      0x04, 0x03, 0x02, 0x01,                               // pid
                      0x00, 0x00, 0x00, 0x00}),                             // reserved
               kBootIdWire,                                                 // boot_id
               bytes({0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,       // netns
                      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,       // probe_address
                      0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31})})},  // probe_value
      {"host_can_pull",
       HostFrame{.pid = kMaxU32,
                 .boot_id = test_boot_id(),
                 .netns = 0xF0000001,
                 .probe_address = 0x00007F0012345678,
                 .probe_value = kMaxU64,
                 .can_pull = true},
       concat({bytes({0x0D, 0x01, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00,       // type 13, CAN_PULL, body 48
                      0xFF, 0xFF, 0xFF, 0xFF,                               // pid
                      0x00, 0x00, 0x00, 0x00}),                             // reserved
               kBootIdWire,                                                 // boot_id
               bytes({0x01, 0x00, 0x00, 0xF0, 0x00, 0x00, 0x00, 0x00,       // netns
                      0x78, 0x56, 0x34, 0x12, 0x00, 0x7F, 0x00, 0x00,       // probe_address
                      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})})},  // probe_value
      {"pull",
       PullFrame{.recv_id = 0x0102030405060708,
                 .offset = 0x1112131415161718,
                 .length = 0x21222324,
                 .address = 0x3132333435363738},
       bytes({0x0E, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,     // type 14, kind 0 (message), body 32
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,     // recv_id
              0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,     // offset
              0x24, 0x23, 0x22, 0x21,                             // length
              0x00, 0x00, 0x00, 0x00,                             // reserved
              0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31})},  // address in the sender
      {"pull_put",
       PullFrame{
           .recv_id = 7, .offset = 0x10000, .length = 0x8000, .address = 0x00007F0000011000, .kind = ChunkKind::kPut},
       bytes({0x0E, 0x01, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,     // type 14, kind 1 (put data), body 32
              0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // recv_id = the initiator's PUT op_id
              0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,     // offset
              0x00, 0x80, 0x00, 0x00,                             // length
              0x00, 0x00, 0x00, 0x00,                             // reserved
              0x00, 0x10, 0x01, 0x00, 0x00, 0x7F, 0x00, 0x00})},  // address
      {"pull_crc",
       PullFrame{.recv_id = 3,
                 .offset = 0,
                 .length = 5,
                 .address = 0x1000,
                 .kind = ChunkKind::kPut,
                 .has_crc = true,
                 .crc = 0x01020304},
       bytes({0x0E, 0x81, 0x00, 0x00, 0x24, 0x00, 0x00, 0x00,  // type 14, CRC | kind 1, body 32 + 4
              0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // recv_id
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // offset
              0x05, 0x00, 0x00, 0x00,                          // length
              0x00, 0x00, 0x00, 0x00,                          // reserved
              0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // address
              0x04, 0x03, 0x02, 0x01})},                       // crc of the chunk's bytes
      {"pulled", PulledFrame{.recv_id = 0x0102030405060708, .length = 0x21222324},
       bytes({0x0F, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,  // type 15, kind 0 (message), body 16
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // recv_id
              0x24, 0x23, 0x22, 0x21,                          // length
              0x00, 0x00, 0x00, 0x00})},                       // reserved
      {"pulled_put", PulledFrame{.recv_id = 7, .length = 0x8000, .kind = ChunkKind::kPut},
       bytes({0x0F, 0x01, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,  // type 15, kind 1 (put data), body 16
              0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // recv_id = the PULL's
              0x00, 0x80, 0x00, 0x00,                          // length = the PULL's
              0x00, 0x00, 0x00, 0x00})},                       // reserved
      {"shm_offer", ShmFrame{.op = ShmOp::kOffer, .ring_fd = 0x0102, .wake_fd = 0x0A0B0C0D},
       bytes({0x10, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,  // type 16, no flags, body 16
              0x01, 0x00, 0x00, 0x00,                          // op 1 OFFER
              0x02, 0x01, 0x00, 0x00,                          // ring_fd
              0x0D, 0x0C, 0x0B, 0x0A,                          // wake_fd
              0x00, 0x00, 0x00, 0x00})},                       // code
      {"shm_switch", ShmFrame{.op = ShmOp::kSwitch},
       bytes({0x10, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,  // type 16, no flags, body 16
              0x03, 0x00, 0x00, 0x00,                          // op 3 SWITCH
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // no descriptors
              0x00, 0x00, 0x00, 0x00})},                       // code
      {"shm_decline", ShmFrame{.op = ShmOp::kDecline, .code = StatusCode::kAccessDenied},
       bytes({0x10, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,  // type 16, no flags, body 16
              0x04, 0x00, 0x00, 0x00,                          // op 4 DECLINE
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // no descriptors
              0x05, 0x00, 0x00, 0x00})},                       // code: access_denied
      {"chunk_resend",
       ChunkFrame{
           .recv_id = 9, .offset = 0x40000, .length = 0x40000, .stream = 1, .kind = ChunkKind::kGet, .resend = true},
       bytes({0x04, 0x42, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00,  // type 4, RESEND | kind 2 (get data), body 24
              0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // recv_id = the initiator's GET op_id
              0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00,  // offset: where it was first announced
              0x00, 0x00, 0x04, 0x00,                          // length: as first announced
              0x01, 0x00,                                      // stream: a surviving one
              0x00, 0x00})},                                   // reserved
      {"received", ReceivedFrame{.stream = 3, .chunks = 0x0102030405060708},
       bytes({0x11, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,     // type 17, no flags, body 16
              0x03, 0x00,                                         // stream
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                 // reserved
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01})},  // chunks read whole so far
      {"retire", RetireFrame{.stream = 0x0102, .chunks = 5},
       bytes({0x12, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,     // type 18, no flags, body 16
              0x02, 0x01,                                         // stream
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                 // reserved
              0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},  // chunks read whole, all it ever will
      {"rejoined", RejoinedFrame{.stream = 0x0102},
       bytes({0x13, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,     // type 19, no flags, body 16
              0x02, 0x01,                                         // stream
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                 // reserved
              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},  // reserved
      {"handled", HandledFrame{.bytes = 0x0102030405060708},
       bytes({0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,     // type 20, no flags, body 8
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01})},  // bytes of the peer's control stream handled
      {"handled resumed", HandledFrame{.bytes = 5, .resumed = true},
       bytes({0x14, 0x01, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,     // type 20, RESUMED, body 8
              0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},  // where the replay starts
      // --- direct mappings ---
      {"map_request", MapFrame{.op = MapOp::kRequest, .key = test_key()},
       concat({bytes({0x15, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,    // type 21, no flags, body 64
                      0x01, 0x00, 0x00, 0x00,                            // op REQUEST
                      0x00, 0x00, 0x00, 0x00,                            // fd: none
                      0x00, 0x00, 0x00, 0x00,                            // code: none
                      0x00, 0x00, 0x00, 0x00,                            // reserved
                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // region_bytes: none
               kKeyWire})},                                              // the key asked about
      {"map_grant", MapFrame{.op = MapOp::kGrant, .fd = 0x0102, .region_bytes = 0x400000, .key = test_key()},
       concat({bytes({0x15, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,    // type 21, no flags, body 64
                      0x02, 0x00, 0x00, 0x00,                            // op GRANT
                      0x02, 0x01, 0x00, 0x00,                            // fd in the sender's process
                      0x00, 0x00, 0x00, 0x00,                            // code: none
                      0x00, 0x00, 0x00, 0x00,                            // reserved
                      0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00}),  // region_bytes: 4 MiB
               kKeyWire})},                                              // the key, echoed
      {"map_grant_numbered",
       MapFrame{.op = MapOp::kGrant, .fd = 0x0102, .grant = 0x0FFF, .region_bytes = 0x400000, .key = test_key()},
       concat({bytes({0x15, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,    // type 21, no flags, body 64
                      0x02, 0x00, 0x00, 0x00,                            // op GRANT
                      0x02, 0x01, 0x00, 0x00,                            // fd in the sender's process
                      0x00, 0x00, 0x00, 0x00,                            // code: none
                      0xFF, 0x0F, 0x00, 0x00,                            // the key's number (PLACED_SHORT)
                      0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00}),  // region_bytes: 4 MiB
               kKeyWire})},                                              // the key, echoed
      {"map_refuse", MapFrame{.op = MapOp::kRefuse, .code = StatusCode::kUnsupported, .key = test_key()},
       concat({bytes({0x15,
                      0x00,
                      0x00,
                      0x00,
                      0x40,
                      0x00,
                      0x00,
                      0x00,  // type 21, no flags, body 64
                      0x03,
                      0x00,
                      0x00,
                      0x00,  // op REFUSE
                      0x00,
                      0x00,
                      0x00,
                      0x00,  // fd: none
                      static_cast<uint8_t>(StatusCode::kUnsupported),
                      0x00,
                      0x00,
                      0x00,  // why
                      0x00,
                      0x00,
                      0x00,
                      0x00,  // reserved
                      0x00,
                      0x00,
                      0x00,
                      0x00,
                      0x00,
                      0x00,
                      0x00,
                      0x00}),  // region_bytes: none
               kKeyWire})},    // the key, echoed
      {"map_credit", MapFrame{.op = MapOp::kCredit, .count = 64},
       concat({bytes({0x15, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,    // type 21, no flags, body 64
                      0x04, 0x00, 0x00, 0x00,                            // op CREDIT
                      0x00, 0x00, 0x00, 0x00,                            // fd: none
                      0x00, 0x00, 0x00, 0x00,                            // code: none
                      0x00, 0x00, 0x00, 0x00,                            // reserved
                      0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // credits: 64 places
               Bytes(kKeySize, std::byte{0})})},                         // no key
      {"map_ack", MapFrame{.op = MapOp::kAck, .count = 0x0102},
       concat({bytes({0x15, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,    // type 21, no flags, body 64
                      0x05, 0x00, 0x00, 0x00,                            // op ACK
                      0x00, 0x00, 0x00, 0x00,                            // fd: none
                      0x00, 0x00, 0x00, 0x00,                            // code: none
                      0x00, 0x00, 0x00, 0x00,                            // reserved
                      0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}),  // PLACED frames handled so far
               Bytes(kKeySize, std::byte{0})})},                         // no key
      {"placed", PlacedFrame{.key = test_key(), .offset = 0x10, .length = 0x0102, .notify = 0x0102030405060708},
       concat({bytes({0x16, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00}),     // type 22, no flags, body 64
               kKeyWire,                                                    // a key the receiver granted
               bytes({0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,       // offset in its window
                      0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,       // length written
                      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01})})},  // the notification
      {"placed_short",
       PlacedShortFrame{.grant = 3, .length = 0x0102, .offset = 0x10, .notify = 0x0102030405060708, .handled = 0x0A0B},
       bytes({0x17, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00,     // type 23, no flags, body 32
              0x03, 0x00, 0x00, 0x00,                             // the key's number from its GRANT
              0x02, 0x01, 0x00, 0x00,                             // length written
              0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     // offset in its window
              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,     // the notification
              0x0B, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})},  // the receiver's PLACED frames handled
  };
}

TEST(FrameGolden, EncodeMatchesProtocolDoc) {
  for (const Golden& g : goldens()) {
    SCOPED_TRACE(g.name);
    EXPECT_EQ(encoded_size(g.frame), g.wire.size());
    EXPECT_EQ(encode_to_vector(g.frame), g.wire);
  }
}

TEST(FrameGolden, DecodeMatchesProtocolDoc) {
  for (const Golden& g : goldens()) {
    SCOPED_TRACE(g.name);
    auto r = decode_frame(g.wire, kLimits);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->consumed, g.wire.size());
    EXPECT_TRUE(same_frame(r->frame, g.frame));
  }
}

TEST(FrameGolden, EagerPrefixMatchesFullEncoding) {
  const Golden g = goldens()[0];
  Bytes prefix(kFrameHeaderSize + kEagerBodySize);
  ASSERT_EQ(encode_eager_prefix(static_cast<Tag>(0x0102030405060708), 3, prefix), prefix.size());
  EXPECT_EQ(prefix, Bytes(g.wire.begin(), g.wire.begin() + 16));
  const Bytes whole = concat({prefix, kEagerPayload});
  EXPECT_EQ(whole, g.wire);
}

Bytes golden(const char* name);  // below, with the malformed frames

// encode_header writes everything but the inline payload, which the control stream's
// output copies to its place first: together they are encode's bytes, for every frame.
TEST(FrameGolden, HeaderAfterPayloadMatchesFullEncoding) {
  for (const Golden& g : goldens()) {
    SCOPED_TRACE(g.name);
    const std::span<const std::byte> payload = inline_payload(g.frame);
    ASSERT_LE(payload.size(), g.wire.size());
    Bytes out(g.wire.size(), std::byte{0xEE});  // not zeroed: the header must write every byte of its own
    std::copy(payload.begin(), payload.end(), out.end() - static_cast<ptrdiff_t>(payload.size()));
    ASSERT_EQ(encode_header(g.frame, out), g.wire.size());
    EXPECT_EQ(out, g.wire);
  }
}

TEST(FrameGolden, InlinePayloadOnlyOfFramesThatCarryOne) {
  EXPECT_EQ(inline_payload(GetFrame{.op_id = 1, .key = test_key(), .offset = 0, .length = 8}).size(), 0u);
  const Bytes data = bytes({1, 2, 3});
  EXPECT_EQ(
      inline_payload(PutFrame{.op_id = 1, .key = test_key(), .length = 3, .inline_data = true, .payload = data}).size(),
      3u);
  EXPECT_EQ(inline_payload(PutFrame{.op_id = 1, .key = test_key(), .length = 3, .inline_data = false, .payload = data})
                .size(),
            0u);
  EXPECT_EQ(inline_payload(RespFrame{.op_id = 1, .inline_data = true, .payload = data}).size(), 3u);
  EXPECT_EQ(inline_payload(EagerFrame{.tag = static_cast<Tag>(1), .payload = data}).size(), 3u);
}

TEST(FrameGolden, EagerPrefixWithCrcMatchesFullEncoding) {
  const Golden g{"eager_crc", EagerFrame{}, golden("eager_crc")};
  Bytes prefix(kFrameHeaderSize + kEagerBodySize + kCrcSize);
  const uint32_t crc = 0xA1B2C3D4;
  ASSERT_EQ(encode_eager_prefix(static_cast<Tag>(9), 3, prefix, &crc), prefix.size());
  EXPECT_EQ(concat({prefix, kEagerPayload}), g.wire);
}

TEST(FrameReject, CrcWithoutInlineData) {
  Bytes put = golden("put_inline_crc");
  put[1] = std::byte{0x80};  // CRC without INLINE: a large PUT's CRCs travel in its CHUNKs
  expect_protocol_error(Bytes(put.begin(), put.begin() + 2), "PUT frame: CRC flag without INLINE");
  Bytes resp = golden("resp_checksum");
  resp[1] = std::byte{0x80};
  expect_protocol_error(Bytes(resp.begin(), resp.begin() + 2), "RESP frame: CRC flag without INLINE");
  // A CHUNK with the flag but no room for the CRC.
  Bytes chunk = golden("chunk");
  chunk[1] = std::byte{0x80};
  expect_protocol_error(chunk, "CHUNK frame: body_length 24, expected 28");
}

TEST(FrameGolden, EagerPrefixOfMaxTagAndEmptyPayload) {
  Bytes prefix(kFrameHeaderSize + kEagerBodySize);
  ASSERT_EQ(encode_eager_prefix(static_cast<Tag>(kMaxU64), 0, prefix), 16u);
  EXPECT_EQ(prefix, bytes({0x01, 0, 0, 0, 0x08, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}));
}

TEST(FrameRoundTrip, EagerBoundaries) {
  for (uint64_t tag : {uint64_t{0}, uint64_t{1}, kMaxU64}) {
    expect_round_trip(EagerFrame{.tag = static_cast<Tag>(tag), .payload = {}});
    expect_round_trip(EagerFrame{.tag = static_cast<Tag>(tag), .payload = kEagerPayload});
  }
  Bytes max_payload(kEagerLimit);
  for (size_t i = 0; i < max_payload.size(); ++i) max_payload[i] = static_cast<std::byte>(i * 7);
  expect_round_trip(EagerFrame{.tag = static_cast<Tag>(kMaxU64), .payload = max_payload});
  // A limit of 0 still admits 0-byte messages.
  expect_round_trip(EagerFrame{.tag = static_cast<Tag>(5), .payload = {}}, DecodeLimits{.max_eager_payload = 0});
}

TEST(FrameRoundTrip, EagerPayloadPointsIntoInput) {
  const Bytes wire = encode_to_vector(EagerFrame{.tag = static_cast<Tag>(9), .payload = kEagerPayload});
  auto r = decode_frame(wire, kLimits);
  ASSERT_TRUE(r.is_ok());
  const auto& eager = std::get<EagerFrame>(r->frame);
  EXPECT_EQ(eager.payload.data(), wire.data() + 16);
  EXPECT_EQ(eager.payload.size(), 3u);
}

TEST(FrameRoundTrip, FixedFramesBoundaries) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x8000000000000000}, kMaxU64}) {
    expect_round_trip(RtsFrame{.send_id = v, .tag = static_cast<Tag>(v), .length = v});
    expect_round_trip(RtsFrame{.send_id = kMaxU64 - v, .tag = static_cast<Tag>(v), .length = 0});
    expect_round_trip(CtsFrame{.send_id = v, .recv_id = v, .status = CtsStatus::kProceed});
    expect_round_trip(CtsFrame{.send_id = v, .recv_id = kMaxU64 - v, .status = CtsStatus::kTruncated});
    expect_round_trip(ChunkFrame{.recv_id = v, .offset = v, .length = 1, .stream = 0});
    expect_round_trip(ChunkFrame{.recv_id = v, .offset = kMaxU64 - v, .length = kMaxU32, .stream = 0xFFFF});
    expect_round_trip(CreditFrame{.bytes = v});
  }
  for (uint32_t reason : {uint32_t{0}, uint32_t{1}, kMaxU32}) expect_round_trip(GoodbyeFrame{.reason = reason});
  for (ChunkKind kind : {ChunkKind::kMessage, ChunkKind::kPut, ChunkKind::kGet}) {
    expect_round_trip(ChunkFrame{.recv_id = 1, .offset = 0, .length = 1, .stream = 63, .kind = kind});
    expect_round_trip(ChunkFrame{.recv_id = kMaxU64, .offset = kMaxU64, .length = kMaxU32, .stream = 0, .kind = kind});
  }
}

TEST(FrameRoundTrip, ConcatenatedFramesDecodeInOrder) {
  Bytes stream;
  std::vector<Golden> gs = goldens();
  for (const Golden& g : gs) stream.insert(stream.end(), g.wire.begin(), g.wire.end());
  std::span<const std::byte> rest(stream);
  for (const Golden& g : gs) {
    SCOPED_TRACE(g.name);
    auto r = decode_frame(rest, kLimits);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->consumed, g.wire.size());
    EXPECT_TRUE(same_frame(r->frame, g.frame));
    rest = rest.subspan(r->consumed);
  }
  EXPECT_TRUE(rest.empty());
  auto r = decode_frame(rest, kLimits);
  EXPECT_EQ(r.status().code(), StatusCode::kInProgress);
}

TEST(FrameTruncation, EveryPrefixOfEveryValidFrameIsInProgress) {
  std::vector<Golden> gs = goldens();
  Bytes max_payload(kEagerLimit, std::byte{0x5A});
  const auto add = [&gs](const char* name, const Frame& f) { gs.push_back({name, f, encode_to_vector(f)}); };
  add("eager_max", EagerFrame{.tag = static_cast<Tag>(kMaxU64), .payload = max_payload});
  add("put_inline_max", PutFrame{.op_id = 1, .key = test_key(), .offset = 0, .length = max_payload.size(),
                                 .has_notify = true, .notify = 2, .inline_data = true, .payload = max_payload});
  add("resp_inline_max", RespFrame{.op_id = 1, .inline_data = true, .payload = max_payload});
  for (const Golden& g : gs) {
    SCOPED_TRACE(g.name);
    for (size_t n = 0; n < g.wire.size(); ++n) {
      auto r = decode_frame(std::span<const std::byte>(g.wire).first(n), kLimits);
      ASSERT_FALSE(r.is_ok()) << "prefix " << n;
      ASSERT_EQ(r.status().code(), StatusCode::kInProgress) << "prefix " << n << ": " << r.status().to_string();
    }
  }
}

TEST(FrameTruncation, EmptyInputIsInProgress) {
  auto r = decode_frame({}, kLimits);
  EXPECT_EQ(r.status().code(), StatusCode::kInProgress);
}

// --- malformed frames -------------------------------------------------------------

Bytes golden(const char* name) {
  for (const Golden& g : goldens()) {
    if (std::string(name) == g.name) return g.wire;
  }
  ADD_FAILURE() << "no golden " << name;
  return {};
}

TEST(FrameReject, UnknownType) {
  for (int type : {0, 24, 0x80, 0xFF}) {
    Bytes wire = golden("credit");
    wire[0] = static_cast<std::byte>(type);
    expect_protocol_error(wire, "unknown type " + std::to_string(type));
    // Refused on the first byte, without waiting for the rest.
    expect_protocol_error(Bytes(wire.begin(), wire.begin() + 1), "unknown type");
  }
}

// The flag bits docs/protocol.md defines per type; every other bit is a protocol error.
uint8_t defined_flags(std::byte type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::kChunk: return 0xC3;  // the kind (3 itself is refused: ChunkKindThree), RESEND, CRC
    case FrameType::kAbort: return 0x03;  // the kind
    case FrameType::kEager: return 0x80;  // CRC
    case FrameType::kPut: return 0x87;    // NOTIFY | INLINE | SEGMENTS | CRC
    case FrameType::kGet: return 0x04;    // SEGMENTS
    case FrameType::kResp: return 0x81;   // INLINE | CRC
    case FrameType::kHeartbeat: return 0x01;  // REPLY
    case FrameType::kHost: return 0x01;       // CAN_PULL
    case FrameType::kHandled: return 0x01;    // RESUMED
    case FrameType::kPull: return 0x83;       // the kind (3 is refused: SameHostReject), CRC
    case FrameType::kPulled: return 0x03;     // the kind; no CRC
    default: return 0x00;
  }
}

TEST(FrameReject, UndefinedFlagBitsPerType) {
  for (const Golden& g : goldens()) {
    SCOPED_TRACE(g.name);
    const uint8_t defined = defined_flags(g.wire[0]);
    for (int bit = 0; bit < 8; ++bit) {
      if ((defined & (1u << bit)) != 0) continue;
      Bytes wire = g.wire;
      wire[1] |= static_cast<std::byte>(1u << bit);
      char flags[8];
      std::snprintf(flags, sizeof flags, "0x%02x", std::to_integer<unsigned>(wire[1]));
      expect_protocol_error(wire, std::string("flags ") + flags + " has undefined bits");
      // Refused as soon as the flags byte is in.
      expect_protocol_error(Bytes(wire.begin(), wire.begin() + 2), "has undefined bits");
    }
  }
}

TEST(FrameSegments, EncodeSegmentsAndTheListView) {
  const Segment two[] = {{.offset = 0x1000, .length = 0x30000}, {.offset = 0x10, .length = 3}};
  const std::vector<std::byte> wire = encode_segments(two);
  EXPECT_EQ(wire, kTwoSegments);
  const SegmentList list(wire);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].offset, 0x10u);
  EXPECT_EQ(list[1].length, 3u);
}

// A segmented PUT or GET whose list is malformed is refused before the target sees it:
// by its header (no list, a partial segment, too many) or by its body.
TEST(FrameReject, MalformedSegmentLists) {
  const auto with_body = [](const char* name, const Bytes& list, uint8_t flags = 0x04) {
    Bytes wire = golden(name);
    const size_t fixed = wire[0] == std::byte{7} ? 72 : 64;
    wire.resize(8 + fixed);
    wire.insert(wire.end(), list.begin(), list.end());
    wire[1] = std::byte{flags};
    const uint32_t body = static_cast<uint32_t>(wire.size() - 8);
    std::memcpy(wire.data() + 4, &body, 4);
    return wire;
  };
  const auto segment = [](uint64_t offset, uint64_t length) {
    Bytes b(16);
    std::memcpy(b.data(), &offset, 8);
    std::memcpy(b.data() + 8, &length, 8);
    return b;
  };
  const auto set_length = [](Bytes wire, uint64_t length) {
    std::memcpy(wire.data() + 8 + 56, &length, 8);
    return wire;
  };
  for (const char* name : {"put_segments", "get_segments"}) {
    SCOPED_TRACE(name);
    expect_protocol_error(with_body(name, {}), "1 to 1024 segments");
    expect_protocol_error(with_body(name, Bytes(24)), "1 to 1024 segments");
    expect_protocol_error(with_body(name, Bytes(16 * 1025)), "1 to 1024 segments");
    // Refused as soon as the header is in.
    const Bytes partial = with_body(name, Bytes(24));
    expect_protocol_error(Bytes(partial.begin(), partial.begin() + 8), "1 to 1024 segments");
    Bytes shifted = golden(name);
    shifted[8 + 48] = std::byte{1};  // offset 1
    expect_protocol_error(shifted, "with SEGMENTS (must be 0)");
    expect_protocol_error(set_length(with_body(name, concat({segment(0, 5), segment(9, 0)})), 5), "segment 1 is empty");
    expect_protocol_error(set_length(with_body(name, segment(kMaxU64 - 1, 2)), 2), "segment 0 ends past 2^64");
    expect_protocol_error(set_length(with_body(name, concat({segment(0, kMaxU64), segment(0, 2)})), 1),
                          "segment lengths overflow");
    expect_protocol_error(set_length(with_body(name, segment(0, 5)), 6), "length 6 but its segments hold 5 bytes");
  }
  expect_protocol_error(with_body("put_segments", kTwoSegments, 0x06), "SEGMENTS with INLINE");
  expect_protocol_error(with_body("put_segments", kTwoSegments, 0x05), "SEGMENTS with NOTIFY");
}

TEST(FrameReject, NonzeroHeaderReserved) {
  for (size_t i : {2u, 3u}) {
    Bytes wire = golden("goodbye");
    wire[i] = std::byte{0x10};
    expect_protocol_error(wire, "reserved byte " + std::to_string(i) + " is 0x10");
    expect_protocol_error(Bytes(wire.begin(), wire.begin() + static_cast<std::ptrdiff_t>(i) + 1), "reserved byte");
  }
}

TEST(FrameReject, FixedBodyLengthMismatch) {
  struct Case {
    const char* golden;
    const char* name;
    uint32_t expected;
  };
  for (const Case& c : {Case{"rts", "RTS", 24}, Case{"cts", "CTS", 24}, Case{"chunk", "CHUNK", 24},
                        Case{"credit", "CREDIT", 8}, Case{"goodbye", "GOODBYE", 8}, Case{"chunk_put", "CHUNK", 24},
                        Case{"chunk_get", "CHUNK", 24}, Case{"put", "PUT", 72}, Case{"put_notify", "PUT", 72},
                        Case{"get", "GET", 64}, Case{"atomic_fetch_add", "ATOMIC", 80},
                        Case{"atomic_compare_swap", "ATOMIC", 80}, Case{"resp", "RESP", 24},
                        Case{"resp_atomic", "RESP", 24}, Case{"host", "HOST", 48}, Case{"host_can_pull", "HOST", 48}, Case{"pull", "PULL", 32},
                        Case{"pull_put", "PULL", 32}, Case{"pull_crc", "PULL", 36}, Case{"pulled", "PULLED", 16},
                        Case{"pulled_put", "PULLED", 16}}) {
    SCOPED_TRACE(c.golden);
    for (uint32_t len : {uint32_t{0}, c.expected - 1, c.expected + 1, uint32_t{0x01000000}, kMaxU32}) {
      Bytes wire = golden(c.golden);
      wire.resize(kFrameHeaderSize);  // only the header: the length alone must be refused
      wire[4] = static_cast<std::byte>(len);
      wire[5] = static_cast<std::byte>(len >> 8);
      wire[6] = static_cast<std::byte>(len >> 16);
      wire[7] = static_cast<std::byte>(len >> 24);
      expect_protocol_error(wire, std::string(c.name) + " frame: body_length " + std::to_string(len) +
                                      ", expected " + std::to_string(c.expected));
    }
  }
}

TEST(FrameReject, EagerBodyShorterThanTag) {
  for (int len : {0, 1, 7}) {
    Bytes wire = bytes({0x01, 0x00, 0x00, 0x00, len, 0x00, 0x00, 0x00});
    expect_protocol_error(wire, "body_length " + std::to_string(len) + " is shorter than its 8-byte fixed part");
  }
}

TEST(FrameReject, EagerPayloadOverLimit) {
  // 8 + 4097: one byte over, refused from the header alone.
  Bytes wire = bytes({0x01, 0x00, 0x00, 0x00, 0x09, 0x10, 0x00, 0x00});
  expect_protocol_error(wire, "payload of 4097 bytes (body_length 4105) exceeds eager_limit 4096");
  // The largest length the header can hold.
  wire = bytes({0x01, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF});
  expect_protocol_error(wire, "exceeds eager_limit 4096");
  // A 1-byte message when the limit is 0.
  wire = encode_to_vector(EagerFrame{.tag = static_cast<Tag>(1), .payload = bytes({0x42})});
  expect_protocol_error(wire, "payload of 1 bytes", DecodeLimits{.max_eager_payload = 0});
  // Exactly at the limit is fine (covered by round trips); the largest u32 limit works too.
  auto r = decode_frame(Bytes(wire.begin(), wire.begin() + 8), DecodeLimits{.max_eager_payload = kMaxU32});
  EXPECT_EQ(r.status().code(), StatusCode::kInProgress);
}

TEST(FrameReject, CtsUnknownStatus) {
  for (uint32_t status : {2u, 3u, 0x100u, kMaxU32}) {
    Bytes wire = golden("cts");
    wire[24] = static_cast<std::byte>(status);
    wire[25] = static_cast<std::byte>(status >> 8);
    wire[26] = static_cast<std::byte>(status >> 16);
    wire[27] = static_cast<std::byte>(status >> 24);
    expect_protocol_error(wire, "CTS frame: unknown status " + std::to_string(status));
  }
}

TEST(FrameReject, CtsReservedNonzero) {
  for (size_t i = 28; i < 32; ++i) {
    Bytes wire = golden("cts");
    wire[i] = std::byte{0x01};
    expect_protocol_error(wire, "CTS frame: reserved 0x");
  }
}

TEST(FrameReject, ChunkReservedNonzero) {
  for (size_t i = 30; i < 32; ++i) {
    Bytes wire = golden("chunk");
    wire[i] = std::byte{0x02};
    expect_protocol_error(wire, "CHUNK frame: reserved 0x");
  }
}

TEST(FrameReject, ChunkLengthZero) {
  Bytes wire = encode_to_vector(ChunkFrame{.recv_id = 1, .offset = 0, .length = 0, .stream = 0});
  expect_protocol_error(wire, "CHUNK frame: length 0");
}

TEST(FrameReject, GoodbyeReservedNonzero) {
  for (size_t i = 12; i < 16; ++i) {
    Bytes wire = golden("goodbye");
    wire[i] = std::byte{0xFF};
    expect_protocol_error(wire, "GOODBYE frame: reserved 0x");
  }
}

TEST(FrameReject, ErrorInSecondFrameLeavesFirstIntact) {
  Bytes bad = golden("goodbye");
  bad[0] = std::byte{0x18};
  const Bytes stream = concat({golden("rts"), bad});
  auto first = decode_frame(stream, kLimits);
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->consumed, 32u);
  expect_protocol_error(Bytes(stream.begin() + 32, stream.end()), "unknown type 24");
}

TEST(FrameEncode, RefusesTooSmallBuffer) {
  // A precondition violation must not write out of bounds; in release builds it writes
  // nothing and returns 0 (debug builds assert, so only run this with NDEBUG).
#ifdef NDEBUG
  const Bytes untouched(kMaxFixedFrameSize + 8, std::byte{0xEE});
  for (const Golden& g : goldens()) {
    SCOPED_TRACE(g.name);
    Bytes out = untouched;
    EXPECT_EQ(encode(g.frame, std::span<std::byte>(out).first(g.wire.size() - 1)), 0u);
    EXPECT_EQ(out, untouched);
  }
  Bytes out = untouched;
  EXPECT_EQ(encode_eager_prefix(static_cast<Tag>(1), 0, std::span<std::byte>(out).first(15)), 0u);
  EXPECT_EQ(out, untouched);
  for (const Golden& g : goldens()) {
    SCOPED_TRACE(g.name);
    Bytes header_out = untouched;
    EXPECT_EQ(encode_header(g.frame, std::span<std::byte>(header_out).first(g.wire.size() - 1)), 0u);
    EXPECT_EQ(header_out, untouched);
  }
#else
  GTEST_SKIP() << "asserts are on";
#endif
}

TEST(FrameNames, ToString) {
  EXPECT_EQ(to_string(FrameType::kEager), "EAGER");
  EXPECT_EQ(to_string(FrameType::kRts), "RTS");
  EXPECT_EQ(to_string(FrameType::kCts), "CTS");
  EXPECT_EQ(to_string(FrameType::kChunk), "CHUNK");
  EXPECT_EQ(to_string(FrameType::kCredit), "CREDIT");
  EXPECT_EQ(to_string(FrameType::kGoodbye), "GOODBYE");
  EXPECT_EQ(to_string(FrameType::kPut), "PUT");
  EXPECT_EQ(to_string(FrameType::kGet), "GET");
  EXPECT_EQ(to_string(FrameType::kAtomic), "ATOMIC");
  EXPECT_EQ(to_string(FrameType::kResp), "RESP");
  EXPECT_EQ(to_string(FrameType::kAbort), "ABORT");
  EXPECT_EQ(to_string(FrameType::kHeartbeat), "HEARTBEAT");
  EXPECT_EQ(to_string(FrameType::kHost), "HOST");
  EXPECT_EQ(to_string(FrameType::kPull), "PULL");
  EXPECT_EQ(to_string(FrameType::kPulled), "PULLED");
  EXPECT_EQ(to_string(FrameType::kShm), "SHM");
  EXPECT_EQ(to_string(FrameType::kReceived), "RECEIVED");
  EXPECT_EQ(to_string(FrameType::kRetire), "RETIRE");
  EXPECT_EQ(to_string(FrameType::kRejoined), "REJOINED");
  EXPECT_EQ(to_string(FrameType::kHandled), "HANDLED");
  EXPECT_EQ(to_string(FrameType::kMap), "MAP");
  EXPECT_EQ(to_string(FrameType::kPlaced), "PLACED");
  EXPECT_EQ(to_string(FrameType::kPlacedShort), "PLACED_SHORT");
  EXPECT_EQ(to_string(static_cast<FrameType>(24)), "unknown");
  EXPECT_EQ(to_string(static_cast<FrameType>(0)), "unknown");
  EXPECT_EQ(to_string(static_cast<FrameType>(200)), "unknown");
}

TEST(FrameSizes, MatchProtocolDoc) {
  EXPECT_EQ(encoded_size(RtsFrame{}), 32u);
  EXPECT_EQ(encoded_size(CtsFrame{}), 32u);
  EXPECT_EQ(encoded_size(ChunkFrame{}), 32u);
  EXPECT_EQ(encoded_size(CreditFrame{}), 16u);
  EXPECT_EQ(encoded_size(GoodbyeFrame{}), 16u);
  EXPECT_EQ(encoded_size(EagerFrame{}), 16u);
  EXPECT_EQ(encoded_size(EagerFrame{.payload = kEagerPayload}), 19u);
  EXPECT_EQ(encoded_size(PutFrame{}), 80u);
  EXPECT_EQ(encoded_size(PutFrame{.length = 3, .inline_data = true, .payload = kEagerPayload}), 83u);
  EXPECT_EQ(encoded_size(GetFrame{}), 72u);
  EXPECT_EQ(encoded_size(AtomicFrame{}), 88u);
  EXPECT_EQ(encoded_size(RespFrame{}), 32u);
  EXPECT_EQ(encoded_size(RespFrame{.inline_data = true, .payload = kEagerPayload}), 35u);
  EXPECT_EQ(encoded_size(AbortFrame{}), 24u);
  EXPECT_EQ(encoded_size(HeartbeatFrame{}), 16u);
  EXPECT_EQ(encoded_size(HostFrame{}), 56u);
  EXPECT_EQ(encoded_size(HostFrame{.can_pull = true}), 56u);
  EXPECT_EQ(encoded_size(PullFrame{}), 40u);
  EXPECT_EQ(encoded_size(PullFrame{.has_crc = true}), 44u);
  EXPECT_EQ(encoded_size(PulledFrame{}), 24u);
  EXPECT_EQ(kMaxFixedFrameSize, 88u);  // ATOMIC
}

// --- one-sided (RMA) frames: round trips ------------------------------------------

TEST(RmaRoundTrip, PutBoundaries) {
  KeyBytes ones;
  ones.fill(std::byte{0xFF});  // the key is opaque to wire/: any 40 bytes travel
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x8000000000000000}, kMaxU64}) {
    for (const KeyBytes& key : {KeyBytes{}, test_key(), ones}) {
      expect_round_trip(PutFrame{.op_id = v, .key = key, .offset = v, .length = kMaxU64 - v, .payload = {}});
      expect_round_trip(PutFrame{.op_id = v, .key = key, .offset = v, .length = v, .has_notify = true, .notify = v, .payload = {}});
    }
  }
  Bytes max_payload(kEagerLimit);
  for (size_t i = 0; i < max_payload.size(); ++i) max_payload[i] = static_cast<std::byte>(i * 13);
  for (bool notify : {false, true}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{kEagerLimit}}) {
      expect_round_trip(PutFrame{.op_id = n, .key = test_key(), .offset = kMaxU64, .length = n,
                                 .has_notify = notify, .notify = notify ? kMaxU64 : 0, .inline_data = true,
                                 .payload = std::span(max_payload).first(n)});
    }
  }
  // NOTIFY with the value 0 is a notification carrying 0, not "no notification".
  expect_round_trip(PutFrame{.op_id = 1, .key = test_key(), .length = 8, .has_notify = true, .notify = 0, .payload = {}});
  // A limit of 0 still admits zero-length inline puts.
  expect_round_trip(PutFrame{.op_id = 1, .key = test_key(), .length = 0, .inline_data = true, .payload = {}},
                    DecodeLimits{.max_eager_payload = 0});
}

TEST(RmaRoundTrip, GetAndAtomicBoundaries) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x8000000000000000}, kMaxU64}) {
    expect_round_trip(GetFrame{.op_id = v, .key = test_key(), .offset = v, .length = kMaxU64 - v});
    expect_round_trip(AtomicFrame{.op_id = v, .key = test_key(), .offset = v, .op = AtomicOp::kFetchAdd,
                                  .operand = v, .compare = 0});
    expect_round_trip(AtomicFrame{.op_id = v, .key = test_key(), .offset = kMaxU64 - v,
                                  .op = AtomicOp::kCompareSwap, .operand = v, .compare = kMaxU64 - v});
  }
}

TEST(RmaRoundTrip, RespEveryStatusAndInlineData) {
  for (uint32_t status = 0; status <= 7; ++status) {
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, kMaxU64}) {
      expect_round_trip(RespFrame{.op_id = v, .status = static_cast<RmaStatus>(status), .value = kMaxU64 - v, .payload = {}});
    }
  }
  Bytes max_payload(kEagerLimit, std::byte{0x3C});
  for (size_t n : {size_t{0}, size_t{1}, size_t{kEagerLimit}}) {
    expect_round_trip(RespFrame{.op_id = n, .status = RmaStatus::kOk, .value = 0, .inline_data = true,
                                .payload = std::span(max_payload).first(n)});
  }
  expect_round_trip(RespFrame{.op_id = 1, .inline_data = true, .payload = {}}, DecodeLimits{.max_eager_payload = 0});
}

TEST(RmaRoundTrip, InlinePayloadsPointIntoInput) {
  const Bytes put = golden("put_inline_notify");
  auto r = decode_frame(put, kLimits);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const auto& p = std::get<PutFrame>(r->frame);
  EXPECT_EQ(p.payload.data(), put.data() + kFrameHeaderSize + kPutBodySize);
  EXPECT_EQ(p.payload.size(), 3u);

  const Bytes resp = golden("resp_inline");
  auto r2 = decode_frame(resp, kLimits);
  ASSERT_TRUE(r2.is_ok()) << r2.status().to_string();
  const auto& rf = std::get<RespFrame>(r2->frame);
  EXPECT_EQ(rf.payload.data(), resp.data() + kFrameHeaderSize + kRespBodySize);
  EXPECT_EQ(rf.payload.size(), 3u);
}

// The encoder writes only what the layout can carry: fields that must be 0 are sent as
// 0 and a payload without its INLINE flag is not sent at all.
TEST(RmaEncode, NormalisesFieldsTheFlagsSayAreAbsent) {
  Bytes wire = encode_to_vector(PutFrame{.op_id = 4, .key = test_key(), .offset = 0x1000,
                                         .length = 0x0000000100000000, .has_notify = false, .notify = 99,
                                         .inline_data = false, .payload = kEagerPayload});
  EXPECT_EQ(wire, golden("put"));
  wire = encode_to_vector(AtomicFrame{.op_id = 0x0102030405060708, .key = test_key(), .offset = 0x1112131415161718,
                                      .op = AtomicOp::kFetchAdd, .operand = 0x2122232425262728, .compare = 77});
  EXPECT_EQ(wire, golden("atomic_fetch_add"));
  wire = encode_to_vector(RespFrame{.op_id = 0x0102030405060708, .status = RmaStatus::kOutOfRange,
                                    .inline_data = false, .payload = kEagerPayload});
  EXPECT_EQ(wire, golden("resp"));
}

// encode() must refuse an inline payload its u32 body_length cannot describe. The bound
// depends on the fixed body in front of the payload (8 for EAGER, 72 for PUT, 24 for
// RESP): a bound computed for EAGER let a PUT/RESP body_length wrap around and describe
// a far shorter frame than the bytes written. Address space only, never touched.
TEST(RmaEncode, RefusesPayloadTheBodyLengthCannotDescribe) {
#ifdef NDEBUG
  constexpr size_t kPage = 4096;
  constexpr size_t kMapSize = (size_t{1} << 32) + 2 * kPage;
  void* map = mmap(nullptr, kMapSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) GTEST_SKIP() << "no 4 GiB of address space for the test";
  auto* base = static_cast<std::byte*>(map);
  ASSERT_EQ(mprotect(base, kPage, PROT_READ | PROT_WRITE), 0);  // only the first page is writable
  const std::span<std::byte> out(base, kMapSize);
  for (size_t fixed : {kPutBodySize, kRespBodySize, kEagerBodySize}) {
    SCOPED_TRACE(fixed);
    const size_t largest = size_t{kMaxU32} - fixed;  // body_length == UINT32_MAX
    for (size_t n : {largest + 1, size_t{kMaxU32} - kEagerBodySize, size_t{kMaxU32}}) {
      if (n <= largest) continue;
      const std::span<const std::byte> payload(base + kPage, n);  // PROT_NONE: reading it would fault
      Frame f;
      if (fixed == kPutBodySize) {
        f = PutFrame{.op_id = 1, .length = n, .inline_data = true, .payload = payload};
      } else if (fixed == kRespBodySize) {
        f = RespFrame{.op_id = 1, .inline_data = true, .payload = payload};
      } else {
        f = EagerFrame{.tag = Tag{1}, .payload = payload};
      }
      EXPECT_EQ(encode(f, out), 0u) << "payload " << n;
      EXPECT_EQ(out[0], std::byte{0}) << "the header was written";
    }
  }
  munmap(map, kMapSize);
#else
  GTEST_SKIP() << "asserts are on";
#endif
}

// --- one-sided (RMA) frames: malformed --------------------------------------------

void put_le(Bytes& b, size_t at, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}

Bytes header(uint8_t type, uint8_t flags, uint32_t body_length) {
  Bytes h = bytes({type, flags, 0, 0, 0, 0, 0, 0});
  put_le(h, 4, body_length, 4);
  return h;
}

// Byte offsets in the whole frame (header included) of the fields the tests poke.
constexpr size_t kPutLengthAt = kFrameHeaderSize + 56;
constexpr size_t kPutNotifyAt = kFrameHeaderSize + 64;
constexpr size_t kAtomicOpcodeAt = kFrameHeaderSize + 56;
constexpr size_t kAtomicReservedAt = kFrameHeaderSize + 60;
constexpr size_t kAtomicCompareAt = kFrameHeaderSize + 72;
constexpr size_t kRespStatusAt = kFrameHeaderSize + 8;
constexpr size_t kRespReservedAt = kFrameHeaderSize + 12;

TEST(RmaReject, ChunkKindThree) {
  for (const char* name : {"chunk", "chunk_put", "chunk_get"}) {
    Bytes wire = golden(name);
    wire[1] = std::byte{0x03};
    expect_protocol_error(wire, "CHUNK frame: unknown kind 3");
    // Kind 3 can never be valid: refused as soon as the flags byte is in.
    expect_protocol_error(Bytes(wire.begin(), wire.begin() + 2), "CHUNK frame: unknown kind 3");
  }
  // 4..63, 0x44..0x7F, 0x84..0xBF and 0xC4..255 set bits the CHUNK flags byte does not
  // define (0x80 is CRC, 0x40 RESEND).
  for (int kind = 4; kind < 256; ++kind) {
    if ((kind & 0x3F) < 4) continue;
    Bytes wire = golden("chunk");
    wire[1] = static_cast<std::byte>(kind);
    expect_protocol_error(wire, "has undefined bits");
  }
  Bytes with_crc = golden("chunk");
  with_crc[1] = std::byte{0x83};
  expect_protocol_error(Bytes(with_crc.begin(), with_crc.begin() + 2), "CHUNK frame: unknown kind 3");
}

TEST(RmaReject, PutInlinePayloadSizeNotLength) {
  for (uint64_t length : {uint64_t{0}, uint64_t{2}, uint64_t{4}, uint64_t{kEagerLimit}, kMaxU64}) {
    Bytes wire = golden("put_inline_notify");  // 3 inline bytes
    put_le(wire, kPutLengthAt, length, 8);
    expect_protocol_error(wire, "PUT frame: length " + std::to_string(length) + " but 3 inline bytes");
  }
  // The same from the payload side: length 0 (a zero-length put) with a byte attached.
  Bytes wire = golden("put_inline_empty");
  wire.push_back(std::byte{0x11});
  put_le(wire, 4, kPutBodySize + 1, 4);
  expect_protocol_error(wire, "PUT frame: length 0 but 1 inline bytes");
}

TEST(RmaReject, PutNotifyValueWithoutNotifyFlag) {
  for (const char* name : {"put", "put_inline"}) {
    for (size_t i = 0; i < 8; ++i) {
      Bytes wire = golden(name);
      wire[kPutNotifyAt + i] = std::byte{0x01};
      expect_protocol_error(wire, "PUT frame: notify value without the NOTIFY flag");
    }
  }
  // Clearing NOTIFY on a frame that carries a value is the same violation.
  Bytes wire = golden("put_notify");
  wire[1] = std::byte{0x00};
  expect_protocol_error(wire, "PUT frame: notify value without the NOTIFY flag");
}

TEST(RmaReject, InlinePayloadOverEagerLimitFromHeaderAlone) {
  struct Case {
    uint8_t type, flags;
    uint8_t flags_without_inline;
    const char* name;
    size_t fixed;
  };
  for (const Case& c : {Case{7, 0x02, 0x00, "PUT", kPutBodySize}, Case{7, 0x03, 0x01, "PUT", kPutBodySize},
                        Case{10, 0x01, 0x00, "RESP", kRespBodySize}}) {
    SCOPED_TRACE(std::string(c.name) + " flags " + std::to_string(c.flags));
    const auto body = static_cast<uint32_t>(c.fixed + kEagerLimit + 1);
    expect_protocol_error(header(c.type, c.flags, body),
                          std::string(c.name) + " frame: inline payload of 4097 bytes (body_length " +
                              std::to_string(body) + ") exceeds eager_limit 4096");
    expect_protocol_error(header(c.type, c.flags, kMaxU32), "exceeds eager_limit 4096");
    expect_protocol_error(header(c.type, c.flags, static_cast<uint32_t>(c.fixed + 1)), "inline payload of 1 bytes",
                          DecodeLimits{.max_eager_payload = 0});
    // Exactly at the limit: the header is fine, the decoder waits for the body.
    auto r = decode_frame(header(c.type, c.flags, static_cast<uint32_t>(c.fixed + kEagerLimit)), kLimits);
    EXPECT_EQ(r.status().code(), StatusCode::kInProgress) << r.status().to_string();
    // Without INLINE the same lengths are simply the wrong fixed body length.
    expect_protocol_error(header(c.type, c.flags_without_inline, body),
                          std::string(c.name) + " frame: body_length " + std::to_string(body) + ", expected " +
                              std::to_string(c.fixed));
  }
}

TEST(RmaReject, InlineBodyShorterThanFixedPart) {
  for (uint32_t len : {uint32_t{0}, uint32_t{8}, uint32_t{kPutBodySize - 1}}) {
    expect_protocol_error(header(7, 0x02, len),
                          "PUT frame: body_length " + std::to_string(len) + " is shorter than its 72-byte fixed part");
    expect_protocol_error(header(7, 0x03, len), "is shorter than its 72-byte fixed part");
  }
  for (uint32_t len : {uint32_t{0}, uint32_t{8}, uint32_t{kRespBodySize - 1}}) {
    expect_protocol_error(header(10, 0x01, len),
                          "RESP frame: body_length " + std::to_string(len) + " is shorter than its 24-byte fixed part");
  }
}

TEST(RmaReject, AtomicUnknownOpcode) {
  for (uint32_t op : {0u, 3u, 0x100u, 0x01000001u, kMaxU32}) {
    for (const char* name : {"atomic_fetch_add", "atomic_compare_swap"}) {
      Bytes wire = golden(name);
      put_le(wire, kAtomicOpcodeAt, op, 4);
      expect_protocol_error(wire, "ATOMIC frame: unknown opcode " + std::to_string(op));
    }
  }
}

TEST(RmaReject, AtomicReservedNonzero) {
  for (size_t i = 0; i < 4; ++i) {
    for (const char* name : {"atomic_fetch_add", "atomic_compare_swap"}) {
      Bytes wire = golden(name);
      wire[kAtomicReservedAt + i] = std::byte{0x80};
      expect_protocol_error(wire, "ATOMIC frame: reserved 0x");
    }
  }
}

TEST(RmaReject, FetchAddWithNonzeroCompare) {
  for (size_t i = 0; i < 8; ++i) {
    Bytes wire = golden("atomic_fetch_add");
    wire[kAtomicCompareAt + i] = std::byte{0x01};
    expect_protocol_error(wire, "ATOMIC frame: fetch_add with a nonzero compare field");
  }
  // Turning a compare_swap (compare set) into a fetch_add is the same violation.
  Bytes wire = golden("atomic_compare_swap");
  put_le(wire, kAtomicOpcodeAt, 1, 4);
  expect_protocol_error(wire, "fetch_add with a nonzero compare field");
}

TEST(RmaReject, RespUnknownStatus) {
  for (uint32_t status : {9u, 10u, 0x100u, 0x01000000u, kMaxU32}) {
    for (const char* name : {"resp", "resp_atomic", "resp_inline"}) {
      Bytes wire = golden(name);
      put_le(wire, kRespStatusAt, status, 4);
      expect_protocol_error(wire, "RESP frame: unknown status " + std::to_string(status));
    }
  }
}

TEST(RmaReject, RespReservedNonzero) {
  for (size_t i = 0; i < 4; ++i) {
    for (const char* name : {"resp", "resp_inline"}) {
      Bytes wire = golden(name);
      wire[kRespReservedAt + i] = std::byte{0x01};
      expect_protocol_error(wire, "RESP frame: reserved 0x");
    }
  }
}

TEST(RmaReject, RespInlineWithFailureStatus) {
  for (uint32_t status = 1; status <= 7; ++status) {
    for (const char* name : {"resp_inline", "resp_inline_empty"}) {
      Bytes wire = golden(name);
      put_le(wire, kRespStatusAt, status, 4);
      expect_protocol_error(wire, "RESP frame: inline data with a failure status");
    }
    // Without INLINE every status is a legal verdict.
    Bytes wire = golden("resp");
    put_le(wire, kRespStatusAt, status, 4);
    EXPECT_TRUE(decode_frame(wire, kLimits).is_ok()) << "status " << status;
  }
}

TEST(RmaTruncation, InlineFramesWaitForTheirWholeBody) {
  // A malformed inline PUT (length says 3, the body carries 5) is only judged once all
  // of it is in; every shorter prefix is "read more", never an error.
  Bytes wire = golden("put_inline_notify");
  wire.push_back(std::byte{0x01});
  wire.push_back(std::byte{0x02});
  put_le(wire, 4, kPutBodySize + 5, 4);
  for (size_t n = 0; n < wire.size(); ++n) {
    auto r = decode_frame(std::span<const std::byte>(wire).first(n), kLimits);
    ASSERT_EQ(r.status().code(), StatusCode::kInProgress) << "prefix " << n << ": " << r.status().to_string();
  }
  expect_protocol_error(wire, "PUT frame: length 3 but 5 inline bytes");
}

// --- ABORT ---------------------------------------------------------------------------

TEST(AbortFrame, EveryKindAndErrorCodeRoundTrips) {
  for (ChunkKind kind : {ChunkKind::kMessage, ChunkKind::kPut, ChunkKind::kGet}) {
    for (uint8_t code = static_cast<uint8_t>(StatusCode::kNoResource); code <= static_cast<uint8_t>(StatusCode::kDeviceFailed);
         ++code) {
      expect_round_trip(AbortFrame{.id = kMaxU64 - code, .kind = kind, .code = static_cast<StatusCode>(code)});
    }
  }
}

TEST(AbortFrame, RefusesCodesThatAreNotErrorsAndNonzeroReserved) {
  for (int code : {0, 1, 16, 0xFF}) {  // ok, in_progress, and past the last code
    Bytes wire = golden("abort");
    wire[16] = static_cast<std::byte>(code);
    expect_protocol_error(wire, "ABORT frame: code " + std::to_string(code) + " is not an error");
  }
  for (size_t i = 17; i < 24; ++i) {
    Bytes wire = golden("abort");
    wire[i] = std::byte{0x01};
    expect_protocol_error(wire, "ABORT frame: reserved byte " + std::to_string(i - 8) + " is not 0");
  }
  Bytes kind3 = golden("abort");
  kind3[1] = std::byte{0x03};
  expect_protocol_error(kind3, "ABORT frame: unknown kind 3");
}

// --- same-host pulls: HOST, PULL, PULLED ----------------------------------------------

// Byte offsets in the whole frame (header included), as docs/protocol.md lays them out.
constexpr size_t kHostPidAt = kFrameHeaderSize + 0;
constexpr size_t kHostReservedAt = kFrameHeaderSize + 4;
constexpr size_t kHostBootIdAt = kFrameHeaderSize + 8;
constexpr size_t kHostNetnsAt = kFrameHeaderSize + 24;
constexpr size_t kHostProbeAddressAt = kFrameHeaderSize + 32;
constexpr size_t kHostProbeValueAt = kFrameHeaderSize + 40;
constexpr size_t kPullRecvIdAt = kFrameHeaderSize + 0;
constexpr size_t kPullOffsetAt = kFrameHeaderSize + 8;
constexpr size_t kPullLengthAt = kFrameHeaderSize + 16;
constexpr size_t kPullReservedAt = kFrameHeaderSize + 20;
constexpr size_t kPullAddressAt = kFrameHeaderSize + 24;
constexpr size_t kPullCrcAt = kFrameHeaderSize + 32;
constexpr size_t kPulledRecvIdAt = kFrameHeaderSize + 0;
constexpr size_t kPulledLengthAt = kFrameHeaderSize + 8;
constexpr size_t kPulledReservedAt = kFrameHeaderSize + 12;

constexpr ChunkKind kEveryKind[] = {ChunkKind::kMessage, ChunkKind::kPut, ChunkKind::kGet};

template <typename T>
T decode_as(const Bytes& wire) {
  auto r = decode_frame(wire, kLimits);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return T{};
  EXPECT_EQ(r->consumed, wire.size());
  EXPECT_TRUE(std::holds_alternative<T>(r->frame)) << "type " << r->frame.index() + 1;
  return std::holds_alternative<T>(r->frame) ? std::get<T>(r->frame) : T{};
}

std::string reserved_message(const char* frame, size_t byte) {
  char value[16];
  std::snprintf(value, sizeof value, "0x%08x", 0x80u << (8 * byte));
  return std::string(frame) + " frame: reserved " + value + ", must be 0";
}

TEST(SameHostRoundTrip, HostEveryFieldAndCanPull) {
  std::array<std::byte, 16> ones;
  ones.fill(std::byte{0xFF});
  for (bool can_pull : {false, true}) {
    for (const auto& boot_id : {std::array<std::byte, 16>{}, test_boot_id(), ones}) {
      for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x8000000000000000}, kMaxU64}) {
        expect_round_trip(HostFrame{.pid = static_cast<uint32_t>(v >> 32), .boot_id = boot_id, .netns = v,
                                    .probe_address = kMaxU64 - v, .probe_value = v, .can_pull = can_pull});
        expect_round_trip(HostFrame{.pid = static_cast<uint32_t>(v), .boot_id = boot_id, .netns = kMaxU64 - v,
                                    .probe_address = v, .probe_value = kMaxU64 - v, .can_pull = can_pull});
      }
    }
  }
}

TEST(SameHostRoundTrip, PullEveryKindWithAndWithoutCrc) {
  for (ChunkKind kind : kEveryKind) {
    for (bool crc : {false, true}) {
      for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x8000000000000000}, kMaxU64}) {
        SCOPED_TRACE(std::to_string(static_cast<int>(kind)) + (crc ? " crc " : " ") + std::to_string(v));
        expect_round_trip(PullFrame{.recv_id = v, .offset = v, .length = 1, .address = kMaxU64 - v, .kind = kind,
                                    .has_crc = crc, .crc = crc ? static_cast<uint32_t>(v) : 0});
        expect_round_trip(PullFrame{.recv_id = kMaxU64 - v, .offset = kMaxU64 - v, .length = kMaxU32, .address = v,
                                    .kind = kind, .has_crc = crc, .crc = crc ? kMaxU32 : 0});
      }
    }
  }
}

TEST(SameHostRoundTrip, PulledEveryKind) {
  for (ChunkKind kind : kEveryKind) {
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x8000000000000000}, kMaxU64}) {
      expect_round_trip(PulledFrame{.recv_id = v, .length = 1, .kind = kind});
      expect_round_trip(PulledFrame{.recv_id = kMaxU64 - v, .length = kMaxU32, .kind = kind});
      expect_round_trip(PulledFrame{.recv_id = v, .length = static_cast<uint32_t>(v | 1), .kind = kind});
    }
  }
}

// Each field of the three frames sits at the offset docs/protocol.md gives it: a value
// written there by hand comes out in that field, and in no other.
TEST(SameHostLayout, EachFieldAtItsDocumentedOffset) {
  {
    Bytes wire = golden("host");
    put_le(wire, kHostPidAt, 0xA0A1A2A3, 4);
    put_le(wire, kHostBootIdAt, 0xC0C1C2C3C4C5C6C7, 8);
    put_le(wire, kHostBootIdAt + 8, 0xD0D1D2D3D4D5D6D7, 8);
    put_le(wire, kHostNetnsAt, 0xE0E1E2E3E4E5E6E7, 8);
    put_le(wire, kHostProbeAddressAt, 0xF0F1F2F3F4F5F6F7, 8);
    put_le(wire, kHostProbeValueAt, 0x9091929394959697, 8);
    const HostFrame f = decode_as<HostFrame>(wire);
    EXPECT_EQ(f.pid, 0xA0A1A2A3u);
    EXPECT_EQ(f.boot_id[0], std::byte{0xC7});   // byte 0 of the boot id is the frame's byte 16
    EXPECT_EQ(f.boot_id[7], std::byte{0xC0});
    EXPECT_EQ(f.boot_id[8], std::byte{0xD7});
    EXPECT_EQ(f.boot_id[15], std::byte{0xD0});
    EXPECT_EQ(f.netns, 0xE0E1E2E3E4E5E6E7u);
    EXPECT_EQ(f.probe_address, 0xF0F1F2F3F4F5F6F7u);
    EXPECT_EQ(f.probe_value, 0x9091929394959697u);
    EXPECT_FALSE(f.can_pull);
  }
  {
    Bytes wire = golden("pull_crc");
    put_le(wire, kPullRecvIdAt, 0xA0A1A2A3A4A5A6A7, 8);
    put_le(wire, kPullOffsetAt, 0xB0B1B2B3B4B5B6B7, 8);
    put_le(wire, kPullLengthAt, 0xC0C1C2C3, 4);
    put_le(wire, kPullAddressAt, 0xD0D1D2D3D4D5D6D7, 8);
    put_le(wire, kPullCrcAt, 0xE0E1E2E3, 4);
    const PullFrame f = decode_as<PullFrame>(wire);
    EXPECT_EQ(f.recv_id, 0xA0A1A2A3A4A5A6A7u);
    EXPECT_EQ(f.offset, 0xB0B1B2B3B4B5B6B7u);
    EXPECT_EQ(f.length, 0xC0C1C2C3u);
    EXPECT_EQ(f.address, 0xD0D1D2D3D4D5D6D7u);
    EXPECT_EQ(f.kind, ChunkKind::kPut);
    EXPECT_TRUE(f.has_crc);
    EXPECT_EQ(f.crc, 0xE0E1E2E3u);
    EXPECT_EQ(wire.size(), kFrameHeaderSize + kPullBodySize + kCrcSize);
  }
  {
    Bytes wire = golden("pulled_put");
    put_le(wire, kPulledRecvIdAt, 0xA0A1A2A3A4A5A6A7, 8);
    put_le(wire, kPulledLengthAt, 0xB0B1B2B3, 4);
    const PulledFrame f = decode_as<PulledFrame>(wire);
    EXPECT_EQ(f.recv_id, 0xA0A1A2A3A4A5A6A7u);
    EXPECT_EQ(f.length, 0xB0B1B2B3u);
    EXPECT_EQ(f.kind, ChunkKind::kPut);
  }
}

// The encoder writes only what the layout can carry: a crc without its flag is not sent.
TEST(SameHostEncode, PullCrcOnlyWithItsFlag) {
  const Bytes wire = encode_to_vector(PullFrame{.recv_id = 0x0102030405060708, .offset = 0x1112131415161718,
                                                .length = 0x21222324, .address = 0x3132333435363738,
                                                .has_crc = false, .crc = 0xDEADBEEF});
  EXPECT_EQ(wire, golden("pull"));
}

TEST(SameHostReject, PullAndPulledKindThree) {
  for (const char* name : {"pull", "pull_put", "pull_crc"}) {
    SCOPED_TRACE(name);
    Bytes wire = golden(name);
    wire[1] = (wire[1] & std::byte{0x80}) | std::byte{0x03};  // the CRC flag kept as it was
    expect_protocol_error(wire, "PULL frame: unknown kind 3");
    // Kind 3 can never be valid: refused as soon as the flags byte is in.
    expect_protocol_error(Bytes(wire.begin(), wire.begin() + 2), "PULL frame: unknown kind 3");
  }
  for (const char* name : {"pulled", "pulled_put"}) {
    SCOPED_TRACE(name);
    Bytes wire = golden(name);
    wire[1] = std::byte{0x03};
    expect_protocol_error(wire, "PULLED frame: unknown kind 3");
    expect_protocol_error(Bytes(wire.begin(), wire.begin() + 2), "PULLED frame: unknown kind 3");
  }
}

TEST(SameHostReject, UndefinedFlagBits) {
  // HOST defines CAN_PULL (0x01) alone; PULL its kind and CRC; PULLED its kind alone.
  struct Case {
    const char* golden;
    const char* name;
    uint8_t defined;
  };
  for (const Case& c : {Case{"host", "HOST", 0x01}, Case{"pull", "PULL", 0x83}, Case{"pulled", "PULLED", 0x03}}) {
    for (int flags = 0; flags < 256; ++flags) {
      if ((flags & ~c.defined) == 0) continue;
      SCOPED_TRACE(std::string(c.golden) + " flags " + std::to_string(flags));
      Bytes wire = golden(c.golden);
      wire[1] = static_cast<std::byte>(flags);
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", flags);
      const std::string message = std::string(c.name) + " frame: flags " + hex + " has undefined bits";
      expect_protocol_error(wire, message);
      expect_protocol_error(Bytes(wire.begin(), wire.begin() + 2), message);
    }
  }
}

TEST(SameHostReject, PulledCarriesNoCrc) {
  for (ChunkKind kind : kEveryKind) {
    const auto flags = static_cast<uint8_t>(kCrcFlag | static_cast<uint8_t>(kind));
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", flags);
    const std::string message = std::string("PULLED frame: flags ") + hex + " has undefined bits";
    Bytes wire = golden("pulled");
    wire[1] = static_cast<std::byte>(flags);
    expect_protocol_error(wire, message);
    // Not even with room for a CRC after the body: the flag itself is refused.
    wire.insert(wire.end(), {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}});
    put_le(wire, 4, kPulledBodySize + kCrcSize, 4);
    expect_protocol_error(wire, message);
    expect_protocol_error(header(15, flags, static_cast<uint32_t>(kPulledBodySize + kCrcSize)), message);
  }
}

TEST(SameHostReject, PullCrcFlagAndBodyLengthDisagree) {
  // The flag without the 4 bytes of the CRC, and the 4 bytes without the flag.
  Bytes wire = golden("pull");
  wire[1] = std::byte{0x80};
  expect_protocol_error(wire, "PULL frame: body_length 32, expected 36");
  expect_protocol_error(Bytes(wire.begin(), wire.begin() + kFrameHeaderSize), "PULL frame: body_length 32, expected 36");
  wire = golden("pull_crc");
  wire[1] = std::byte{0x01};
  expect_protocol_error(wire, "PULL frame: body_length 36, expected 32");
}

TEST(SameHostReject, ReservedNonzero) {
  for (size_t i = 0; i < 4; ++i) {
    for (const char* name : {"host", "host_can_pull"}) {
      Bytes wire = golden(name);
      wire[kHostReservedAt + i] = std::byte{0x80};
      expect_protocol_error(wire, reserved_message("HOST", i));
    }
    for (const char* name : {"pull", "pull_put", "pull_crc"}) {
      Bytes wire = golden(name);
      wire[kPullReservedAt + i] = std::byte{0x80};
      expect_protocol_error(wire, reserved_message("PULL", i));
    }
    for (const char* name : {"pulled", "pulled_put"}) {
      Bytes wire = golden(name);
      wire[kPulledReservedAt + i] = std::byte{0x80};
      expect_protocol_error(wire, reserved_message("PULLED", i));
    }
  }
}

// RECEIVED and RETIRE: their 6 reserved bytes must be 0.
TEST(FailoverReject, ReservedBytes) {
  for (const char* name : {"received", "retire"}) {
    for (size_t at = 2; at < 8; ++at) {
      Bytes wire = golden(name);
      wire[kFrameHeaderSize + at] = std::byte{0x01};
      expect_protocol_error(wire, "reserved bytes not 0");
    }
  }
}

// SHM (docs/protocol.md, "Shared-memory channel"): each field only as its op allows.
TEST(ShmReject, FieldsTheOpDoesNotAllow) {
  const auto with = [](const char* name, size_t at, uint64_t value) {
    Bytes wire = golden(name);
    put_le(wire, kFrameHeaderSize + at, value, 4);
    return wire;
  };
  for (uint64_t op : {0u, 5u, 0xFFFFFFFFu}) expect_protocol_error(with("shm_offer", 0, op), "SHM frame: unknown op");
  expect_protocol_error(with("shm_offer", 4, 0x80000000u), "SHM frame: descriptors");
  expect_protocol_error(with("shm_offer", 8, 0x0102), "SHM frame: descriptors");  // ring_fd == wake_fd
  expect_protocol_error(with("shm_offer", 12, 5), "SHM frame: code 5");
  expect_protocol_error(with("shm_switch", 4, 3), "SHM frame: descriptors");
  expect_protocol_error(with("shm_switch", 12, 5), "SHM frame: code 5");
  expect_protocol_error(with("shm_decline", 8, 3), "SHM frame: descriptors");
  for (uint64_t code : {0u, 1u, 17u}) expect_protocol_error(with("shm_decline", 12, code), "SHM frame: code");
  Bytes flagged = golden("shm_switch");
  flagged[1] = std::byte{0x01};
  expect_protocol_error(flagged, "flags 0x01 has undefined bits");
  Bytes short_body = golden("shm_switch");
  short_body[4] = std::byte{0x0C};
  short_body.resize(kFrameHeaderSize + 12);
  expect_protocol_error(short_body, "");
}

// MAP (docs/protocol.md, "Direct mappings"): each field only as its op allows.
TEST(MapReject, FieldsTheOpDoesNotAllow) {
  const auto with = [](const char* name, size_t at, uint64_t value, int width = 4) {
    Bytes wire = golden(name);
    put_le(wire, kFrameHeaderSize + at, value, width);
    return wire;
  };
  for (uint64_t op : {0u, 6u, 0xFFFFFFFFu}) expect_protocol_error(with("map_request", 0, op), "MAP frame: unknown op");
  expect_protocol_error(with("map_request", 4, 3), "do not fit op 1");
  expect_protocol_error(with("map_request", 8, 5), "do not fit op 1");
  expect_protocol_error(with("map_request", 16, 4096, 8), "do not fit op 1");
  for (const char* name : {"map_request", "map_refuse", "map_credit", "map_ack"}) {
    expect_protocol_error(with(name, 12, 1), "MAP frame: grant number 1 with op");
  }
  expect_protocol_error(with("map_grant", 12, kMaxGrantNumber + 1), "MAP frame: grant number 4097 with op 2");
  EXPECT_TRUE(decode_frame(with("map_grant", 12, kMaxGrantNumber), kLimits).is_ok());
  expect_protocol_error(with("map_grant", 4, 0x80000000u), "do not fit op 2");
  expect_protocol_error(with("map_grant", 8, 5), "do not fit op 2");
  expect_protocol_error(with("map_grant", 16, 0, 8), "do not fit op 2");
  expect_protocol_error(with("map_refuse", 4, 3), "do not fit op 3");
  expect_protocol_error(with("map_refuse", 16, 4096, 8), "do not fit op 3");
  for (uint64_t code : {0u, 1u, 17u}) expect_protocol_error(with("map_refuse", 8, code), "do not fit op 3");
  expect_protocol_error(with("map_credit", 4, 3), "do not fit op 4");
  expect_protocol_error(with("map_credit", 8, 5), "do not fit op 4");
  expect_protocol_error(with("map_credit", 16, 0, 8), "do not fit op 4");
  expect_protocol_error(with("map_credit", 16, kMaxPlacedCredits + 1, 8), "do not fit op 4");
  expect_protocol_error(with("map_credit", 24, 1, 1), "do not fit op 4");  // a key where none goes
  EXPECT_TRUE(decode_frame(with("map_credit", 16, kMaxPlacedCredits, 8), kLimits).is_ok());
  expect_protocol_error(with("map_ack", 4, 3), "do not fit op 5");
  expect_protocol_error(with("map_ack", 16, 0, 8), "do not fit op 5");
  expect_protocol_error(with("map_ack", 30, 1, 1), "do not fit op 5");
  EXPECT_TRUE(decode_frame(with("map_ack", 16, UINT64_MAX, 8), kLimits).is_ok());
  Bytes flagged = golden("map_request");
  flagged[1] = std::byte{0x01};
  expect_protocol_error(flagged, "flags 0x01 has undefined bits");
}

/// Golden frame `name` (a range of 258 bytes whose u64 offset is at body offset `at`)
/// refused with the offset 2^64 - 1 (the range ends past 2^64), and with flag `flag`,
/// which its type does not define.
void expect_range_past_the_end_and_flag_refused(const char* name, size_t at, const std::string& type, uint8_t flag) {
  Bytes wire = golden(name);
  put_le(wire, kFrameHeaderSize + at, UINT64_MAX, 8);
  expect_protocol_error(wire, type + " frame: 258 bytes at offset 18446744073709551615 end past 2^64");
  Bytes flagged = golden(name);
  flagged[1] = std::byte{flag};
  expect_protocol_error(flagged, fmt::format("flags {:#04x} has undefined bits", flag));
}

// PLACED: a range that ends past 2^64 is refused before the receiver looks at the key.
TEST(PlacedReject, ARangePastTheEndOfTheAddressSpace) {
  expect_range_past_the_end_and_flag_refused("placed", 40, "PLACED", 0x01);
  Bytes end_at_top = golden("placed");
  put_le(end_at_top, kFrameHeaderSize + 40, UINT64_MAX - 0x0102, 8);  // ends exactly at 2^64: the receiver judges it
  EXPECT_TRUE(decode_frame(end_at_top, kLimits).is_ok());
}

TEST(FrameGolden, PlacedShortEncodedInPlaceIsTheSameFrame) {
  const Bytes want = golden("placed_short");
  Bytes out(want.size() + 3, std::byte{0xEE});
  ASSERT_EQ(encode_placed_short(
                PlacedShortFrame{
                    .grant = 3, .length = 0x0102, .offset = 0x10, .notify = 0x0102030405060708, .handled = 0x0A0B},
                out),
            want.size());
  EXPECT_EQ(Bytes(out.begin(), out.begin() + static_cast<ptrdiff_t>(want.size())), want);
  EXPECT_EQ(out.back(), std::byte{0xEE}) << "nothing past the frame";
}

// PLACED_SHORT: a key number outside what a GRANT can give, or a range past 2^64.
TEST(PlacedShortReject, KeyNumbersAGrantCannotGiveAndRangesPastTheEnd) {
  for (uint64_t grant : {uint64_t{0}, uint64_t{kMaxGrantNumber} + 1, uint64_t{UINT32_MAX}}) {
    Bytes wire = golden("placed_short");
    put_le(wire, kFrameHeaderSize, grant, 4);
    expect_protocol_error(wire, "PLACED_SHORT frame: grant number " + std::to_string(grant) + " outside 1..4096");
  }
  Bytes top = golden("placed_short");
  put_le(top, kFrameHeaderSize, kMaxGrantNumber, 4);
  EXPECT_TRUE(decode_frame(top, kLimits).is_ok());
  expect_range_past_the_end_and_flag_refused("placed_short", 8, "PLACED_SHORT", 0x80);
  Bytes long_body = golden("placed_short");
  long_body[4] = std::byte{0x21};
  long_body.push_back(std::byte{0});
  expect_protocol_error(long_body, "");
}

TEST(SameHostReject, LengthZero) {
  for (ChunkKind kind : kEveryKind) {
    for (bool crc : {false, true}) {
      const Bytes wire = encode_to_vector(PullFrame{.recv_id = 1, .offset = 0, .length = 0, .address = 0x1000,
                                                    .kind = kind, .has_crc = crc, .crc = 0});
      expect_protocol_error(wire, "PULL frame: length 0 (chunks are never empty)");
    }
    expect_protocol_error(encode_to_vector(PulledFrame{.recv_id = 1, .length = 0, .kind = kind}),
                          "PULLED frame: length 0 (chunks are never empty)");
  }
  for (const char* name : {"pull", "pull_put", "pull_crc"}) {
    Bytes wire = golden(name);
    put_le(wire, kPullLengthAt, 0, 4);
    expect_protocol_error(wire, "PULL frame: length 0");
  }
  for (const char* name : {"pulled", "pulled_put"}) {
    Bytes wire = golden(name);
    put_le(wire, kPulledLengthAt, 0, 4);
    expect_protocol_error(wire, "PULLED frame: length 0");
  }
}

}  // namespace
}  // namespace remora::wire
