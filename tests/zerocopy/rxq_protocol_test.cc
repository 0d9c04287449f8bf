// rxq_protocol_test.cc — `remora rxq`'s Unix-socket protocol: every message byte for byte
// (the layout of docs/protocol.md), round trips, every malformed request refused by
// the strict decoder (and every truncation and single-bit change of a valid one either
// refused or decoded to a request that encodes back to the same bytes), and the packet layer with
// descriptor passing over a real SOCK_SEQPACKET pair: the fd received reads the bytes
// written through the fd sent; cut packets, stray descriptors and EOF are told apart.
#include "zerocopy/rxq_protocol.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
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
  b = want, b[4] = 4;
  EXPECT_NE(request_type(bytes(b)).status().message().find("message type 0x0004"), std::string::npos);

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
  other[4] = 0x04;  // 0x8004: no such reply
  EXPECT_FALSE(decode_reply(bytes(other)).is_ok());
}

TEST(RxqProtocol, ReserveQueueRequestBytes) {
  std::vector<uint8_t> want(48, 0);  // magic, type 3, then 42 bytes of 0
  const uint8_t head[] = {'R', 'X', 'Q', '1', 3, 0, 0, 0};
  std::memcpy(want.data(), head, sizeof head);
  EXPECT_EQ(u8s(encode(ReserveQueueRequest{})), want);
  auto type = request_type(bytes(want));
  ASSERT_TRUE(type.is_ok()) << type.status().to_string();
  EXPECT_EQ(*type, kTypeReserveQueue);
  auto back = decode_reserve_queue(bytes(want));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(u8s(encode(*back)), want);  // round trip
  // No decoder takes another request's message.
  EXPECT_FALSE(decode_request(bytes(want)).is_ok());
  EXPECT_FALSE(decode_bind_dmabuf(bytes(want)).is_ok());
  const auto flow = encode(BindFlowRequest{flow4()});
  const auto dmabuf = encode(BindDmabufRequest{.dmabuf_size = 4096});
  EXPECT_EQ(request_type(flow).value(), kTypeBindFlow);
  EXPECT_EQ(request_type(dmabuf).value(), kTypeBindDmabuf);
  EXPECT_NE(decode_reserve_queue(flow).status().message().find("message type 0x0001, want 0x0003"), std::string::npos);
  EXPECT_NE(decode_reserve_queue(dmabuf).status().message().find("message type 0x0002, want 0x0003"),
            std::string::npos);

  auto refuse = [](std::vector<uint8_t> b, const std::string& why) {
    expect_refused_by([](auto in) { return decode_reserve_queue(in); }, std::move(b), why);
  };
  auto b = want;
  b.pop_back();
  refuse(b, "reserve-queue request: 47 bytes, want 48");
  b = want;
  b.push_back(0);
  refuse(b, "49 bytes, want 48");
  b = want, b[0] = 'r';
  refuse(b, "bad magic");
  b = want, b[6] = 1;
  refuse(b, "reserved bytes 6..7 are not zero");
  b = want, b[8] = 1;
  refuse(b, "reserved bytes 8..47 are not zero");
  b = want, b[47] = 0x80;
  refuse(b, "reserved bytes 8..47 are not zero");
  // Every prefix and every single-bit change is refused: the request has no free bit.
  for (size_t n = 0; n < want.size(); ++n) {
    std::vector<uint8_t> cut(want.begin(), want.begin() + static_cast<long>(n));
    EXPECT_EQ(decode_reserve_queue(bytes(cut)).status().code(), StatusCode::kProtocol) << n;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      b = want;
      b[i] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_EQ(decode_reserve_queue(bytes(b)).status().code(), StatusCode::kProtocol)
          << "byte " << i << " bit " << bit;
    }
  }
}

