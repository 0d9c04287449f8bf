// net/address.h — "host:port" parsing and name resolution (IPv4, IPv6, names).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "remora/status.h"

namespace remora::net {

struct HostPort {
  std::string host;  ///< without brackets; may be empty (= any address when listening)
  uint16_t port = 0;
};

/// "10.0.0.1:7100", "[::1]:7100", "node-3:7100", ":7100". kInvalidArgument otherwise.
Result<HostPort> parse_host_port(std::string_view text);

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() noexcept { return reinterpret_cast<sockaddr*>(&storage); }
  int family() const noexcept { return storage.ss_family; }
};

/// getaddrinfo for TCP. `passive` for listening (empty host → wildcard, IPv6 dual
/// stack preferred). kUnreachable with gai_strerror when the name does not resolve.
Result<std::vector<SockAddr>> resolve(const HostPort& hp, bool passive);

/// "1.2.3.4:80" / "[::1]:80".
std::string to_string(const SockAddr& addr);

/// Whether `addr` is a loopback address (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104); a
/// wildcard (0.0.0.0, ::) is not.
bool is_loopback(const SockAddr& addr) noexcept;

}  // namespace remora::net
