// net/io.cc — see io.h.
#include "net/io.h"

#include <sys/socket.h>

#include <cerrno>

namespace remora::net {
namespace {

IoResult failed(int err) noexcept {
  if (err == EAGAIN || err == EWOULDBLOCK) return {.kind = IoResult::Kind::kWouldBlock};
  return {.kind = IoResult::Kind::kError, .err = err};
}

}  // namespace

IoResult send_some(int fd, const void* data, size_t len) noexcept {
  for (;;) {
    const ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return {.kind = IoResult::Kind::kBytes, .bytes = static_cast<size_t>(n)};
    if (errno != EINTR) return failed(errno);
  }
}

IoResult recv_some(int fd, void* data, size_t len) noexcept {
  for (;;) {
    const ssize_t n = ::recv(fd, data, len, MSG_DONTWAIT);
    if (n > 0 || (n == 0 && len == 0)) return {.kind = IoResult::Kind::kBytes, .bytes = static_cast<size_t>(n)};
    if (n == 0) return {.kind = IoResult::Kind::kEof};
    if (errno != EINTR) return failed(errno);
  }
}

}  // namespace remora::net
