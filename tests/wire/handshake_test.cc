// tests/wire/handshake_test.cc — HELLO / HELLO_ACK against docs/protocol.md.
#include "wire/handshake.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "remora/version.h"

namespace remora::wire {
namespace {

using Bytes = std::vector<std::byte>;

Bytes bytes(std::initializer_list<int> values) {
  Bytes out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

template <size_t N>
Bytes to_vector(const std::array<std::byte, N>& a) {
  return Bytes(a.begin(), a.end());
}

void put_u16(Bytes& b, size_t at, uint16_t v) {
  b[at] = static_cast<std::byte>(v);
  b[at + 1] = static_cast<std::byte>(v >> 8);
}

void put_u32(Bytes& b, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}

constexpr size_t kRmaWindowAt = 44;
constexpr uint32_t kMaxRmaWindow = 65536;

Hello control_hello() {
  return Hello{.version = kWireVersion,
               .role = Role::kControl,
               .capabilities = 0,
               .endpoint_id = 0,
               .attach_token = 0,
               .stream_index = 0,
               .stream_count = 4,
               .eager_limit = 8192,
               .eager_credit = 1 << 20,
               .rma_window = 256};
}

Hello data_hello() {
  return Hello{.version = kWireVersion,
               .role = Role::kData,
               .capabilities = 0,
               .endpoint_id = 0x0102030405060708,
               .attach_token = 0x1112131415161718,
               .stream_index = 3,
               .stream_count = 4,
               .eager_limit = 8192,
               .eager_credit = 1 << 20,
               .rma_window = 256};
}

void expect_same(const Hello& a, const Hello& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.capabilities, b.capabilities);
  EXPECT_EQ(a.endpoint_id, b.endpoint_id);
  EXPECT_EQ(a.attach_token, b.attach_token);
  EXPECT_EQ(a.stream_index, b.stream_index);
  EXPECT_EQ(a.stream_count, b.stream_count);
  EXPECT_EQ(a.eager_limit, b.eager_limit);
  EXPECT_EQ(a.eager_credit, b.eager_credit);
  EXPECT_EQ(a.rma_window, b.rma_window);
}

void expect_same(const HelloAck& a, const HelloAck& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.capabilities, b.capabilities);
  EXPECT_EQ(a.endpoint_id, b.endpoint_id);
  EXPECT_EQ(a.attach_token, b.attach_token);
  EXPECT_EQ(a.stream_index, b.stream_index);
  EXPECT_EQ(a.stream_count, b.stream_count);
  EXPECT_EQ(a.eager_limit, b.eager_limit);
  EXPECT_EQ(a.eager_credit, b.eager_credit);
  EXPECT_EQ(a.rma_window, b.rma_window);
}

void expect_hello_rejected(const Bytes& wire, const std::string& fragment) {
  auto r = decode_hello(wire);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos)
      << "message \"" << r.status().message() << "\" lacks \"" << fragment << "\"";
}

void expect_ack_rejected(const Bytes& wire, const std::string& fragment) {
  auto r = decode_hello_ack(wire);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos)
      << "message \"" << r.status().message() << "\" lacks \"" << fragment << "\"";
}

TEST(HelloGolden, DataHelloMatchesProtocolDoc) {
  Hello h = data_hello();
  h.capabilities = 0x2122232425262728;
  h.eager_limit = 0x31323334;
  h.eager_credit = 0x41424344;
  h.rma_window = 0xABCD;
  const Bytes expected = bytes({
      0x52, 0x4D, 0x52, 0x41,                          // magic "RMRA"
      0x01, 0x00,                                      // version
      0x02,                                            // role = data
      0x00,                                            // reserved
      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  // capabilities
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // endpoint_id
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // attach_token
      0x03, 0x00,                                      // stream_index
      0x04, 0x00,                                      // stream_count
      0x34, 0x33, 0x32, 0x31,                          // eager_limit
      0x44, 0x43, 0x42, 0x41,                          // eager_credit
      0xCD, 0xAB, 0x00, 0x00,                          // rma_window
  });
  ASSERT_EQ(expected.size(), kHelloSize);
  EXPECT_EQ(to_vector(encode_hello(h)), expected);
  auto r = decode_hello(expected);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_same(*r, h);
}

