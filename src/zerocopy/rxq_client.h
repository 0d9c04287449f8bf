// zerocopy/rxq_client.h — an application's side of `remora rxq serve`: connect to its
// Unix socket, ask for a flow to be steered to a devmem queue, and receive the dmabuf's
// file descriptor (SCM_RIGHTS) with the binding id and queue; or hand rxq our own dmabuf,
// or have it reserve a queue for our own io_uring zcrx. The connection is the lease:
// closing it (or the process dying) makes rxq remove the flow's rules and free our
// queue. Also the packet send/receive with fd passing that rxq's server side uses.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "net/socket.h"
#include "remora/status.h"
#include "zerocopy/rxq_protocol.h"

namespace remora::zerocopy::rxq {

/// One SOCK_SEQPACKET packet received, with the descriptor it carried (if any).
struct Packet {
  std::vector<std::byte> bytes;
  net::Fd fd;
  bool eof = false;  ///< the peer closed: no packet
};

/// Sends one packet, with `pass_fd` in SCM_RIGHTS when it is >= 0.
Status send_packet(int socket, std::span<const std::byte> bytes, int pass_fd = -1);
/// Receives one packet of at most `max` bytes before `deadline`. A packet that was cut
/// (MSG_TRUNC) or whose control data was (MSG_CTRUNC), or that carries more than one
/// descriptor or anything but SCM_RIGHTS, is kProtocol (descriptors it brought are closed).
Result<Packet> recv_packet(int socket, size_t max, net::Clock::time_point deadline);

/// A flow rxq steers for us, and the buffer it lands in.
struct FlowLease {
  BindFlowReply reply;  ///< binding id, queue, rule location, size, flags
  /// The dmabuf (or, in rxq's stand-in mode, a memfd: reply.flags & kFlagStandin);
  /// none when the flow lands in our own dmabuf (reply.flags & kFlagClientDmabuf) or in
  /// the queue we registered for our io_uring zcrx (reply.flags & kFlagClientZcrx).
  net::Fd dmabuf;
};

/// A connection to rxq. Move-only; its flows stay steered while it is open.
class Client {
 public:
  /// Connects to rxq's socket at `path`.
  static Result<Client> connect(const std::string& path);
  /// Asks for `flow`. rxq's refusal is an error carrying its errno's code and message;
  /// kTimeout when rxq does not answer within `timeout`.
  Result<FlowLease> bind_flow(const TcpFlow& flow, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// Hands rxq our own dmabuf `dmabuf_fd` of `size` bytes to bind to a queue of ours;
  /// our flows go there from then on. rxq's refusal is an error as for bind_flow.
  Result<BindFlowReply> bind_dmabuf(int dmabuf_fd, uint64_t size,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// Asks rxq for a queue of ours for our io_uring zcrx: rxq binds nothing, it takes one
  /// of its client queues for us (reply.queue; ifindex_of(reply) is the interface to
  /// register it on with IORING_REGISTER_ZCRX_IFQ) and steers our flows there from then
  /// on (their replies carry kFlagClientZcrx and no descriptor). rxq's refusal is an
  /// error as for bind_flow; a reply that carries a descriptor is kProtocol.
  Result<BindFlowReply> reserve_queue(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  int fd() const { return socket_.get(); }

 private:
  explicit Client(net::Fd s) : socket_(std::move(s)) {}
  net::Fd socket_;
};

}  // namespace remora::zerocopy::rxq
