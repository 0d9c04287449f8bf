// net/rails.h — a context's rails: the local interfaces (NICs) its endpoints spread
// their data streams over, chosen by REMORA_RAILS in the syntax of NCCL_SOCKET_IFNAME
// (comma-separated name prefixes, `^` to exclude, `=` for exact names, and here also
// plain IP addresses), matched against the host's interfaces (getifaddrs). Also the
// helpers on addresses that choosing a rail needs (the connect that binds a rail's
// source address is net::connect_tcp's `source`, socket.h). What the handshake does with rails:
// docs/protocol.md, "Rails"; how to set them up: docs/rails.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/address.h"
#include "net/socket.h"
#include "remora/status.h"

namespace remora::net {

/// At most this many rails per context (and addresses in a listener's RAILS message).
inline constexpr size_t kMaxRails = 16;

/// One address of one local interface, as getifaddrs lists it.
struct InterfaceAddress {
  std::string name;           ///< "eth0"
  SockAddr address;           ///< port 0
  uint8_t prefix_length = 0;  ///< of its netmask: 24 for 255.255.255.0
  bool up = false;            ///< IFF_UP
  bool loopback = false;      ///< IFF_LOOPBACK
};

/// A rail: a local interface and the address its streams are bound to.
struct Rail {
  std::string interface;
  SockAddr address;  ///< port 0
  uint8_t prefix_length = 0;
};

/// REMORA_RAILS, parsed. A leading `^` excludes what follows (every other interface
/// that is up, loopback aside, is a rail); a `=` (after the `^`, if any) makes the
/// names exact rather than prefixes. Items that read as an IPv4 or IPv6 address name
/// that address of whichever interface holds it.
struct RailSpec {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
  std::vector<SockAddr> addresses;
};

/// Parses the text of REMORA_RAILS; kInvalidArgument for an empty list or item, or an
/// item with characters no interface name has.
Result<RailSpec> parse_rail_spec(std::string_view text);

/// The rails `spec` selects among `interfaces` (up ones only, one rail per interface:
/// its first IPv4 address, else its first IPv6 address that is not link-local; an
/// address item takes exactly that address), in the order of the items (exclude: of
/// the interfaces' names). kInvalidArgument naming `text` and the interfaces there are
/// when nothing matches, an address item names no local address, or more than
/// kMaxRails match.
Result<std::vector<Rail>> match_rails(const RailSpec& spec, std::span<const InterfaceAddress> interfaces,
                                      std::string_view text);

/// Why interface `name` (one of `interfaces`) is not among the rails `spec` selects, by
/// the rules of match_rails ("down", "excluded by REMORA_RAILS", ...); empty when it is
/// one. For `remora doctor`, which lists every interface.
std::string why_not_a_rail(const RailSpec& spec, std::span<const InterfaceAddress> interfaces, const std::string& name);

/// This host's interface addresses (getifaddrs), IPv4 and IPv6 only.
Result<std::vector<InterfaceAddress>> local_interfaces();

/// REMORA_RAILS's rails on this host: parse_rail_spec, local_interfaces, match_rails.
/// Empty text: no rails (one path, the route's, as without rails).
Result<std::vector<Rail>> resolve_rails(std::string_view text);

/// Whether `peer` lies in `rail`'s subnet (same family, same prefix bits).
bool same_subnet(const Rail& rail, const SockAddr& peer) noexcept;
/// Whether two addresses are equal, ports aside.
bool same_address(const SockAddr& a, const SockAddr& b) noexcept;
/// Whether `a` is the wildcard address (0.0.0.0 or ::).
bool is_wildcard(const SockAddr& a) noexcept;
/// The port of an IPv4 or IPv6 address (host order), and a copy with another port.
uint16_t port_of(const SockAddr& a) noexcept;
SockAddr with_port(SockAddr a, uint16_t port) noexcept;
/// "1.2.3.4" / "::1": the address without a port.
std::string address_text(const SockAddr& a);

}  // namespace remora::net
