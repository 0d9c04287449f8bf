// datapath/rx_steering.cc — see rx_steering.h.
#include "datapath/rx_steering.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "core/log.h"
#include "datapath/zcrx_path.h"

namespace remora::detail {
namespace {

/// rxq is local and answers at once; a wait is bounded by the stream's deadline, within reason.
std::chrono::milliseconds answer_timeout(net::Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now());
  return std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(10000));
}

}  // namespace

RxSteering::RxSteering(const Config& config, const std::vector<MemoryDomain*>* domains, std::string peer)
    : config_(config), domains_(domains), peer_(std::move(peer)) {}

RxSteering::~RxSteering() = default;

void RxSteering::refused(Status why) {
  refused_ = std::move(why);
  REMORA_LOG(kWarn, "endpoint to {}: {}", peer_, refused_.message());
}

DevmemRxLease* RxSteering::lease(net::Clock::time_point deadline) {
  if (lease_ != nullptr) return lease_.get();
  auto lease = DevmemRxLease::open(std::string(config_.rxq_socket.data()));
  if (!lease) {
    refused(lease.status().with_context("devmem RX: REMORA_RXQ_SOCKET"));
    return nullptr;
  }
  if (config_.device_path == DevicePathMode::kZcrx) {
    // io_uring zcrx: a queue rxq reserves for us, registered with our own ring; its area
    // host memory, or with REMORA_RXQ_DEVICE_AREA a dmabuf of our first device domain.
    MemoryDomain* device = config_.rxq_device_area > 0 ? domains_->front() : nullptr;
    if (Status reserved = (*lease)->reserve_zcrx(device != nullptr ? config_.rxq_device_area : config_.zcrx_area,
                                                 device, answer_timeout(deadline));
        !reserved) {
      refused(reserved.with_context(device != nullptr ? fmt::format("zcrx: REMORA_RXQ_DEVICE_AREA={} of {} memory",
                                                                    config_.rxq_device_area, device->name())
                                                      : std::string("zcrx")));
      return nullptr;
    }
  } else if (config_.rxq_device_area > 0) {
    // TCPX's model: our own receive area in device memory, bound by rxq to a queue of
    // ours, before the first stream is steered.
    MemoryDomain& domain = *domains_->front();
    if (Status bound = (*lease)->bind_area(domain, config_.rxq_device_area, answer_timeout(deadline)); !bound) {
      refused(bound.with_context(
          fmt::format("devmem RX: REMORA_RXQ_DEVICE_AREA={} of {} memory", config_.rxq_device_area, domain.name())));
      return nullptr;
    }
  }
  lease_ = std::move(*lease);
  return lease_.get();
}

bool RxSteering::copy_mode() const noexcept {
  return config_.device_path == DevicePathMode::kZcrx && config_.zcrx_mode == ZcrxMode::kCopy;
}

std::unique_ptr<StreamIn> RxSteering::steer_device_less(int fd) {
  if (!refused_.is_ok()) return std::make_unique<StreamIn>(fd);
  if (copy_queue_ == nullptr) {
    zerocopy::KernelError refusal;
    auto queue =
        zerocopy::ZcrxQueue::open(zerocopy::ZcrxQueue::Options{.area_bytes = config_.zcrx_area, .device_less = true},
                                  zerocopy::io_uring_zcrx_kernels(), &refusal);
    if (!queue) {
      refused(queue.status().with_context("zcrx copy mode (REMORA_ZCRX_MODE=copy)"));
      return std::make_unique<StreamIn>(fd);
    }
    copy_queue_ = std::move(*queue);
    copy_binding_ = host_area_binding(*copy_queue_);
  }
  auto stream = copy_queue_->add_stream(fd);
  if (!stream) {
    // Streams added before stay on the queue; this one and later ones are read plainly.
    refused(stream.status().with_context("zcrx copy mode (REMORA_ZCRX_MODE=copy)"));
    return std::make_unique<StreamIn>(fd);
  }
  ++copy_streams_;
  return std::make_unique<DevmemStreamIn>(
      std::make_shared<ZcrxReceiver>(fd, copy_binding_, copy_queue_, std::move(*stream)));
}

