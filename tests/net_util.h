// tests/net_util.h — small socket helpers shared by the unit and integration tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

namespace remora::test {

/// A loopback TCP port that was free a moment ago, for a rendezvous store the ranks of
/// a test host. It is chosen below the kernel's ephemeral range
/// (net.ipv4.ip_local_port_range), which bind(0) and connect() draw from: a port from
/// inside it could be handed to a context's listener created in between, or be the
/// source port of a rank's own early connect to it (TCP then connects the socket to
/// itself), and the store could not bind it. Another process could still take it in
/// between, which would fail the test.
inline uint16_t free_tcp_port() {
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
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as the store binds
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (free) return port;
  }
  ADD_FAILURE() << "no free TCP port outside the ephemeral range in 1000 tries";
  return 0;
}

}  // namespace remora::test
