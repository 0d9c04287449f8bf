// datapath/transfer.h — a transfer as the data path sees it: which way its bytes go,
// whether they travel inline in a frame on the control stream or in chunks on the data
// streams, the memory they are in, and the path that moves them. DataPaths::choose
// (data_paths.h) takes a TransferSpec and returns the one source or sink (PathEnd,
// path_end.h) that the operation holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "mem/region_access.h"
#include "remora/memory.h"

namespace remora::detail {

/// Which end of a transfer this side is.
enum class Direction : uint8_t {
  kSend,     ///< this side's memory is read: the operation holds a ChunkSource
  kReceive,  ///< this side's memory is written: the operation holds a ChunkSink
};

/// How a transfer's bytes travel. The endpoint decides it (a length against the
/// negotiated eager limit, and for messages the credit), never the data path.
enum class TransferClass : uint8_t {
  kInline,   ///< in the operation's frame on the control stream (EAGER, PUT, RESP)
  kChunked,  ///< in chunks on the data streams (ChunkScheduler)
};

/// The path a transfer's bytes take; EndpointStats::device_path names the last one a
/// transfer of device memory took.
enum class DataPath : uint8_t {
  kHost,     ///< host memory: between the memory and the sockets, no copy of ours
  kStaging,  ///< device memory through host memory: pinned bounce buffers chunk by
             ///< chunk (staging.h), or one host copy for an inline transfer (bounce.h)
  kDevmem,   ///< devmem TCP: the NIC reads (TX) or writes (RX) the device memory
  kZcrx,     ///< io_uring zero-copy receive, placed from its area into the memory
};
constexpr std::string_view data_path_name(DataPath p) noexcept {
  switch (p) {
    case DataPath::kHost: return "host";
    case DataPath::kStaging: return "staging";
    case DataPath::kDevmem: return "devmem";
    case DataPath::kZcrx: return "zcrx";
  }
  return "?";
}

/// The memory one transfer reads or writes, and whose it is.
struct TransferMemory {
  /// The first byte. A send only reads it (the pointer is not const so that one type
  /// serves both directions).
  std::byte* address = nullptr;
  uint64_t length = 0;
  MemoryDomain* device = nullptr;  ///< the device domain the memory belongs to; null: host memory
  /// A registered region a peer reads or writes (its request was granted): every touch
  /// of the memory is bracketed by it. The caller holds it for the call of
  /// DataPaths::choose (an end that needs it longer keeps a share; pointing at it costs
  /// a host-memory request no reference count). Null: this side's own operation's
  /// memory, which stays valid until the operation completes.
  const std::shared_ptr<RegionAccess>* region = nullptr;

  bool on_host() const noexcept { return device == nullptr; }
  /// The first `length` bytes a peer's granted request names.
  static TransferMemory of_region(const std::shared_ptr<RegionAccess>& access, uint64_t length) {
    TransferMemory m;
    m.address = access->address();
    m.length = length;
    m.device = access->device();
    m.region = &access;
    return m;
  }
  /// The region's access (null for this side's own memory).
  const RegionAccess* access() const noexcept { return region != nullptr ? region->get() : nullptr; }
  /// A share of it, for an end that outlives the call.
  std::shared_ptr<const RegionAccess> shared_access() const { return region != nullptr ? *region : nullptr; }
};

/// What an operation asks of DataPaths::choose.
struct TransferSpec {
  Direction direction = Direction::kSend;
  TransferClass cls = TransferClass::kChunked;
  TransferMemory memory{};
  /// What a zero-copy send's completions are reported under (devmem TX: each sendmsg
  /// is reported done with it on its data stream's error queue; see devmem_tx_path.h).
  uint64_t zero_copy_id = 0;
};

}  // namespace remora::detail
