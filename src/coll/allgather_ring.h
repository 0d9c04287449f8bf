// coll/allgather_ring.h — the ring allgather, a template over how blocks lie in the
// receive buffer (equal blocks for allgather, counts and displacements for allgatherv).
#pragma once

#include "coll/algo_helpers.h"

namespace remora::coll {

/// Ring: at step s a rank forwards the block it received at step s-1 (its own at
/// s = 0) to the right and receives the next one from the left straight into place.
/// Every receive is posted up front (they match in order on one tag).
/// `block(i)` is {offset, bytes} of rank i's block in recv.
template <typename BlockOf>
Status allgather_ring(Op& op, void* recv, BlockOf block) {
  const int n = op.size();
  const int r = op.rank();
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  Inflight recvs(op), sends(op);
  for (int s = 0; s < n - 1; ++s) {
    const auto b = static_cast<size_t>(mod(r - s - 1, n));
    const Span x = block(b);
    recvs.recv(left, at(recv, x.offset), x.bytes);
  }
  for (int s = 0; s < n - 1; ++s) {
    if (s > 0) REMORA_RETURN_IF_ERROR(recvs.wait_oldest());
    const auto b = static_cast<size_t>(mod(r - s, n));
    const Span x = block(b);
    sends.send(right, at(recv, x.offset), x.bytes);
  }
  Status s = recvs.finish();
  Status t = sends.finish();
  return s.is_ok() ? t : s;
}

}  // namespace remora::coll
