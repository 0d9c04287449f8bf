// coll/gather_linear.cc — gather(v), linear at the root: every receive posted at once,
// so data lands in the caller's buffer at its displacement directly.
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {

Status gather(Op& op, const void* send, void* recv, size_t count, DataType type, int root) {
  const int n = op.size();
  const size_t block = count * size_of(type);
  if (op.rank() != root) return op.sendrecv(root, send, block, -1, nullptr, 0);
  if (send != nullptr) copy_block(at(recv, static_cast<size_t>(root) * block), send, block);
  REMORA_RETURN_IF_ERROR(op.prepare_all_peers());
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    if (p != root) io.recv(p, at(recv, static_cast<size_t>(p) * block), block);
  }
  return io.finish();
}

Status gatherv(Op& op, const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
               std::span<const size_t> displs, DataType type, int root) {
  const int n = op.size();
  const size_t elem = size_of(type);
  if (op.rank() != root) return op.sendrecv(root, send, send_count * elem, -1, nullptr, 0);
  const auto me = static_cast<size_t>(root);
  if (send != nullptr) {
    REMORA_RETURN_IF_ERROR(check_own("gatherv", send_count, recv_counts[me]));
    copy_block(at(recv, displs[me] * elem), send, send_count * elem);
  }
  REMORA_RETURN_IF_ERROR(op.prepare_all_peers());
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    const auto i = static_cast<size_t>(p);
    if (p != root) io.recv(p, at(recv, displs[i] * elem), recv_counts[i] * elem);
  }
  return io.finish();
}

}  // namespace remora::coll
