#include "net/socket.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "net/io.h"
#include "net/seal.h"

namespace remora::net {

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0) {
    unseal_socket(fd_);  // before the number can be reused
    ::close(fd_);
  }
  fd_ = fd;
}

Status errno_status(int err, std::string_view what) {
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED:
      code = StatusCode::kPeerFailed;
      break;
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRNOTAVAIL:
    case ENETDOWN:
      code = StatusCode::kUnreachable;
      break;
    case ETIMEDOUT:
      code = StatusCode::kTimeout;
      break;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      code = StatusCode::kNoResource;
      break;
    case EADDRINUSE:
    case EACCES:
    case EINVAL:
      code = StatusCode::kInvalidArgument;
      break;
    case EBADMSG:
      // Only a sealed socket (net/seal.h) reports it.
      return Status(StatusCode::kProtocol,
                    std::string(what) +
                        ": a sealed record failed authentication (tampered with, dropped, reordered, replayed or cut "
                        "short in flight; REMORA_ENCRYPT): none of its bytes were delivered");
    default:
      break;
  }
  return Status(code, std::string(what) + ": " + std::strerror(err) + descriptor_limit_hint(err));
}

std::string descriptor_limit_hint(int err) {
  if (err == ENFILE) {
    return " (the system-wide limit on open files, fs.file-max, is reached: raise it with sysctl, or close files)";
  }
  if (err != EMFILE) return {};
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return " (this process reached its open-file limit, RLIMIT_NOFILE)";
  auto text = [](rlim_t v) { return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v); };
  std::string fix = "raise the soft limit up to the hard one (ulimit -n " + text(limit.rlim_max) + ")";
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_cur >= limit.rlim_max) {
    fix =
        "the soft limit is at the hard one: raise the hard limit (limits.conf, systemd's LimitNOFILE, a "
        "container's nofile ulimit)";
  }
  return " (this process reached its open-file limit, RLIMIT_NOFILE: soft " + text(limit.rlim_cur) + ", hard " +
         text(limit.rlim_max) + "; " + fix + ", or open fewer endpoints or data streams, REMORA_STREAMS)";
}

size_t open_descriptors() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    return n > 0 ? n - 1 : 0;  // less the directory's own descriptor
  }
  return 0;
}

size_t descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return static_cast<size_t>(limit.rlim_cur);
}

Status ensure_descriptors(size_t more, std::string_view what) {
  // A margin for what else the process opens meanwhile (files, pipes, the store).
  constexpr size_t kMargin = 32;
  const size_t need = open_descriptors() + more + kMargin;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return errno_status(errno, "getrlimit(RLIMIT_NOFILE)");
  if (limit.rlim_cur == RLIM_INFINITY || need <= limit.rlim_cur) return Status::ok();
  if (limit.rlim_max == RLIM_INFINITY || need <= limit.rlim_max) {
    rlimit raised = limit;
    // Headroom, so that each new endpoint does not raise it again.
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? need * 2 : std::min<rlim_t>(limit.rlim_max, need * 2);
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      REMORA_LOG(kInfo, "{} needs {} descriptors: raised the soft RLIMIT_NOFILE from {} to {}", what, need,
                 limit.rlim_cur, raised.rlim_cur);
      return Status::ok();
    }
  }
  return Status(StatusCode::kNoResource,
                std::string(what) + " needs about " + std::to_string(need) +
                    " file descriptors, more than this process's open-file limit allows (RLIMIT_NOFILE: soft " +
                    std::to_string(limit.rlim_cur) + ", hard " +
                    (limit.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(limit.rlim_max)) +
                    "): raise the hard limit (limits.conf, systemd's LimitNOFILE, a container's nofile ulimit), or "
                    "open fewer data streams per endpoint (REMORA_STREAMS)");
}

namespace {

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000 ? 1'000'000 : static_cast<int>(left);
}

Status wait_fd(int fd, short events, Clock::time_point deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = remaining_ms(deadline);
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return Status::ok();
    // remaining_ms caps one poll at 1000 s: a longer deadline takes several rounds.
    if (rc == 0 && Clock::now() < deadline) continue;
    if (rc == 0) return Status(StatusCode::kTimeout, std::string(what) + ": timed out");
    if (errno != EINTR) return errno_status(errno, what);
  }
}

}  // namespace

Status wait_readable(int fd, Clock::time_point deadline) { return wait_fd(fd, POLLIN, deadline, "recv"); }

