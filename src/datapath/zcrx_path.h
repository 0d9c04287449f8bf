// datapath/zcrx_path.h — io_uring zero-copy receive (zcrx) on a data stream: the
// stream's flow is steered to an RX queue registered with an io_uring of the endpoint's
// own (zerocopy/zcrx_queue.h), so its payload lands in that queue's area and arrives as
// RECV_ZC completions instead of bytes in a buffer.
//
// ZcrxReceiver is DevmemReceiver's loop with the fragments from those completions: the
// same placement (copied out of the host area to host destinations, copied to the device
// for device ones), the same DevmemStreamIn for host sinks and DevmemSink for device
// transfers, and instead of SO_DEVMEM_DONTNEED a piece's buffer goes back through the
// refill ring once its copy has ended. Because the kernel takes the bytes off the socket
// on the queue's thread, the socket does not stay readable for epoll: the stream tells
// its endpoint of arrivals through on_arrival, and a handshake read waits on the stream.
//
// None of this has run on a NIC that can do zcrx (docs/device-memory.md): the kernel
// refuses the registration on every interface of this project's machines, and tests
// drive the queue through a stand-in NIC.
#pragma once

#include <memory>

#include "datapath/devmem_path.h"
#include "zerocopy/zcrx_queue.h"

namespace remora::detail {

/// How the placement sees a queue's host area.
DevmemRxBinding host_area_binding(const zerocopy::ZcrxQueue& queue);

/// One zcrx data stream's receive loop. Not thread-safe (the progress lock), but for
/// release(), which placements ending on a domain's thread may call.
class ZcrxReceiver final : public DevmemReceiver {
 public:
  /// Reads `stream` (armed on socket `fd`) of `queue`, whose area `area` describes as
  /// the placement sees it (host_area_binding for a host area; for a dmabuf area, its
  /// domain and the domain address of its byte 0). `hold` keeps that memory alive while
  /// the receiver, or a placement holding it, may read it.
  ZcrxReceiver(int fd, DevmemRxBinding area, std::shared_ptr<zerocopy::ZcrxQueue> queue,
               std::unique_ptr<zerocopy::ZcrxQueue::Stream> stream, std::shared_ptr<const void> hold = nullptr);
  ~ZcrxReceiver() override;

  /// Up to `len` bytes of what arrived, placed at `dst` (as DevmemReceiver::receive);
  /// the end of the RECV_ZC (the kernel's error, or a completion outside the area) is
  /// the Status saying so.
  Result<net::IoResult> receive(MemoryDomain* dst_domain, std::byte* dst, uint64_t len, DevmemRead* read) override;
  /// Hands `read`'s buffers back to the NIC.
  Status release(DevmemRead& read) override;
  /// Stops the RECV_ZC (the socket is going): what arrived and was not read goes back.
  void detach() noexcept override;
  Status wait_readable(net::Clock::time_point deadline) override;
  void on_arrival(std::function<void()> fn) override;
  DataPathKind kind() const noexcept override { return DataPathKind::kZcrx; }

 private:
  std::shared_ptr<zerocopy::ZcrxQueue> queue_;
  std::unique_ptr<zerocopy::ZcrxQueue::Stream> stream_;
  std::vector<zerocopy::ZcrxQueue::Stream::Piece> pieces_;
};

}  // namespace remora::detail
