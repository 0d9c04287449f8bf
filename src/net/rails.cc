// net/rails.cc — REMORA_RAILS: parsing, matching against the host's interfaces, and
// the address helpers rails need. See rails.h.
#include "net/rails.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace remora::net {
namespace {

Status bad(std::string_view text, std::string why) {
  return Status(StatusCode::kInvalidArgument, fmt::format("REMORA_RAILS='{}': {}", text, why));
}

/// `item` as an IPv4 or IPv6 address (port 0), if it is one.
std::optional<SockAddr> parse_address(const std::string& item) {
  SockAddr a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(a.get());
  if (::inet_pton(AF_INET, item.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    a.length = sizeof(sockaddr_in);
    return a;
  }
  a = SockAddr{};
  auto* v6 = reinterpret_cast<sockaddr_in6*>(a.get());
  if (::inet_pton(AF_INET6, item.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    a.length = sizeof(sockaddr_in6);
    return a;
  }
  return std::nullopt;
}

bool link_local(const SockAddr& a) noexcept {
  if (a.family() != AF_INET6) return false;
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a.get());
  return IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr);
}

uint8_t prefix_of(const sockaddr* mask) noexcept {
  if (mask == nullptr) return 0;
  const auto* bytes = mask->sa_family == AF_INET
                          ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr)
                          : reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
  const size_t n = mask->sa_family == AF_INET ? 4 : 16;
  uint8_t bits = 0;
  for (size_t i = 0; i < n; ++i) bits += static_cast<uint8_t>(__builtin_popcount(bytes[i]));
  return bits;
}

/// The address bytes of an IPv4 or IPv6 address, and how many there are.
std::span<const uint8_t> address_bytes(const SockAddr& a) noexcept {
  if (a.family() == AF_INET) {
    return {reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(a.get())->sin_addr), 4};
  }
  if (a.family() == AF_INET6) {
    return {reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(a.get())->sin6_addr), 16};
  }
  return {};
}

bool name_matches(const RailSpec& spec, const std::string& name, const std::string& item) {
  return spec.exact ? name == item : name.starts_with(item);
}

/// The rail of interface `name`: its first IPv4 address, else its first IPv6 one that
/// is not link-local.
std::optional<Rail> rail_of(std::span<const InterfaceAddress> interfaces, const std::string& name) {
  const InterfaceAddress* best = nullptr;
  for (const InterfaceAddress& i : interfaces) {
    if (i.name != name || !i.up || link_local(i.address)) continue;
    if (best == nullptr || (best->address.family() != AF_INET && i.address.family() == AF_INET)) best = &i;
  }
  if (best == nullptr) return std::nullopt;
  return Rail{best->name, best->address, best->prefix_length};
}