TEST(RxqProtocol, ReserveQueueReplyBytes) {
  // The flow reply's layout with type 0x8003: binding_id holds the ifindex, no rule, no size.
  BindFlowReply r;
  r.type = kTypeReserveQueueReply;
  r.binding_id = 0x0102;  // the ifindex
  r.queue = 14;
  r.rule_location = kNoRule;
  r.dmabuf_size = 0;
  r.flags = kFlagClientZcrx | kFlagStandin;
  r.message = "ok";
  // clang-format off
  const std::vector<uint8_t> want = {'R', 'X', 'Q', '1', 0x03, 0x80, 0, 0,  // magic, type 0x8003, reserved
                                     0, 0, 0, 0, 0x02, 0x01, 0, 0,          // error 0, ifindex 0x102
                                     14, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,   // queue 14, no rule
                                     0, 0, 0, 0, 0, 0, 0, 0,                // dmabuf_size 0
                                     0x09, 0, 0, 0, 2, 0, 0, 0,             // CLIENT_ZCRX|STANDIN, message_len 2
                                     'o', 'k'};
  // clang-format on
  EXPECT_EQ(u8s(encode(r)), want);
  EXPECT_EQ(kFlagClientZcrx, 0x08u);
  EXPECT_EQ(kKnownFlags, 0x0fu);
  auto back = decode_reply(bytes(want));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->type, kTypeReserveQueueReply);
  EXPECT_EQ(back->error, 0);
  EXPECT_EQ(ifindex_of(*back), 0x0102u);
  EXPECT_EQ(back->queue, 14u);
  EXPECT_EQ(back->rule_location, kNoRule);
  EXPECT_EQ(back->dmabuf_size, 0u);
  EXPECT_EQ(back->flags, kFlagClientZcrx | kFlagStandin);
  EXPECT_EQ(back->message, "ok");
  EXPECT_EQ(u8s(encode(*back)), want);  // round trip

  auto refused = [](std::vector<uint8_t> b, const std::string& why) {
    auto d = decode_reply(bytes(b));
    ASSERT_FALSE(d.is_ok()) << why;
    EXPECT_EQ(d.status().code(), StatusCode::kProtocol);
    EXPECT_NE(d.status().message().find(why), std::string::npos) << d.status().message();
  };
  auto b = want;
  b[32] = 0x19;  // bit 4: no such flag
  refused(b, "unknown flags 0x10");
  b = want, b[24] = 1;  // a zcrx queue's buffer is the client's: no size
  refused(b, "a zcrx success with dmabuf_size 1 (want 0)");
  b = want, b[32] = 0x01;  // a reserve-queue success must say CLIENT_ZCRX
  refused(b, "success with a buffer of 0 bytes");
  b = want, b[32] = 0x01, b[24] = 1;
  refused(b, "a reserve-queue success without flag CLIENT_ZCRX");
  b = want, b[32] = 0x0c;  // CLIENT_DMABUF and CLIENT_ZCRX
  refused(b, "flags CLIENT_DMABUF and CLIENT_ZCRX together");
  b = want, b[38] = 1;
  refused(b, "reserved bytes 38..39 are not zero");
  b = want, b[6] = 1;
  refused(b, "reserved bytes 6..7 are not zero");
  b = want, b[4] = 0x04;
  refused(b, "message type 0x8004");

  // A refusal: an errno, no flags, no size.
  BindFlowReply no;
  no.type = kTypeReserveQueueReply;
  no.error = EBUSY;
  no.message = "all 1 client queue(s) are taken";
  auto nb = decode_reply(encode(no));
  ASSERT_TRUE(nb.is_ok()) << nb.status().to_string();
  EXPECT_EQ(nb->type, kTypeReserveQueueReply);
  EXPECT_EQ(nb->error, EBUSY);
  EXPECT_EQ(nb->flags, 0u);
  EXPECT_EQ(nb->message, no.message);

  // A zcrx client's flow: a 0x8001 success with CLIENT_ZCRX and size 0 (and a rule).
  BindFlowReply flow;
  flow.binding_id = 0x0102;
  flow.queue = 14;
  flow.rule_location = 1000;
  flow.flags = kFlagClientZcrx;
  const auto fenc = encode(flow);
  auto fb = decode_reply(fenc);
  ASSERT_TRUE(fb.is_ok()) << fb.status().to_string();
  EXPECT_EQ(fb->type, kTypeBindFlowReply);
  EXPECT_EQ(fb->flags, kFlagClientZcrx);
  EXPECT_EQ(ifindex_of(*fb), 0x0102u);
  EXPECT_EQ(fb->rule_location, 1000u);
  EXPECT_EQ(fb->dmabuf_size, 0u);
  EXPECT_EQ(encode(*fb), fenc);
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

