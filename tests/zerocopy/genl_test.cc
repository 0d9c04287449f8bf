// zerocopy/genl: the generic netlink core. The controller request byte for byte against
// bytes laid out by hand from the uAPI (nlmsghdr, genlmsghdr, attribute TLVs with their
// padding); the controller's family reply, ACKs and refusals (NLMSG_ERROR, capped or
// not, with an extended ack; NLMSG_DONE of a failed dump) parsed from synthetic bytes,
// malformed ones refused; and the real controller resolving real families.
#include "zerocopy/genl.h"

#include <linux/genetlink.h>
#include <linux/netlink.h>

#include <cerrno>
#include <vector>

#include <gtest/gtest.h>

#include "zc_test_util.h"

namespace remora::zerocopy {
namespace {

using test::Bytes;

std::vector<std::byte> as_vector(std::span<const std::byte> s) { return {s.begin(), s.end()}; }

/// nlmsghdr with its length patched in by finish().
Bytes nlmsg(uint16_t type, uint16_t flags, uint32_t seq, uint32_t pid = 0) {
  Bytes b;
  b.u32(0).u16(type).u16(flags).u32(seq).u32(pid);
  return b;
}
std::vector<std::byte> finish(Bytes b) {
  b.set_u32(0, static_cast<uint32_t>(b.size()));
  return b.bytes();
}

TEST(Genl, GetFamilyRequestIsByteForByteTheUapiLayout) {
  Bytes want = nlmsg(GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, 42);
  want.u8(CTRL_CMD_GETFAMILY).u8(1).u16(0);                          // genlmsghdr
  want.attr(CTRL_ATTR_FAMILY_NAME, 7).str("netdev").u8(0).zeros(1);  // "netdev\0" + 1 byte of padding
  const auto expected = finish(want);
  ASSERT_EQ(expected.size(), 32u);
  EXPECT_EQ(as_vector(nl::build_get_family(42, "netdev").bytes()), expected);
}

Bytes family_reply() {
  Bytes b = nlmsg(GENL_ID_CTRL, 0, 7, 1234);
  b.u8(CTRL_CMD_NEWFAMILY).u8(2).u16(0);
  b.attr(CTRL_ATTR_FAMILY_ID, 2).u16(20).zeros(2);
  b.attr(CTRL_ATTR_FAMILY_NAME, 7).str("netdev").u8(0).zeros(1);
  b.attr_u32(CTRL_ATTR_VERSION, 1);
  b.attr(CTRL_ATTR_MAXATTR, 4).u32(9);
  // CTRL_ATTR_OPS: an array of nests numbered 1..n, each {OP_ID, OP_FLAGS}.
  b.attr(CTRL_ATTR_OPS | NLA_F_NESTED, 3 * 20);
  for (uint16_t i = 1; i <= 3; ++i) {
    const uint32_t ids[] = {1, 13, 15};
    b.attr(i | NLA_F_NESTED, 16).attr_u32(CTRL_ATTR_OP_ID, ids[i - 1]).attr_u32(CTRL_ATTR_OP_FLAGS, 0x0a);
  }
  b.attr(99, 4).u32(0);  // an attribute from a newer kernel: skipped
  return b;
}

TEST(Genl, FamilyReplyGivesIdVersionAndOperations) {
  auto info = nl::parse_family(finish(family_reply()));
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->id, 20);
  EXPECT_EQ(info->version, 1u);
  EXPECT_EQ(info->ops, (std::vector<uint32_t>{1, 13, 15}));
  EXPECT_TRUE(info->has_op(13));
  EXPECT_FALSE(info->has_op(14));
}

TEST(Genl, MalformedRepliesAreRefused) {
  {
    SCOPED_TRACE("an attribute longer than the message");
    Bytes b = family_reply();
    b.attr(CTRL_ATTR_HDRSIZE, 200).u32(0);
    auto info = nl::parse_family(finish(b));
    ASSERT_FALSE(info.is_ok());
    EXPECT_EQ(info.status().code(), StatusCode::kProtocol);
    EXPECT_NE(info.status().message().find("malformed netlink attributes"), std::string::npos);
  }
  {
    SCOPED_TRACE("the family id of the wrong size");
    Bytes b = nlmsg(GENL_ID_CTRL, 0, 7);
    b.u8(CTRL_CMD_NEWFAMILY).u8(2).u16(0).attr_u32(CTRL_ATTR_FAMILY_ID, 20);
    auto info = nl::parse_family(finish(b));
    ASSERT_FALSE(info.is_ok());
    EXPECT_NE(info.status().message().find("family id: attribute of 4 bytes, expected 2"), std::string::npos)
        << info.status().message();
  }
  {
    SCOPED_TRACE("no family id");
    Bytes b = nlmsg(GENL_ID_CTRL, 0, 7);
    b.u8(CTRL_CMD_NEWFAMILY).u8(2).u16(0);
    EXPECT_EQ(nl::parse_family(finish(b)).status().code(), StatusCode::kProtocol);
  }
  {
    SCOPED_TRACE("shorter than a header; a length past the bytes");
    const std::vector<std::byte> tiny(8);
    EXPECT_EQ(nl::as_message(tiny).status().code(), StatusCode::kProtocol);
    auto bytes = finish(family_reply());
    EXPECT_EQ(nl::as_message(std::span(bytes).first(40)).status().code(), StatusCode::kProtocol);
  }
}

/// NLMSG_ERROR for a request of `request_len` bytes, capped (only its header echoed) or
/// whole, with an extended ack.
std::vector<std::byte> error_reply(int error, bool capped, const std::string& msg, std::optional<uint32_t> offs) {
  uint16_t flags = NLM_F_ACK_TLVS;
  if (capped) flags |= NLM_F_CAPPED;
  Bytes b = nlmsg(NLMSG_ERROR, flags, 5, 77);
  b.u32(static_cast<uint32_t>(error));
  // The echoed request: a 32-byte message, its header always, its body unless capped.
  b.u32(32).u16(20).u16(NLM_F_REQUEST | NLM_F_ACK).u32(5).u32(0);
  if (!capped) b.zeros(16);
  const auto len = static_cast<uint16_t>(msg.size() + 1);
  b.attr(NLMSGERR_ATTR_MSG, len).str(msg).u8(0).zeros((4 - len % 4) % 4);
  if (offs) b.attr_u32(NLMSGERR_ATTR_OFFS, *offs);
  b.attr_u32(NLMSGERR_ATTR_MISS_TYPE, 3);
  return finish(b);
}

TEST(Genl, ErrorWithExtendedAckCappedOrWhole) {
  for (bool capped : {true, false}) {
    SCOPED_TRACE(capped);
    const auto bytes = error_reply(-EOPNOTSUPP, capped, "Driver does not support netmem TX", 20);
    auto msg = nl::as_message(bytes);
    ASSERT_TRUE(msg.is_ok());
    auto e = nl::parse_error(*msg);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    EXPECT_EQ(e->err, EOPNOTSUPP);
    EXPECT_EQ(e->message, "Driver does not support netmem TX");
    EXPECT_EQ(e->bad_attr_offset, 20u);
    EXPECT_EQ(e->missing_attr, 3u);
    EXPECT_EQ(e->to_string(),
              "EOPNOTSUPP (Operation not supported): Driver does not support netmem TX (missing attribute type 3)");
  }
}

TEST(Genl, AckIsErrorZeroAndADumpsDoneCarriesItsOwnError) {
  Bytes ack = nlmsg(NLMSG_ERROR, NLM_F_CAPPED, 5);
  ack.u32(0).u32(32).u16(20).u16(5).u32(5).u32(0);
  auto a = nl::parse_error(*nl::as_message(finish(ack)));
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->err, 0);

