// datapath/rx_steering.h — zero-copy receive set up for one endpoint's data streams:
// with REMORA_RXQ_SOCKET set and device memory domains in the context, `remora rxq`
// steers each data stream's flow to RX queues bound to memory the NIC writes (devmem
// TCP, or with REMORA_DEVICE_PATH=zcrx an io_uring zcrx queue of the endpoint's own;
// devmem_rx_lease.h), before any payload can arrive on it. Once every stream is attached,
// the path selector hears whether all of them were steered, or why not (the reason
// EndpointStats::device_path_reason gives when a receive stages instead).
//
// One lease (one rxq connection) per endpoint, open for its life. Refusals are logged
// and kept for the reason; a refused stream is read as a plain one.
//
// With REMORA_DEVICE_PATH=zcrx and REMORA_ZCRX_MODE=copy there is no rxq and no NIC: the
// endpoint registers a device-less zcrx queue of its own (ZCRX_REG_NODEV, Linux 7.1+) on
// its first data stream and reads every data stream through it, whatever memory the
// context has; the kernel copies the bytes into the queue's host area.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datapath/chunk_io.h"
#include "datapath/device_path.h"
#include "datapath/devmem_path.h"
#include "datapath/devmem_rx_lease.h"
#include "net/io.h"
#include "remora/config.h"
#include "zerocopy/zcrx_queue.h"

namespace remora::detail {

class RxSteering {
 public:
  /// `domains`: the context's device domains (null or empty: nothing is steered).
  RxSteering(const Config& config, const std::vector<MemoryDomain*>* domains, std::string peer);
  ~RxSteering();
  RxSteering(const RxSteering&) = delete;
  RxSteering& operator=(const RxSteering&) = delete;

  /// How data stream socket `fd` is read: through its devmem or zcrx receiver when rxq
  /// steered it, else plainly (the refusal is kept). Blocks up to `deadline` (rxq's answer).
  std::unique_ptr<StreamIn> steer(int fd, net::Clock::time_point deadline);
  /// Every one of `streams` data streams is attached: tells `selector` whether zero-copy
  /// receive is set up for all of them (then true), or why not.
  bool settle(uint32_t streams, DevicePathSelector& selector);
  /// What the steered streams are read by (valid when settle() said true).
  DataPathKind kind() const noexcept;

 private:
  /// The lease, opened (and for zcrx or an own receive area, set up) on first use; null
  /// after a refusal, kept in refused_.
  DevmemRxLease* lease(net::Clock::time_point deadline);
  void refused(Status why);
  bool copy_mode() const noexcept;
  /// Copy mode: `fd` read through the endpoint's device-less queue (opened on first use).
  std::unique_ptr<StreamIn> steer_device_less(int fd);

  const Config& config_;
  const std::vector<MemoryDomain*>* domains_;
  std::string peer_;
  std::unique_ptr<DevmemRxLease> lease_;  // null: none asked, or refused
  std::shared_ptr<zerocopy::ZcrxQueue> copy_queue_;  // copy mode: the device-less queue
  DevmemRxBinding copy_binding_;
  uint32_t copy_streams_ = 0;             // copy mode: data streams read through copy_queue_
  Status refused_;                        // why a stream is not steered
};

}  // namespace remora::detail
