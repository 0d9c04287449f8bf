// zerocopy/devmem_rx: the devmem recvmsg parser on control buffers laid out as the
// kernel lays them out (CMSG_* macros, struct dmabuf_cmsg): dmabuf-only, mixed with
// linear data, truncated (MSG_CTRUNC, the last message cut short as put_cmsg cuts it),
// malformed lengths, unknown control messages, foreign binding ids, misrouted payload,
// and thousands of fragments. Every case checks that the fragments seen are still handed
// out (their tokens must go back) when the status is an error.
#include "zerocopy/devmem_rx.h"

#include <sys/socket.h>

#include <vector>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

using test::ControlBuffer;

constexpr uint32_t kOurs = test::kOurBinding;
const uint32_t kBindings[] = {kOurs};

DevmemFragment dmabuf(uint64_t offset, uint32_t size, uint32_t token, uint32_t binding = kOurs) {
  return {.kind = FragmentKind::kDmabuf, .offset = offset, .size = size, .token = token, .binding_id = binding};
}
DevmemFragment linear(uint64_t offset, uint32_t size) {
  return {.kind = FragmentKind::kLinear, .offset = offset, .size = size};
}

TEST(DevmemRx, ControlBytesAreFortyPerFragment) {
  EXPECT_EQ(CMSG_SPACE(sizeof(uapi::DmabufCmsg)), 40u);
  EXPECT_EQ(devmem_control_bytes(1), 40u);
  EXPECT_EQ(devmem_control_bytes(2000), 80'000u);  // ncdevmem's 20000-int buffer
}

TEST(DevmemRx, DmabufFragmentsComeOutInStreamOrder) {
  ControlBuffer cb;
  cb.dmabuf(0x10000, 4096, 11, kOurs);
  cb.dmabuf(0x3000, 1448, 12, kOurs);
  cb.dmabuf(0x20000, 100, 5, kOurs);
  std::vector<DevmemFragment> out;
  const Status s = parse_devmem_rx(cb.msg(), 4096 + 1448 + 100, {.bindings = kBindings}, &out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(
      out, (std::vector<DevmemFragment>{dmabuf(0x10000, 4096, 11), dmabuf(0x3000, 1448, 12), dmabuf(0x20000, 100, 5)}));
}

TEST(DevmemRx, LinearAndDmabufInterleaveAndLinearOffsetsCountIovBytes) {
  ControlBuffer cb;
  cb.linear(66);
  cb.dmabuf(8192, 1000, 1);
  cb.linear(34);
  cb.dmabuf(12288, 2000, 2);
  std::vector<DevmemFragment> out = {dmabuf(1, 1, 99)};  // appended to, not replaced
  const Status s = parse_devmem_rx(cb.msg(), 3100, {.bindings = kBindings, .allow_linear = true}, &out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(out, (std::vector<DevmemFragment>{dmabuf(1, 1, 99), linear(0, 66), dmabuf(8192, 1000, 1), linear(66, 34),
                                              dmabuf(12288, 2000, 2)}));
}

TEST(DevmemRx, LinearDataOnADeviceOnlyStreamIsRefusedButTokensAreKept) {
  ControlBuffer cb;
  cb.dmabuf(0, 1000, 3);
  cb.linear(200);
  cb.dmabuf(4096, 1000, 4);
  std::vector<DevmemFragment> out;
  const Status s = parse_devmem_rx(cb.msg(), 2200, {.bindings = kBindings, .allow_linear = false}, &out);
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("200 bytes of linear data"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tcp-data-split on"), std::string::npos) << s.message();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].token, 3u);
  EXPECT_EQ(out[2].token, 4u);  // the fragment after the refused one is still handed out
}

TEST(DevmemRx, ForeignBindingIsAFlowSteeringError) {
  ControlBuffer cb;
  cb.dmabuf(0, 1448, 20, kOurs);
  cb.dmabuf(4096, 1448, 21, 9);
  cb.dmabuf(8192, 1448, 22, kOurs);
  std::vector<DevmemFragment> out;
  const Status s = parse_devmem_rx(cb.msg(), 3 * 1448, {.bindings = kBindings}, &out);
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("dmabuf binding 9 on a stream bound to 7 (foreign binding)"), std::string::npos)
      << s.message();
  // The foreign fragment's token is this socket's too: it is handed out to be returned.
  EXPECT_EQ(out, (std::vector<DevmemFragment>{dmabuf(0, 1448, 20), dmabuf(4096, 1448, 21, 9), dmabuf(8192, 1448, 22)}));
}

TEST(DevmemRx, SeveralBindingsOfOneStreamAreAllOurs) {
  const uint32_t two[] = {3, 4};
  ControlBuffer cb;
  cb.dmabuf(0, 10, 1, 4);
  cb.dmabuf(0, 10, 2, 3);
  std::vector<DevmemFragment> out;
  EXPECT_TRUE(parse_devmem_rx(cb.msg(), 20, {.bindings = two}, &out).is_ok());
  std::vector<DevmemFragment> none;
  const Status s = parse_devmem_rx(cb.msg(), 20, {}, &none);  // bound to nothing: every binding is foreign
  EXPECT_NE(s.message().find("bound to none"), std::string::npos) << s.message();
}

TEST(DevmemRx, TruncatedControlDataIsRefusedWithTheFix) {
  // What put_cmsg does when the buffer runs out mid-message: it copies what fits, writes
  // that shorter length into cmsg_len, and sets MSG_CTRUNC.
  ControlBuffer cb;
  cb.dmabuf(0, 4096, 1);
  cb.dmabuf(4096, 4096, 2);
  const size_t full = cb.used();
  const uapi::DmabufCmsg cut{.frag_offset = 8192, .frag_size = 4096, .frag_token = 3, .dmabuf_id = kOurs, .flags = 0};
  cb.add(SOL_SOCKET, uapi::kScmDevmemDmabuf, &cut, 8, CMSG_LEN(8));
  std::vector<DevmemFragment> out;
  const Status s = parse_devmem_rx(cb.msg(MSG_CTRUNC, full + CMSG_LEN(8)), 3 * 4096, {.bindings = kBindings}, &out);
  EXPECT_EQ(s.code(), StatusCode::kTruncated);
  EXPECT_NE(s.message().find("MSG_CTRUNC"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bigger control buffer"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("after 2 devmem fragments"), std::string::npos) << s.message();
  // The two whole fragments are handed out so that their tokens can go back.
  EXPECT_EQ(out, (std::vector<DevmemFragment>{dmabuf(0, 4096, 1), dmabuf(4096, 4096, 2)}));
}

TEST(DevmemRx, CtruncAloneIsRefusedEvenWhenEverythingParsed) {
  ControlBuffer cb;
  cb.dmabuf(0, 100, 1);
  std::vector<DevmemFragment> out;
  EXPECT_EQ(parse_devmem_rx(cb.msg(MSG_CTRUNC), 100, {.bindings = kBindings}, &out).code(), StatusCode::kTruncated);
  EXPECT_EQ(out.size(), 1u);
}

TEST(DevmemRx, MalformedLengthsAreRefused) {
  const uapi::DmabufCmsg frag{.frag_offset = 0, .frag_size = 100, .frag_token = 1, .dmabuf_id = kOurs, .flags = 0};
  {
    SCOPED_TRACE("cmsg_len shorter than a header");
    ControlBuffer cb;
    cb.add(SOL_SOCKET, uapi::kScmDevmemDmabuf, &frag, sizeof frag, 8);
    std::vector<DevmemFragment> out;
    const Status s = parse_devmem_rx(cb.msg(), 100, {.bindings = kBindings}, &out);
    EXPECT_EQ(s.code(), StatusCode::kProtocol);
    EXPECT_NE(s.message().find("malformed control message at byte 0: cmsg_len 8"), std::string::npos) << s.message();
    EXPECT_TRUE(out.empty());
  }
  {
    SCOPED_TRACE("cmsg_len past the control data");
    ControlBuffer cb;
    cb.dmabuf(0, 50, 1);
    cb.add(SOL_SOCKET, uapi::kScmDevmemDmabuf, &frag, sizeof frag, 4000);
    std::vector<DevmemFragment> out;
    const Status s = parse_devmem_rx(cb.msg(), 150, {.bindings = kBindings}, &out);
    EXPECT_EQ(s.code(), StatusCode::kProtocol);
    EXPECT_NE(s.message().find("malformed control message at byte 40: cmsg_len 4000"), std::string::npos)
        << s.message();
    EXPECT_EQ(out.size(), 1u);  // the one before it
  }
  {
    SCOPED_TRACE("a devmem message too short for struct dmabuf_cmsg");
    ControlBuffer cb;
    cb.add(SOL_SOCKET, uapi::kScmDevmemDmabuf, &frag, 16);
    cb.dmabuf(4096, 100, 2);
    std::vector<DevmemFragment> out;
    const Status s = parse_devmem_rx(cb.msg(), 100, {.bindings = kBindings}, &out);
    EXPECT_EQ(s.code(), StatusCode::kProtocol);
    EXPECT_NE(s.message().find("less than the 40 bytes"), std::string::npos) << s.message();
    EXPECT_EQ(out, (std::vector<DevmemFragment>{dmabuf(4096, 100, 2)}));
  }
}

TEST(DevmemRx, UnknownControlMessagesAreRefusedAndTheWalkGoesOn) {
  ControlBuffer cb;
  const int stamp = 1;
  cb.add(SOL_SOCKET, SCM_TIMESTAMPNS, &stamp, sizeof stamp);
  cb.dmabuf(0, 100, 8);
  cb.add(IPPROTO_IP, uapi::kScmDevmemDmabuf, &stamp, sizeof stamp);  // the right type at another level
  std::vector<DevmemFragment> out;
  const Status s = parse_devmem_rx(cb.msg(), 100, {.bindings = kBindings}, &out);
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("unexpected control message (level 1, type 35) at byte 0"), std::string::npos)
      << s.message();
  EXPECT_EQ(out, (std::vector<DevmemFragment>{dmabuf(0, 100, 8)}));
}

TEST(DevmemRx, PayloadWithoutAnyDevmemMessageIsAMisroutedFlow) {
  std::vector<DevmemFragment> out;
  msghdr plain{};  // no control buffer at all, as a readable skb from an unbound queue leaves it
  Status s = parse_devmem_rx(plain, 1448, {.bindings = kBindings}, &out);
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("misrouted flow: 1448 bytes arrived without any devmem control message"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("ethtool -N"), std::string::npos) << s.message();
  ControlBuffer empty;
  EXPECT_EQ(parse_devmem_rx(empty.msg(), 1, {.bindings = kBindings}, &out).code(), StatusCode::kProtocol);
  EXPECT_TRUE(out.empty());
}

TEST(DevmemRx, PayloadBeyondTheFragmentsIsMisroutedAndFragmentsBeyondThePayloadMalformed) {
  ControlBuffer cb;
  cb.dmabuf(0, 500, 1);
  std::vector<DevmemFragment> out;
  Status s = parse_devmem_rx(cb.msg(), 1000, {.bindings = kBindings}, &out);
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("500 bytes came without one"), std::string::npos) << s.message();
  s = parse_devmem_rx(cb.msg(), 400, {.bindings = kBindings}, &out);
  EXPECT_EQ(s.code(), StatusCode::kProtocol);
  EXPECT_NE(s.message().find("add up to 500 bytes"), std::string::npos) << s.message();
}

TEST(DevmemRx, EndOfStreamWithNothingIsFine) {
  std::vector<DevmemFragment> out;
  msghdr plain{};
  EXPECT_TRUE(parse_devmem_rx(plain, 0, {.bindings = kBindings}, &out).is_ok());
  EXPECT_TRUE(out.empty());
}

TEST(DevmemRx, TwoThousandFragmentsInOneControlBuffer) {
  constexpr uint32_t kFrags = 2000;
  const uint32_t two[] = {1, 2};
  ControlBuffer cb(devmem_control_bytes(kFrags));
  uint64_t total = 0;
  for (uint32_t i = 0; i < kFrags; ++i) {
    const uint32_t size = 1000 + i % 3000;  // page-sized and not
    cb.dmabuf(uint64_t{i} * 4096, size, i + 1, 1 + i % 2);
    total += size;
  }
  EXPECT_EQ(cb.used(), devmem_control_bytes(kFrags));
  std::vector<DevmemFragment> out;
  const Status s = parse_devmem_rx(cb.msg(), total, {.bindings = two}, &out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_EQ(out.size(), kFrags);
  for (uint32_t i = 0; i < kFrags; ++i) {
    ASSERT_EQ(out[i], dmabuf(uint64_t{i} * 4096, 1000 + i % 3000, i + 1, 1 + i % 2)) << i;
  }
}

}  // namespace
}  // namespace remora::zerocopy
