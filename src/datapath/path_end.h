// datapath/path_end.h — the one end of a data path an operation holds: the source its
// bytes come from (this side sends) or the sink they go to (this side receives), as
// DataPaths::choose made it for the operation's memory and transfer class, with the
// path it took.
//
// An operation asks its end the same things whatever the path: the ChunkSource or
// ChunkSink the chunk scheduler moves its chunks through; an inline transfer's bytes
// for its frame (read_inline) or their placement (place_inline); whether copies of its
// memory are still in flight (a failed operation completes only once none is), whether
// a granted region was revoked under it, and whether the NIC may still read its memory
// (zero-copy sends). No operation names a path to ask these.
//
// Host memory's ends (the operation's own buffer, a granted region, the endpoint's
// discard sink) live in place: choosing and holding one allocates nothing. Device
// memory's ends are owned through a pointer, so they never move while copies or
// sendmsgs refer to them, and a PathEnd may be moved; but once the scheduler was given
// an in-place end's source or sink, that PathEnd stays where it is (operations hold it
// in their own heap-allocated state).
//
// The counting helpers at the bottom keep EndpointStats' per-path counts in one place.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <variant>

#include "datapath/chunk_io.h"
#include "datapath/transfer.h"
#include "remora/endpoint.h"
#include "remora/status.h"

namespace remora::detail {

struct RxTransfer;

class PathEnd {
 public:
  /// No end: an operation that moves no bytes (an atomic).
  PathEnd() noexcept = default;

  /// Host memory of this side's own operation: `data`, `length` bytes.
  static PathEnd host_source(const std::byte* data, uint64_t length, TransferClass cls) noexcept;
  static PathEnd host_sink(std::byte* data, uint64_t length, TransferClass cls) noexcept;
  /// A granted region of host memory (a peer's request): every touch bracketed by
  /// `access`, which outlives the end; a revoked region's bytes go to `discard`.
  static PathEnd region_source(const RegionAccess* access, uint64_t length, TransferClass cls) noexcept;
  static PathEnd region_sink(const RegionAccess* access, DiscardSink* discard, uint64_t length,
                             TransferClass cls) noexcept;
  /// Bytes nobody takes (a refused request's), read into the endpoint's `discard`.
  static PathEnd discard(DiscardSink* discard, uint64_t length) noexcept;
  /// A segmented transfer's host-memory source or sink (datapath/segments.h): chunks
  /// only, never inline.
  static PathEnd segmented_source(std::unique_ptr<ChunkSource> source, uint64_t length) noexcept;
  static PathEnd segmented_sink(std::unique_ptr<ChunkSink> sink, uint64_t length) noexcept;
  /// A source or sink of `device`'s memory that `path` moves.
  static PathEnd device_source(std::unique_ptr<ChunkSource> source, DataPath path, MemoryDomain& device,
                               uint64_t length, TransferClass cls) noexcept;
  static PathEnd device_sink(std::unique_ptr<ChunkSink> sink, DataPath path, MemoryDomain& device, uint64_t length,
                             TransferClass cls) noexcept;

  /// The source the scheduler writes chunks from; null for a sink or no end.
  ChunkSource* source() noexcept;
  /// The sink the scheduler reads chunks into, told which transfer it receives (an
  /// asynchronous sink reports that transfer's chunks placed); null for a source.
  ChunkSink* sink(RxTransfer& t) noexcept;

  DataPath path() const noexcept { return path_; }
  /// The device domain of the memory; null for host memory.
  MemoryDomain* device() const noexcept { return device_; }
  uint64_t length() const noexcept { return length_; }
  bool travels_inline() const noexcept { return class_ == TransferClass::kInline; }

  /// Copies of the memory started and not ended (staging, a bounce, a devmem scatter).
  size_t in_flight() const noexcept;
  /// A granted region was deregistered while it was read or written.
  bool revoked() const noexcept;
  /// Zero-copy sends: the operation completes only once unreleased() is 0, each
  /// completion the kernel reports counted by released().
  bool zero_copy() const noexcept;
  uint64_t unreleased() const noexcept;
  void released() noexcept;

