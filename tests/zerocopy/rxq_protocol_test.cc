// rxq_protocol_test.cc — `remora rxq`'s Unix-socket protocol: both messages byte for byte
// (the layout of docs/device-memory.md), round trips, every malformed request refused by
// the strict decoder (and every truncation and single-bit change of a valid one either
// refused or decoded to a request that encodes back to the same bytes), and the packet layer with
// descriptor passing over a real SOCK_SEQPACKET pair: the fd received reads the bytes
// written through the fd sent; cut packets, stray descriptors and EOF are told apart.
#include "zerocopy/rxq_protocol.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "zc_test_util.h"
#include "zerocopy/rxq_client.h"

namespace remora::zerocopy::rxq {
namespace {

std::vector<uint8_t> u8s(const std::vector<std::byte>& b) {
  std::vector<uint8_t> out;
  for (std::byte x : b) out.push_back(std::to_integer<uint8_t>(x));
  return out;
}

std::vector<std::byte> bytes(const std::vector<uint8_t>& b) {
  std::vector<std::byte> out;
  for (uint8_t x : b) out.push_back(std::byte{x});
  return out;
}

TcpFlow flow4() {
  TcpFlow f;
  f.dst_port = 0x1388;
  f.src_port = 0x9c40;
  f.dst_addr = {10, 0, 0, 2};
  f.src_addr = {10, 0, 0, 1};
  return f;
}

TEST(RxqProtocol, RequestBytes) {
  std::vector<uint8_t> want(48, 0);
  const uint8_t head[] = {'R', 'X', 'Q', '1', 1, 0, 0, 0, 4, 0, 0, 0, 0x88, 0x13, 0x40, 0x9c};
  std::memcpy(want.data(), head, sizeof head);
  want[16] = 10, want[19] = 2;
  want[32] = 10, want[35] = 1;
  EXPECT_EQ(u8s(encode(BindFlowRequest{flow4()})), want);
  auto back = decode_request(bytes(want));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->flow.describe(), flow4().describe());
}

TEST(RxqProtocol, ReplyBytes) {
  BindFlowReply r;
  r.binding_id = 7;
  r.queue = 15;
  r.rule_location = 1022;
  r.dmabuf_size = 0x100000000ull;
  r.flags = kFlagStandin;
  r.message = "ok";
  const std::vector<uint8_t> want = {'R', 'X', 'Q', '1', 0x01, 0x80, 0, 0,  // magic, type 0x8001, reserved
                                     0, 0, 0, 0, 7, 0, 0, 0,                // error 0, binding 7
                                     15, 0, 0, 0, 0xfe, 0x03, 0, 0,         // queue 15, rule 1022
                                     0, 0, 0, 0, 1, 0, 0, 0,                // dmabuf size 2^32
                                     1, 0, 0, 0, 2, 0, 0, 0,                // flags, message_len 2, reserved
                                     'o', 'k'};
  EXPECT_EQ(u8s(encode(r)), want);
  auto back = decode_reply(bytes(want));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->binding_id, 7u);
  EXPECT_EQ(back->queue, 15u);
  EXPECT_EQ(back->rule_location, 1022u);
  EXPECT_EQ(back->dmabuf_size, 0x100000000ull);
  EXPECT_EQ(back->flags, kFlagStandin);
  EXPECT_EQ(back->message, "ok");

  BindFlowReply refusal;
  refusal.error = 95;
  refusal.message = std::string(5000, 'x');  // cut to the limit
  const auto enc = encode(refusal);
  EXPECT_EQ(enc.size(), kMaxReplyBytes);
  auto rb = decode_reply(enc);
  ASSERT_TRUE(rb.is_ok()) << rb.status().to_string();
  EXPECT_EQ(rb->error, 95);
  EXPECT_EQ(rb->message.size(), kMaxReplyMessage);
}

/// `decode` (a request decoder) refuses `b` as kProtocol, saying `why`.
template <typename Decode>
void expect_refused_by(Decode decode, std::vector<uint8_t> b, const std::string& why) {
  auto r = decode(bytes(b));
  ASSERT_FALSE(r.is_ok()) << why;
  EXPECT_EQ(r.status().code(), StatusCode::kProtocol);
  EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
}

