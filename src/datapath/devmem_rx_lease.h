// datapath/devmem_rx_lease.h — devmem TCP receive driven by an endpoint: `remora rxq`
// (the receive data-path manager) steers each of the endpoint's data streams to an RX
// queue bound to its buffer, and from then on the stream is read through a
// DevmemReceiver (datapath/devmem_path.h).
//
// REMORA_RXQ_SOCKET (Config::rxq_socket) names rxq's socket. An endpoint with device
// memory domains opens one lease (one connection to rxq: the flows stay steered while
// it is open, and rxq removes their rules when it closes or the process dies) and asks
// for each data stream's flow before any payload can arrive on it:
// - the connecting side right after the stream's TCP connect, before its hello, so that
//   the hello's answer is read through the receiver already;
// - the accepting side when the stream's hello has been read, before its answer, and
//   the connecting side sends nothing more on a data stream before every answer came.
// rxq answers with the binding id, the queue and the buffer's descriptor. That buffer is
// rxq's own (a udmabuf or the DMA-BUF system heap: host memory), mapped here read-only;
// fragments are copied out of it to host destinations, and to device memory by the
// domain's copy from host.
//
// With REMORA_RXQ_DEVICE_AREA (TCPX's model) the endpoint first hands rxq a receive area
// of its own: device memory of its context's first device domain, exported as a dmabuf
// (bind_area); rxq binds it to a queue of the endpoint's own, and the streams' payload
// lands in device memory. Fragments for device destinations are then scattered within
// the device (MemoryDomain::scatter; CUDA: the unpack kernel), and those for host
// destinations copied to the host, the read waiting for those copies.
//
// With REMORA_DEVICE_PATH=zcrx the endpoint reads its streams by io_uring zero-copy
// receive instead (reserve_zcrx): rxq reserves a queue of its own for it (away from RSS,
// steered by rxq's rules), the lease registers that queue with an io_uring of its own
// (zerocopy/zcrx_queue.h: a host memory area, or with REMORA_RXQ_DEVICE_AREA a dmabuf of
// the context's first device domain; CAP_NET_ADMIN, the queue restarted), and each
// stream steered afterwards is read through a ZcrxReceiver (datapath/zcrx_path.h).
//
// rxq's stand-in mode (a memfd, no rule) is refused unless a test installed a stand-in
// of the kernel's devmem receive (set_devmem_rx_kernel_for_tests), since nothing would
// steer the flow. None of this has run on a NIC that can do devmem.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "datapath/devmem_path.h"
#include "remora/memory.h"
#include "remora/status.h"
#include "zerocopy/rxq_client.h"
#include "zerocopy/token_return.h"
#include "zerocopy/zcrx_queue.h"

namespace remora::detail {

/// The kernel calls devmem receive makes: the real ones, or a test's stand-in.
struct DevmemRxKernel {
  RecvmsgFn recvmsg = system_recvmsg;
  zerocopy::DontneedFn dontneed = zerocopy::devmem_dontneed;
  bool standin = false;  ///< a test's stand-in: rxq's stand-in buffers are accepted
  /// A test's stand-in NIC learns where an endpoint's own receive area is (the binding
  /// as the receivers see it, and the area's first byte and size). Null: nothing to tell.
  std::function<void(const DevmemRxBinding& binding, std::byte* area, uint64_t size)> area_bound;
  /// The kernel side of io_uring zcrx; null: the real one (io_uring_zcrx_kernels).
  zerocopy::ZcrxKernelFactory zcrx;
};

/// The calls endpoints use from now on (read when a lease opens).
std::shared_ptr<const DevmemRxKernel> devmem_rx_kernel();
/// Tests only: a stand-in of the kernel and NIC; nullptr puts the system calls back.
void set_devmem_rx_kernel_for_tests(std::shared_ptr<const DevmemRxKernel> kernel);

/// One endpoint's flows steered by rxq, and rxq's buffer mapped. Not thread-safe.
class DevmemRxLease {
 public:
  /// Connects to rxq's socket at `path`; nothing is steered yet.
  static Result<std::unique_ptr<DevmemRxLease>> open(const std::string& path);

  /// Before any stream is steered: takes `size` bytes of `domain`'s memory as this
  /// lease's own receive area, exports it as a dmabuf and has rxq bind it to a queue of
  /// ours; every stream steered afterwards lands there. The area is freed when the
  /// lease and every receiver reading it are gone. The domain's, the export's or rxq's
  /// refusal otherwise (nothing is kept).
  Status bind_area(MemoryDomain& domain, uint64_t size, std::chrono::milliseconds timeout);
  /// Before any stream is steered: has rxq reserve a queue of ours and registers it for
  /// io_uring zcrx with an area of `area_bytes` of host memory, or, with `device`, of
  /// `area_bytes` of that domain's memory exported as a dmabuf (the NIC writes into
  /// device memory; the kernel takes a whole dmabuf, so the export must be exactly the
  /// area); every stream steered afterwards is read through it. rxq's, the domain's or
  /// the kernel's refusal otherwise (nothing is kept).
  Status reserve_zcrx(uint64_t area_bytes, MemoryDomain* device, std::chrono::milliseconds timeout);
  /// The streams are read by io_uring zcrx.
  bool zcrx() const noexcept { return zcrx_ != nullptr; }
  ~DevmemRxLease();
  DevmemRxLease(const DevmemRxLease&) = delete;
  DevmemRxLease& operator=(const DevmemRxLease&) = delete;

  /// Asks rxq to steer the flow of the connected TCP socket `fd` (this side receiving)
  /// and returns the stream's StreamIn. rxq's refusal, a reply that names another
  /// buffer than the first one, a buffer that cannot be mapped, or stand-in mode
  /// without a stand-in kernel is an error saying so; the stream is then read as a
  /// plain one. (Only the "another buffer" answer leaves a rule of rxq's behind: that
  /// stream's payload lands where this endpoint cannot read it, and its first read
  /// fails the endpoint with EFAULT. A conforming rxq serves one buffer.)
  Result<std::unique_ptr<DevmemStreamIn>> steer(int fd, std::chrono::milliseconds timeout);

  /// The binding every steered stream reads through (valid once one was steered).
  const DevmemRxBinding& binding() const noexcept { return binding_; }
  uint32_t streams_steered() const noexcept { return steered_; }
  /// What rxq said about the buffer and queues, for the path's reason.
  std::string describe() const { return describe_ + "; streams steered to queues " + queues_; }

 private:
  DevmemRxLease(zerocopy::rxq::Client client, std::shared_ptr<const DevmemRxKernel> kernel);

  zerocopy::rxq::Client client_;
  std::shared_ptr<const DevmemRxKernel> kernel_;
  std::shared_ptr<net::Fd> buffer_;  // rxq's buffer (the first reply's descriptor)
  std::shared_ptr<void> map_;        // it, mapped read-only (unmapped when the last receiver lets go)
  std::shared_ptr<void> area_;       // our own receive area (bind_area), freed when the last receiver lets go
  net::Fd zcrx_dmabuf_;              // reserve_zcrx with a device area: its export
  std::shared_ptr<zerocopy::ZcrxQueue> zcrx_;  // reserve_zcrx: the queue our streams are read from
  size_t map_bytes_ = 0;
  DevmemRxBinding binding_;
  uint32_t steered_ = 0;
  std::string describe_;
  std::string queues_;
};

}  // namespace remora::detail
