// Tests for net/address.cc: every form parse_host_port accepts (IPv4, [IPv6]:port,
// names, an empty host, port 0 and 65535) and every form it refuses, with its code;
// resolve for numeric addresses, localhost and the wildcard; to_string of both families.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "net/address.h"

namespace remora::net {
namespace {

struct Accepted {
  std::string_view text;
  std::string_view host;
  uint16_t port;
};

TEST(ParseHostPort, AcceptsEveryDocumentedForm) {
  const Accepted cases[] = {
      {"10.0.0.1:7100", "10.0.0.1", 7100},
      {"127.0.0.1:0", "127.0.0.1", 0},          // port 0: any free port when listening
      {"0.0.0.0:65535", "0.0.0.0", 65535},      // the largest port
      {"[::1]:7100", "::1", 7100},              // brackets are not part of the host
      {"[fe80::1%lo]:80", "fe80::1%lo", 80},    // a scoped address stays whole
      {"[::]:0", "::", 0},
      {"localhost:7100", "localhost", 7100},
      {"node-3.example:1", "node-3.example", 1},
      {":7100", "", 7100},                      // empty host: the wildcard when listening
      {"host:007", "host", 7},                  // leading zeros are a number still
  };
  for (const auto& c : cases) {
    auto hp = parse_host_port(c.text);
    ASSERT_TRUE(hp.is_ok()) << c.text << ": " << hp.status().to_string();
    EXPECT_EQ(hp->host, c.host) << c.text;
    EXPECT_EQ(hp->port, c.port) << c.text;
  }
}

TEST(ParseHostPort, RefusesEveryMalformedFormWithInvalidArgument) {
  struct Refused {
    std::string_view text;
    std::string_view why;  ///< part of the message
  };
  const Refused cases[] = {
      {"", "missing ':port'"},
      {"10.0.0.1", "missing ':port'"},
      {"localhost", "missing ':port'"},
      {"::1:7100", "IPv6 addresses must be written in brackets"},
      {"fe80::1", "IPv6 addresses must be written in brackets"},
      {"[::1:7100", "missing ']'"},
      {"[::1]", "missing ':port' after ']'"},
      {"[::1]7100", "missing ':port' after ']'"},
      {"10.0.0.1:", "port must be 0..65535"},
      {"10.0.0.1:65536", "port must be 0..65535"},
      {"10.0.0.1:-1", "port must be 0..65535"},
      {"10.0.0.1:+80", "port must be 0..65535"},
      {"10.0.0.1:80x", "port must be 0..65535"},
      {"10.0.0.1: 80", "port must be 0..65535"},
      {"[::1]:", "port must be 0..65535"},
      {"[::1]:99999", "port must be 0..65535"},
      {"host:99999999999999999999999", "port must be 0..65535"},
  };
  for (const auto& c : cases) {
    auto hp = parse_host_port(c.text);
    ASSERT_FALSE(hp.is_ok()) << "'" << c.text << "' was accepted as host '" << hp->host << "'";
    EXPECT_EQ(hp.status().code(), StatusCode::kInvalidArgument) << c.text;
    // The message quotes what was given and says what is wanted.
    EXPECT_NE(hp.status().message().find("address '" + std::string(c.text) + "'"), std::string::npos)
        << hp.status().message();
    EXPECT_NE(hp.status().message().find(c.why), std::string::npos) << c.text << ": " << hp.status().message();
    EXPECT_NE(hp.status().message().find("want host:port or [v6]:port"), std::string::npos);
  }
}

uint16_t port_of(const SockAddr& a) {
  if (a.family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(a.get())->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(a.get())->sin6_port);
}

TEST(Resolve, NumericIPv4AndIPv6ResolveToThemselves) {
  auto v4 = resolve(HostPort{"127.0.0.1", 7100}, /*passive=*/false);
  ASSERT_TRUE(v4.is_ok()) << v4.status().to_string();
  ASSERT_EQ(v4->size(), 1u);
  EXPECT_EQ((*v4)[0].family(), AF_INET);
  EXPECT_EQ((*v4)[0].length, sizeof(sockaddr_in));
  EXPECT_EQ(to_string((*v4)[0]), "127.0.0.1:7100");

  auto v6 = resolve(HostPort{"::1", 80}, /*passive=*/false);
  ASSERT_TRUE(v6.is_ok()) << v6.status().to_string();
  ASSERT_GE(v6->size(), 1u);
  EXPECT_EQ((*v6)[0].family(), AF_INET6);
  EXPECT_EQ(to_string((*v6)[0]), "[::1]:80");
}

TEST(Resolve, LocalhostResolvesToLoopbackOnly) {
  auto r = resolve(HostPort{"localhost", 4242}, /*passive=*/false);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_FALSE(r->empty());
  for (const SockAddr& a : *r) {
    const std::string s = to_string(a);
    EXPECT_TRUE(s == "127.0.0.1:4242" || s == "[::1]:4242") << s;
    EXPECT_EQ(port_of(a), 4242);
  }
}

TEST(Resolve, EmptyPassiveHostIsTheWildcardIPv6First) {
  auto r = resolve(HostPort{"", 0}, /*passive=*/true);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_FALSE(r->empty());
  bool seen_v4 = false;
  for (const SockAddr& a : *r) {
    const std::string s = to_string(a);
    EXPECT_TRUE(s == "0.0.0.0:0" || s == "[::]:0") << s;
    if (a.family() == AF_INET) seen_v4 = true;
    if (a.family() == AF_INET6) {
      EXPECT_FALSE(seen_v4) << "the IPv6 wildcard (dual stack) must come first";
    }
  }
}

TEST(Resolve, AnUnknownNameIsUnreachableAndNamesTheHost) {
  auto r = resolve(HostPort{"no-such-host.invalid", 7100}, /*passive=*/false);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnreachable);
  EXPECT_NE(r.status().message().find("cannot resolve 'no-such-host.invalid'"), std::string::npos)
      << r.status().message();
}

TEST(SockAddrToString, UnknownFamilySaysSo) {
  SockAddr a;
  EXPECT_EQ(to_string(a), "<unknown address family>");
}

}  // namespace
}  // namespace remora::net
