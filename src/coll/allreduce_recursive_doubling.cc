// coll/allreduce_recursive_doubling.cc — allreduce by recursive doubling (non-powers of
// two fold the excess ranks first); also reduce_scatter's small path.
#include <algorithm>
#include <cstring>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/reduce.h"

namespace remora::coll {
namespace {

/// One round: sends `src` (count elements) to `partner`, receives the partner's vector
/// into `tmp` and leaves op(lower rank's, higher rank's) in `dst`. The vector goes as
/// pieces of `piece` bytes, every receive and send posted at once, so reducing one
/// piece overlaps the transfer of the ones behind it. `dst` may be `src`: a piece is
/// overwritten only after its own send has completed.
Status exchange_reduce(Op& op, int partner, const void* src, void* dst, std::byte* tmp, size_t count, DataType type,
                       ReduceOp rop, size_t piece) {
  const size_t es = size_of(type);
  const size_t piece_elems = std::max<size_t>(piece / es, 1);
  const bool partner_lower = partner < op.rank();
  if (count <= piece_elems) {
    // One piece: a plain exchange, without the request queues (a small allreduce's
    // call is a few hundred nanoseconds, bench/results/coll.md).
    REMORA_RETURN_IF_ERROR(op.sendrecv(partner, src, count * es, partner, tmp, count * es, kStepData));
    reduce_to(type, rop, dst, partner_lower ? tmp : src, partner_lower ? src : tmp, count);
    return Status::ok();
  }
  // Every receive is posted before the first send, so no piece arrives unexpected.
  Inflight recvs(op), sends(op);
  for (size_t first = 0; first < count; first += piece_elems) {
    recvs.recv(partner, tmp + first * es, std::min(piece_elems, count - first) * es, kStepData);
  }
  for (size_t first = 0; first < count; first += piece_elems) {
    sends.send(partner, at(src, first * es), std::min(piece_elems, count - first) * es, kStepData);
  }
  for (size_t first = 0; first < count; first += piece_elems) {
    const size_t n = std::min(piece_elems, count - first);
    REMORA_RETURN_IF_ERROR(recvs.wait_oldest());                  // the partner's piece is in tmp
    if (dst == src) REMORA_RETURN_IF_ERROR(sends.wait_oldest());  // ours has left the buffer
    const void* theirs = tmp + first * es;
    const void* ours = at(src, first * es);
    reduce_to(type, rop, at(dst, first * es), partner_lower ? theirs : ours, partner_lower ? ours : theirs, n);
  }
  return sends.finish();
}

}  // namespace

/// Allreduce of `send` into `buf` (count elements; `send` may be `buf`) by recursive
/// doubling. The excess ranks of a non-power-of-two size first hand their vector to
/// their even partner and get the result back at the end. Both partners of a round
/// compute op(lower rank's vector, higher rank's vector), so they hold identical bits.
Status allreduce_rd(Op& op, const void* send, void* buf, size_t count, DataType type, ReduceOp rop) {
  const int n = op.size();
  const int r = op.rank();
  const size_t es = size_of(type);
  const size_t bytes = count * es;
  if (n == 1 || count == 0) {
    if (send != buf && bytes > 0) std::memcpy(buf, send, bytes);
    return Status::ok();
  }
  std::byte* tmp = grow(op.comm().scratch().a, bytes);
  const size_t piece = op.config().exchange_piece_bytes;

  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  // The first exchange reads `send` and writes `buf`; the fold steps work in place.
  if (rem > 0 && send != buf) {
    std::memcpy(buf, send, bytes);
    send = buf;
  }
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
      REMORA_RETURN_IF_ERROR(exchange_reduce(op, real(vrank ^ mask), send, buf, tmp, count, type, rop, piece));
      send = buf;
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