  Bytes done = nlmsg(NLMSG_DONE, NLM_F_MULTI | NLM_F_ACK_TLVS, 6);
  done.u32(static_cast<uint32_t>(-ENODEV));
  done.attr(NLMSGERR_ATTR_MSG, 8).str("no such").u8(0);
  auto d = nl::parse_error(*nl::as_message(finish(done)));
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->err, ENODEV);
  EXPECT_EQ(d->message, "no such");

  Bytes bare = nlmsg(NLMSG_DONE, NLM_F_MULTI, 6);  // old kernels: no error field at all
  auto b = nl::parse_error(*nl::as_message(finish(bare)));
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->err, 0);
}

TEST(Genl, MalformedErrorsAreRefused) {
  Bytes shorty = nlmsg(NLMSG_ERROR, 0, 5);
  shorty.u32(static_cast<uint32_t>(-EINVAL));  // no echoed header
  EXPECT_EQ(nl::parse_error(*nl::as_message(finish(shorty))).status().code(), StatusCode::kProtocol);
  Bytes positive = nlmsg(NLMSG_ERROR, NLM_F_CAPPED, 5);
  positive.u32(5).u32(16).u16(20).u16(5).u32(5).u32(0);
  EXPECT_EQ(nl::parse_error(*nl::as_message(finish(positive))).status().code(), StatusCode::kProtocol);
  Bytes bad_tlv = nlmsg(NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS, 5);
  bad_tlv.u32(static_cast<uint32_t>(-EINVAL)).u32(16).u16(20).u16(5).u32(5).u32(0);
  bad_tlv.attr(NLMSGERR_ATTR_MSG, 60).str("cut");  // claims 64 bytes, has 7
  EXPECT_EQ(nl::parse_error(*nl::as_message(finish(bad_tlv))).status().code(), StatusCode::kProtocol);
  Bytes other = nlmsg(20, 0, 5);
  EXPECT_EQ(nl::parse_error(*nl::as_message(finish(other))).status().code(), StatusCode::kProtocol);
}

