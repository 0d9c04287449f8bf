// datapath/data_paths.cc — see data_paths.h.
#include "datapath/data_paths.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "datapath/bounce.h"

namespace remora::detail {

DataPaths::DataPaths(Params params)
    : config_(*params.config),
      params_(std::move(params)),
      stats_(*params_.stats),
      anchor_(std::make_shared<StagingHost*>(params_.host)),
      selector_(config_),
      steering_(config_, params_.domains, params_.peer) {
  selector_.set_binding_cache(params_.devmem_tx_bindings);
}

DataPaths::~DataPaths() = default;

TransferMemory DataPaths::memory_on_device(const void* p, uint64_t n) const {
  TransferMemory m;
  m.address = static_cast<std::byte*>(const_cast<void*>(p));  // a send's memory is only read (transfer.h)
  m.length = n;
  for (MemoryDomain* d : *params_.domains) {
    if (d->owns(p, n)) {
      m.device = d;
      break;
    }
  }
  return m;
}

Result<PathEnd> DataPaths::choose(const TransferSpec& spec) {
  const TransferMemory& m = spec.memory;
  const bool send = spec.direction == Direction::kSend;
  if (m.on_host()) {
    if (m.region != nullptr) {
      return send ? PathEnd::region_source(m.access(), m.length, spec.cls)
                  : PathEnd::region_sink(m.access(), &discard_, m.length, spec.cls);
    }
    return send ? PathEnd::host_source(m.address, m.length, spec.cls)
                : PathEnd::host_sink(m.address, m.length, spec.cls);
  }
  REMORA_ASSIGN_OR_RETURN(PathChoice choice, choose_device_path(spec));
  return device_end(spec, std::move(choice));
}

Result<PathEnd> DataPaths::device_end(const TransferSpec& spec, PathChoice choice) {
  const TransferMemory& m = spec.memory;
  MemoryDomain& device = *m.device;
  const bool send = spec.direction == Direction::kSend;
  if (spec.cls == TransferClass::kInline) {
    // Its bytes travel in a frame: one host copy (the selector reported staging).
    if (send) {
      return PathEnd::device_source(
          std::make_unique<BounceSource>(params_.engine, device, m.address, m.length, m.shared_access()),
          DataPath::kStaging, device, m.length, spec.cls);
    }
    return PathEnd::device_sink(std::make_unique<BounceSink>(params_.engine, device, m.address, m.shared_access()),
                                DataPath::kStaging, device, m.length, spec.cls);
  }
  if (choice.path == DataPath::kDevmem && send) {
    // Chunks sent again after a stream broke are staged (DevmemSource); the pool is
    // made only then. The endpoint's paths outlive the sources they make.
    auto again = [this, &device, address = m.address, length = m.length,
                  access = m.shared_access()]() -> Result<std::unique_ptr<ChunkSource>> {
      REMORA_ASSIGN_OR_RETURN(StagingContext staging, staging_for(device, /*tx=*/true));
      return std::unique_ptr<ChunkSource>(StagingSource::for_resends(std::move(staging), address, length, access));
    };
    auto source = std::make_unique<DevmemSource>(std::move(choice.devmem_tx), devmem_streams_, spec.zero_copy_id,
                                                 m.access(), std::move(again));
    return PathEnd::device_source(std::move(source), DataPath::kDevmem, device, m.length, spec.cls);
  }
  if (choice.path == DataPath::kDevmem || choice.path == DataPath::kZcrx) {
    // Every data stream is steered: the chunks are placed from the bound buffer.
    return PathEnd::device_sink(
        std::make_unique<DevmemSink>(devmem_rx_, &device, m.address, nullptr, m.shared_access()), choice.path, device,
        m.length, spec.cls);
  }
  REMORA_ASSIGN_OR_RETURN(StagingContext staging, staging_for(device, send));
  if (send) {
    const uint64_t first_chunk = std::min<uint64_t>(staging.chunk_bytes, m.length);
    auto source = std::make_unique<StagingSource>(std::move(staging), m.address, m.length, m.shared_access());
    // Start staging now: the copies overlap the announcement's way to the peer.
    (void)source->prepare(0, first_chunk);
    return PathEnd::device_source(std::move(source), DataPath::kStaging, device, m.length, spec.cls);
  }
  return PathEnd::device_sink(std::make_unique<StagingSink>(std::move(staging), m.address, nullptr, m.shared_access()),
                              DataPath::kStaging, device, m.length, spec.cls);
}

Result<PathChoice> DataPaths::choose_device_path(const TransferSpec& spec) {
  const TransferMemory& m = spec.memory;
  const bool send = spec.direction == Direction::kSend;
  const bool chunked = spec.cls == TransferClass::kChunked;
  // Only chunks go by devmem TX or RX: an inline transfer's bytes are in its frame.
  Result<PathChoice> choice = selector_.choose(*m.device, m.address, m.length, send,
                                               /*drives_devmem_tx=*/send && chunked,
                                               /*drives_devmem_rx=*/!send && chunked);
  if (!choice) return refuse(choice.status().message(), choice.status());
  if (choice->path == DataPath::kDevmem && send && params_.streams != nullptr) {
    // The NIC reads the memory after sendmsg returns: every data stream reports those
    // reads' end on its error queue. A retired one (failover) has no socket: it is
    // enabled when it is connected again (adopt), this transfer's chunks maybe on it.
    devmem_streams_.use();
    for (uint16_t i = 0; i < params_.streams->streams(); ++i) {
      const int fd = params_.streams->fd(i);
      if (fd < 0) continue;
      if (Status s = devmem_streams_.enable(fd); !s) {
        std::string reason = "devmem TX: data stream " + std::to_string(i) + ": " + s.message();
        return refuse(reason, Status(StatusCode::kUnsupported, reason));
      }
    }
  }
  stats_.device_path = std::string(data_path_name(choice->path));
  stats_.device_path_reason = choice->reason;
  return choice;
}

Status DataPaths::refuse(std::string reason, Status why) {
  ++stats_.device_path_refusals;
  stats_.device_path = "refused";
  stats_.device_path_reason = std::move(reason);
  return why;
}

Result<StagingContext> DataPaths::staging_for(MemoryDomain& domain, bool tx) {
  auto it = std::find_if(staging_pools_.begin(), staging_pools_.end(),
                         [&](const StagingPools& p) { return p.domain == &domain; });
  if (it == staging_pools_.end()) {
    staging_pools_.push_back(StagingPools{&domain, nullptr, nullptr});
    it = staging_pools_.end() - 1;
  }
  std::shared_ptr<StagingPool>& pool = tx ? it->tx : it->rx;
  if (!pool) {
    auto made = StagingPool::create(domain, config_.staging_buffers, config_.chunk_bytes);
    if (!made) return made.status().with_context("endpoint to " + params_.peer);
    pool = std::move(*made);
  }
  return StagingContext{.engine = params_.engine, .pool = pool, .host = anchor_, .chunk_bytes = config_.chunk_bytes};
}

void DataPaths::inline_arrival(const PathEnd& end, uint64_t bytes) {
  if (end.device() == nullptr || bytes == 0) return;
  ++stats_.staged_transfers;
  stats_.staged_bytes += bytes;
  if (end.path() == DataPath::kDevmem || end.path() == DataPath::kZcrx) {
    // Chosen for a zero-copy receive, but the message came on the control stream: it staged.
    stats_.device_path = std::string(data_path_name(DataPath::kStaging));
    stats_.device_path_reason = fmt::format(
        "devmem RX was chosen for this receive, but the message ({} bytes, at most the eager limit) came inline on "
        "the control stream: copied to {} memory from there",
        bytes, end.device()->name());
  }
}

void DataPaths::settle() {
  const uint32_t streams = params_.streams != nullptr ? params_.streams->streams() : 0;
  if (steering_.settle(streams, selector_)) {
    devmem_rx_ = std::make_shared<DevmemRxContext>(
        DevmemRxContext{.engine = params_.engine, .host = anchor_, .kind = steering_.kind()});
  }
}

}  // namespace remora::detail
