// The NIXL backend's wire formats (plugin/nixl/wire.h): each round-trips, and each
// decoder refuses malformed input with a clear error instead of misreading it.
#include "wire.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace remora::nixl_plugin {
namespace {

TEST(NixlWire, ConnInfoRoundTrips) {
  ConnInfo info{.host = "b16e5fa0-497a-49ee-ab09-0451f71a17bc/4026531833",
                .addresses = {"10.0.0.1:7100", "[fd00::1]:7100", "127.0.0.1:7100"}, .instance = {}};
  const std::string text = encode_conn_info(info);
  EXPECT_EQ(text,
            "remora-nixl/1 host=b16e5fa0-497a-49ee-ab09-0451f71a17bc/4026531833 "
            "addr=10.0.0.1:7100,[fd00::1]:7100,127.0.0.1:7100");
  Result<ConnInfo> back = decode_conn_info(text);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->host, info.host);
  EXPECT_EQ(back->addresses, info.addresses);
}

TEST(NixlWire, ConnInfoCarriesTheEngineInstance) {
  ConnInfo info{.host = "h", .addresses = {"10.0.0.1:7100"}, .instance = "0123456789abcdef"};
  const std::string text = encode_conn_info(info);
  EXPECT_EQ(text, "remora-nixl/1 host=h id=0123456789abcdef addr=10.0.0.1:7100");
  Result<ConnInfo> back = decode_conn_info(text);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->instance, info.instance);
  for (const char* bad : {"remora-nixl/1 host=h id= addr=a:1", "remora-nixl/1 host=h id=a id=b addr=a:1",
                          "remora-nixl/1 host=h id=a;b addr=a:1"}) {
    EXPECT_FALSE(decode_conn_info(bad)) << bad;
  }
}

TEST(NixlWire, ConnInfoRefusesWhatItDoesNotKnow) {
  for (const char* bad : {"", "remora-nixl/2 host=h addr=1.2.3.4:5", "remora-nixl/1 addr=1.2.3.4:5",
                          "remora-nixl/1 host=h", "remora-nixl/1 host=h addr=1.2.3.4:5,",
                          "remora-nixl/1 host=h addr=1.2.3.4:5 extra=1", "remora-nixl/1 host=h host=g addr=a:1",
                          "remora-nixl/1 host=h addr=1.2.3.4:5;rm", "remora-nixl/1 host=h\naddr=a:1"}) {
    Result<ConnInfo> r = decode_conn_info(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  std::string many = "remora-nixl/1 host=h addr=";
  for (size_t i = 0; i <= kMaxAddresses; ++i) many += (i ? "," : "") + std::string("10.0.0.1:1");
  EXPECT_FALSE(decode_conn_info(many));
  EXPECT_FALSE(decode_conn_info("remora-nixl/1 host=h addr=" + std::string(kMaxAddressBytes + 1, '1')));
}

TEST(NixlWire, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1:80"));
  EXPECT_TRUE(is_loopback_address("127.5.5.5:80"));
  EXPECT_TRUE(is_loopback_address("[::1]:80"));
  EXPECT_TRUE(is_loopback_address("localhost:80"));
  EXPECT_FALSE(is_loopback_address("10.127.0.1:80"));
  EXPECT_FALSE(is_loopback_address("[::11]:80"));
}

PublicData sample_data() {
  PublicData d;
  d.kind = MemKind::kVram;
  d.base = 0x7f0012345000;
  d.key.region = RegionId{17};
  d.key.generation = 3;
  d.key.secret = 0x0123456789abcdefULL;
  d.key.offset = 0;
  d.key.length = 1 << 20;
  d.key.access = Access::kRemoteRead | Access::kRemoteWrite;
  return d;
}

TEST(NixlWire, PublicDataRoundTrips) {
  const PublicData d = sample_data();
  const std::string bytes = encode_public_data(d);
  ASSERT_EQ(bytes.size(), kPublicDataBytes);
  EXPECT_EQ(bytes.substr(0, 4), "RMNX");
  Result<PublicData> back = decode_public_data(bytes);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->kind, d.kind);
  EXPECT_EQ(back->base, d.base);
  EXPECT_EQ(back->key, d.key);
}

TEST(NixlWire, PublicDataRefusesMalformedBytes) {
  const std::string good = encode_public_data(sample_data());
  EXPECT_FALSE(decode_public_data(good.substr(0, kPublicDataBytes - 1)));
  EXPECT_FALSE(decode_public_data(good + "x"));
  auto with = [&](size_t at, char c) {
    std::string s = good;
    s[at] = c;
    return decode_public_data(s);
  };
  EXPECT_FALSE(with(0, 'X'));  // magic
  EXPECT_FALSE(with(4, 2));    // version
  EXPECT_FALSE(with(5, 7));    // kind
  EXPECT_FALSE(with(6, 1));    // reserved
  EXPECT_FALSE(with(16, 9));   // the key's own version
  // A tampered secret is well-formed: only the target can tell (tests/nixl engine_test.cc).
  EXPECT_TRUE(with(16 + 16, static_cast<char>(good[32] ^ 1)));
  // A window whose end wraps past the base address.
  PublicData wraps = sample_data();
  wraps.base = ~uint64_t{0} - 10;
  EXPECT_FALSE(decode_public_data(encode_public_data(wraps)));
}

TEST(NixlWire, NotificationsRoundTripAnyBytes) {
  const std::string msg("\0binary\xff message", 16);
  Result<std::vector<std::byte>> wire = encode_notification("agent-7", msg);
  ASSERT_TRUE(wire);
  EXPECT_EQ(wire->size(), kNotificationHeaderBytes + 7 + msg.size());
  Result<NotificationMessage> back = decode_notification(*wire);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->agent, "agent-7");
  EXPECT_EQ(back->message, msg);

  Result<std::vector<std::byte>> empty = encode_notification("", "");
  ASSERT_TRUE(empty);
  Result<NotificationMessage> e = decode_notification(*empty);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->agent.empty() && e->message.empty());
}

TEST(NixlWire, NotificationsHaveABound) {
  const std::string agent = "a";
  const size_t fits = kMaxNotificationBytes - kNotificationHeaderBytes - agent.size();
  EXPECT_TRUE(encode_notification(agent, std::string(fits, 'x')));
  Result<std::vector<std::byte>> over = encode_notification(agent, std::string(fits + 1, 'x'));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find(std::to_string(fits)), std::string::npos) << over.status().message();
  EXPECT_FALSE(encode_notification(std::string(70000, 'a'), ""));
}

TEST(NixlWire, NotificationDecoderRefusesOtherMessages) {
  std::vector<std::byte> junk(5, std::byte{'R'});
  EXPECT_EQ(decode_notification(junk).status().code(), StatusCode::kProtocol);
  std::vector<std::byte> wire = *encode_notification("abc", "m");
  wire[4] = std::byte{200};  // the name would run past the end
  EXPECT_EQ(decode_notification(wire).status().code(), StatusCode::kProtocol);
  wire = *encode_notification("abc", "m");
  wire[0] = std::byte{'X'};
  EXPECT_EQ(decode_notification(wire).status().code(), StatusCode::kProtocol);
}

}  // namespace
}  // namespace remora::nixl_plugin
