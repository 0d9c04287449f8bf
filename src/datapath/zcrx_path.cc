// datapath/zcrx_path.cc — see zcrx_path.h.
#include "datapath/zcrx_path.h"

#include <chrono>
#include <utility>

namespace remora::detail {

DevmemRxBinding host_area_binding(const zerocopy::ZcrxQueue& queue) {
  const zerocopy::ZcrxRegistration& reg = queue.registration();
  return DevmemRxBinding{.id = reg.zcrx_id,
                         .domain = &host_domain(),
                         .base = reg.area,
                         .size = reg.area_bytes,
                         .allow_linear = false,
                         .cpu_sync_fd = -1};
}

ZcrxReceiver::ZcrxReceiver(int fd, DevmemRxBinding area, std::shared_ptr<zerocopy::ZcrxQueue> queue,
                           std::unique_ptr<zerocopy::ZcrxQueue::Stream> stream, std::shared_ptr<const void> hold)
    : DevmemReceiver(fd, area, std::move(hold)), queue_(std::move(queue)), stream_(std::move(stream)) {}

ZcrxReceiver::~ZcrxReceiver() { stream_->close(); }

void ZcrxReceiver::detach() noexcept {
  fd_ = -1;
  stream_->close();
}

Status ZcrxReceiver::wait_readable(net::Clock::time_point deadline) { return stream_->wait(deadline); }

void ZcrxReceiver::on_arrival(std::function<void()> fn) { stream_->set_notify(std::move(fn)); }

Status ZcrxReceiver::release(DevmemRead& read) {
  for (const uint32_t slot : read.tokens) stream_->release(slot);
  read.tokens.clear();
  return Status::ok();
}

Result<net::IoResult> ZcrxReceiver::receive(MemoryDomain* dst_domain, std::byte* dst, uint64_t len, DevmemRead* read) {
  *read = DevmemRead{};
  pieces_.clear();
  Status why;
  const net::IoResult got = stream_->take(std::min<uint64_t>(len, kMaxReadBytes), &pieces_, &why);
  if (got.error() && !why.is_ok()) return why.with_context("io_uring zcrx receive");
  if (!got.moved()) return got;
  read->bytes = got.bytes;
  fragments_.clear();
  for (const auto& p : pieces_) {
    read->tokens.push_back(p.slot);
    fragments_.push_back(zerocopy::DevmemFragment{.kind = zerocopy::FragmentKind::kDmabuf,
                                                  .offset = p.area_offset,
                                                  .size = p.length,
                                                  .token = p.slot,
                                                  .binding_id = binding_.id});
  }
  if (dst == nullptr) {
    (void)release(*read);  // dropped: nothing reads the area
    return got;
  }
  if (Status placed = place(dst_domain, dst, read); !placed.is_ok()) {
    // Copies that did start read the area: wait for them before its buffers go back.
    for (auto& copy : read->copies) (void)copy->wait(std::chrono::seconds(60));
    read->copies.clear();
    (void)release(*read);
    return placed;
  }
  return got;
}

}  // namespace remora::detail