void expect_refused(std::vector<uint8_t> b, const std::string& why) {
  expect_refused_by([](auto in) { return decode_request(in); }, std::move(b), why);
}

TEST(RxqProtocol, MalformedRequestsAreRefusedWithTheReason) {
  const auto good = u8s(encode(BindFlowRequest{flow4()}));
  auto b = good;
  b.pop_back();
  expect_refused(b, "47 bytes, want 48");
  b = good;
  b.push_back(0);
  expect_refused(b, "49 bytes, want 48");
  b = good, b[0] = 'r';
  expect_refused(b, "bad magic");
  b = good, b[4] = 2;  // a bind-dmabuf request is not a flow request
  expect_refused(b, "message type 0x0002");
  b = good, b[7] = 1;
  expect_refused(b, "reserved bytes 6..7");
  b = good, b[8] = 5;
  expect_refused(b, "address family 5");
  b = good, b[10] = 1;
  expect_refused(b, "reserved bytes 9..11");
  b = good, b[12] = 0, b[13] = 0;
  expect_refused(b, "dst_port 0");
  b = good, b[25] = 1;
  expect_refused(b, "IPv4 address with nonzero bytes");
  b = good, b[47] = 1;
  expect_refused(b, "IPv4 address with nonzero bytes");
}

TEST(RxqProtocol, MalformedRepliesAreRefused) {
  BindFlowReply r;
  r.dmabuf_size = 4096;
  r.message = "abc";
  const auto good = u8s(encode(r));
  auto b = good;
  b.pop_back();
  EXPECT_FALSE(decode_reply(bytes(b)).is_ok());  // message_len 3 but 2 bytes
  b = good, b[32] = 0x80;
  EXPECT_FALSE(decode_reply(bytes(b)).is_ok());  // unknown flag
  b = good, b[11] = 0x80;
  EXPECT_FALSE(decode_reply(bytes(b)).is_ok());  // negative error
  b = good, b[38] = 1;
  EXPECT_FALSE(decode_reply(bytes(b)).is_ok());
  b = good;
  std::memset(&b[24], 0, 8);
  EXPECT_FALSE(decode_reply(bytes(b)).is_ok());  // success with 0 bytes
  EXPECT_FALSE(decode_reply(bytes(std::vector<uint8_t>(39, 0))).is_ok());
}

// Every prefix and every single-bit change of a valid request: refused, or decoded to a
// request that encodes back to the same bytes (the decoder reads only inside what it was
// given; asan watches).
TEST(RxqProtocol, EveryTruncationAndByteFlipIsHandled) {
  const auto good = u8s(encode(BindFlowRequest{flow4()}));
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    EXPECT_FALSE(decode_request(bytes(cut)).is_ok()) << n;
  }
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = good;
      b[i] ^= static_cast<uint8_t>(1u << bit);
      auto r = decode_request(bytes(b));
      // What decodes is canonical: it encodes back to the very bytes (4 -> 6 in the
      // family byte, say, is a valid IPv6 request).
      if (r.is_ok()) {
        EXPECT_EQ(u8s(encode(*r)), b) << "byte " << i << " bit " << bit;
      }
    }
  }
}

