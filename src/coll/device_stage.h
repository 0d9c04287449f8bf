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
// Collectives whose buffers are made of `blocks` blocks of `count` elements, where
// element i of a result's block depends on element i of the inputs' blocks only, can
// be cut into segments of elements [first, first + m) of every block. That covers the
// elementwise ones (allreduce, reduce, broadcast, scan, exscan: one block) and the
// blocked ones (allgather, gather, scatter, alltoall, reduce_scatter: a rank's block
// per rank). Those of at least 4 segments (CollConfig::device_segment_bytes,
// REMORA_COLL_DEVICE_SEGMENT, 4 MiB, counted over every block of a segment) are
// pipelined instead of staged whole: the ranks first agree, by a 1-byte allreduce,
// whether any of them has a device buffer; if one has, every rank runs the collective
// segment by segment, each as an op of its own (CommCore::reserve_seq), and a rank with
// device buffers copies segment k + 1 in and segment k - 1 out while the network moves
// segment k. The agreement is the exception: host-only collectives of that size pay one
// small allreduce for it. The v-forms (their blocks need not line up) are staged whole:
// all copies in, the algorithm, all copies out.
//
// A staged blocked buffer is laid out segment by segment in its host buffer: segment
// [first, first + m) occupies `blocks * m` elements from element `blocks * first` on,
// its blocks packed one after the other (the device copies gather and scatter them, one
// copy per block). A buffer that is not staged (host memory) keeps its own layout, its
// blocks `count` elements apart. segment_blocks() says which applies.
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
    /// The segmented layout (the top of this file): `blocks` blocks of `stride`
    /// elements on the device; a segment writes back its first `out_blocks` packed
    /// blocks to the device's first `out_blocks` (fewer only for an in-place
    /// reduce_scatter, whose result is one block).
    size_t blocks = 1;
    size_t out_blocks = 1;
    size_t stride = 0;
  };

  /// A buffer the collective reads: the pointer its algorithm should use instead (the
  /// same one for host memory, nullptr and kInPlace).
  const void* in(const void* p, size_t bytes);
  /// A buffer the collective writes (and may read: in place, or bytes it leaves alone).
  void* inout(void* p, size_t bytes);
  /// As in() and inout(), for a buffer of `blocks` blocks of `count` elements of `elem`
  /// bytes (a segmented collective's, see the top of this file). `out_blocks`: how many
  /// of a segment's blocks the collective writes (see Staged).
  const void* in_blocks(const void* p, size_t count, size_t blocks, size_t elem);
  void* inout_blocks(void* p, size_t count, size_t blocks, size_t out_blocks, size_t elem);

  /// Where segment [first, first + m) of a buffer of blocks of `count` elements lies:
  /// `mapped` is what in_blocks/inout_blocks returned for `original`. Block i of the
  /// segment starts at element `base + i * stride` (elements of `elem` bytes).
  struct SegmentBlocks {
    std::byte* base;
    size_t stride;
  };
  static SegmentBlocks segment_blocks(const void* original, const void* mapped, size_t count, size_t blocks,
                                      size_t elem, size_t first, size_t m);
  /// `body` with the copies around it; `body` itself when no buffer is device memory.
  CommCore::Body wrap(CommCore::Body body);

  /// Runs the collective on elements [first, first + n) of every block of the buffers
  /// mapped by in()/inout() (one block) and in_blocks()/inout_blocks().
  using SegmentFn = std::function<Status(Op&, size_t first, size_t n)>;
  /// The body of a collective whose buffers hold blocks of `count` elements of `elem`
  /// bytes, at most `blocks` of them: staged whole, or pipelined segment by segment
  /// (see the top of this file). Every rank must pass the same count, elem and blocks.
  CommCore::Body wrap_segmented(size_t count, size_t elem, size_t blocks, SegmentFn run);
  /// No buffer is device memory and the collective is under 4 segments: wrap_segmented
  /// would run `run(op, 0, count)` as it is, so a caller may run it without the wrapper.
  bool runs_whole(size_t count, size_t elem, size_t blocks) const noexcept {
    return staged_.empty() && !segmented(count, elem, blocks);
  }

 private:
  /// Whether a collective of `count` elements in `blocks` blocks of `elem` bytes is
  /// pipelined segment by segment (4 segments or more); its segment's elements.
  bool segmented(size_t count, size_t elem, size_t blocks, size_t* segment = nullptr) const noexcept;
  void* stage(const void* p, size_t bytes, bool written, size_t blocks = 1, size_t out_blocks = 1, size_t stride = 0);

  CommCore& comm_;
  std::vector<Staged> staged_;
};

}  // namespace remora::coll