Result<Fd> listen_tcp(const SockAddr& addr, int backlog) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!fd.valid()) return errno_status(errno, "listen on " + to_string(addr) + ": socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (addr.family() == AF_INET6) {
    int zero = 0;  // dual stack when bound to the wildcard
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  }
  if (::bind(fd.get(), addr.get(), addr.length) != 0) return errno_status(errno, "bind " + to_string(addr));
  if (::listen(fd.get(), backlog) != 0) return errno_status(errno, "listen " + to_string(addr));
  return fd;
}

Result<SockAddr> local_address(int fd) {
  SockAddr a;
  a.length = sizeof a.storage;
  if (::getsockname(fd, a.get(), &a.length) != 0) return errno_status(errno, "getsockname");
  return a;
}

Result<SockAddr> peer_address(int fd) {
  SockAddr a;
  a.length = sizeof a.storage;
  if (::getpeername(fd, a.get(), &a.length) != 0) return errno_status(errno, "getpeername");
  return a;
}

Status configure_stream_socket(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return errno_status(errno, "TCP_NODELAY");
  if (::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0) return errno_status(errno, "SO_KEEPALIVE");
  int idle = 10, interval = 5, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno_status(errno, "O_NONBLOCK");
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return Status::ok();
}

Result<Fd> connect_tcp(const SockAddr& addr, Clock::time_point deadline, const SockAddr* source) {
  std::string what = "connect " + to_string(addr);
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!fd.valid()) return errno_status(errno, what + ": socket");
  if (source != nullptr) {
    what += " from " + to_string(*source);
    SockAddr local = *source;
    if (local.family() == AF_INET) reinterpret_cast<sockaddr_in*>(local.get())->sin_port = 0;
    if (local.family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(local.get())->sin6_port = 0;
    if (::bind(fd.get(), local.get(), local.length) != 0) return errno_status(errno, what + ": bind");
  }
  if (::connect(fd.get(), addr.get(), addr.length) != 0) {
    if (errno != EINPROGRESS) return errno_status(errno, what);
    REMORA_RETURN_IF_ERROR(wait_fd(fd.get(), POLLOUT, deadline, what));
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return errno_status(err, what);
  }
  if (is_self_connected(fd.get())) {
    return Status(StatusCode::kUnreachable,
                  what + ": connected to itself (nothing listens there, and the kernel chose that port as the source)");
  }
  REMORA_RETURN_IF_ERROR(configure_stream_socket(fd.get()));
  return fd;
}

bool is_self_connected(int fd) {
  auto local = local_address(fd);
  auto peer = peer_address(fd);
  if (!local.is_ok() || !peer.is_ok() || local->family() != peer->family()) return false;
  if (local->family() == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(local->get());
    const auto* b = reinterpret_cast<const sockaddr_in*>(peer->get());
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (local->family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(local->get());
    const auto* b = reinterpret_cast<const sockaddr_in6*>(peer->get());
    return a->sin6_port == b->sin6_port && std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
  }
  return false;
}

Status write_all(int fd, std::span<const std::byte> data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const IoResult r = send_some(fd, data.data() + done, data.size() - done);
    if (r.moved()) {
      done += r.bytes;
    } else if (r.would_block()) {
      REMORA_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, "send"));
    } else {
      return errno_status(r.err, "send");
    }
  }
  return Status::ok();
}

Status read_exact(int fd, std::span<std::byte> data, Clock::time_point deadline,
                  const std::function<IoResult(std::byte*, size_t)>& recv, const std::function<Status(int)>& error,
                  const std::function<Status(Clock::time_point)>& wait) {
  size_t done = 0;
  while (done < data.size()) {
    const IoResult r = recv(data.data() + done, data.size() - done);
    if (r.moved()) {
      done += r.bytes;
    } else if (r.would_block()) {
      REMORA_RETURN_IF_ERROR(wait ? wait(deadline) : wait_fd(fd, POLLIN, deadline, "recv"));
    } else if (r.eof()) {
      return Status(StatusCode::kPeerFailed, "connection closed by peer");
    } else {
      return error(r.err);
    }
  }
  return Status::ok();
}

Status read_exact(int fd, std::span<std::byte> data, Clock::time_point deadline) {
  return read_exact(
      fd, data, deadline, [fd](std::byte* p, size_t n) { return recv_some(fd, p, n); },
      [](int err) { return errno_status(err, "recv"); });
}

}  // namespace remora::net
