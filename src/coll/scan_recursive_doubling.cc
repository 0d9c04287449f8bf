// coll/scan_recursive_doubling.cc — scan and exscan by recursive doubling (log n
// rounds, MPICH's scheme) at every size.
#include <cstring>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/reduce.h"

namespace remora::coll {
namespace {

/// MPICH's recursive doubling: `partial` covers the aligned group of ranks around us
/// seen so far, `result` the part of it below (and, for scan, including) us. Each
/// round exchanges partials with rank ^ mask; the lower range always goes first.
Status scan_rd(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop, bool exclusive) {
  const int n = op.size();
  const int r = op.rank();
  const size_t es = size_of(type);
  const size_t bytes = count * es;
  Scratch& sc = op.comm().scratch();
  std::byte* partial = grow(sc.a, bytes);
  std::byte* tmp = grow(sc.b, bytes);
  std::memcpy(partial, send, bytes);
  if (!exclusive && send != recv) std::memcpy(recv, send, bytes);
  bool have_result = !exclusive;
  for (int mask = 1; mask < n; mask <<= 1) {
    const int partner = r ^ mask;
    if (partner >= n) continue;
    REMORA_RETURN_IF_ERROR(op.sendrecv(partner, partial, bytes, partner, tmp, bytes, kStepData));
    if (partner < r) {
      reduce_to(type, rop, partial, tmp, partial, count);
      if (have_result) {
        reduce_to(type, rop, recv, tmp, recv, count);
      } else {
        std::memcpy(recv, tmp, bytes);
        have_result = true;
      }
    } else {
      reduce_to(type, rop, partial, partial, tmp, count);
    }
  }
  if (have_result && rop == ReduceOp::kAvg) finish_avg(type, recv, count, n);
  return Status::ok();
}

}  // namespace

Status scan(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop) {
  if (count == 0) return Status::ok();
  return scan_rd(op, send, recv, count, type, rop, false);
}

Status exscan(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop) {
  if (count == 0 || op.size() == 1) return Status::ok();
  return scan_rd(op, send, recv, count, type, rop, true);
}

}  // namespace remora::coll
