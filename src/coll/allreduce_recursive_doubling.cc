// coll/allreduce_recursive_doubling.cc — in-place allreduce by recursive doubling
// (non-powers of two fold the excess ranks first); also reduce_scatter's small path.
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/reduce.h"

namespace remora::coll {

/// In-place allreduce of `buf` (count elements) by recursive doubling. The excess
/// ranks of a non-power-of-two size first hand their vector to their even partner
/// and get the result back at the end. Both partners of a round compute
/// op(lower rank's vector, higher rank's vector), so they hold identical bits.
Status allreduce_rd(Op& op, void* buf, size_t count, DataType type, ReduceOp rop) {
  const int n = op.size();
  const int r = op.rank();
  const size_t es = size_of(type);
  const size_t bytes = count * es;
  if (n == 1 || count == 0) return Status::ok();
  std::byte* tmp = grow(op.comm().state<Scratch>("reduce_scratch").a, bytes);

  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  // Ranks below 2*rem pair up: the even one folds into the odd one and sits out.
  int vrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      REMORA_RETURN_IF_ERROR(op.sendrecv(r + 1, buf, bytes, -1, nullptr, 0, kStepFoldIn));
      vrank = -1;
    } else {
      REMORA_RETURN_IF_ERROR(op.sendrecv(-1, nullptr, 0, r - 1, tmp, bytes, kStepFoldIn));
      reduce_to(type, rop, buf, tmp, buf, count);  // op(lower, higher)
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  auto real = [rem](int v) { return v < rem ? v * 2 + 1 : v + rem; };
  if (vrank >= 0) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int partner = real(vrank ^ mask);
      REMORA_RETURN_IF_ERROR(op.sendrecv(partner, buf, bytes, partner, tmp, bytes, kStepData));
      if (partner < r) {
        reduce_to(type, rop, buf, tmp, buf, count);
      } else {
        reduce_to(type, rop, buf, buf, tmp, count);
      }
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      REMORA_RETURN_IF_ERROR(op.sendrecv(-1, nullptr, 0, r + 1, buf, bytes, kStepFoldOut));
    } else {
      REMORA_RETURN_IF_ERROR(op.sendrecv(r - 1, buf, bytes, -1, nullptr, 0, kStepFoldOut));
    }
  }
  return Status::ok();
}

}  // namespace remora::coll
