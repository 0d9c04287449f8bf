// coll/barrier_dissemination.cc — barrier: dissemination, ceil(log2 n) rounds of
// zero-byte messages.
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {

Status barrier(Op& op) {
  const int n = op.size();
  const int r = op.rank();
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    REMORA_RETURN_IF_ERROR(op.sendrecv(mod(r + d, n), nullptr, 0, mod(r - d, n), nullptr, 0, round));
  }
  return Status::ok();
}

}  // namespace remora::coll
