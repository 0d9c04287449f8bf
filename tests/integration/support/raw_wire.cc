#include "support/raw_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace remora::itest::raw {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

uint16_t bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

}  // namespace

Socket::~Socket() {
  if (fd_ >= 0) close(fd_);
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Socket Socket::connect_to(const std::string& host, uint16_t port, std::string* error) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return {};
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    *error = std::string("connect: ") + std::strerror(errno);
    close(fd);
    return {};
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Socket(fd);
}

bool Socket::send_all(const std::vector<uint8_t>& data, std::string* error) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = std::string("send: ") + std::strerror(errno);
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::vector<uint8_t>> Socket::recv_exact(size_t n, std::chrono::milliseconds timeout,
                                                       std::string* error) {
  const auto deadline = Clock::now() + timeout;
  std::vector<uint8_t> out(n);
  size_t got = 0;
  while (got < n) {
    pollfd p{fd_, POLLIN, 0};
    const int r = poll(&p, 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      *error = "timed out after " + std::to_string(got) + " of " + std::to_string(n) + " bytes";
      return std::nullopt;
    }
    const ssize_t k = ::recv(fd_, out.data() + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      *error = std::string("recv: ") + std::strerror(errno) + " after " + std::to_string(got) + " bytes";
      return std::nullopt;
    }
    if (k == 0) {
      *error = "EOF after " + std::to_string(got) + " of " + std::to_string(n) + " bytes";
      return std::nullopt;
    }
    got += static_cast<size_t>(k);
  }
  return out;
}

bool Socket::wait_closed(std::chrono::milliseconds timeout, size_t* bytes_read) {
  const auto deadline = Clock::now() + timeout;
  size_t total = 0;
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int r = poll(&p, 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) break;
    char buf[65536];
    const ssize_t k = ::recv(fd_, buf, sizeof buf, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (bytes_read) *bytes_read = total;
      return true;  // EOF or reset
    }
    total += static_cast<size_t>(k);
  }
  if (bytes_read) *bytes_read = total;
  return false;
}

Listener::Listener() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(0);
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 16) != 0) {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return;
  }
  port_ = bound_port(fd_);
}

Listener::~Listener() {
  if (fd_ >= 0) close(fd_);
}

Socket Listener::accept(std::chrono::milliseconds timeout, std::string* error) {
  pollfd p{fd_, POLLIN, 0};
  const int r = poll(&p, 1, static_cast<int>(timeout.count()));
  if (r <= 0) {
    *error = r == 0 ? "no connection within the deadline" : std::string("poll: ") + std::strerror(errno);
    return {};
  }
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    *error = std::string("accept: ") + std::strerror(errno);
    return {};
  }
  return Socket(fd);
}

ClosedPort::ClosedPort() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(0);
  if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) port_ = bound_port(fd_);
}

ClosedPort::~ClosedPort() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace remora::itest::raw
