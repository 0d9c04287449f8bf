// zerocopy/zcrx_ring.h — the bookkeeping of io_uring zero-copy receive (zcrx, Linux
// 6.15; dmabuf areas 6.16): what a RECV_ZC completion says (a length, and in the second
// half of its 32-byte CQE an offset into the registered area, tagged with the area in
// its top 16 bits), and the refill ring through which the application hands buffers
// back to the NIC once it has consumed them (entries {offset | area token, length},
// published with a release store to the ring's tail, taken by the kernel at its head).
//
// The ring's memory is the region registered with IORING_REGISTER_ZCRX_IFQ
// (zerocopy/io_uring_probe.h tries that registration; every interface of this project's
// machines refuses it); the code here touches only that memory, so tests drive it over
// memory of their own with completions in the kernel's layout. A zcrx receive path
// parses each completion into a fragment of the area, scatters the fragments to the
// destination with the memory's domain (MemoryDomain::scatter, as devmem receive does),
// and refills their buffers when the scatter has ended.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "remora/status.h"
#include "zerocopy/uapi.h"

namespace remora::zerocopy {

/// Bits of a completion's offset that name the area (IORING_ZCRX_AREA_MASK).
inline constexpr uint64_t kZcrxAreaMask = ~((uint64_t{1} << uapi::kIoringZcrxAreaShift) - 1);
/// IORING_CQE_F_MORE: the multishot RECV_ZC goes on; without it, re-arm.
inline constexpr uint32_t kIoringCqeFMore = 1u << 1;

/// One RECV_ZC completion: `length` bytes at `area_offset` of the area.
struct ZcrxFragment {
  uint64_t area_offset = 0;
  uint32_t length = 0;
  bool more = false;  ///< the multishot receive is still armed
};

/// Parses one completion (`res` and `flags` of the CQE, `extra` its second 16 bytes).
/// kEof-like: a result of 0 is the peer's end of stream (length 0, more false). Errors:
/// the kernel's errno for res < 0 (ENOBUFS, kNoResource: the area has no free buffer,
/// refill faster or register a larger one; a reset or timed-out connection,
/// kPeerFailed; others kInternal); kProtocol for a fragment outside an area of
/// `area_bytes`.
Result<ZcrxFragment> parse_zcrx_completion(int32_t res, uint32_t flags, const uapi::ZcrxCqe& extra,
                                           uint64_t area_bytes);

/// The application's side of a refill ring. Not thread-safe (one ring, one owner).
class ZcrxRefillRing {
 public:
  /// `region` is the ring's memory, `offsets` where its head, tail and entries are (the
  /// registration's answer), `entries` its size (a power of two), `area_token` the
  /// area's rq_area_token.
  ZcrxRefillRing(std::byte* region, const uapi::ZcrxOffsets& offsets, uint32_t entries, uint64_t area_token);

  /// Hands [area_offset, area_offset + length) back; false when the ring is full (the
  /// kernel has not taken enough yet: try again after the next completions).
  bool refill(uint64_t area_offset, uint32_t length);
  /// Entries free for refill now.
  uint32_t free_slots() const;
  uint64_t refilled() const noexcept { return refilled_; }

 private:
  std::atomic_ref<uint32_t> head() const;
  std::atomic_ref<uint32_t> tail() const;

  std::byte* region_;
  uapi::ZcrxOffsets offsets_;
  uint32_t entries_;
  uint32_t mask_;
  uint64_t token_;
  uint32_t cached_tail_ = 0;
  uint64_t refilled_ = 0;
};

}  // namespace remora::zerocopy
