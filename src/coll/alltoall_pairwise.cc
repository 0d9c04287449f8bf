// coll/alltoall_pairwise.cc — alltoall(v) by pairwise exchange, at most
// kPairwiseWindow steps in flight (a small alltoall goes through the communicator's
// shared segments instead, its groups' leaders exchanging by alltoall_spans, and so
// does a small alltoallv; shm_segment.h).
#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/shm_segment.h"

namespace remora::coll {
namespace {

/// Steps of a pairwise exchange in flight: bounds the posted operations per rank
/// while still overlapping several peers.
constexpr size_t kPairwiseWindow = 8;

/// Pairwise exchange: step k sends to r+k and receives from r-k, so every pair
/// meets at the same step; at most kPairwiseWindow steps are in flight.
/// `out(i)` / `in(i)` are {offset, bytes} of the blocks for / from rank i.
template <typename OutOf, typename InOf>
Status alltoall_pairwise(Op& op, const void* send, OutOf out, void* recv, InOf in) {
  const int n = op.size();
  const int r = op.rank();
  const auto me = static_cast<size_t>(r);
  copy_block(at(recv, in(me).offset), at(send, out(me).offset), out(me).bytes);
  REMORA_RETURN_IF_ERROR(op.prepare_all_peers());
  Inflight io(op);
  for (int k = 1; k < n; ++k) {
    const auto to = static_cast<size_t>(mod(r + k, n));
    const auto from = static_cast<size_t>(mod(r - k, n));
    io.recv(static_cast<int>(from), at(recv, in(from).offset), in(from).bytes);
    io.send(static_cast<int>(to), at(send, out(to).offset), out(to).bytes);
    while (io.size() > 2 * kPairwiseWindow) REMORA_RETURN_IF_ERROR(io.wait_oldest());
  }
  return io.finish();
}

}  // namespace

Status alltoall(Op& op, const void* send, void* recv, size_t count, DataType type) {
  const size_t block = count * size_of(type);
  // Small, between ranks all of one host: through their shared segment, where an
  // earlier call set it up (an alltoall is not among the calls that set it up).
  if (CommCore& comm = op.comm(); op.size() > 1 && comm.shm_decided() && comm.shm() != nullptr) {
    REMORA_ASSIGN_OR_RETURN(const bool done, alltoall_shm(op, *comm.shm(), send, recv, block));
    if (done) return Status::ok();
  }
  auto same = [block](size_t i) { return Span{i * block, block}; };
  return alltoall_pairwise(op, send, same, recv, same);
}

Status alltoall_spans(Op& op, const void* send, std::span<const Span> out, void* recv, std::span<const Span> in) {
  return alltoall_pairwise(
      op, send, [out](size_t i) { return out[i]; }, recv, [in](size_t i) { return in[i]; });
}

Status alltoallv(Op& op, const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                 void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_displs, DataType type) {
  const size_t elem = size_of(type);
  const auto me = static_cast<size_t>(op.rank());
  REMORA_RETURN_IF_ERROR(check_own("alltoallv", send_counts[me], recv_counts[me]));
  // Where every rank's blocks fit: through the segments of the ranks of each host.
  if (CommCore& comm = op.comm(); op.size() > 1 && comm.shm_decided() && comm.shm() != nullptr) {
    REMORA_ASSIGN_OR_RETURN(const bool done, alltoallv_shm(op, *comm.shm(), send, send_counts, send_displs, recv,
                                                           recv_counts, recv_displs, type));
    if (done) return Status::ok();
  }
  return alltoall_pairwise(
      op, send, [&](size_t i) { return Span{send_displs[i] * elem, send_counts[i] * elem}; }, recv,
      [&](size_t i) { return Span{recv_displs[i] * elem, recv_counts[i] * elem}; });
}

}  // namespace remora::coll
