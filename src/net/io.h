// net/io.h — one non-blocking send or recv on a socket, with the errno handling done
// once for every caller: EINTR is retried, EAGAIN/EWOULDBLOCK is "would block" (not an
// error), a recv of 0 bytes is the peer's EOF, anything else is an error with its errno
// (errno_status in net/socket.h turns it into a Status).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace remora::net {

/// The outcome of one non-blocking send or recv.
struct IoResult {
  enum class Kind : uint8_t {
    kBytes,       ///< `bytes` were moved (> 0, or 0 for a request of 0 bytes)
    kWouldBlock,  ///< the socket has no room (send) or no data (recv) now
    kEof,         ///< recv: the peer shut down its sending side
    kError,       ///< `err` holds the errno
  };
  Kind kind = Kind::kBytes;
  size_t bytes = 0;
  int err = 0;

  bool moved() const noexcept { return kind == Kind::kBytes; }
  bool would_block() const noexcept { return kind == Kind::kWouldBlock; }
  bool eof() const noexcept { return kind == Kind::kEof; }
  bool error() const noexcept { return kind == Kind::kError; }
};

/// send(MSG_NOSIGNAL | MSG_DONTWAIT) of up to `len` bytes; on a socket with a sealing
/// layer (net/seal.h, REMORA_ENCRYPT) the bytes go out as sealed records.
IoResult send_some(int fd, const void* data, size_t len) noexcept;
/// recv(MSG_DONTWAIT) of up to `len` bytes; on a sealed socket, bytes of records that
/// opened (kError EBADMSG once one did not).
IoResult recv_some(int fd, void* data, size_t len) noexcept;

/// sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT) of the `count` buffers in order, up to their
/// total: several buffers in one system call. On a sealed socket the buffers go sealed
/// together in one batch of records (each buffer in records of its own).
IoResult send_some_gathered(int fd, const iovec* buffers, int count) noexcept;

/// recvmsg(MSG_DONTWAIT) into the `count` buffers in order, up to their total; on a
/// sealed socket, bytes of records that opened, buffer by buffer, stopping at the first
/// short one. kEof, kWouldBlock and kError as recv_some (only when nothing was read).
IoResult recv_some_scattered(int fd, const iovec* buffers, int count) noexcept;

/// The plain system calls, under any sealing layer (net/seal.cc sends and reads its
/// records with them).
IoResult raw_send_some(int fd, const void* data, size_t len) noexcept;
IoResult raw_recv_some(int fd, void* data, size_t len) noexcept;

}  // namespace remora::net
