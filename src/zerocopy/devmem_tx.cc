// zerocopy/devmem_tx.cc — see devmem_tx.h.
#include "zerocopy/devmem_tx.h"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "zerocopy/kernel_error.h"
#include "zerocopy/uapi.h"

namespace remora::zerocopy {
namespace {

net::IoResult io_result(ssize_t rc, int err) noexcept {
  if (rc >= 0) return net::IoResult{.kind = net::IoResult::Kind::kBytes, .bytes = static_cast<size_t>(rc)};
  if (err == EAGAIN || err == EWOULDBLOCK) return net::IoResult{.kind = net::IoResult::Kind::kWouldBlock};
  return net::IoResult{.kind = net::IoResult::Kind::kError, .err = err};
}

constexpr int kSendFlags = uapi::kMsgZerocopy | MSG_DONTWAIT | MSG_NOSIGNAL;

}  // namespace

void build_devmem_tx_control(uint32_t binding_id, std::span<std::byte, kDevmemTxControlBytes> out) {
  std::memset(out.data(), 0, out.size());
  cmsghdr header{};
  header.cmsg_len = CMSG_LEN(sizeof(uint32_t));
  header.cmsg_level = SOL_SOCKET;
  header.cmsg_type = uapi::kScmDevmemDmabuf;
  std::memcpy(out.data(), &header, sizeof header);
  std::memcpy(out.data() + CMSG_LEN(0), &binding_id, sizeof binding_id);
}

net::IoResult send_devmem(int fd, uint32_t binding_id, uint64_t dmabuf_offset, size_t len) noexcept {
  alignas(cmsghdr) std::byte control[kDevmemTxControlBytes];
  build_devmem_tx_control(binding_id, control);
  iovec iov{};
  // The kernel reads iov_base as an offset into the bound dmabuf, not as an address.
  iov.iov_base = reinterpret_cast<void*>(static_cast<uintptr_t>(dmabuf_offset));
  iov.iov_len = len;
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t rc;
  do {
    rc = ::sendmsg(fd, &msg, kSendFlags);
  } while (rc < 0 && errno == EINTR);
  return io_result(rc, errno);
}

net::IoResult send_zerocopy(int fd, const void* data, size_t len) noexcept {
  ssize_t rc;
  do {
    rc = ::send(fd, data, len, kSendFlags);
  } while (rc < 0 && errno == EINTR);
  return io_result(rc, errno);
}

Status enable_zerocopy(int fd) {
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, uapi::kSoZerocopy, &one, sizeof one) == 0) return Status::ok();
  const int err = errno;
  return Status(err == ENOPROTOOPT || err == EOPNOTSUPP ? StatusCode::kUnsupported : StatusCode::kInternal,
                fmt::format("setsockopt(SO_ZEROCOPY): {}", errno_text(err)));
}

Result<std::optional<ZerocopyCompletion>> parse_zerocopy_completion(const msghdr& msg) {
  const auto* control = static_cast<const std::byte*>(msg.msg_control);
  const size_t len = control == nullptr ? 0 : msg.msg_controllen;
  for (size_t off = 0; off + sizeof(cmsghdr) <= len;) {
    cmsghdr header;
    std::memcpy(&header, control + off, sizeof header);
    if (header.cmsg_len < CMSG_LEN(0) || header.cmsg_len > len - off) {
      return Status(StatusCode::kProtocol,
                    fmt::format("malformed error-queue control message at byte {}: cmsg_len {}", off, header.cmsg_len));
    }
    const size_t this_off = off;
    off += CMSG_ALIGN(header.cmsg_len);
    const bool recverr = (header.cmsg_level == SOL_IP && header.cmsg_type == IP_RECVERR) ||
                         (header.cmsg_level == SOL_IPV6 && header.cmsg_type == IPV6_RECVERR);
    if (!recverr || header.cmsg_len < CMSG_LEN(sizeof(sock_extended_err))) continue;
    sock_extended_err ee;
    std::memcpy(&ee, control + this_off + CMSG_LEN(0), sizeof ee);
    if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
    if (ee.ee_errno != 0) {
      return Status(StatusCode::kInternal,
                    fmt::format("zero-copy sends {}..{} failed: {}", ee.ee_info, ee.ee_data,
                                errno_text(static_cast<int>(ee.ee_errno))));
    }
    return std::optional<ZerocopyCompletion>(ZerocopyCompletion{
        .first = ee.ee_info, .last = ee.ee_data, .copied = (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0});
  }
  return std::optional<ZerocopyCompletion>();
}

Status ZerocopyTracker::complete(const ZerocopyCompletion& c, const std::function<void(uint64_t)>& released) {
  const uint32_t span = c.last - c.first;  // inclusive range of span + 1 sends, wrapping
  uint64_t matched = 0;
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (static_cast<uint32_t>(it->seq - c.first) <= span) {
      const uint64_t cookie = it->cookie;
      it = inflight_.erase(it);
      ++matched;
      if (released) released(cookie);
    } else {
      ++it;
    }
  }
  ++completions_;
  if (c.copied) ++copied_;
  if (matched != uint64_t{span} + 1) {
    return Status(StatusCode::kProtocol,
                  fmt::format("zero-copy completion {}..{} names {} sends, {} of them in flight (sent {} so far)",
                              c.first, c.last, uint64_t{span} + 1, matched, next_));
  }
  return Status::ok();
}

void ZerocopyTracker::release_all(const std::function<void(uint64_t)>& released) {
  while (!inflight_.empty()) {
    const uint64_t cookie = inflight_.front().cookie;
    inflight_.pop_front();
    released(cookie);
  }
}

Status ZerocopyTracker::drain(int fd, const std::function<void(uint64_t)>& released) {
  Status first = Status::ok();
  for (;;) {
    alignas(cmsghdr) std::byte control[256];
    msghdr msg{};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t rc = ::recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT);
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return first;
      return Status(StatusCode::kInternal, fmt::format("recvmsg(MSG_ERRQUEUE): {}", errno_text(errno)));
    }
    auto parsed = parse_zerocopy_completion(msg);
    if (!parsed) {
      if (first.is_ok()) first = parsed.status();
      continue;
    }
    if (!*parsed) continue;
    if (Status s = complete(**parsed, released); !s.is_ok() && first.is_ok()) first = s;
  }
}

}  // namespace remora::zerocopy
