// coll/reduce_chain.cc — reduce along a pipelined chain toward the root.
#include <algorithm>
#include <vector>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/reduce.h"

namespace remora::coll {

/// Chain toward the root: vrank n-1 sends its vector piece by piece to n-2, which
/// adds its own and forwards, ... down to the root (vrank 0). kWindow pieces are in
/// flight per link, so every link and every rank's reduction work at the same time.
Status reduce_chain(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop, int root) {
  constexpr size_t kWindow = 4;
  const int n = op.size();
  const int r = op.rank();
  const size_t es = size_of(type);
  const int vr = (r - root + n) % n;
  const int up = vr + 1 < n ? (vr + 1 + root) % n : -1;  // who sends to us
  const int down = vr > 0 ? (vr - 1 + root) % n : -1;    // whom we send to
  const size_t piece = std::max<size_t>(1, op.config().pipeline_bytes / es);
  const size_t pieces = (count + piece - 1) / piece;
  auto len_of = [&](size_t p) { return std::min(piece, count - p * piece); };

  if (up < 0) {  // the far end: its own vector, in pieces
    std::vector<Request> sends;
    for (size_t p = 0; p < pieces; ++p) sends.push_back(op.send(down, at(send, p * piece, es), len_of(p) * es, kStepData));
    return op.wait_all(sends);
  }
  Scratch& sc = op.comm().scratch();
  std::byte* in = grow(sc.a, kWindow * piece * es);
  std::byte* out = down >= 0 ? grow(sc.b, kWindow * piece * es) : nullptr;
  std::vector<Request> recvs(pieces), sends(pieces);
  auto all = [&] {
    std::vector<Request> v;
    for (auto& q : recvs) if (q.valid()) v.push_back(q);
    for (auto& q : sends) if (q.valid()) v.push_back(q);
    return v;
  };
  for (size_t p = 0; p < std::min(pieces, kWindow); ++p) {
    recvs[p] = op.recv(up, in + (p % kWindow) * piece * es, len_of(p) * es, kStepData);
  }
  for (size_t p = 0; p < pieces; ++p) {
    Status s = op.wait(recvs[p], len_of(p) * es);
    if (s.is_ok() && down >= 0 && p >= kWindow) s = op.wait(sends[p - kWindow]);
    if (!s.is_ok()) return abandon(op, all(), s);
    std::byte* slot_in = in + (p % kWindow) * piece * es;
    std::byte* dst = down >= 0 ? out + (p % kWindow) * piece * es : at(recv, p * piece, es);
    reduce_to(type, rop, dst, at(send, p * piece, es), slot_in, len_of(p));  // op(own, higher vranks)
    if (p + kWindow < pieces) {
      recvs[p + kWindow] = op.recv(up, slot_in, len_of(p + kWindow) * es, kStepData);
    }
    if (down >= 0) sends[p] = op.send(down, dst, len_of(p) * es, kStepData);
  }
  REMORA_RETURN_IF_ERROR(op.wait_all(all()));
  if (down < 0 && rop == ReduceOp::kAvg) finish_avg(type, recv, count, n);
  return Status::ok();
}

}  // namespace remora::coll