std::unique_ptr<StreamIn> RxSteering::steer(int fd, net::Clock::time_point deadline) {
  if (copy_mode()) return steer_device_less(fd);
  if (config_.rxq_socket[0] == '\0' || domains_ == nullptr || domains_->empty() ||
      config_.device_path == DevicePathMode::kStaging || !refused_.is_ok()) {
    return std::make_unique<StreamIn>(fd);
  }
  DevmemRxLease* lease = this->lease(deadline);
  if (lease == nullptr) return std::make_unique<StreamIn>(fd);
  auto in = lease->steer(fd, answer_timeout(deadline));
  if (!in) {
    // Streams steered before stay steered (rxq keeps their rules while the lease is
    // open) and are read through their receivers; device receives then stage. With
    // none steered yet the lease goes: rxq may have installed this flow's rule before
    // the answer was refused here, and closing the lease removes it (no payload can
    // have come on this stream yet).
    refused(in.status().with_context(lease->zcrx() ? "zcrx" : "devmem RX"));
    if (lease->streams_steered() == 0) lease_.reset();
    return std::make_unique<StreamIn>(fd);
  }
  return std::move(*in);
}

DataPathKind RxSteering::kind() const noexcept {
  return copy_queue_ != nullptr || (lease_ != nullptr && lease_->zcrx()) ? DataPathKind::kZcrx : DataPathKind::kDevmem;
}

bool RxSteering::settle(uint32_t streams, DevicePathSelector& selector) {
  if (copy_mode()) {
    if (copy_queue_ != nullptr && copy_streams_ == streams && streams > 0) {
      selector.set_zcrx_rx(Status(StatusCode::kOk, copy_queue_->describe()));
      return true;
    }
    selector.set_zcrx_rx(Status(
        StatusCode::kUnsupported,
        fmt::format("REMORA_ZCRX_MODE=copy: {} of {} data streams read by a device-less zcrx queue; {}", copy_streams_,
                    streams, refused_.is_ok() ? std::string("the endpoint has no data streams") : refused_.message())));
    return false;
  }
  const uint32_t steered = lease_ ? lease_->streams_steered() : 0;
  if (lease_ != nullptr && steered == streams) {
    const Status ready(StatusCode::kOk, lease_->describe());
    lease_->zcrx() ? selector.set_zcrx_rx(ready) : selector.set_devmem_rx(ready);
    return true;
  }
  if (config_.device_path == DevicePathMode::kZcrx) {
    selector.set_zcrx_rx(Status(
        StatusCode::kUnsupported,
        config_.rxq_socket[0] == '\0'
            ? std::string("REMORA_RXQ_SOCKET is unset: no `remora rxq serve` reserves a queue for this endpoint's "
                          "io_uring zcrx and steers its data streams there")
            : fmt::format("{} of {} data streams read by zcrx; {}", steered, streams,
                          refused_.is_ok() ? std::string("the context had no device memory domain when "
                                                         "the endpoint was made")
                                           : refused_.message())));
  } else if (config_.rxq_socket[0] == '\0') {
    selector.set_devmem_rx(Status(StatusCode::kUnsupported,
                                  "REMORA_RXQ_SOCKET is unset: no `remora rxq serve` steers this endpoint's data "
                                  "streams to devmem RX queues"));
  } else if (!refused_.is_ok()) {
    selector.set_devmem_rx(Status(StatusCode::kUnsupported, fmt::format("{} of {} data streams steered; {}", steered,
                                                                        streams, refused_.message())));
  } else if (lease_ == nullptr) {
    selector.set_devmem_rx(Status(StatusCode::kUnsupported,
                                  "this endpoint's data streams were not steered: the context had no device "
                                  "memory domain when it was made (or REMORA_DEVICE_PATH excludes devmem)"));
  }
  return false;
}

}  // namespace remora::detail