TEST(HelloGolden, AckMatchesProtocolDoc) {
  const HelloAck ack{.version = kWireVersion,
                     .status = HelloStatus::kRefused,
                     .capabilities = 0x2122232425262728,
                     .endpoint_id = 0x0102030405060708,
                     .attach_token = 0x1112131415161718,
                     .stream_index = 0x0102,
                     .stream_count = 0x0304,
                     .eager_limit = 0x31323334,
                     .eager_credit = 0x41424344,
                     .rma_window = 0x00010000};
  const Bytes expected = bytes({
      0x52, 0x4D, 0x52, 0x41,                          // magic
      0x01, 0x00,                                      // version
      0x03, 0x00,                                      // status = refused
      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  // capabilities
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // endpoint_id
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // attach_token
      0x02, 0x01,                                      // stream_index
      0x04, 0x03,                                      // stream_count
      0x34, 0x33, 0x32, 0x31,                          // eager_limit
      0x44, 0x43, 0x42, 0x41,                          // eager_credit
      0x00, 0x00, 0x01, 0x00,                          // rma_window = 65536
  });
  ASSERT_EQ(expected.size(), kHelloAckSize);
  EXPECT_EQ(to_vector(encode_hello_ack(ack)), expected);
  auto r = decode_hello_ack(expected);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_same(*r, ack);
}

TEST(HelloRoundTrip, ControlAndDataBoundaries) {
  constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
  constexpr uint32_t kMaxU32 = std::numeric_limits<uint32_t>::max();
  std::vector<Hello> cases = {control_hello(), data_hello()};
  Hello h = control_hello();
  h.stream_count = 1;
  h.capabilities = kMaxU64;  // unknown capability bits are carried, not refused
  h.eager_limit = 0;
  h.eager_credit = 0;
  cases.push_back(h);
  h.rma_window = 1;
  cases.push_back(h);
  h.stream_count = kMaxStreams;
  h.eager_limit = kMaxU32;
  h.eager_credit = kMaxU32;
  h.rma_window = kMaxRmaWindow;
  cases.push_back(h);
  h = data_hello();
  h.endpoint_id = kMaxU64;
  h.attach_token = 0;  // a random token may be 0
  h.stream_count = kMaxStreams;
  h.stream_index = kMaxStreams - 1;
  h.rma_window = kMaxRmaWindow;
  cases.push_back(h);
  h.endpoint_id = 1;
  h.attach_token = kMaxU64;
  h.stream_index = 0;
  h.stream_count = 1;
  h.rma_window = 1;
  cases.push_back(h);
  for (const Hello& c : cases) {
    const auto wire = encode_hello(c);
    auto r = decode_hello(wire);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    expect_same(*r, c);
  }
}

TEST(HelloAckRoundTrip, EveryStatusAndBoundaries) {
  for (auto status : {HelloStatus::kAccepted, HelloStatus::kVersionMismatch, HelloStatus::kBadRequest,
                      HelloStatus::kRefused, HelloStatus::kAuthenticate, HelloStatus::kUnauthenticated}) {
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, std::numeric_limits<uint64_t>::max()}) {
      // An accepted ACK carries the server's window (1..65536); a refusal may carry 0.
      const uint32_t window_choices[] = {status == HelloStatus::kAccepted ? 1u : 0u, 256u, kMaxRmaWindow};
      const HelloAck ack{.version = kWireVersion,
                         .status = status,
                         .capabilities = v,
                         .endpoint_id = v,
                         .attach_token = ~v,
                         .stream_index = static_cast<uint16_t>(v),
                         .stream_count = static_cast<uint16_t>(~v),
                         .eager_limit = static_cast<uint32_t>(v),
                         .eager_credit = static_cast<uint32_t>(~v),
                         .rma_window = window_choices[v % 3]};
      const auto wire = encode_hello_ack(ack);
      auto r = decode_hello_ack(wire);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      expect_same(*r, ack);
    }
  }
}

