// datapath/segments.h — the sources and sinks of a segmented transfer: one whose bytes
// are pieces of memory laid back to back (a list of blocks moved as one put or get,
// docs/protocol.md "Segments"). The chunk scheduler sees one transfer of the pieces'
// total length; these map each transfer offset to its piece.
//
// Host memory only, read and written by this side's own system calls: a segmented
// source has no host_bytes() (no same-host pulls) and no gather_begin() (it gathers
// its own pieces into one sendmsg instead), and a segmented sink no host_destination()
// (no receive workers): a read or write takes up to kMaxIov pieces in one system call
// (recvmsg, sendmsg). The region kinds bracket every touch of a granted region as
// RegionSource and RegionSink do (chunk_io.h), and act alike once it is revoked.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "datapath/chunk_io.h"

namespace remora::detail {

/// Transfer offsets to memory: piece i holds the transfer's bytes from the sum of the
/// lengths before it on. A piece's `at` is an address (a local list) or an offset from
/// a region access's address (a granted one).
class SegmentMap {
 public:
  struct Piece {
    uint64_t at = 0;
    uint64_t length = 0;  ///< never 0
  };
  SegmentMap() noexcept = default;
  explicit SegmentMap(std::vector<Piece> pieces);

  uint64_t length() const noexcept { return starts_.empty() ? 0 : starts_.back() + pieces_.back().length; }
  /// Where transfer offset `offset` (< length()) is: its `at` and the bytes from there
  /// to its piece's end.
  Piece locate(uint64_t offset) const noexcept;
  /// iovecs of [offset, offset + length) from `base` (null: `at` is an address), at
  /// most `max` of them; returns how many (the bytes they hold may be fewer).
  int iovecs(const std::byte* base, uint64_t offset, uint64_t length, iovec* out, int max) const noexcept;
  /// The CRC-32C of [offset, offset + length) from `base`.
  uint32_t checksum(const std::byte* base, uint64_t offset, uint64_t length) const noexcept;

 private:
  std::vector<Piece> pieces_;
  std::vector<uint64_t> starts_;  // transfer offset of each piece's first byte
};

/// Most pieces one read or write moves in one system call (recvmsg, sendmsg).
inline constexpr int kMaxIov = 64;

/// The pieces of this side's own host memory a segmented put sends.
class SegmentedHostSource final : public ChunkSource {
 public:
  explicit SegmentedHostSource(SegmentMap map) noexcept : map_(std::move(map)) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override {
    return map_.checksum(nullptr, offset, length);
  }
  bool can_resend() const noexcept override { return true; }

 private:
  SegmentMap map_;
};

/// The pieces of this side's own host memory a segmented get fills.
class SegmentedHostSink final : public ChunkSink {
 public:
  explicit SegmentedHostSink(SegmentMap map) noexcept : map_(std::move(map)) {}
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override {
    return map_.checksum(nullptr, offset, length);
  }
  bool can_reread() const noexcept override { return true; }

 private:
  SegmentMap map_;
};

/// The pieces of a granted region a peer's segmented get reads, each write bracketed;
/// zeros once the region is revoked, as RegionSource.
class SegmentedRegionSource final : public ChunkSource {
 public:
  SegmentedRegionSource(const RegionAccess* access, SegmentMap map) noexcept : access_(access), map_(std::move(map)) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;
  bool revoked() const noexcept override { return revoked_; }
  bool can_resend() const noexcept override { return true; }
  /// Never zeros: a region deregistered since answers EKEYREVOKED.
  net::IoResult write_again(int fd, uint64_t offset, uint64_t len) override;

 private:
  const RegionAccess* access_;
  SegmentMap map_;
  bool revoked_ = false;
};

/// The pieces of a granted region a peer's segmented put writes, each read bracketed;
/// drained through `discard` once the region is revoked, as RegionSink.
class SegmentedRegionSink final : public ChunkSink {
 public:
  SegmentedRegionSink(const RegionAccess* access, DiscardSink* discard, SegmentMap map) noexcept
      : access_(access), discard_(discard), map_(std::move(map)) {}
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;
  bool revoked() const noexcept override { return revoked_; }
  bool can_reread() const noexcept override { return true; }

 private:
  const RegionAccess* access_;
  DiscardSink* discard_;
  SegmentMap map_;
  bool revoked_ = false;
};

}  // namespace remora::detail
