// coll/device_stage.h — collectives on device memory: each buffer of a device domain
// added to the context (Context::add_memory_domain) is staged whole through host
// memory. Its bytes are copied to a host buffer before the algorithm runs and, for a
// buffer the collective writes, copied back once it has succeeded; the algorithm
// itself (and its reductions, which the CPU computes) only ever sees host memory.
//
// This is the simple form of staging: the copies do not overlap the network as those
// of sends, receives, puts and gets do (transport/staging.h), and each device buffer
// costs a host buffer of its size for the collective's duration. Host buffers are not
// touched: a collective on host memory runs exactly as without this.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "coll/comm_core.h"
#include "remora/memory.h"

namespace remora::coll {

class DeviceStage {
 public:
  explicit DeviceStage(CommCore& comm);

  /// A buffer the collective reads: the pointer its algorithm should use instead (the
  /// same one for host memory, nullptr and kInPlace).
  const void* in(const void* p, size_t bytes);
  /// A buffer the collective writes (and may read: in place, or bytes it leaves alone).
  void* inout(void* p, size_t bytes);
  /// `body` with the copies around it; `body` itself when no buffer is device memory.
  CommCore::Body wrap(CommCore::Body body);

 private:
  struct Staged {
    MemoryDomain* domain;
    void* device;
    size_t bytes;
    bool written;
    std::shared_ptr<std::vector<std::byte>> host;
  };
  void* stage(const void* p, size_t bytes, bool written);

  CommCore& comm_;
  std::vector<Staged> staged_;
};

}  // namespace remora::coll
