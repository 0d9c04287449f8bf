// coll/allgather_recursive_doubling.cc — allgather by recursive doubling (n a power
// of two, equal contiguous blocks).
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {

/// Recursive doubling (n a power of two, equal contiguous blocks): at distance d the
/// rank exchanges the d blocks its group holds with the partner group's d blocks.
Status allgather_rd(Op& op, void* recv, size_t block) {
  const int n = op.size();
  const int r = op.rank();
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    const int partner = r ^ d;
    const auto mine = static_cast<size_t>(r & ~(d - 1));
    const auto theirs = static_cast<size_t>(partner & ~(d - 1));
    const size_t len = block * static_cast<size_t>(d);
    REMORA_RETURN_IF_ERROR(op.sendrecv(partner, at(recv, mine * block), len, partner, at(recv, theirs * block), len, round));
  }
  return Status::ok();
}

}  // namespace remora::coll
