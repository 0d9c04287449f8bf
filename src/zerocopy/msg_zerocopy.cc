// zerocopy/msg_zerocopy.cc — see msg_zerocopy.h.
#include "zerocopy/msg_zerocopy.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "net/address.h"
#include "net/socket.h"
#include "zerocopy/uapi.h"

namespace remora::zerocopy {
namespace {

using Clock = std::chrono::steady_clock;

Status failed(MsgZerocopyProbe* out, int err, std::string_view step, std::string_view hint = {}) {
  out->refusal.err = err;
  std::string text = fmt::format("MSG_ZEROCOPY probe: {}: {}", step, errno_text(err));
  if (!hint.empty()) text += fmt::format(" — {}", hint);
  return {err == ENOPROTOOPT || err == EOPNOTSUPP ? StatusCode::kUnsupported : StatusCode::kInternal, text};
}

/// Waits until `fd` reports one of `events` (POLLERR is always reported) or the deadline.
Status wait_for(int fd, short events, Clock::time_point deadline, std::string_view what) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return {StatusCode::kTimeout, fmt::format("MSG_ZEROCOPY probe: {}: timed out", what)};
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc > 0) return Status::ok();
    if (rc < 0 && errno != EINTR) return net::errno_status(errno, what);
  }
}

// The control-message macros cast in C style; kept to this one function.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wcast-align"
/// The zerocopy completion in an error-queue message's control data, if it holds one.
bool zerocopy_completion(msghdr* msg, sock_extended_err* out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    const bool recverr = (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                         (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR);
    if (!recverr || c->cmsg_len < CMSG_LEN(sizeof(sock_extended_err))) continue;
    std::memcpy(out, CMSG_DATA(c), sizeof *out);
    if (out->ee_origin == SO_EE_ORIGIN_ZEROCOPY) return true;
  }
  return false;
}
#pragma GCC diagnostic pop

}  // namespace

Status probe_msg_zerocopy(MsgZerocopyProbe* out, std::chrono::milliseconds timeout) {
  *out = MsgZerocopyProbe{};
  const auto deadline = Clock::now() + timeout;
  net::SockAddr loopback;
  auto* in = reinterpret_cast<sockaddr_in*>(&loopback.storage);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  loopback.length = sizeof(sockaddr_in);

  REMORA_ASSIGN_OR_RETURN(net::Fd listener, net::listen_tcp(loopback, 1));
  REMORA_ASSIGN_OR_RETURN(const net::SockAddr where, net::local_address(listener.get()));
  REMORA_ASSIGN_OR_RETURN(net::Fd client, net::connect_tcp(where, deadline));
  REMORA_RETURN_IF_ERROR(wait_for(listener.get(), POLLIN, deadline, "accepting the loopback connection"));
  net::Fd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!server.valid()) return failed(out, errno, "accept4");

  int one = 1;
  if (::setsockopt(client.get(), SOL_SOCKET, uapi::kSoZerocopy, &one, sizeof one) != 0) {
    return failed(out, errno, "setsockopt(SO_ZEROCOPY)", "this kernel has no MSG_ZEROCOPY for TCP (4.14+)");
  }
  out->so_zerocopy = true;

  std::vector<char> payload(64 * 1024, 'z');
  const ssize_t sent = ::send(client.get(), payload.data(), payload.size(), uapi::kMsgZerocopy | MSG_DONTWAIT);
  if (sent < 0) {
    return failed(out, errno, "send(MSG_ZEROCOPY)",
                  errno == ENOBUFS ? "the socket's option memory is exhausted (net.core.optmem_max)" : "");
  }
  // The completion comes when the kernel lets go of the pages; POLLERR announces it.
  REMORA_RETURN_IF_ERROR(wait_for(client.get(), 0, deadline, "waiting for the send's completion"));
  alignas(cmsghdr) char control[256];
  msghdr msg{};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(client.get(), &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
    return failed(out, errno, "recvmsg(MSG_ERRQUEUE)");
  }
  sock_extended_err ee{};
  if (!zerocopy_completion(&msg, &ee)) {
    return {StatusCode::kProtocol, "MSG_ZEROCOPY probe: the error queue held no zerocopy completion"};
  }
  if (ee.ee_errno != 0) return failed(out, static_cast<int>(ee.ee_errno), "the completion reported an error");
  out->completed = true;
  out->copied = (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0;
  out->first = ee.ee_info;
  out->last = ee.ee_data;
  return Status::ok();
}

}  // namespace remora::zerocopy
