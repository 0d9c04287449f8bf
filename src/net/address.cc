#include "net/address.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <cstring>

#include "core/env.h"

namespace remora::net {

Result<HostPort> parse_host_port(std::string_view text) {
  auto bad = [&](const char* why) {
    return Status(StatusCode::kInvalidArgument, "address '" + std::string(text) + "': " + why + " (want host:port or [v6]:port)");
  };
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("missing ']'");
    hp.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("missing ':port' after ']'");
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("missing ':port'");
    if (text.find(':') != colon) return bad("IPv6 addresses must be written in brackets");
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  auto port = core::parse_uint(port_text, 0, 65535);
  if (!port) return bad("port must be 0..65535");
  hp.port = static_cast<uint16_t>(*port);
  return hp;
}

Result<std::vector<SockAddr>> resolve(const HostPort& hp, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : AI_ADDRCONFIG);
  std::string port = std::to_string(hp.port);
  addrinfo* list = nullptr;
  const char* host = hp.host.empty() ? nullptr : hp.host.c_str();
  int rc = ::getaddrinfo(host, port.c_str(), &hints, &list);
  if (rc == EAI_ADDRFAMILY || (rc == EAI_NONAME && !passive && host != nullptr)) {
    // AI_ADDRCONFIG hides loopback-only families on hosts without other addresses (netns).
    hints.ai_flags &= ~AI_ADDRCONFIG;
    rc = ::getaddrinfo(host, port.c_str(), &hints, &list);
  }
  if (rc != 0) {
    return Status(StatusCode::kUnreachable, "cannot resolve '" + hp.host + "': " + ::gai_strerror(rc));
  }
  std::vector<SockAddr> out;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    SockAddr a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    out.push_back(a);
  }
  ::freeaddrinfo(list);
  if (passive && host == nullptr) {
    // Prefer the IPv6 wildcard (dual stack) when both are offered.
    std::stable_partition(out.begin(), out.end(), [](const SockAddr& a) { return a.family() == AF_INET6; });
  }
  if (out.empty()) return Status(StatusCode::kUnreachable, "'" + hp.host + "' resolved to no TCP address");
  return out;
}

std::string to_string(const SockAddr& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr.storage);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr.storage);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "<unknown address family>";
}

bool is_loopback(const SockAddr& addr) noexcept {
  if (addr.family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr.storage);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr.family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr.storage);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace remora::net