/// A listening SOCK_SEQPACKET socket in a fresh directory: a stand-in for rxq that this
/// test answers by hand.
class FakeRxq {
 public:
  FakeRxq() {
    char tmpl[] = "/tmp/remora-rxq-unit-XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/rxq.sock";
    listen_ = net::Fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    EXPECT_EQ(::bind(listen_.get(), static_cast<sockaddr*>(static_cast<void*>(&addr)), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_.get(), 4), 0);
  }
  ~FakeRxq() {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  net::Fd accept() { return net::Fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC)); }

 private:
  std::string dir_, path_;
  net::Fd listen_;
};

// The client's side of RESERVE_QUEUE against answers written by hand (each queued before
// the client asks, so no thread is needed): a success, rxq's refusal with its errno's
// code, and the answers it must not take: one carrying a descriptor, one of another type.
TEST(RxqClient, ReserveQueueTakesOnlyADescriptorlessReserveQueueReply) {
  FakeRxq rxq;
  auto c = Client::connect(rxq.path());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  net::Fd server = rxq.accept();
  ASSERT_TRUE(server.valid());
  const auto expect_request = [&] {
    auto p = recv_packet(server.get(), kRequestBytes, net::Clock::now() + std::chrono::seconds(5));
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_FALSE(p->fd.valid());
    EXPECT_TRUE(decode_reserve_queue(p->bytes).is_ok());
  };

  BindFlowReply ok;
  ok.type = kTypeReserveQueueReply;
  ok.binding_id = 3;
  ok.queue = 7;
  ok.flags = kFlagClientZcrx;
  ASSERT_TRUE(send_packet(server.get(), encode(ok)).is_ok());
  auto got = c->reserve_queue();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  expect_request();
  EXPECT_EQ(got->type, kTypeReserveQueueReply);
  EXPECT_EQ(ifindex_of(*got), 3u);
  EXPECT_EQ(got->queue, 7u);
  EXPECT_EQ(got->flags, kFlagClientZcrx);

  BindFlowReply busy;
  busy.type = kTypeReserveQueueReply;
  busy.error = EBUSY;
  busy.message = "all 1 client queue(s) are taken";
  ASSERT_TRUE(send_packet(server.get(), encode(busy)).is_ok());
  auto refused = c->reserve_queue();
  expect_request();
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kNoResource);
  EXPECT_NE(refused.status().message().find("rxq refused a queue for our io_uring zcrx: EBUSY"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find(busy.message), std::string::npos) << refused.status().message();

  net::Fd memfd(::memfd_create("rxq-test", MFD_CLOEXEC));
  ASSERT_TRUE(memfd.valid());
  ASSERT_TRUE(send_packet(server.get(), encode(ok), memfd.get()).is_ok());
  auto with_fd = c->reserve_queue();
  expect_request();
  ASSERT_FALSE(with_fd.is_ok());
  EXPECT_EQ(with_fd.status().code(), StatusCode::kProtocol);
  EXPECT_NE(with_fd.status().message().find("a reserve-queue reply that carried a descriptor"), std::string::npos)
      << with_fd.status().message();

  BindFlowReply other;  // a flow reply
  other.dmabuf_size = 4096;
  ASSERT_TRUE(send_packet(server.get(), encode(other)).is_ok());
  auto wrong = c->reserve_queue();
  expect_request();
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kProtocol);
  EXPECT_NE(wrong.status().message().find("with a reply of type 0x8001"), std::string::npos)
      << wrong.status().message();
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
