// net/socket.h — TCP sockets: RAII descriptors, listen/connect with deadlines,
// options, and the few blocking helpers the client-side handshake needs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "net/address.h"
#include "net/io.h"
#include "remora/status.h"

namespace remora::net {

using Clock = std::chrono::steady_clock;

/// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() noexcept = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// A Status for a failed syscall: code chosen from errno (ECONNRESET/EPIPE →
/// kPeerFailed, ECONNREFUSED/EHOSTUNREACH/ENETUNREACH → kUnreachable, ETIMEDOUT →
/// kTimeout, EMFILE/ENOBUFS/ENOMEM → kNoResource, else kInternal) and the message
/// "<what>: <strerror>", followed for EMFILE/ENFILE by descriptor_limit_hint.
Status errno_status(int err, std::string_view what);
/// For EMFILE: the process's RLIMIT_NOFILE (soft and hard) and how to raise it; for
/// ENFILE: the system-wide limit; empty for any other errno.
std::string descriptor_limit_hint(int err);

/// File descriptors this process has open now (the entries of /proc/self/fd).
size_t open_descriptors();
/// This process's soft RLIMIT_NOFILE (SIZE_MAX when unlimited).
size_t descriptor_limit();
/// Makes room for `more` descriptors beyond those open now: raises the soft
/// RLIMIT_NOFILE toward the hard one when they would not fit (no privilege needed),
/// or fails with kNoResource naming RLIMIT_NOFILE, what `what` needs and the limits.
Status ensure_descriptors(size_t more, std::string_view what);

/// Binds and listens (SO_REUSEADDR, non-blocking, close-on-exec).
Result<Fd> listen_tcp(const SockAddr& addr, int backlog = 1024);
/// The locally bound address of a socket.
Result<SockAddr> local_address(int fd);
/// The peer address of a connected socket.
Result<SockAddr> peer_address(int fd);

/// Whether a connected TCP socket is connected to itself. Connecting to a local port
/// that nobody listens on, the kernel may choose that same port as the source port,
/// and TCP's simultaneous open then joins the socket to itself: the connect succeeds
/// and the caller talks to itself.
bool is_self_connected(int fd);

/// What TCP says of a connection's outgoing bytes (net/tcp_state.cc).
struct TcpAckState {
  uint64_t queued = 0;             ///< bytes written and not acknowledged yet (sent or not)
  uint32_t since_last_ack_ms = 0;  ///< since the last acknowledgement arrived
  uint32_t peer_window = 0;        ///< the peer's advertised receive window, bytes
  uint32_t unanswered_probes = 0;  ///< probes of a closed window (or keepalives) not answered
};
Result<TcpAckState> tcp_ack_state(int fd);
/// Why a TCP connection's own path looks gone: bytes on it unacknowledged for `quiet_ms`
/// or more, with the peer's window open or its probes unanswered (a stopped or slow
/// peer process leaves its kernel acknowledging them, or closing its window and
/// answering the probes). nullopt where it does not, and where TCP_INFO fails.
std::optional<std::string> tcp_path_stalled(int fd, uint32_t quiet_ms);
/// Whether the peer has ended the connection, as TCP tells: its FIN or its reset came
/// (CLOSE_WAIT, CLOSE and the states after them). False where TCP_INFO fails.
bool tcp_peer_ended(int fd);

/// Connects to `addr` before `deadline` (the socket is left blocking=false). A
/// connection that came out joined to itself (is_self_connected) is kUnreachable, as
/// a refused one: nobody listens there yet. With `source`, the socket is bound to that
/// address (its port ignored) before it connects, so the stream leaves by the interface
/// holding it whatever the routing table prefers (a rail, net/rails.h).
Result<Fd> connect_tcp(const SockAddr& addr, Clock::time_point deadline, const SockAddr* source = nullptr);

/// TCP_NODELAY, SO_KEEPALIVE with short probes (dead peers are noticed even when
/// idle), close-on-exec and O_NONBLOCK.
Status configure_stream_socket(int fd);

/// Blocking-with-deadline helpers on a non-blocking socket (poll-based).
Status write_all(int fd, std::span<const std::byte> data, Clock::time_point deadline);
/// poll(POLLIN) until `fd` is readable; kTimeout at `deadline`.
Status wait_readable(int fd, Clock::time_point deadline);
/// Reads exactly data.size() bytes. EOF before that is kPeerFailed ("closed by peer").
Status read_exact(int fd, std::span<std::byte> data, Clock::time_point deadline);
/// The same, each read made by `recv` (one non-blocking read of up to the length given
/// into the pointer given, as recv_some): for a socket read otherwise than by recv(2).
/// Its kError is reported by `error` (given the errno). After a read that would block it
/// waits with `wait` (until the deadline given) if there is one, else with poll(POLLIN).
Status read_exact(int fd, std::span<std::byte> data, Clock::time_point deadline,
                  const std::function<IoResult(std::byte*, size_t)>& recv, const std::function<Status(int)>& error,
                  const std::function<Status(Clock::time_point)>& wait = {});

}  // namespace remora::net
