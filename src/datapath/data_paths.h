// datapath/data_paths.h — one endpoint's data paths, and the one place where the source
// or sink of an operation is chosen.
//
// DataPaths::choose takes what an operation is (TransferSpec: direction, transfer
// class, memory) and returns the PathEnd it holds for its whole life:
//
//   memory        class    send (source)                      receive (sink)
//   host, own     any      HostSource (the buffer)            HostSink
//   host, region  any      RegionSource (bracketed)           RegionSink (bracketed)
//   device        inline   BounceSource (one host copy)       BounceSink (one host copy)
//   device        chunked  devmem TX: DevmemSource            devmem RX / zcrx: DevmemSink
//                          else StagingSource                 else StagingSink
//
// Which device path a chunked transfer takes is the DevicePathSelector's answer
// (device_path.h: REMORA_DEVICE_PATH, what the kernel and NIC allow, whether the data
// streams are steered), recorded in EndpointStats::device_path / device_path_reason,
// or the refusal when the demanded path cannot be taken. Host memory never reaches the
// selector and allocates nothing.
//
// Adding a memory kind or a path is a new source or sink (chunk_io.h says what it
// implements) and one branch here; matching, RMA and the chunk scheduler do not change.
//
// It also keeps what the choice needs per endpoint: the staging pools (made on first
// use), the devmem TX completion trackers of the data streams, the zero-copy receive
// set-up of the data streams (rx_steering.h), and the discard sink. Not thread-safe:
// everything runs under the progress lock, except steer() (before the endpoint is
// published) and PathEnd::copy_inline (no shared state).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datapath/chunk_io.h"
#include "datapath/chunk_scheduler.h"
#include "datapath/device_path.h"
#include "datapath/devmem_path.h"
#include "datapath/devmem_tx_path.h"
#include "datapath/path_end.h"
#include "datapath/rx_steering.h"
#include "datapath/staging.h"
#include "datapath/transfer.h"
#include "engine/progress.h"
#include "remora/config.h"
#include "remora/endpoint.h"

namespace remora::detail {

class DataPaths {
 public:
  struct Params {
    const Config* config = nullptr;                    ///< the endpoint's; outlives this
    std::shared_ptr<engine::ProgressEngine> engine{};  ///< copies end on it (null: host memory only)
    /// The context's device domains (read with the lock held); null: host memory only.
    const std::vector<MemoryDomain*>* domains = nullptr;
    /// The context's devmem TX bindings of registered regions (null: none kept).
    std::shared_ptr<DevmemTxBindingCache> devmem_tx_bindings{};
    std::string peer{};                 ///< names the other side in messages
    EndpointStats* stats = nullptr;     ///< the endpoint's; the path choices are recorded there
    StagingHost* host = nullptr;        ///< hears of placed chunks and of staging's progress
    ChunkScheduler* streams = nullptr;  ///< the data streams (devmem TX switches them to zero-copy)
  };
  explicit DataPaths(Params params);
  ~DataPaths();
  DataPaths(const DataPaths&) = delete;
  DataPaths& operator=(const DataPaths&) = delete;

  /// The memory [p, p + n) of an operation of this side's: host, or the device domain
  /// that owns it (an empty range is host memory whatever it points at).
  TransferMemory memory_of(const void* p, uint64_t n) const {
    // Without device domains (or for an empty range) this is host memory: every send and
    // receive asks, so that answer takes no call.
    if (params_.domains == nullptr || params_.domains->empty() || p == nullptr || n == 0) {
      // (A send's memory is only read: transfer.h.)
      return TransferMemory{.address = static_cast<std::byte*>(const_cast<void*>(p)), .length = n};
    }
    return memory_on_device(p, n);
  }

  /// The one source or sink of the transfer `spec` describes (see the top of this file);
  /// for device memory the path it took is recorded in the stats. Errors: the selector's
  /// refusal (kUnsupported) when the path REMORA_DEVICE_PATH demands cannot be taken, or
  /// the staging pool's (the domain refused its buffers). A receive's sink is told its
  /// transfer when the operation takes it (PathEnd::sink).
  Result<PathEnd> choose(const TransferSpec& spec);

  /// The end of bytes nobody takes: a refused put's, drained into the discard sink.
  PathEnd discard(uint64_t length) noexcept { return PathEnd::discard(&discard_, length); }
  DiscardSink& discard_sink() noexcept { return discard_; }

  /// A message came inline (eager) for a receive that holds `end`: a receive into device
  /// memory counts a staged transfer of `bytes`, and where a zero-copy receive path was
  /// chosen for it the stats say it staged after all, and why.
  void inline_arrival(const PathEnd& end, uint64_t bytes);

  // --- the data streams ---------------------------------------------------------------
  /// Before any payload can arrive on data stream socket `fd`: how it is read (rxq may
  /// steer it to zero-copy receive; rx_steering.h). Blocks up to `deadline`.
  std::unique_ptr<StreamIn> steer(int fd, net::Clock::time_point deadline) { return steering_.steer(fd, deadline); }
  /// Every data stream is attached: the selector hears whether zero-copy receive is set
  /// up for all of them, or why not.
  void settle();
  /// The data streams as zero-copy sends use them: their completions are read from here.
  DevmemTxStreams& zero_copy_streams() noexcept { return devmem_streams_; }

  /// What staged sources and sinks hold to reach the host; detach_host() first thing in
  /// the host's destructor, so that late copy ends find nobody.
  const std::shared_ptr<StagingHost*>& host_anchor() const noexcept { return anchor_; }
  void detach_host() noexcept { anchor_.reset(); }
  /// For tests: the selector's probe, instead of asking the kernel.
  DevicePathSelector& selector() noexcept { return selector_; }

 private:
  /// The selector's choice for device memory, recorded in the stats (or the refusal).
  Result<PathChoice> choose_device_path(const TransferSpec& spec);
  Status refuse(std::string reason, Status why);
  /// The endpoint's staging for `domain` in one direction, its pool made on first use.
  Result<StagingContext> staging_for(MemoryDomain& domain, bool tx);
  Result<PathEnd> device_end(const TransferSpec& spec, PathChoice choice);
  /// memory_of where device domains exist: the one that owns [p, p + n), if any.
  TransferMemory memory_on_device(const void* p, uint64_t n) const;

  const Config& config_;
  Params params_;
  EndpointStats& stats_;
  std::shared_ptr<StagingHost*> anchor_;
  DiscardSink discard_;  // refused and revoked bytes are read here and dropped
  DevicePathSelector selector_;
  DevmemTxStreams devmem_streams_;  // the data streams' zero-copy completions (devmem TX)
  RxSteering steering_;
  std::shared_ptr<DevmemRxContext> devmem_rx_;  // what devmem sinks share, once every stream is steered
  struct StagingPools {
    MemoryDomain* domain;
    std::shared_ptr<StagingPool> tx, rx;
  };
  std::vector<StagingPools> staging_pools_;
};

}  // namespace remora::detail