TEST(Genl, RefusalsMapToCodesWithTheKernelsWordsAndAHint) {
  KernelError e{.err = EPERM, .message = "", .bad_attr_offset = {}, .bad_attr_type = {}, .missing_attr = {}};
  Status s = nl::refusal_status("bind-rx", e, "run as root");
  EXPECT_EQ(s.code(), StatusCode::kAccessDenied);
  EXPECT_EQ(s.message(), "bind-rx: the kernel refused: EPERM (Operation not permitted) — run as root");
  e.err = EOPNOTSUPP;
  e.message = "Driver does not support netmem TX";
  e.bad_attr_type = 1;
  s = nl::refusal_status("bind-tx", e);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_EQ(s.message(),
            "bind-tx: the kernel refused: EOPNOTSUPP (Operation not supported): Driver does not support netmem TX "
            "(objected to attribute type 1)");
  e = {};
  for (int err : {EINVAL, ENODEV, ERANGE, EBADF}) {
    e.err = err;
    EXPECT_EQ(nl::refusal_status("x", e).code(), StatusCode::kInvalidArgument) << err;
  }
  for (int err : {EBUSY, EEXIST, ENOMEM}) {
    e.err = err;
    EXPECT_EQ(nl::refusal_status("x", e).code(), StatusCode::kNoResource) << err;
  }
}

// ---- the real controller ----

TEST(GenlKernel, ResolvesTheNetdevAndEthtoolFamilies) {
  auto socket = nl::Socket::open();
  ASSERT_TRUE(socket.is_ok()) << socket.status().to_string();
  auto netdev = socket->resolve(uapi::kNetdevFamilyName);
  ASSERT_TRUE(netdev.is_ok()) << netdev.status().to_string();
  EXPECT_GE(netdev->id, GENL_MIN_ID);
  EXPECT_TRUE(netdev->has_op(uapi::kNetdevCmdDevGet));
  EXPECT_TRUE(netdev->has_op(uapi::kNetdevCmdQueueGet));
  auto ethtool = socket->resolve(uapi::kEthtoolFamilyName);
  ASSERT_TRUE(ethtool.is_ok()) << ethtool.status().to_string();
  EXPECT_NE(ethtool->id, netdev->id);
  EXPECT_TRUE(ethtool->has_op(uapi::kEthtoolMsgRingsGet));
}

TEST(GenlKernel, AnUnknownFamilyIsUnsupportedNotAnError) {
  auto socket = nl::Socket::open();
  ASSERT_TRUE(socket.is_ok());
  auto none = socket->resolve("remora-nonesuch");
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(none.status().message().find("no generic netlink family 'remora-nonesuch'"), std::string::npos)
      << none.status().message();
  // The socket is still in step: the next request gets its own answer.
  EXPECT_TRUE(socket->resolve(uapi::kNetdevFamilyName).is_ok());
}

}  // namespace
}  // namespace remora::zerocopy