TEST(RxqProtocol, BindDmabufRequestAndReplyBytes) {
  std::vector<uint8_t> want(48, 0);
  const uint8_t head[] = {'R', 'X', 'Q', '1', 2, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0};  // type 2, 4 MiB
  std::memcpy(want.data(), head, sizeof head);
  EXPECT_EQ(u8s(encode(BindDmabufRequest{.dmabuf_size = 4u << 20})), want);
  auto type = request_type(bytes(want));
  ASSERT_TRUE(type.is_ok()) << type.status().to_string();
  EXPECT_EQ(*type, kTypeBindDmabuf);
  auto back = decode_bind_dmabuf(bytes(want));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->dmabuf_size, 4u << 20);
  // A flow request is told apart, and neither decoder takes the other's message.
  const auto flow = encode(BindFlowRequest{flow4()});
  EXPECT_EQ(request_type(flow).value(), kTypeBindFlow);
  EXPECT_FALSE(decode_request(bytes(want)).is_ok());
  EXPECT_FALSE(decode_bind_dmabuf(flow).is_ok());

  auto refuse = [](std::vector<uint8_t> b, const std::string& why) {
    expect_refused_by([](auto in) { return decode_bind_dmabuf(in); }, std::move(b), why);
  };
  auto b = want;
  b.pop_back();
  refuse(b, "47 bytes, want 48");
  b = want, b[16] = 1;
  refuse(b, "reserved bytes 16..47");
  b = want, b[47] = 1;
  refuse(b, "reserved bytes 16..47");
  b = want, b[10] = 0;
  refuse(b, "dmabuf_size 0");
  b = want, b[4] = 3;
  EXPECT_NE(request_type(bytes(b)).status().message().find("message type 0x0003"), std::string::npos);

  // The reply: the flow reply's layout with type 0x8002 and no descriptor.
  BindFlowReply r;
  r.type = kTypeBindDmabufReply;
  r.binding_id = 9;
  r.queue = 3;
  r.dmabuf_size = 4u << 20;
  r.flags = kFlagStandin | kFlagClientDmabuf;
  const auto enc = u8s(encode(r));
  EXPECT_EQ(enc[4], 0x02);
  EXPECT_EQ(enc[5], 0x80);
  EXPECT_EQ(enc[32], 0x05);  // flags
  auto rb = decode_reply(bytes(enc));
  ASSERT_TRUE(rb.is_ok()) << rb.status().to_string();
  EXPECT_EQ(rb->type, kTypeBindDmabufReply);
  EXPECT_EQ(rb->flags, kFlagStandin | kFlagClientDmabuf);
  EXPECT_EQ(rb->binding_id, 9u);
  auto other = enc;
  other[4] = 0x03;  // 0x8003: no such reply
  EXPECT_FALSE(decode_reply(bytes(other)).is_ok());
}

struct SeqPair {
  net::Fd a, b;
  SeqPair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    a = net::Fd(sv[0]);
    b = net::Fd(sv[1]);
  }
};

TEST(RxqPacket, DescriptorPassedReadsTheSameBytes) {
  SeqPair p;
  net::Fd memfd(::memfd_create("rxq-test", MFD_CLOEXEC));
  ASSERT_TRUE(memfd.valid());
  const std::string text = "written by the sender";
  ASSERT_EQ(::pwrite(memfd.get(), text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
  BindFlowReply r;
  r.dmabuf_size = 4096;
  ASSERT_TRUE(send_packet(p.a.get(), encode(r), memfd.get()).is_ok());
  auto got = recv_packet(p.b.get(), kMaxReplyBytes, net::Clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_TRUE(got->fd.valid());
  EXPECT_NE(got->fd.get(), memfd.get());
  std::string back(text.size(), '\0');
  ASSERT_EQ(::pread(got->fd.get(), back.data(), back.size(), 0), static_cast<ssize_t>(back.size()));
  EXPECT_EQ(back, text);
  EXPECT_TRUE(decode_reply(got->bytes).is_ok());
}

TEST(RxqPacket, OversizedPacketAndEofAndTimeout) {
  SeqPair p;
  const std::vector<std::byte> big(kRequestBytes + 1);
  ASSERT_TRUE(send_packet(p.a.get(), big).is_ok());
  auto cut = recv_packet(p.b.get(), kRequestBytes, net::Clock::now() + std::chrono::seconds(5));
  ASSERT_FALSE(cut.is_ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kProtocol);
  auto timeout = recv_packet(p.b.get(), kRequestBytes, net::Clock::now() + std::chrono::milliseconds(20));
  EXPECT_EQ(timeout.status().code(), StatusCode::kTimeout);
  p.a.reset();
  auto eof = recv_packet(p.b.get(), kRequestBytes, net::Clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(eof.is_ok()) << eof.status().to_string();
  EXPECT_TRUE(eof->eof);
}

TEST(RxqClient, ConnectToNothingSaysWhatToRun) {
  auto c = Client::connect("/nonexistent/rxq.sock");
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnreachable);
  EXPECT_NE(c.status().message().find("remora rxq serve --socket /nonexistent/rxq.sock"), std::string::npos);
  EXPECT_EQ(Client::connect(std::string(200, 'x')).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace remora::zerocopy::rxq
