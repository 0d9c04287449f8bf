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

  const Config& config_;
  const std::vector<MemoryDomain*>* domains_;
  std::string peer_;
  std::unique_ptr<DevmemRxLease> lease_;  // null: none asked, or refused
  Status refused_;                        // why a stream is not steered
};

}  // namespace remora::detail
