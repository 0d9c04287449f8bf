// tests/net/rails_test.cc — REMORA_RAILS: the NCCL_SOCKET_IFNAME syntax (prefixes, ^,
// =, addresses) matched against a fixed list of interfaces, the clear errors, and the
// address helpers rails use; and the host's own interfaces through getifaddrs.
#include "net/rails.h"

#include <arpa/inet.h>

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace remora::net {
namespace {

SockAddr v4(const char* text) {
  SockAddr a;
  auto* sin = reinterpret_cast<sockaddr_in*>(a.get());
  sin->sin_family = AF_INET;
  EXPECT_EQ(::inet_pton(AF_INET, text, &sin->sin_addr), 1);
  a.length = sizeof(sockaddr_in);
  return a;
}

SockAddr v6(const char* text) {
  SockAddr a;
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(a.get());
  sin6->sin6_family = AF_INET6;
  EXPECT_EQ(::inet_pton(AF_INET6, text, &sin6->sin6_addr), 1);
  a.length = sizeof(sockaddr_in6);
  return a;
}

InterfaceAddress iface(std::string name, SockAddr address, uint8_t prefix, bool up = true, bool loopback = false) {
  InterfaceAddress i;
  i.name = std::move(name);
  i.address = address;
  i.prefix_length = prefix;
  i.up = up;
  i.loopback = loopback;
  return i;
}

/// A host with loopback, two data NICs, one NIC with only IPv6, a docker bridge and a
/// NIC that is down.
std::vector<InterfaceAddress> host() {
  return {iface("lo", v4("127.0.0.1"), 8, true, true),
          iface("eth0", v4("10.0.0.5"), 24),
          iface("eth0", v6("fe80::1"), 64),
          iface("eth1", v4("10.0.1.5"), 24),
          iface("ens7", v6("fd00::7"), 64),
          iface("ens7", v6("fe80::7"), 64),
          iface("docker0", v4("172.17.0.1"), 16),
          iface("eth2", v4("10.0.2.5"), 24, /*up=*/false)};
}

Result<std::vector<Rail>> rails_of(const char* text) {
  auto spec = parse_rail_spec(text);
  if (!spec) return spec.status();
  const auto interfaces = host();
  return match_rails(*spec, interfaces, text);
}

std::vector<std::string> names(const Result<std::vector<Rail>>& rails) {
  std::vector<std::string> out;
  if (!rails) {
    out.push_back(std::string("error: ").append(rails.status().message()));
    return out;
  }
  for (const Rail& r : *rails) {
    std::string entry = r.interface;
    entry.append("=").append(address_text(r.address));
    out.push_back(std::move(entry));
  }
  return out;
}

using Names = std::vector<std::string>;

TEST(Rails, PrefixesMatchEveryInterfaceThatIsUp) {
  EXPECT_EQ(names(rails_of("eth")), (Names{"eth0=10.0.0.5", "eth1=10.0.1.5"}));        // eth2 is down
  EXPECT_EQ(names(rails_of("eth1,eth0")), (Names{"eth1=10.0.1.5", "eth0=10.0.0.5"}));  // the items' order
  EXPECT_EQ(names(rails_of("ens")), (Names{"ens7=fd00::7"}));                          // IPv6, not the link-local one
  EXPECT_EQ(names(rails_of("eth,eth0")), (Names{"eth0=10.0.0.5", "eth1=10.0.1.5"}));   // once each
}

TEST(Rails, ExactNamesWithEquals) {
  EXPECT_EQ(names(rails_of("=eth0")), (Names{"eth0=10.0.0.5"}));
  EXPECT_FALSE(rails_of("=eth").is_ok());  // no interface is called exactly "eth"
}

TEST(Rails, CaretExcludesAndSkipsLoopback) {
  EXPECT_EQ(names(rails_of("^docker")), (Names{"ens7=fd00::7", "eth0=10.0.0.5", "eth1=10.0.1.5"}));
  EXPECT_EQ(names(rails_of("^docker,ens")), (Names{"eth0=10.0.0.5", "eth1=10.0.1.5"}));
  EXPECT_EQ(names(rails_of("^=eth0,docker0,ens7")), (Names{"eth1=10.0.1.5"}));
  // With ^=, a prefix excludes nothing it does not name exactly.
  EXPECT_EQ(names(rails_of("^=eth,docker0,ens7")), (Names{"eth0=10.0.0.5", "eth1=10.0.1.5"}));
  // Loopback only when named.
  EXPECT_EQ(names(rails_of("lo")), (Names{"lo=127.0.0.1"}));
}

TEST(Rails, AddressesNameTheirInterface) {
  EXPECT_EQ(names(rails_of("10.0.1.5,10.0.0.5")), (Names{"eth1=10.0.1.5", "eth0=10.0.0.5"}));
  EXPECT_EQ(names(rails_of("fd00::7")), (Names{"ens7=fd00::7"}));
  EXPECT_EQ(names(rails_of("eth1,10.0.0.5")), (Names{"eth1=10.0.1.5", "eth0=10.0.0.5"}));
}

// What `remora doctor` says of each interface agrees with what match_rails takes, for
// every kind of list; and the reasons name the rule.
TEST(Rails, EveryInterfaceNotTakenSaysWhy) {
  const auto interfaces = host();
  for (const char* text : {"eth", "eth1,eth0", "ens", "=eth0", "^docker", "^docker,ens", "^=eth0,docker0,ens7",
                           "^=eth,docker0,ens7", "lo", "10.0.1.5,10.0.0.5", "fd00::7", "eth1,10.0.0.5", "^10.0.0.5"}) {
    SCOPED_TRACE(text);
    auto spec = parse_rail_spec(text);
    ASSERT_TRUE(spec.is_ok());
    auto rails = match_rails(*spec, interfaces, text);
    ASSERT_TRUE(rails.is_ok()) << rails.status().message();
    for (const std::string name : {"lo", "eth0", "eth1", "ens7", "docker0", "eth2"}) {
      const bool taken = std::any_of(rails->begin(), rails->end(), [&](const Rail& r) { return r.interface == name; });
      const std::string why = why_not_a_rail(*spec, interfaces, name);
      EXPECT_EQ(why.empty(), taken) << name << ": " << why;
    }
  }
  auto why = [&](const char* text, const char* name) {
    return why_not_a_rail(*parse_rail_spec(text), interfaces, name);
  };
  EXPECT_EQ(why("eth", "eth2"), "down");
  EXPECT_EQ(why("eth", "docker0"), "not named by REMORA_RAILS");
  EXPECT_EQ(why("^docker", "docker0"), "excluded by REMORA_RAILS");
  EXPECT_EQ(why("^docker", "lo"), "loopback: taken only when REMORA_RAILS names it");
  EXPECT_EQ(why("^10.0.0.5", "eth0"), "its address 10.0.0.5 is excluded by REMORA_RAILS");
  const std::vector<InterfaceAddress> link_local_only = {iface("eth9", v6("fe80::9"), 64)};
  EXPECT_EQ(why_not_a_rail(*parse_rail_spec("eth"), link_local_only, "eth9"),
            "no IPv4 address, nor an IPv6 one that is not link-local");
}

TEST(Rails, NoMatchIsAClearError) {
  auto none = rails_of("ib");
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  const std::string m = none.status().message();
  EXPECT_NE(m.find("REMORA_RAILS='ib'"), std::string::npos) << m;
  EXPECT_NE(m.find("matches no interface"), std::string::npos) << m;
  EXPECT_NE(m.find("eth0 10.0.0.5"), std::string::npos) << m;  // lists what there is
  EXPECT_NE(m.find("eth2 10.0.2.5 (down)"), std::string::npos) << m;

  auto foreign = rails_of("192.168.9.9");
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_NE(foreign.status().message().find("no interface of this host holds the address 192.168.9.9"),
            std::string::npos)
      << foreign.status().message();
  auto down = rails_of("10.0.2.5");
  ASSERT_FALSE(down.is_ok());
  EXPECT_NE(down.status().message().find("eth2 holds 10.0.2.5 but is down"), std::string::npos);
  EXPECT_FALSE(rails_of("eth2").is_ok());             // down: nothing left
  EXPECT_FALSE(rails_of("^eth,ens,docker").is_ok());  // everything excluded
}

TEST(Rails, MalformedListsAreRefused) {
  for (const char* text :
       {"", "^", "=", "^=", "eth0,", ",eth0", "eth0,,eth1", "eth0/1", "a:b", "averyveryverylongname0"}) {
    auto spec = parse_rail_spec(text);
    EXPECT_FALSE(spec.is_ok()) << "'" << text << "'";
    if (!spec) {
      EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(spec.status().message().find("REMORA_RAILS"), std::string::npos);
    }
  }
  auto spec = parse_rail_spec("^=eth0,10.0.0.1");
  ASSERT_TRUE(spec.is_ok());
  EXPECT_TRUE(spec->exclude);
  EXPECT_TRUE(spec->exact);
  EXPECT_EQ(spec->names, std::vector<std::string>{"eth0"});
  EXPECT_EQ(spec->addresses.size(), 1u);
}

TEST(Rails, MoreThanSixteenAreRefused) {
  std::vector<InterfaceAddress> many;
  for (int i = 0; i < 17; ++i) {
    std::string address = "10.1.";
    address.append(std::to_string(i)).append(".1");
    std::string name = "eth";
    name.append(std::to_string(i));
    many.push_back(iface(std::move(name), v4(address.c_str()), 24));
  }
  auto spec = parse_rail_spec("eth");
  ASSERT_TRUE(spec.is_ok());
  auto rails = match_rails(*spec, many, "eth");
  ASSERT_FALSE(rails.is_ok());
  EXPECT_NE(rails.status().message().find("at most 16"), std::string::npos);
}

TEST(Rails, SubnetsAndAddresses) {
  const Rail rail{"eth1", v4("10.0.1.5"), 24};
  EXPECT_TRUE(same_subnet(rail, v4("10.0.1.200")));
  EXPECT_FALSE(same_subnet(rail, v4("10.0.2.5")));
  EXPECT_FALSE(same_subnet(rail, v6("fd00::7")));
  const Rail odd{"eth9", v4("10.0.1.5"), 23};
  EXPECT_TRUE(same_subnet(odd, v4("10.0.0.9")));
  EXPECT_TRUE(same_address(with_port(v4("10.0.1.5"), 80), v4("10.0.1.5")));
  EXPECT_TRUE(is_wildcard(v4("0.0.0.0")));
  EXPECT_TRUE(is_wildcard(v6("::")));
  EXPECT_FALSE(is_wildcard(v4("10.0.0.1")));
  EXPECT_EQ(port_of(with_port(v6("::1"), 7100)), 7100);
}

TEST(Rails, ThisHostsLoopbackIsFoundByGetifaddrs) {
  auto interfaces = local_interfaces();
  ASSERT_TRUE(interfaces.is_ok()) << interfaces.status().to_string();
  bool loopback = false;
  for (const InterfaceAddress& i : *interfaces) loopback |= i.loopback && address_text(i.address) == "127.0.0.1";
  EXPECT_TRUE(loopback);
  auto rails = resolve_rails("lo");
  ASSERT_TRUE(rails.is_ok()) << rails.status().to_string();
  ASSERT_GE(rails->size(), 1u);
  EXPECT_EQ((*rails)[0].interface, "lo");
  EXPECT_TRUE(resolve_rails("").is_ok());
  EXPECT_TRUE(resolve_rails("")->empty());
  EXPECT_FALSE(resolve_rails("no-such-nic").is_ok());
}

}  // namespace
}  // namespace remora::net
