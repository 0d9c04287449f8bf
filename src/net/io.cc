// net/io.cc — see io.h.
#include "net/io.h"

#include <sys/socket.h>

#include <cerrno>

#include "net/seal.h"

namespace remora::net {
namespace {

IoResult failed(int err) noexcept {
  if (err == EAGAIN || err == EWOULDBLOCK) return {.kind = IoResult::Kind::kWouldBlock};
  return {.kind = IoResult::Kind::kError, .err = err};
}

}  // namespace

IoResult raw_send_some(int fd, const void* data, size_t len) noexcept {
  for (;;) {
    const ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return {.kind = IoResult::Kind::kBytes, .bytes = static_cast<size_t>(n)};
    if (errno != EINTR) return failed(errno);
  }
}

IoResult raw_recv_some(int fd, void* data, size_t len) noexcept {
  for (;;) {
    const ssize_t n = ::recv(fd, data, len, MSG_DONTWAIT);
    if (n > 0 || (n == 0 && len == 0)) return {.kind = IoResult::Kind::kBytes, .bytes = static_cast<size_t>(n)};
    if (n == 0) return {.kind = IoResult::Kind::kEof};
    if (errno != EINTR) return failed(errno);
  }
}

IoResult recv_some_scattered(int fd, const iovec* buffers, int count) noexcept {
  if (count <= 0) return {.kind = IoResult::Kind::kBytes, .bytes = 0};
  if (count == 1) return recv_some(fd, buffers[0].iov_base, buffers[0].iov_len);
  IoResult sealed;
  if (sealed_recv(fd, buffers[0].iov_base, buffers[0].iov_len, &sealed)) {
    // The layer copies opened bytes out: buffer by buffer, on while each is filled.
    size_t got = 0;
    for (int i = 0;; ++i) {
      if (!sealed.moved()) return got > 0 ? IoResult{.kind = IoResult::Kind::kBytes, .bytes = got} : sealed;
      got += sealed.bytes;
      if (sealed.bytes < buffers[i].iov_len || i + 1 == count) return {.kind = IoResult::Kind::kBytes, .bytes = got};
      (void)sealed_recv(fd, buffers[i + 1].iov_base, buffers[i + 1].iov_len, &sealed);
    }
  }
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(buffers);  // recvmsg writes through the buffers, not the array
  msg.msg_iovlen = static_cast<size_t>(count);
  for (;;) {
    const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
    if (n > 0) return {.kind = IoResult::Kind::kBytes, .bytes = static_cast<size_t>(n)};
    if (n == 0) return {.kind = IoResult::Kind::kEof};
    if (errno != EINTR) return failed(errno);
  }
}

IoResult send_some(int fd, const void* data, size_t len) noexcept {
  IoResult sealed;
  if (sealed_send(fd, data, len, &sealed)) return sealed;
  return raw_send_some(fd, data, len);
}

IoResult send_some_gathered(int fd, const iovec* buffers, int count) noexcept {
  if (count <= 0) return {.kind = IoResult::Kind::kBytes, .bytes = 0};
  IoResult sealed;
  if (sealed_send_gathered(fd, buffers, count, &sealed)) return sealed;
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(buffers);  // sendmsg does not write through it
  msg.msg_iovlen = static_cast<size_t>(count);
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return {.kind = IoResult::Kind::kBytes, .bytes = static_cast<size_t>(n)};
    if (errno != EINTR) return failed(errno);
  }
}

IoResult recv_some(int fd, void* data, size_t len) noexcept {
  IoResult sealed;
  if (sealed_recv(fd, data, len, &sealed)) return sealed;
  return raw_recv_some(fd, data, len);
}

}  // namespace remora::net