TEST(MagicPrefix, AnyPrefixOfTheMagicPassesAndTheFirstWrongByteFails) {
  const Bytes magic = bytes({0x52, 0x4D, 0x52, 0x41});  // "RMRA"
  for (size_t n = 0; n <= 4; ++n) {
    EXPECT_TRUE(check_magic_prefix("HELLO", std::span(magic).first(n)).is_ok()) << n << " bytes";
  }
  // More than the magic: only the magic is checked.
  Bytes longer = magic;
  longer.push_back(std::byte{0xFF});
  EXPECT_TRUE(check_magic_prefix("HELLO", longer).is_ok());
  for (size_t i = 0; i < 4; ++i) {
    Bytes wrong(magic.begin(), magic.begin() + static_cast<ptrdiff_t>(i) + 1);
    wrong[i] ^= std::byte{0x01};
    const Status s = check_magic_prefix("the reply", wrong);
    EXPECT_EQ(s.code(), StatusCode::kProtocol) << i;
    EXPECT_NE(s.message().find("not a remora peer"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("the reply"), std::string::npos) << s.message();
  }
  // The first byte of "HTTP/1.1 200 OK" is enough.
  EXPECT_EQ(check_magic_prefix("reply", bytes({'H'})).code(), StatusCode::kProtocol);
}

TEST(HelloReject, BadMagic) {
  for (size_t i = 0; i < 4; ++i) {
    Bytes wire = to_vector(encode_hello(control_hello()));
    wire[i] ^= std::byte{0x20};
    expect_hello_rejected(wire, "not a remora peer");
    Bytes ack = to_vector(encode_hello_ack(HelloAck{.version = kWireVersion}));
    ack[i] ^= std::byte{0x20};
    expect_ack_rejected(ack, "not a remora peer");
  }
  // The byte order of the magic is part of the protocol: "RMRA" read big-endian is wrong.
  Bytes wire = to_vector(encode_hello(control_hello()));
  wire[0] = std::byte{0x41};
  wire[1] = std::byte{0x52};
  wire[2] = std::byte{0x4D};
  wire[3] = std::byte{0x52};
  expect_hello_rejected(wire, "magic 0x524d5241");
  // Bad magic wins over a foreign version.
  put_u16(wire, 4, 7);
  expect_hello_rejected(wire, "not a remora peer");
}

TEST(HelloReject, WrongBufferSizeIsInvalidArgument) {
  const Bytes wire = to_vector(encode_hello(control_hello()));
  for (size_t n : {size_t{0}, size_t{4}, kHelloSize - 1}) {
    auto r = decode_hello(std::span<const std::byte>(wire).first(n));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    auto a = decode_hello_ack(std::span<const std::byte>(wire).first(n));
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  }
  Bytes longer = wire;
  longer.push_back(std::byte{0});
  EXPECT_EQ(decode_hello(longer).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_hello_ack(longer).status().code(), StatusCode::kInvalidArgument);
}

TEST(HelloVersion, OtherVersionReturnsOnlyTheVersion) {
  for (uint16_t version : {uint16_t{0}, uint16_t{2}, uint16_t{0xFFFF}}) {
    // Everything after the version is garbage that would be refused in v1.
    Bytes wire(kHelloSize, std::byte{0xEE});
    wire[0] = std::byte{0x52};
    wire[1] = std::byte{0x4D};
    wire[2] = std::byte{0x52};
    wire[3] = std::byte{0x41};
    put_u16(wire, 4, version);
    auto r = decode_hello(wire);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->version, version);
    EXPECT_EQ(r->stream_count, 0);
    EXPECT_EQ(r->endpoint_id, 0u);

    auto a = decode_hello_ack(wire);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->version, version);
    EXPECT_EQ(static_cast<uint16_t>(a->status), 0xEEEE);  // unvalidated, as sent
    EXPECT_EQ(a->endpoint_id, 0u);
  }
  // The realistic case: a v2 server answering "version mismatch".
  const auto wire = encode_hello_ack(HelloAck{.version = 2, .status = HelloStatus::kVersionMismatch});
  auto a = decode_hello_ack(wire);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->version, 2);
  EXPECT_EQ(a->status, HelloStatus::kVersionMismatch);
}

TEST(HelloReject, UnknownRole) {
  for (int role : {0, 5, 0xFF}) {
    Bytes wire = to_vector(encode_hello(control_hello()));
    wire[6] = static_cast<std::byte>(role);
    expect_hello_rejected(wire, "unknown role " + std::to_string(role));
  }
}

TEST(HelloReject, ReservedNonzero) {
  Bytes wire = to_vector(encode_hello(control_hello()));
  wire[7] = std::byte{0x01};
  expect_hello_rejected(wire, "reserved byte 7 is 0x01");
}

TEST(HelloReject, RmaWindowOutOfRange) {
  for (uint32_t window : {0u, kMaxRmaWindow + 1, 0x80000000u, std::numeric_limits<uint32_t>::max()}) {
    for (Hello h : {control_hello(), data_hello()}) {
      h.rma_window = window;
      expect_hello_rejected(to_vector(encode_hello(h)),
                            "HELLO: rma_window " + std::to_string(window) + " outside 1..65536");
    }
  }
  // Bytes 44..47 are one u32: a high byte alone pushes it out of range.
  for (size_t i = kRmaWindowAt + 2; i < kRmaWindowAt + 4; ++i) {
    Bytes wire = to_vector(encode_hello(data_hello()));
    wire[i] = std::byte{0x80};
    expect_hello_rejected(wire, "rma_window");
  }
  // The bounds themselves are fine.
  for (uint32_t window : {1u, kMaxRmaWindow}) {
    Bytes wire = to_vector(encode_hello(control_hello()));
    put_u32(wire, kRmaWindowAt, window);
    auto r = decode_hello(wire);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->rma_window, window);
  }
}

