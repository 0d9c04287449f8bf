// coll/bcast_chain.cc — broadcast down a pipelined chain: pieces of pipeline_bytes,
// each rank forwards a piece as soon as it has it.
#include <algorithm>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {
namespace {

/// Pieces of a broadcast chain in flight per rank (posted receives ahead, and
/// unfinished forwards): enough to keep both links of a rank busy.
constexpr size_t kChainWindow = 4;

}  // namespace

Status broadcast_chain(Op& op, void* buf, size_t bytes, int root, size_t piece) {
  const int n = op.size();
  const int vr = mod(op.rank() - root, n);
  const int prev = vr == 0 ? -1 : mod(op.rank() - 1, n);
  const int next = vr == n - 1 ? -1 : mod(op.rank() + 1, n);
  // At least one piece: a zero-byte broadcast still travels (see the file comment).
  const size_t pieces = bytes == 0 ? 1 : (bytes + piece - 1) / piece;
  auto len = [&](size_t i) { return std::min(piece, bytes - std::min(bytes, i * piece)); };
  // Receives ahead of use and forwards not yet finished, kept in separate queues so
  // that "wait for piece i" never waits behind an unrelated send.
  Inflight recvs(op), sends(op);
  size_t posted = 0;
  for (size_t i = 0; i < pieces; ++i) {
    if (prev >= 0) {
      while (posted < pieces && posted < i + kChainWindow) {
        recvs.recv(prev, at(buf, posted * piece), len(posted));
        ++posted;
      }
      REMORA_RETURN_IF_ERROR(recvs.wait_oldest());
    }
    if (next >= 0) {
      sends.send(next, at(buf, i * piece), len(i));
      if (sends.size() > kChainWindow) REMORA_RETURN_IF_ERROR(sends.wait_oldest());
    }
  }
  Status s = sends.finish();
  Status r = recvs.finish();
  return s.is_ok() ? r : s;
}

}  // namespace remora::coll
