// coll/allgather_ring.h — the ring allgather, a template over how blocks lie in the
// receive buffer (equal blocks for allgather, counts and displacements for allgatherv).
#pragma once

#include <span>

#include "coll/algo_helpers.h"

namespace remora::coll {

/// Ring: at step s a rank forwards the block it received at step s-1 (its own at
/// s = 0) to the right and receives the next one from the left straight into place.
/// Every receive is posted up front (they match in order on one tag). A block may lie
/// in `parts` pieces apart, each its own message: `block(i, k)` is {offset, bytes} of
/// part k of rank i's block in recv.
template <typename PartOf>
Status allgather_ring_parts(Op& op, void* recv, size_t parts, PartOf block) {
  const int n = op.size();
  const int r = op.rank();
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  Inflight recvs(op), sends(op);
  for (int s = 0; s < n - 1; ++s) {
    const auto b = static_cast<size_t>(mod(r - s - 1, n));
    for (size_t k = 0; k < parts; ++k) {
      const Span x = block(b, k);
      recvs.recv(left, at(recv, x.offset), x.bytes);
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    const auto b = static_cast<size_t>(mod(r - s, n));
    for (size_t k = 0; k < parts; ++k) {
      if (s > 0) REMORA_RETURN_IF_ERROR(recvs.wait_oldest());
      const Span x = block(b, k);
      sends.send(right, at(recv, x.offset), x.bytes);
    }
  }
  Status s = recvs.finish();
  Status t = sends.finish();
  return s.is_ok() ? t : s;
}

/// The ring over blocks of one piece each: `block(i)` is {offset, bytes} of rank i's
/// block in recv.
template <typename BlockOf>
Status allgather_ring(Op& op, void* recv, BlockOf block) {
  return allgather_ring_parts(op, recv, 1, [&](size_t i, size_t) { return block(i); });
}

/// Allgather of equal blocks in two levels, for ranks in equal groups: the ring among
/// `across` (the ranks at this rank's index in every group) straight into place, then the
/// ring within `local` (this rank's group) of each index's blocks, one part per group.
/// `by_index`: the communicator's ranks index by index, each index's in the order of the
/// groups.
inline Status allgather_two_level(Op& local, Op& across, std::span<const int> by_index, void* recv, size_t block) {
  const auto groups = static_cast<size_t>(across.size());
  const size_t mine = static_cast<size_t>(local.rank()) * groups;
  auto of = [&](size_t k) { return Span{static_cast<size_t>(by_index[k]) * block, block}; };
  REMORA_RETURN_IF_ERROR(allgather_ring(across, recv, [&](size_t g) { return of(mine + g); }));
  return allgather_ring_parts(local, recv, groups, [&](size_t i, size_t g) { return of(i * groups + g); });
}

}  // namespace remora::coll