TEST(HelloReject, StreamCountOutOfRange) {
  for (uint16_t count : {uint16_t{0}, uint16_t{kMaxStreams + 1}, uint16_t{0xFFFF}}) {
    Hello h = control_hello();
    h.stream_count = count;
    expect_hello_rejected(to_vector(encode_hello(h)), "stream_count " + std::to_string(count) + " outside 1..64");
  }
}

TEST(HelloReject, StreamIndexNotBelowCount) {
  Hello h = data_hello();
  h.stream_count = 4;
  h.stream_index = 4;
  expect_hello_rejected(to_vector(encode_hello(h)), "stream_index 4 not below stream_count 4");
  h.stream_index = 0xFFFF;
  expect_hello_rejected(to_vector(encode_hello(h)), "stream_index 65535");
}

TEST(HelloReject, ControlWithDataFields) {
  Hello h = control_hello();
  h.endpoint_id = 5;
  expect_hello_rejected(to_vector(encode_hello(h)), "endpoint_id 5");
  h = control_hello();
  h.attach_token = 0xABC;
  expect_hello_rejected(to_vector(encode_hello(h)), "attach_token 0xabc");
  h = control_hello();
  h.stream_index = 1;
  expect_hello_rejected(to_vector(encode_hello(h)), "stream_index 1");
}

TEST(HelloRoundTrip, AProbeIsAControlHelloOfRoleThree) {
  Hello h = control_hello();
  h.role = Role::kProbe;
  const auto wire = encode_hello(h);
  EXPECT_EQ(wire[6], std::byte{3});
  auto r = decode_hello(wire);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_same(*r, h);
}

TEST(HelloReject, ProbeWithDataFields) {
  Hello h = control_hello();
  h.role = Role::kProbe;
  h.endpoint_id = 7;
  expect_hello_rejected(to_vector(encode_hello(h)), "a probe connection must send endpoint_id");
}

TEST(HelloRoundTrip, AResumeIsADataHelloOfRoleFourWithIndexZero) {
  Hello h = data_hello();
  h.role = Role::kResume;
  h.stream_index = 0;
  const auto wire = encode_hello(h);
  EXPECT_EQ(wire[6], std::byte{4});
  auto r = decode_hello(wire);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_same(*r, h);
}

TEST(HelloReject, ResumeWithoutEndpointOrWithAStreamIndex) {
  Hello h = data_hello();
  h.role = Role::kResume;
  h.stream_index = 0;
  h.endpoint_id = 0;
  expect_hello_rejected(to_vector(encode_hello(h)), "resumed control connection with endpoint_id 0");
  h = data_hello();
  h.role = Role::kResume;
  h.stream_index = 1;
  expect_hello_rejected(to_vector(encode_hello(h)), "a resumed control connection must send stream_index 0, got 1");
}

TEST(HelloReject, DataWithZeroEndpointId) {
  Hello h = data_hello();
  h.endpoint_id = 0;
  expect_hello_rejected(to_vector(encode_hello(h)), "data connection with endpoint_id 0");
}

TEST(HelloAckReject, UnknownStatus) {
  for (uint16_t status : {uint16_t{6}, uint16_t{0x100}, uint16_t{0xFFFF}}) {
    Bytes wire = to_vector(encode_hello_ack(HelloAck{.version = kWireVersion}));
    put_u16(wire, 6, status);
    expect_ack_rejected(wire, "unknown status " + std::to_string(status));
  }
}

TEST(HelloAckReject, AcceptedWithRmaWindowOutOfRange) {
  for (uint32_t window : {0u, kMaxRmaWindow + 1, std::numeric_limits<uint32_t>::max()}) {
    const HelloAck ack{.version = kWireVersion, .status = HelloStatus::kAccepted, .endpoint_id = 1,
                       .stream_count = 1, .rma_window = window};
    expect_ack_rejected(to_vector(encode_hello_ack(ack)),
                        "HELLO_ACK: rma_window " + std::to_string(window) + " outside 1..65536");
  }
}

TEST(HelloAckRoundTrip, RefusalMayCarryRmaWindowZero) {
  for (auto status : {HelloStatus::kVersionMismatch, HelloStatus::kBadRequest, HelloStatus::kRefused,
                      HelloStatus::kUnauthenticated}) {
    const HelloAck ack{.version = kWireVersion, .status = status, .rma_window = 0};
    auto r = decode_hello_ack(encode_hello_ack(ack));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->status, status);
    EXPECT_EQ(r->rma_window, 0u);
  }
}

}  // namespace
}  // namespace remora::wire

