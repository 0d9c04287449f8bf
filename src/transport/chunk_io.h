// transport/chunk_io.h — where the bytes of a chunked transfer come from (ChunkSource)
// and where they go (ChunkSink), and the host-memory kinds of each.
//
// The chunk scheduler (chunk_scheduler.h) moves chunks between the data streams and
// these interfaces and knows nothing else about memory. A new memory kind joins the
// data path by implementing them (none of these exists yet; see issue 18):
// - a staging sink reads a chunk into a pinned bounce buffer, starts an asynchronous
//   copy to device memory in chunk_arrived() and returns kInProgress, then reports the
//   copy's end with ChunkScheduler::chunk_placed (in any order, or with an error);
// - a devmem sink reads with recvmsg(MSG_SOCK_DEVMEM), gets dmabuf fragments and
//   tokens instead of bytes, scatters them to the destination and returns the tokens
//   before it reports the chunk placed;
// - a staging source copies device memory into bounce buffers ahead of the stream
//   (the scheduler will need a "not staged yet" answer from write() for it).
// Every call runs with the progress lock held; none may block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mem/region_access.h"
#include "net/io.h"
#include "remora/status.h"

namespace remora::detail {

/// Where the chunks of one outgoing transfer come from.
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  /// Writes up to `len` bytes of the transfer, from transfer offset `offset` on, to the
  /// non-blocking stream `fd` (one system call).
  virtual net::IoResult write(int fd, uint64_t offset, uint64_t len) = 0;
};

/// Where the chunks of one incoming transfer go.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  /// Reads up to `len` bytes of the transfer, at transfer offset `offset`, from the
  /// non-blocking stream `fd` (one system call). `*asked` is set to the byte count the
  /// call asked the kernel for: a read shorter than that drained the socket.
  virtual net::IoResult read(int fd, uint64_t offset, uint64_t len, uint64_t* asked) = 0;
  /// Every byte of the chunk [offset, offset + length) is off the stream. ok: the chunk
  /// is in place. kInProgress: it will be, and the sink says so later through
  /// ChunkScheduler::chunk_placed. Any other status: the chunk failed, and the whole
  /// transfer completes with that status (the stream stays in step either way).
  virtual Status chunk_arrived(uint64_t /*offset*/, uint64_t /*length*/) { return Status::ok(); }
};

/// Host memory that nothing can take away: a message's send buffer, an initiator's put.
class HostSource final : public ChunkSource {
 public:
  explicit HostSource(const std::byte* data = nullptr) noexcept : data_(data) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;

 private:
  const std::byte* data_;
};

/// Host memory the caller posted: a receive buffer, a get's destination.
class HostSink final : public ChunkSink {
 public:
  explicit HostSink(std::byte* data = nullptr) noexcept : data_(data) {}
  net::IoResult read(int fd, uint64_t offset, uint64_t len, uint64_t* asked) override;

 private:
  std::byte* data_;
};

/// Reads and drops: the bytes of a refused put, of a revoked region, of a transfer
/// whose operation is gone. One scratch buffer per endpoint, allocated on first use.
class DiscardSink final : public ChunkSink {
 public:
  static constexpr size_t kScratchBytes = size_t{64} << 10;
  net::IoResult read(int fd, uint64_t offset, uint64_t len, uint64_t* asked) override;
  std::byte* scratch();

 private:
  std::vector<std::byte> scratch_;
};

/// A registered region a peer reads (a served get): every write is bracketed by the
/// region's RegionAccess. Once the region is deregistered it never reads the memory
/// again and sends zeros instead, keeping the stream in step; revoked() then says so.
class RegionSource final : public ChunkSource {
 public:
  RegionSource() noexcept = default;
  explicit RegionSource(const RegionAccess* access) noexcept : access_(access) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  bool revoked() const noexcept { return revoked_; }

 private:
  const RegionAccess* access_ = nullptr;
  bool revoked_ = false;
};

/// A registered region a peer writes (a served put): every read is bracketed. Once the
/// region is deregistered the rest is drained through `discard`; revoked() says so.
class RegionSink final : public ChunkSink {
 public:
  RegionSink() noexcept = default;
  RegionSink(const RegionAccess* access, DiscardSink* discard) noexcept : access_(access), discard_(discard) {}
  net::IoResult read(int fd, uint64_t offset, uint64_t len, uint64_t* asked) override;
  bool revoked() const noexcept { return revoked_; }

 private:
  const RegionAccess* access_ = nullptr;
  DiscardSink* discard_ = nullptr;
  bool revoked_ = false;
};

}  // namespace remora::detail
