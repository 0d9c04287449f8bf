// coll/scatter_linear.cc — scatter(v), linear at the root: every send posted at once,
// straight from the caller's buffer at its displacement.
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"

namespace remora::coll {

Status scatter(Op& op, const void* send, void* recv, size_t count, DataType type, int root) {
  const int n = op.size();
  const size_t block = count * size_of(type);
  if (op.rank() != root) return op.sendrecv(-1, nullptr, 0, root, recv, block);
  // recv == nullptr: in-place, the root's block stays in send.
  if (recv != nullptr) copy_block(recv, at(send, static_cast<size_t>(root) * block), block);
  REMORA_RETURN_IF_ERROR(op.prepare_all_peers());
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    if (p != root) io.send(p, at(send, static_cast<size_t>(p) * block), block);
  }
  return io.finish();
}

Status scatterv(Op& op, const void* send, std::span<const size_t> send_counts, std::span<const size_t> displs,
                void* recv, size_t recv_count, DataType type, int root) {
  const int n = op.size();
  const size_t elem = size_of(type);
  if (op.rank() != root) return op.sendrecv(-1, nullptr, 0, root, recv, recv_count * elem);
  const auto me = static_cast<size_t>(root);
  if (recv != nullptr) {
    REMORA_RETURN_IF_ERROR(check_own("scatterv", send_counts[me], recv_count));
    copy_block(recv, at(send, displs[me] * elem), recv_count * elem);
  }
  REMORA_RETURN_IF_ERROR(op.prepare_all_peers());
  Inflight io(op);
  for (int p = 0; p < n; ++p) {
    const auto i = static_cast<size_t>(p);
    if (p != root) io.send(p, at(send, displs[i] * elem), send_counts[i] * elem);
  }
  return io.finish();
}

}  // namespace remora::coll