namespace remora::wire {
namespace {

// RAILS (docs/protocol.md, "Rails"): the bytes of a listener's two addresses, exactly.
TEST(RailsWire, GoldenBytes) {
  RailAddress v4{.family = 4, .prefix_length = 24, .port = 7100};
  v4.address[0] = std::byte{10};
  v4.address[1] = std::byte{0};
  v4.address[2] = std::byte{1};
  v4.address[3] = std::byte{5};
  RailAddress v6{.family = 6, .prefix_length = 64, .port = 0x1234};
  v6.address[0] = std::byte{0xfd};
  v6.address[15] = std::byte{0x01};
  const RailAddress both[] = {v4, v6};
  const std::vector<std::byte> out = encode_rails(both);
  const std::vector<std::byte> expected = [] {
    std::vector<int> v = {0x52, 0x4D, 0x52, 0x41, 2, 0, 0, 0,                            // magic, count 2, reserved
                          4,    24,   0xBC, 0x1B, 0, 0, 0, 0, 10,  0, 1, 5, 0, 0, 0, 0,  // 10.0.1.5/24 port 7100
                          0,    0,    0,    0,    0, 0, 0, 0,                            // rest of the v4 address
                          6,    64,   0x34, 0x12, 0, 0, 0, 0, 0xfd};                     // fd00::1/64 port 0x1234
    v.resize(8 + 24 + 24, 0);
    v.back() = 0x01;
    std::vector<std::byte> b;
    for (int x : v) b.push_back(static_cast<std::byte>(x));
    return b;
  }();
  ASSERT_EQ(out, expected);

  auto count = decode_rails_header(std::span(out).first(kRailsHeaderSize));
  ASSERT_TRUE(count.is_ok()) << count.status().to_string();
  EXPECT_EQ(*count, 2);
  auto a = decode_rail_entry(std::span(out).subspan(kRailsHeaderSize, kRailEntrySize));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->family, 4);
  EXPECT_EQ(a->prefix_length, 24);
  EXPECT_EQ(a->port, 7100);
  EXPECT_EQ(a->address, v4.address);
  auto b = decode_rail_entry(std::span(out).subspan(kRailsHeaderSize + kRailEntrySize, kRailEntrySize));
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(b->family, 6);
  EXPECT_EQ(b->address, v6.address);
}

TEST(RailsWire, EmptyListIsEightBytes) {
  const std::vector<std::byte> out = encode_rails({});
  ASSERT_EQ(out.size(), kRailsHeaderSize);
  auto count = decode_rails_header(out);
  ASSERT_TRUE(count.is_ok());
  EXPECT_EQ(*count, 0);
}

TEST(RailsWire, MalformedIsAProtocolError) {
  RailAddress v4{.family = 4, .prefix_length = 24, .port = 7100};
  v4.address[0] = std::byte{10};
  const RailAddress one[] = {v4};
  const std::vector<std::byte> good = encode_rails(one);
  auto header = [&](std::vector<std::byte> b) { return decode_rails_header(std::span(b).first(kRailsHeaderSize)); };
  auto entry = [&](std::vector<std::byte> b) {
    return decode_rail_entry(std::span(b).subspan(kRailsHeaderSize, kRailEntrySize));
  };
  auto with = [&](size_t at, int value) {
    std::vector<std::byte> b = good;
    b[at] = static_cast<std::byte>(value);
    return b;
  };
  EXPECT_EQ(header(with(0, 0x53)).status().code(), StatusCode::kProtocol);  // magic
  EXPECT_EQ(header(with(4, 17)).status().code(), StatusCode::kProtocol);    // 17 addresses
  EXPECT_EQ(header(with(6, 1)).status().code(), StatusCode::kProtocol);     // reserved
  EXPECT_EQ(entry(with(8, 5)).status().code(), StatusCode::kProtocol);      // family 5
  EXPECT_EQ(entry(with(9, 33)).status().code(), StatusCode::kProtocol);     // /33 for IPv4
  EXPECT_EQ(entry(with(12, 1)).status().code(), StatusCode::kProtocol);     // reserved
  EXPECT_EQ(entry(with(20, 1)).status().code(), StatusCode::kProtocol);     // IPv4 byte 5
  auto no_port = good;
  no_port[10] = no_port[11] = std::byte{0};
  EXPECT_EQ(entry(no_port).status().code(), StatusCode::kProtocol);
  EXPECT_EQ(decode_rails_header(std::span(good).first(7)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(entry(good).is_ok());
}

}  // namespace
}  // namespace remora::wire
