// zerocopy/zcrx_ring.cc — see zcrx_ring.h.
#include "zerocopy/zcrx_ring.h"

#include <cstring>

#include <fmt/format.h>

#include "zerocopy/kernel_error.h"

namespace remora::zerocopy {

Result<ZcrxFragment> parse_zcrx_completion(int32_t res, uint32_t flags, const uapi::ZcrxCqe& extra,
                                           uint64_t area_bytes) {
  if (res < 0) {
    const int err = -res;
    std::string text = fmt::format("io_uring RECV_ZC: {}", errno_text(err));
    if (err == ENOBUFS) text += " (no free buffer in the zcrx area: refill sooner, or register a larger area)";
    const bool peer = err == ECONNRESET || err == ECONNABORTED || err == EPIPE || err == ETIMEDOUT;
    return Status(err == ENOBUFS ? StatusCode::kNoResource
                  : peer         ? StatusCode::kPeerFailed
                                 : StatusCode::kInternal,
                  text);
  }
  ZcrxFragment f;
  f.more = (flags & kIoringCqeFMore) != 0;
  if (res == 0) return f;
  f.area_offset = extra.off & ~kZcrxAreaMask;
  f.length = static_cast<uint32_t>(res);
  if (f.area_offset > area_bytes || f.length > area_bytes - f.area_offset) {
    return Status(StatusCode::kProtocol, fmt::format("io_uring RECV_ZC: fragment [{}, +{}) outside the {}-byte area",
                                                     f.area_offset, f.length, area_bytes));
  }
  return f;
}

ZcrxRefillRing::ZcrxRefillRing(std::byte* region, const uapi::ZcrxOffsets& offsets, uint32_t entries,
                               uint64_t area_token)
    : region_(region), offsets_(offsets), entries_(entries), mask_(entries - 1), token_(area_token) {
  cached_tail_ = tail().load(std::memory_order_relaxed);
}

std::atomic_ref<uint32_t> ZcrxRefillRing::head() const {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(region_ + offsets_.head));
}
std::atomic_ref<uint32_t> ZcrxRefillRing::tail() const {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(region_ + offsets_.tail));
}

uint32_t ZcrxRefillRing::free_slots() const {
  return entries_ - (cached_tail_ - head().load(std::memory_order_acquire));
}

bool ZcrxRefillRing::refill(uint64_t area_offset, uint32_t length) {
  if (free_slots() == 0) return false;
  uapi::ZcrxRqe rqe{};
  rqe.off = (area_offset & ~kZcrxAreaMask) | token_;
  rqe.len = length;
  std::memcpy(region_ + offsets_.rqes + size_t{cached_tail_ & mask_} * sizeof rqe, &rqe, sizeof rqe);
  ++cached_tail_;
  tail().store(cached_tail_, std::memory_order_release);  // the kernel reads the entry after it sees the tail
  ++refilled_;
  return true;
}

}  // namespace remora::zerocopy
