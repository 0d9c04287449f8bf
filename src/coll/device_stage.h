// coll/device_stage.h — collectives on device memory: each buffer of a device domain
// added to the context (Context::add_memory_domain) is staged whole through host
// memory. Its bytes are copied to a host buffer before the algorithm runs and, for a
// buffer the collective writes, copied back once it has succeeded; the algorithm
// itself (and its reductions, which the CPU computes) only ever sees host memory.
//
// Each device buffer costs a host buffer of its size for the collective's duration.
// Host buffers are not touched: a collective on host memory runs exactly as without
// this, with one exception below.
//
// Elementwise collectives (allreduce, reduce, broadcast: element i of a result depends
// on element i of the inputs only) of at least 4 segments (CollConfig::
// device_segment_bytes, REMORA_COLL_DEVICE_SEGMENT, 4 MiB) are pipelined instead: the
// ranks first agree, by a 1-byte allreduce, whether any of them has a device buffer;
// if one has, every rank runs the collective segment by segment, each as an op of its
// own (CommCore::reserve_seq), and a rank with device buffers copies segment k + 1 in
// and segment k - 1 out while the network moves segment k. The agreement is the
// exception: host-only collectives of that size pay one small allreduce for it. The
// other collectives are staged whole: all copies in, the algorithm, all copies out.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "coll/comm_core.h"
#include "remora/memory.h"

namespace remora::coll {

class DeviceStage {
 public:
  explicit DeviceStage(CommCore& comm);

  /// A device buffer of the collective and the host buffer standing in for it.
  struct Staged {
    MemoryDomain* domain;
    void* device;
    size_t bytes;
    bool written;
    std::shared_ptr<std::vector<std::byte>> host;
  };

  /// A buffer the collective reads: the pointer its algorithm should use instead (the
  /// same one for host memory, nullptr and kInPlace).
  const void* in(const void* p, size_t bytes);
  /// A buffer the collective writes (and may read: in place, or bytes it leaves alone).
  void* inout(void* p, size_t bytes);
  /// `body` with the copies around it; `body` itself when no buffer is device memory.
  CommCore::Body wrap(CommCore::Body body);

  /// Runs an elementwise collective on elements [first, first + n) of the buffers
  /// mapped by in() and inout().
  using SegmentFn = std::function<Status(Op&, size_t first, size_t n)>;
  /// The body of an elementwise collective of `count` elements of `elem` bytes, every
  /// buffer mapped by in()/inout() holding `count` of them: staged whole, or pipelined
  /// segment by segment (see the top of this file).
  CommCore::Body wrap_elementwise(size_t count, size_t elem, SegmentFn run);

 private:
  void* stage(const void* p, size_t bytes, bool written);

  CommCore& comm_;
  std::vector<Staged> staged_;
};

}  // namespace remora::coll
