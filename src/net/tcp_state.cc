// net/tcp_state.cc — what the kernel's TCP says of a connection: its outgoing bytes, its end. Apart
// from net/socket.cc: the fields it needs are in <linux/tcp.h>'s tcp_info, which clashes
// with glibc's <netinet/tcp.h> (whose copy lacks the peer's window).
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>

#include <fmt/format.h>

#include "net/socket.h"

namespace remora::net {

Result<TcpAckState> tcp_ack_state(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return errno_status(errno, "TCP_INFO");
  int queued = 0;  // SIOCOUTQ: bytes not acknowledged, sent or still queued
  if (::ioctl(fd, SIOCOUTQ, &queued) != 0) return errno_status(errno, "SIOCOUTQ");
  return TcpAckState{.queued = static_cast<uint64_t>(queued > 0 ? queued : 0),
                     .since_last_ack_ms = info.tcpi_last_ack_recv,
                     .peer_window = info.tcpi_snd_wnd,
                     .unanswered_probes = info.tcpi_probes};
}

std::optional<std::string> tcp_path_stalled(int fd, uint32_t quiet_ms) {
  Result<TcpAckState> tcp = tcp_ack_state(fd);
  // A closed window whose probes the peer answers is the peer not reading; a window
  // that closed just before the path went is only seen by the probes going unanswered.
  const bool peer_not_reading = tcp && tcp->peer_window == 0 && tcp->unanswered_probes == 0;
  if (!tcp || tcp->queued == 0 || peer_not_reading || tcp->since_last_ack_ms < quiet_ms) return std::nullopt;
  return fmt::format("no acknowledgement of its {} bytes for {} ms", tcp->queued, tcp->since_last_ack_ms);
}

bool tcp_peer_ended(int fd) {
  // tcpi_state's values (the kernel's TCP states, as glibc's <netinet/tcp.h> names them,
  // which cannot be included beside <linux/tcp.h>).
  enum : uint8_t { kTimeWait = 6, kClose = 7, kCloseWait = 8, kLastAck = 9, kClosing = 11 };
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  switch (info.tcpi_state) {
    case kTimeWait:
    case kClose:
    case kCloseWait:
    case kLastAck:
    case kClosing: return true;
    default: return false;
  }
}

}  // namespace remora::net
