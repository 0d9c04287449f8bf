// coll/bcast_binomial.cc — broadcast down a binomial tree rooted at the root.
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {

Status broadcast_tree(Op& op, void* buf, size_t bytes, int root) {
  const int n = op.size();
  const int vr = mod(op.rank() - root, n);
  Inflight io(op);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      io.recv(mod(vr - mask + root, n), buf, bytes);
      REMORA_RETURN_IF_ERROR(io.wait_oldest());
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) io.send(mod(vr + mask + root, n), buf, bytes);
  }
  return io.finish();
}

}  // namespace remora::coll