  /// An inline send's bytes can be read at once; else copy_inline() first (device memory
  /// an initiator puts inline: its bytes are copied to host memory before posting).
  bool inline_ready() const noexcept;
  /// Copies an inline send's bytes to host memory now, waiting at most `timeout`. Call
  /// without the progress lock. ok at once for every end that needs no copy.
  Status copy_inline(Duration timeout);

  /// An inline send's bytes, for its frame. ok: `now(bytes)` ran here with them (a
  /// region's inside its bracket). kInProgress: they are being copied to host memory, and
  /// `make_later()`'s function runs with the progress lock held once the copy ended, as
  /// `later(bytes, status)` (no bytes if it failed; not at all if the engine is gone).
  /// `make_later` is called only then, so an end read at once costs no function object.
  /// Another status: they cannot be read (revoked() says whether the region is gone).
  template <typename Now, typename MakeLater>
  Status read_inline(Now&& now, MakeLater&& make_later);
  /// Places an inline receive's bytes (they came in a frame and are valid for this call
  /// only) at the start of the memory. ok: placed. kInProgress: being copied into device
  /// memory; `make_done()`'s function runs with the progress lock held once that copy
  /// ended, as `done(status)` (whether or not this end still exists; not at all if the
  /// engine is gone); `make_done` is called only then. Another status: nothing was placed
  /// (revoked() says whether the region is gone).
  template <typename MakeDone>
  Status place_inline(std::span<const std::byte> bytes, MakeDone&& make_done);

 private:
  using End = std::variant<std::monostate, HostSource, HostSink, RegionSource, RegionSink, ChunkSink*,
                           std::unique_ptr<ChunkSource>, std::unique_ptr<ChunkSink>>;
  PathEnd(End end, DataPath path, MemoryDomain* device, uint64_t length, TransferClass cls) noexcept
      : end_(std::move(end)), path_(path), device_(device), length_(length), class_(cls) {}
  const ChunkSource* source_view() const noexcept;
  const ChunkSink* sink_view() const noexcept;

  End end_;
  DataPath path_ = DataPath::kHost;
  MemoryDomain* device_ = nullptr;
  uint64_t length_ = 0;
  TransferClass class_ = TransferClass::kChunked;
};

template <typename Now, typename MakeLater>
Status PathEnd::read_inline(Now&& now, MakeLater&& make_later) {
  if (auto* host = std::get_if<HostSource>(&end_)) {
    now(std::span<const std::byte>(host->host_bytes(), length_));
    return Status::ok();
  }
  if (auto* region = std::get_if<RegionSource>(&end_)) return region->read_bracketed(length_, now);
  if (auto* owned = std::get_if<std::unique_ptr<ChunkSource>>(&end_)) {
    return (*owned)->read_inline(length_, ChunkSource::InlineNow(std::forward<Now>(now)), make_later());
  }
  return Status(StatusCode::kInternal, "no source to read");
}

template <typename MakeDone>
Status PathEnd::place_inline(std::span<const std::byte> bytes, MakeDone&& make_done) {
  if (auto* host = std::get_if<HostSink>(&end_)) {
    host->place(bytes);
    return Status::ok();
  }
  if (auto* region = std::get_if<RegionSink>(&end_)) return region->place(bytes);
  if (auto* owned = std::get_if<std::unique_ptr<ChunkSink>>(&end_)) return (*owned)->place_inline(bytes, make_done());
  if (std::holds_alternative<ChunkSink*>(end_)) return Status::ok();  // the discard sink drops them
  return Status(StatusCode::kInternal, "no sink to place into");
}

/// An operation of this side's was posted (or, a receive, matched) on `end`: counts it
/// if it stages (EndpointStats::staged_transfers).
void count_posted(EndpointStats& stats, const PathEnd& end) noexcept;
/// It completed with `bytes`: counts staged bytes, or a zero-copy transfer.
void count_completed(EndpointStats& stats, const PathEnd& end, uint64_t bytes) noexcept;
/// A peer's request served on `end` completed: counts a zero-copy transfer (staged
/// bytes count this side's own operations only).
void count_zero_copy(EndpointStats& stats, const PathEnd& end) noexcept;

}  // namespace remora::detail
