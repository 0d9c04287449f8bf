// transport/shm_channel.cc — see shm_channel.h.
#include "transport/shm_channel.h"

#include <cerrno>

namespace remora::detail {

Result<wire::ShmFrame> ShmChannel::create_rx() {
  REMORA_ASSIGN_OR_RETURN(net::ShmRingMemory memory, net::ShmRingMemory::create(kRingBytes));
  REMORA_ASSIGN_OR_RETURN(net::Fd wake, net::make_wake_fd());
  const auto ring_fd = static_cast<uint32_t>(memory.fd());
  rx_ = std::make_unique<net::ShmRingReader>(std::move(memory));
  rx_wake_ = std::move(wake);
  return wire::ShmFrame{.op = wire::ShmOp::kOffer,
                        .ring_fd = ring_fd,
                        .wake_fd = static_cast<uint32_t>(rx_wake_.get()),
                        .code = StatusCode::kOk};
}

Status ShmChannel::adopt_tx(pid_t pid, const wire::ShmFrame& offer) {
  REMORA_ASSIGN_OR_RETURN(net::Fd ring_fd, net::take_peer_fd(pid, static_cast<int>(offer.ring_fd)));
  REMORA_ASSIGN_OR_RETURN(net::Fd wake_fd, net::take_peer_fd(pid, static_cast<int>(offer.wake_fd)));
  REMORA_RETURN_IF_ERROR(net::check_eventfd(wake_fd.get()));
  REMORA_ASSIGN_OR_RETURN(net::ShmRingMemory memory, net::ShmRingMemory::adopt(std::move(ring_fd)));
  tx_ = std::make_unique<net::ShmRingWriter>(std::move(memory));
  peer_wake_ = std::move(wake_fd);
  return Status::ok();
}

net::IoResult ShmChannel::send(int tcp_fd, const std::byte* queued, size_t off, size_t end) noexcept {
  if (!tx_on_) {
    // Before the switch (or without one): TCP, never past the SWITCH frame's end.
    const size_t stop = std::min(end, tx_switch_at_);
    net::IoResult r = net::send_some(tcp_fd, queued + off, stop - off);
    if (r.moved() && off + r.bytes == tx_switch_at_) tx_on_ = true;
    return r;
  }
  auto wrote = tx_->write(std::span(queued + off, end - off));
  if (!wrote) {
    corruption_ = wrote.status();
    return net::IoResult{net::IoResult::Kind::kError, 0, EPROTO};
  }
  if (wrote->wake_consumer) net::wake(peer_wake_.get());
  if (wrote->bytes == 0) return net::IoResult{net::IoResult::Kind::kWouldBlock, 0, 0};
  return net::IoResult{net::IoResult::Kind::kBytes, wrote->bytes, 0};
}

net::IoResult ShmChannel::recv(std::byte* dst, size_t len, bool arm) noexcept {
  auto read = rx_->read(std::span(dst, len), arm);
  if (!read) {
    corruption_ = read.status();
    return net::IoResult{net::IoResult::Kind::kError, 0, EPROTO};
  }
  // The peer waits for room: only a side whose TX moved too has its eventfd, and a
  // side's RX moves only once the peer took its ring, so both do (see set-up).
  if (read->wake_producer && peer_wake_.valid()) net::wake(peer_wake_.get());
  if (read->bytes == 0) return net::IoResult{net::IoResult::Kind::kWouldBlock, 0, 0};
  return net::IoResult{net::IoResult::Kind::kBytes, read->bytes, 0};
}

}  // namespace remora::detail