std::string describe(std::span<const InterfaceAddress> interfaces) {
  std::string out;
  for (const InterfaceAddress& i : interfaces) {
    out += fmt::format("{}{} {}{}", out.empty() ? "" : ", ", i.name, address_text(i.address), i.up ? "" : " (down)");
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Result<RailSpec> parse_rail_spec(std::string_view text) {
  RailSpec spec;
  std::string_view rest = text;
  if (rest.starts_with('^')) {
    spec.exclude = true;
    rest.remove_prefix(1);
  }
  if (rest.starts_with('=')) {
    spec.exact = true;
    rest.remove_prefix(1);
  }
  if (rest.empty())
    return bad(
        text,
        "names no interface (a comma-separated list of name prefixes, ^ to exclude, = for exact names, or addresses)");
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    if (item.empty()) return bad(text, "an empty item (two commas in a row, or one at an end)");
    if (auto address = parse_address(item)) {
      spec.addresses.push_back(*address);
    } else {
      if (item.size() >= IFNAMSIZ) return bad(text, fmt::format("'{}' is longer than an interface name can be", item));
      for (char c : item) {
        if (c == '/' || c == ':' || c == ' ' || c == '^' || c == '=' || c < ' ') {
          return bad(text, fmt::format("'{}' is neither an interface name nor an IP address", item));
        }
      }
      spec.names.push_back(item);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return spec;
}

Result<std::vector<Rail>> match_rails(const RailSpec& spec, std::span<const InterfaceAddress> interfaces,
                                      std::string_view text) {
  std::vector<Rail> rails;
  auto add = [&](Rail r) {
    const bool dup = std::any_of(rails.begin(), rails.end(), [&](const Rail& o) {
      return o.interface == r.interface && same_address(o.address, r.address);
    });
    if (!dup) rails.push_back(std::move(r));
  };
  std::vector<std::string> names;  // up interfaces, sorted, once each
  for (const InterfaceAddress& i : interfaces) {
    if (i.up && std::find(names.begin(), names.end(), i.name) == names.end()) names.push_back(i.name);
  }
  std::sort(names.begin(), names.end());
  if (spec.exclude) {
    for (const std::string& name : names) {
      const bool excluded = std::any_of(spec.names.begin(), spec.names.end(),
                                        [&](const std::string& item) { return name_matches(spec, name, item); });
      if (excluded) continue;
      auto rail = rail_of(interfaces, name);
      if (!rail) continue;
      const bool loopback = std::any_of(interfaces.begin(), interfaces.end(),
                                        [&](const InterfaceAddress& i) { return i.name == name && i.loopback; });
      const bool address_excluded = std::any_of(spec.addresses.begin(), spec.addresses.end(),
                                                [&](const SockAddr& a) { return same_address(a, rail->address); });
      if (!loopback && !address_excluded) add(std::move(*rail));
    }
  } else {
    for (const std::string& item : spec.names) {
      for (const std::string& name : names) {
        if (!name_matches(spec, name, item)) continue;
        if (auto rail = rail_of(interfaces, name)) add(std::move(*rail));
      }
    }
    for (const SockAddr& a : spec.addresses) {
      auto it = std::find_if(interfaces.begin(), interfaces.end(),
                             [&](const InterfaceAddress& i) { return same_address(i.address, a); });
      if (it == interfaces.end()) {
        return bad(text, fmt::format("no interface of this host holds the address {} (the interfaces: {})",
                                     address_text(a), describe(interfaces)));
      }
      if (!it->up) return bad(text, fmt::format("{} holds {} but is down", it->name, address_text(a)));
      add(Rail{it->name, it->address, it->prefix_length});
    }
  }
  if (rails.empty()) {
    return bad(text, fmt::format("matches no interface that is up with an address (the interfaces: {})",
                                 describe(interfaces)));
  }
  if (rails.size() > kMaxRails) {
    return bad(text, fmt::format("matches {} interfaces; at most {} rails are taken", rails.size(), kMaxRails));
  }
  return rails;
}

std::string why_not_a_rail(const RailSpec& spec, std::span<const InterfaceAddress> interfaces,
                           const std::string& name) {
  auto held = [&](auto pred) {
    return std::any_of(interfaces.begin(), interfaces.end(),
                       [&](const InterfaceAddress& i) { return i.name == name && pred(i); });
  };
  if (!held([](const InterfaceAddress& i) { return i.up; })) return "down";
  const bool named = std::any_of(spec.names.begin(), spec.names.end(),
                                 [&](const std::string& item) { return name_matches(spec, name, item); });
  const auto rail = rail_of(interfaces, name);
  if (spec.exclude) {
    if (named) return "excluded by REMORA_RAILS";
    if (!rail) return "no IPv4 address, nor an IPv6 one that is not link-local";
    if (held([](const InterfaceAddress& i) { return i.loopback; })) {
      return "loopback: taken only when REMORA_RAILS names it";
    }
    const bool address_excluded = std::any_of(spec.addresses.begin(), spec.addresses.end(),
                                              [&](const SockAddr& a) { return same_address(a, rail->address); });
    return address_excluded ? fmt::format("its address {} is excluded by REMORA_RAILS", address_text(rail->address))
                            : "";
  }
  const bool address_named = std::any_of(spec.addresses.begin(), spec.addresses.end(), [&](const SockAddr& a) {
    return held([&](const InterfaceAddress& i) { return same_address(i.address, a); });
  });
  if (address_named) return "";
  if (!named) return "not named by REMORA_RAILS";
  return rail ? "" : "no IPv4 address, nor an IPv6 one that is not link-local";
}

Result<std::vector<InterfaceAddress>> local_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return errno_status(errno, "getifaddrs");
  std::vector<InterfaceAddress> out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress a;
    a.name = i->ifa_name;
    std::memcpy(&a.address.storage, i->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    a.address.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    a.address = with_port(a.address, 0);
    a.prefix_length = prefix_of(i->ifa_netmask);
    // Administratively up. Not IFF_RUNNING: a link's carrier may come a moment after it
    // was set up (veth), and a rail without one fails its connect and is skipped.
    a.up = (i->ifa_flags & IFF_UP) != 0;
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(a));
  }
  ::freeifaddrs(list);
  return out;
}

Result<std::vector<Rail>> resolve_rails(std::string_view text) {
  if (text.empty()) return std::vector<Rail>{};
  REMORA_ASSIGN_OR_RETURN(const RailSpec spec, parse_rail_spec(text));
  REMORA_ASSIGN_OR_RETURN(const std::vector<InterfaceAddress> interfaces, local_interfaces());
  return match_rails(spec, interfaces, text);
}

bool same_subnet(const Rail& rail, const SockAddr& peer) noexcept {
  if (rail.address.family() != peer.family()) return false;
  const auto a = address_bytes(rail.address), b = address_bytes(peer);
  if (a.size() != b.size() || a.empty()) return false;
  const unsigned bits = std::min<unsigned>(rail.prefix_length, static_cast<unsigned>(a.size() * 8));
  for (unsigned i = 0; i < bits; ++i) {
    const uint8_t bit = static_cast<uint8_t>(0x80u >> (i % 8));
    if ((a[i / 8] & bit) != (b[i / 8] & bit)) return false;
  }
  return true;
}

bool same_address(const SockAddr& a, const SockAddr& b) noexcept {
  const auto x = address_bytes(a), y = address_bytes(b);
  return a.family() == b.family() && !x.empty() && std::equal(x.begin(), x.end(), y.begin(), y.end());
}

bool is_wildcard(const SockAddr& a) noexcept {
  const auto x = address_bytes(a);
  return !x.empty() && std::all_of(x.begin(), x.end(), [](uint8_t v) { return v == 0; });
}

uint16_t port_of(const SockAddr& a) noexcept {
  if (a.family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(a.get())->sin_port);
  if (a.family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(a.get())->sin6_port);
  return 0;
}

SockAddr with_port(SockAddr a, uint16_t port) noexcept {
  if (a.family() == AF_INET) reinterpret_cast<sockaddr_in*>(a.get())->sin_port = htons(port);
  if (a.family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(a.get())->sin6_port = htons(port);
  return a;
}

std::string address_text(const SockAddr& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  const auto bytes = address_bytes(a);
  if (bytes.empty() || ::inet_ntop(a.family(), bytes.data(), buf, sizeof buf) == nullptr) return "?";
  return buf;
}

}  // namespace remora::net
