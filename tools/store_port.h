// tools/store_port.h — choosing a loopback port for a rendezvous store that ranks about
// to start will use (remora run; the tests that host a store do the same).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <optional>
#include <random>

namespace remora::tools {

/// Whether 127.0.0.1:port can be bound now (as the store binds: SO_REUSEADDR).
inline bool loopback_port_bindable(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

/// A loopback port that was free a moment ago (rank 0 binds it again at once), chosen
/// outside the kernel's ephemeral range (net.ipv4.ip_local_port_range), which bind(0)
/// and connect() draw from: inside it, a rank's listener created in between could be
/// given the same port, or a rank's early connect to it could get it as its own source
/// port, and the store could not bind it. Another process could still take it in
/// between. nullopt (errno EADDRINUSE) when 1000 random tries found none free.
inline std::optional<uint16_t> free_store_port() {
  int low = 32768, high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  int bottom = 1024, top = 65535;  // the whole range, where the ephemeral one leaves no room
  if (low > 2048) {
    top = low - 1;
  } else if (high < 64511) {
    bottom = high + 1;
  }
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(bottom, top);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<uint16_t>(pick(rng));
    if (loopback_port_bindable(port)) return port;
  }
  errno = EADDRINUSE;
  return std::nullopt;
}

}  // namespace remora::tools
