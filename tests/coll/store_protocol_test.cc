// The rendezvous store's wire format without sockets (coll/store_protocol.h): golden
// bytes of a request and a reply, requests decoded one after another from a stream,
// every prefix of a request incomplete, and each malformed field refused as soon as it
// has arrived. store_test.cc drives the same decoders through a real server.
#include "coll/store_protocol.h"

#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace remora::detail::store_protocol {
namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(std::byte(b));
  return out;
}

TEST(StoreProtocol, RequestGoldenBytesAndRoundTrip) {
  std::vector<std::byte> b;
  const std::string value = "v1";
  encode_request(b, Op::kGet, "ab", {}, 300);
  encode_request(b, Op::kSet, "k", std::as_bytes(std::span(value)), 0);
  EXPECT_EQ(std::vector<std::byte>(b.begin(), b.begin() + 19),
            bytes({2, 2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 0x2c, 1, 0, 0, 0, 0, 0, 0}));

  auto get = decode_request(b);
  ASSERT_TRUE(get.is_ok()) << get.status().to_string();
  EXPECT_EQ(get->op, Op::kGet);
  EXPECT_EQ(get->key, "ab");
  EXPECT_TRUE(get->value.empty());
  EXPECT_EQ(get->timeout_ms, 300u);
  EXPECT_EQ(get->consumed, 19u);
  auto set = decode_request(std::span(b).subspan(get->consumed));
  ASSERT_TRUE(set.is_ok()) << set.status().to_string();
  EXPECT_EQ(set->op, Op::kSet);
  EXPECT_EQ(set->key, "k");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(set->value.data()), set->value.size()), "v1");
  EXPECT_EQ(get->consumed + set->consumed, b.size());
}

TEST(StoreProtocol, EveryPrefixIsIncomplete) {
  std::vector<std::byte> b;
  const std::string value = "value";
  encode_request(b, Op::kSet, "key", std::as_bytes(std::span(value)), 0);
  for (size_t n = 0; n < b.size(); ++n) {
    auto r = decode_request(std::span(b).first(n));
    ASSERT_FALSE(r.is_ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kInProgress) << n;
  }
}

TEST(StoreProtocol, MalformedFieldsRefusedAsSoonAsTheyArrive) {
  auto code_of = [](std::vector<std::byte> b) { return decode_request(b).status(); };
  EXPECT_EQ(code_of(bytes({0, 1, 0, 0, 0})).code(), StatusCode::kProtocol);  // op 0
  EXPECT_EQ(code_of(bytes({7, 1, 0, 0, 0})).code(), StatusCode::kProtocol);  // op 7
  // A key over 1024 bytes, refused with only its length in.
  const Status big = code_of(bytes({1, 0x01, 0x04, 0, 0}));
  EXPECT_EQ(big.code(), StatusCode::kProtocol);
  EXPECT_NE(big.message().find("1025"), std::string::npos) << big.message();
  EXPECT_EQ(code_of(bytes({1, 0, 0, 0, 0})).code(), StatusCode::kProtocol);     // empty key outside wait
  EXPECT_EQ(code_of(bytes({3, 1, 0, 0, 0})).code(), StatusCode::kProtocol);     // a key in wait
  // A value over 64 MiB, refused with only its length in.
  EXPECT_EQ(code_of(bytes({1, 1, 0, 0, 0, 'k', 1, 0, 0, 4})).code(), StatusCode::kProtocol);
}

TEST(StoreProtocol, WaitKeys) {
  const std::vector<std::string> keys = {"a", std::string(kMaxKey, 'x')};
  std::vector<std::byte> b;
  encode_wait_keys(b, keys);
  auto back = decode_wait_keys(b);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, keys);
  EXPECT_FALSE(decode_wait_keys({}).is_ok());                              // no key
  EXPECT_FALSE(decode_wait_keys(bytes({0, 0, 0, 0})).is_ok());             // an empty key
  EXPECT_FALSE(decode_wait_keys(bytes({2, 0, 0, 0, 'a'})).is_ok());        // cut short
  EXPECT_FALSE(decode_wait_keys(bytes({1, 0, 0, 0, 'a', 1})).is_ok());     // a stray byte
}

TEST(StoreProtocol, ReplyHeader) {
  std::vector<std::byte> b;
  const std::string msg = "why";
  encode_reply(b, Reply::kInvalidArgument, std::as_bytes(std::span(msg)));
  EXPECT_EQ(b, bytes({2, 3, 0, 0, 0, 'w', 'h', 'y'}));
  auto h = decode_reply_header(b);
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(h->status, Reply::kInvalidArgument);
  EXPECT_EQ(h->payload_bytes, 3u);
  EXPECT_EQ(decode_reply_header(std::span(b).first(4)).status().code(), StatusCode::kInProgress);
  auto refused = decode_reply_header(bytes({3, 0, 0, 0, 0}));  // a keyed store refusing (REMORA_AUTH_KEY)
  ASSERT_TRUE(refused.is_ok());
  EXPECT_EQ(refused->status, Reply::kUnauthenticated);
  EXPECT_EQ(decode_reply_header(bytes({4, 0, 0, 0, 0})).status().code(), StatusCode::kProtocol);
  EXPECT_EQ(decode_reply_header(bytes({0, 0, 0, 0, 0x10})).status().code(), StatusCode::kProtocol);  // 256 MiB
}

}  // namespace
}  // namespace remora::detail::store_protocol
