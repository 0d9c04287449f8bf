// datapath/path_end.cc — see path_end.h.
#include "datapath/path_end.h"

#include "datapath/chunk_scheduler.h"

namespace remora::detail {

PathEnd PathEnd::host_source(const std::byte* data, uint64_t length, TransferClass cls) noexcept {
  return PathEnd(End(std::in_place_type<HostSource>, data), DataPath::kHost, nullptr, length, cls);
}

PathEnd PathEnd::host_sink(std::byte* data, uint64_t length, TransferClass cls) noexcept {
  return PathEnd(End(std::in_place_type<HostSink>, data), DataPath::kHost, nullptr, length, cls);
}

PathEnd PathEnd::region_source(const RegionAccess* access, uint64_t length, TransferClass cls) noexcept {
  return PathEnd(End(std::in_place_type<RegionSource>, access), DataPath::kHost, nullptr, length, cls);
}

PathEnd PathEnd::region_sink(const RegionAccess* access, DiscardSink* discard, uint64_t length,
                             TransferClass cls) noexcept {
  return PathEnd(End(std::in_place_type<RegionSink>, access, discard), DataPath::kHost, nullptr, length, cls);
}

PathEnd PathEnd::discard(DiscardSink* discard, uint64_t length) noexcept {
  return PathEnd(End(std::in_place_type<ChunkSink*>, discard), DataPath::kHost, nullptr, length,
                 TransferClass::kChunked);
}

PathEnd PathEnd::segmented_source(std::unique_ptr<ChunkSource> source, uint64_t length) noexcept {
  return PathEnd(End(std::move(source)), DataPath::kHost, nullptr, length, TransferClass::kChunked);
}

PathEnd PathEnd::segmented_sink(std::unique_ptr<ChunkSink> sink, uint64_t length) noexcept {
  return PathEnd(End(std::move(sink)), DataPath::kHost, nullptr, length, TransferClass::kChunked);
}

PathEnd PathEnd::device_source(std::unique_ptr<ChunkSource> source, DataPath path, MemoryDomain& device,
                               uint64_t length, TransferClass cls) noexcept {
  return PathEnd(End(std::move(source)), path, &device, length, cls);
}

PathEnd PathEnd::device_sink(std::unique_ptr<ChunkSink> sink, DataPath path, MemoryDomain& device, uint64_t length,
                             TransferClass cls) noexcept {
  return PathEnd(End(std::move(sink)), path, &device, length, cls);
}

ChunkSource* PathEnd::source() noexcept { return const_cast<ChunkSource*>(source_view()); }

ChunkSink* PathEnd::sink(RxTransfer& t) noexcept {
  if (auto* owned = std::get_if<std::unique_ptr<ChunkSink>>(&end_)) {
    (*owned)->attach(t);
    return owned->get();
  }
  return const_cast<ChunkSink*>(sink_view());
}

const ChunkSource* PathEnd::source_view() const noexcept {
  if (const auto* host = std::get_if<HostSource>(&end_)) return host;
  if (const auto* region = std::get_if<RegionSource>(&end_)) return region;
  if (const auto* owned = std::get_if<std::unique_ptr<ChunkSource>>(&end_)) return owned->get();
  return nullptr;
}

const ChunkSink* PathEnd::sink_view() const noexcept {
  if (const auto* host = std::get_if<HostSink>(&end_)) return host;
  if (const auto* region = std::get_if<RegionSink>(&end_)) return region;
  if (const auto* borrowed = std::get_if<ChunkSink*>(&end_)) return *borrowed;
  if (const auto* owned = std::get_if<std::unique_ptr<ChunkSink>>(&end_)) return owned->get();
  return nullptr;
}

size_t PathEnd::in_flight() const noexcept {
  if (const ChunkSource* s = source_view()) return s->in_flight();
  if (const ChunkSink* s = sink_view()) return s->in_flight();
  return 0;
}

bool PathEnd::revoked() const noexcept {
  if (const ChunkSource* s = source_view()) return s->revoked();
  if (const ChunkSink* s = sink_view()) return s->revoked();
  return false;
}

bool PathEnd::zero_copy() const noexcept {
  const ChunkSource* s = source_view();
  return s != nullptr && s->zero_copy();
}

uint64_t PathEnd::unreleased() const noexcept {
  const ChunkSource* s = source_view();
  return s != nullptr ? s->unreleased() : 0;
}

void PathEnd::released() noexcept {
  if (ChunkSource* s = source()) s->released();
}

bool PathEnd::inline_ready() const noexcept {
  const ChunkSource* s = source_view();
  return s == nullptr || s->inline_ready();
}

Status PathEnd::copy_inline(Duration timeout) {
  ChunkSource* s = source();
  return s != nullptr ? s->copy_inline(timeout) : Status::ok();
}

void count_posted(EndpointStats& stats, const PathEnd& end) noexcept {
  if (end.path() == DataPath::kStaging) ++stats.staged_transfers;
}

void count_zero_copy(EndpointStats& stats, const PathEnd& end) noexcept {
  if (end.path() == DataPath::kDevmem) ++stats.devmem_transfers;
  if (end.path() == DataPath::kZcrx) ++stats.zcrx_transfers;
}

void count_completed(EndpointStats& stats, const PathEnd& end, uint64_t bytes) noexcept {
  if (end.path() == DataPath::kStaging) stats.staged_bytes += bytes;
  count_zero_copy(stats, end);
}

}  // namespace remora::detail
