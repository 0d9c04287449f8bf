// zerocopy/rxq_client.cc — see rxq_client.h.
#include "zerocopy/rxq_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "zerocopy/genl.h"
#include "zerocopy/kernel_error.h"

namespace remora::zerocopy::rxq {

Status send_packet(int socket, std::span<const std::byte> bytes, int pass_fd) {
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return net::errno_status(errno, "rxq: sendmsg on the Unix socket");
  if (static_cast<size_t>(n) != bytes.size()) {
    return Status(StatusCode::kInternal, fmt::format("rxq: sendmsg sent {} of {} bytes", n, bytes.size()));
  }
  return Status::ok();
}

Result<Packet> recv_packet(int socket, size_t max, net::Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now());
    if (left.count() <= 0) return Status(StatusCode::kTimeout, "rxq: no packet on the Unix socket in time");
    pollfd p{socket, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return net::errno_status(errno, "rxq: poll on the Unix socket");
    if (r == 0) continue;
    break;
  }
  Packet out;
  out.bytes.resize(max + 1);  // one more, so that an oversized packet shows as MSG_TRUNC
  iovec iov{out.bytes.data(), out.bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return net::errno_status(errno, "rxq: recvmsg on the Unix socket");
  // Take every descriptor first, so that none leaks whatever else is wrong.
  std::vector<net::Fd> fds;
  bool foreign = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.emplace_back(fd);
      }
    } else {
      foreign = true;
    }
  }
  if (n == 0 && fds.empty()) {
    out.eof = true;
    out.bytes.clear();
    return out;
  }
  if ((msg.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(n) > max) {
    return Status(StatusCode::kProtocol, fmt::format("rxq: a packet longer than {} bytes", max));
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) return Status(StatusCode::kProtocol, "rxq: control data cut (MSG_CTRUNC)");
  if (foreign) return Status(StatusCode::kProtocol, "rxq: a control message other than SCM_RIGHTS");
  if (fds.size() > 1) return Status(StatusCode::kProtocol, fmt::format("rxq: {} descriptors in one packet", fds.size()));
  out.bytes.resize(static_cast<size_t>(n));
  if (!fds.empty()) out.fd = std::move(fds.front());
  return out;
}

Result<Client> Client::connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("rxq socket path '{}': empty or longer than {} bytes", path, sizeof addr.sun_path - 1));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  net::Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s.valid()) return net::errno_status(errno, "rxq: socket(AF_UNIX, SOCK_SEQPACKET)");
  if (::connect(s.get(), static_cast<sockaddr*>(static_cast<void*>(&addr)), sizeof addr) != 0) {
    const int err = errno;
    return Status(err == ENOENT || err == ECONNREFUSED ? StatusCode::kUnreachable : StatusCode::kInternal,
                  fmt::format("rxq: connect to {}: {} (is `remora rxq serve --socket {}` running?)", path,
                              errno_text(err), path));
  }
  return Client(std::move(s));
}

namespace {

/// rxq's answer of `type` to what we just sent (`what`, for messages); a refusal as an
/// error with the code its errno maps to (rxq's refusals are mostly the kernel's).
Result<std::pair<BindFlowReply, net::Fd>> answer(int socket, uint16_t type, const std::string& what,
                                                 std::chrono::milliseconds timeout) {
  REMORA_ASSIGN_OR_RETURN(Packet p, recv_packet(socket, kMaxReplyBytes, net::Clock::now() + timeout));
  if (p.eof) return Status(StatusCode::kPeerFailed, "rxq closed the connection without answering");
  REMORA_ASSIGN_OR_RETURN(BindFlowReply reply, decode_reply(p.bytes));
  if (reply.type != type) {
    return Status(StatusCode::kProtocol, fmt::format("rxq answered {} with a reply of type {:#06x}", what, reply.type));
  }
  if (reply.error != 0) {
    if (p.fd.valid()) return Status(StatusCode::kProtocol, "rxq: a refusal that carried a descriptor");
    KernelError ke;
    ke.err = reply.error;
    const StatusCode code = nl::refusal_status("", ke).code();
    return Status(code, fmt::format("rxq refused {}: {}: {}", what, errno_text(reply.error), reply.message));
  }
  return std::pair<BindFlowReply, net::Fd>(std::move(reply), std::move(p.fd));
}

}  // namespace

Result<FlowLease> Client::bind_flow(const TcpFlow& flow, std::chrono::milliseconds timeout) {
  REMORA_RETURN_IF_ERROR(send_packet(socket_.get(), encode(BindFlowRequest{flow})));
  REMORA_ASSIGN_OR_RETURN(auto got, answer(socket_.get(), kTypeBindFlowReply, flow.describe(), timeout));
  auto& [reply, fd] = got;
  if ((reply.flags & (kFlagClientDmabuf | kFlagClientZcrx)) != 0) {
    // Into our own dmabuf, or our own zcrx queue: nothing to pass.
    if (fd.valid()) {
      return Status(StatusCode::kProtocol, "rxq: a flow into our own dmabuf or zcrx queue that carried a descriptor");
    }
  } else if (!fd.valid()) {
    return Status(StatusCode::kProtocol, "rxq: a success without the buffer's descriptor");
  }
  return FlowLease{std::move(reply), std::move(fd)};
}

Result<BindFlowReply> Client::bind_dmabuf(int dmabuf_fd, uint64_t size, std::chrono::milliseconds timeout) {
  REMORA_RETURN_IF_ERROR(send_packet(socket_.get(), encode(BindDmabufRequest{.dmabuf_size = size}), dmabuf_fd));
  REMORA_ASSIGN_OR_RETURN(
      auto got, answer(socket_.get(), kTypeBindDmabufReply, fmt::format("our dmabuf of {} bytes", size), timeout));
  if (got.second.valid()) return Status(StatusCode::kProtocol, "rxq: a bind-dmabuf reply that carried a descriptor");
  return std::move(got.first);
}

Result<BindFlowReply> Client::reserve_queue(std::chrono::milliseconds timeout) {
  REMORA_RETURN_IF_ERROR(send_packet(socket_.get(), encode(ReserveQueueRequest{})));
  REMORA_ASSIGN_OR_RETURN(auto got,
                          answer(socket_.get(), kTypeReserveQueueReply, "a queue for our io_uring zcrx", timeout));
  // The descriptor, if one came, is closed with `got`.
  if (got.second.valid()) return Status(StatusCode::kProtocol, "rxq: a reserve-queue reply that carried a descriptor");
  return std::move(got.first);
}

}  // namespace remora::zerocopy::rxq
