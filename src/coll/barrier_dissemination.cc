// coll/barrier_dissemination.cc — barrier: dissemination, ceil(log2 n) rounds of
// zero-byte messages; or, where the communicator has a shared segment (ranks of one
// host), one round through it.
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/shm_segment.h"

namespace remora::coll {

Status barrier(Op& op) {
  if (op.size() > 1) {
    REMORA_ASSIGN_OR_RETURN(ShmPlan * plan, shm_plan(op));
    if (plan != nullptr) return barrier_shm(op, *plan);
  }
  return barrier_dissemination(op);
}

Status barrier_dissemination(Op& op) {
  const int n = op.size();
  const int r = op.rank();
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    REMORA_RETURN_IF_ERROR(op.sendrecv(mod(r + d, n), nullptr, 0, mod(r - d, n), nullptr, 0, round));
  }
  return Status::ok();
}

}  // namespace remora::coll
