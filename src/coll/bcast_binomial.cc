// coll/bcast_binomial.cc — broadcast down a binomial tree rooted at the root.
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {

Status broadcast_tree(Op& op, void* buf, size_t bytes, int root) {
  const int n = op.size();
  const BinomialEdges e = binomial_edges(mod(op.rank() - root, n), n);
  Inflight io(op);
  if (e.parent >= 0) {
    io.recv(mod(e.parent + root, n), buf, bytes);
    REMORA_RETURN_IF_ERROR(io.wait_oldest());
  }
  for (int child : e.sends()) io.send(mod(child + root, n), buf, bytes);
  return io.finish();
}

}  // namespace remora::coll
