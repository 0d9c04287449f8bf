// coll/reduce_binomial.cc — reduce up a binomial tree to the root.
#include <cstring>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/reduce.h"

namespace remora::coll {

Status reduce_tree(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop, int root) {
  const int n = op.size();
  const int r = op.rank();
  const size_t es = size_of(type);
  const size_t bytes = count * es;
  const int vr = (r - root + n) % n;
  Scratch& sc = op.comm().scratch();
  std::byte* tmp = grow(sc.a, bytes);
  // acc: what this subtree has so far. The root accumulates into recv; an inner node
  // into scratch; a leaf sends its send buffer as it is.
  const void* acc = send;
  void* acc_out = r == root ? recv : grow(sc.b, bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      const int parent = (vr - mask + root) % n;
      return op.sendrecv(parent, acc, bytes, -1, nullptr, 0, kStepData);
    }
    if (vr + mask < n) {
      const int child = (vr + mask + root) % n;
      REMORA_RETURN_IF_ERROR(op.sendrecv(-1, nullptr, 0, child, tmp, bytes, kStepData));
      reduce_to(type, rop, acc_out, acc, tmp, count);  // op(lower vrank subtree, higher)
      acc = acc_out;
    }
  }
  // Only the root gets here.
  if (acc != recv) std::memcpy(recv, acc, bytes);
  if (rop == ReduceOp::kAvg) finish_avg(type, recv, count, n);
  return Status::ok();
}

}  // namespace remora::coll
