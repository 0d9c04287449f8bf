// coll/collectives.cc — the entry points of the collectives that have more than one
// algorithm: each asks select_algorithm (algo_select.cc) which one runs and calls it.
// The algorithms live one family per file, named after it (bcast_binomial.cc,
// allreduce_ring.cc, ...; the single-algorithm collectives' entry points live with
// their algorithm). Why each rule is what it is:
//
// Movement (type-agnostic: only the element size matters): barrier, broadcast,
// gather(v), scatter(v), allgather(v), alltoall(v).
//
// Algorithms and when they are chosen (CollConfig overrides where there is a choice;
// the choice itself is made in algo_select.cc):
// - barrier: dissemination, ceil(log2 n) rounds of zero-byte messages.
// - broadcast: binomial tree, or a pipelined chain (pieces of pipeline_bytes, each
//   rank forwards a piece as soon as it has it). Auto picks the chain when the
//   message is at least 4 pieces and there are more than 2 ranks: below that the
//   pipeline cannot fill, and with 2 ranks the tree is one direct message anyway.
// - gather(v)/scatter(v): linear at the root, every receive/send posted at once, so
//   data lands in (or leaves from) the caller's buffer at its displacement directly.
// - allgather: for small results (up to 64 KiB, algo_select.cc) log2(n) rounds: recursive
//   doubling when n is a power of two, Bruck otherwise (REMORA_ALLGATHER_ALGO=rd means
//   this pair); else a ring, which receives straight into place (in two levels where the
//   segments found groups that allow lanes, as for the allreduce below, and the block is
//   above their slot, shm_segment.h).
//   allgatherv: the ring (its blocks need not be contiguous or equal, which both
//   log-round algorithms rely on), host by host where the ranks span hosts, and where
//   every count is the same the allgather's two levels over lanes (each block sent
//   where its displacement puts it).
// - alltoall(v): pairwise exchange, at most kPairwiseWindow steps in flight (a small
//   alltoall through the segments, the leaders' exchange pairwise, shm_segment.h).
//
// Every rank sends its messages even for zero counts (a zero-byte message still
// matches), so ranks that disagree on counts get kProtocol/kTruncated from the size
// check instead of one side moving on while the other waits.
//
// Reductions: reduce, allreduce, reduce_scatter, scan, exscan.
//
// Algorithms (CollConfig; `bytes` is count * element size of the whole vector; the
// choice is made in algo_select.cc):
// - allreduce: pipelined ring (reduce-scatter by puts into the right neighbour's
//   registered scratch with notifications, then a send/recv ring allgather whose
//   receives are posted first and whose first step sends each owned piece the moment
//   the reduce-scatter finishes it, so the two phases overlap) when
//   bytes >= ring_threshold_for(n) and n >= 2; recursive doubling below (non-powers of
//   two fold the excess ranks first), each round's exchange in pieces of
//   exchange_piece_bytes, every piece's receive and send posted at once, so reducing a
//   piece overlaps the transfer of the next. REMORA_ALLREDUCE_ALGO overrides. The
//   threshold is 64 KiB above 2 ranks, where recursive doubling sends log2(n) whole
//   vectors against the ring's 2(n-1)/n. At 2 ranks both send one vector each way;
//   recursive doubling does it in one step where the ring takes two, each rank
//   reducing the whole vector against the ring's half: measured over TCP it is
//   faster up to 2 MiB (0.49x the ring's time at 64 KiB, 0.88x at 256 KiB, level at
//   1-2 MiB) and the ring from 4 MiB (bench/results/mpi.md). Where the segments found
//   several groups, one of at least two ranks, the ring's sizes run in two levels over
//   the narrowest group's size of lanes (one where a rank is alone), a rank past them
//   handing the lanes its blocks and taking the result back (LaneViews, shm_segment.h).
// - reduce: binomial tree, or a pipelined chain when bytes >= ring_threshold_for(n) and n > 2.
// - reduce_scatter: the ring reduce-scatter when size*count bytes >= ring_threshold_for(n)
//   (in two levels where the segments found groups that allow lanes, shm_segment.h),
//   else recursive-doubling allreduce of the whole input (log n rounds, fewer than
//   reduce + scatter's) keeping the rank's block, or, where the whole input fits the
//   segment's slot, an allreduce through the segments (shm_segment.h), likewise.
//   REMORA_ALLREDUCE_ALGO steers it too.
// - scan / exscan: recursive doubling (log n rounds, MPICH's scheme) at every size.
//   (kAvg is refused for scans by the Communicator before they get here.)
//
// Host order: where the communicator's shared segments (shm_segment.h) find groups of
// ranks (hosts) that are not in rank order, the chains (broadcast, reduce) and the rings
// by messages (allreduce, reduce_scatter and allgather where the groups allow no lanes,
// or when named)
// run on a view that lists the ranks host by host, so they cross between hosts once
// per group instead of at every step. The trees of broadcasts and reduces too large
// for the segments run in two levels wherever there are several groups, in rank order
// or not: among the groups' representatives (the root for its own), then within each
// group, so that each group is reached by one message from outside it
// (broadcast_by_group, reduce_by_group).
//
// Determinism: every algorithm combines in a fixed order that depends only on ranks,
// counts and which ranks share a host (never on arrival order), and each element of an
// allreduce result is computed once and then copied, so results are bit-identical on
// every rank and from run to run. kAvg combines as a sum; finish_avg divides by size()
// once, on the ranks that hold the result (for the ring: each block's owner, before the
// allgather).
#include <algorithm>
#include <cstring>
#include <optional>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/allgather_ring.h"
#include "coll/reduce.h"
#include "coll/shm_segment.h"

namespace remora::coll {

namespace {
/// The communicator's shared segments (coll/shm_segment.h), set up at the first call
/// that asks; null where they are off.
Result<ShmPlan*> segment(Op& op) { return op.size() > 1 ? shm_plan(op) : nullptr; }

/// `op` over the ranks in host order (plan.by_host, not empty).
Op in_host_order(Op& op, const ShmPlan& plan) {
  return Op(op, plan.by_host, plan.place[static_cast<size_t>(op.rank())]);
}
}  // namespace

Status broadcast(Op& op, void* buf, size_t count, DataType type, int root) {
  const int n = op.size();
  if (n == 1) return Status::ok();
  const size_t bytes = count * size_of(type);
  REMORA_ASSIGN_OR_RETURN(ShmPlan * seg, segment(op));
  if (seg != nullptr) {
    REMORA_ASSIGN_OR_RETURN(const bool done, broadcast_shm(op, *seg, buf, bytes, root));
    if (done) return Status::ok();
  }
  const size_t piece = std::max<size_t>(op.config().pipeline_bytes, 1);
  const Algo algo = select_algorithm(CollectiveKind::kBroadcast, op.config(), n, bytes);
  if (algo == Algo::kChain && seg != nullptr && !seg->by_host.empty()) {
    // The chain host by host, from the root on.
    Op hosts = in_host_order(op, *seg);
    return broadcast_chain(hosts, buf, bytes, seg->place[static_cast<size_t>(root)], piece);
  }
  if (algo == Algo::kChain) return broadcast_chain(op, buf, bytes, root, piece);
  if (seg != nullptr && !seg->flat()) return broadcast_by_group(op, *seg, buf, bytes, root);
  return broadcast_tree(op, buf, bytes, root);
}

namespace {

/// The views a call in two levels over `seg`'s lanes (ShmPlan::lanes) runs on: this
/// rank's whole group, lanes first; where this rank is one of the lanes, the group's
/// lanes and the lanes at its index in every group.
struct LaneViews {
  LaneViews(const Op& op, const ShmPlan& seg)
      : lanes(seg.lanes()), index(seg.index_in[static_cast<size_t>(op.rank())]), group(op, seg.local, index) {
    if (index < lanes) {
      local.emplace(op, seg.lane_ranks, index);
      across.emplace(op, seg.across, seg.group_of[static_cast<size_t>(op.rank())]);
    }
  }
  /// This rank is past its group's lanes: it hands its data to them (a *_past_lanes call).
  bool past_lanes() const { return index >= lanes; }
  /// The group where it has ranks past its lanes, for a lane's *_two_level call; else null.
  Op* group_past() { return group.size() > lanes ? &group : nullptr; }

  const int lanes;
  const int index;
  Op group;
  std::optional<Op> local, across;
};

/// An allgather(v) by the plan's hosts: in two levels where `two_level`, else by the
/// ring host by host where `ring` and the ranks span hosts; nullopt where neither runs
/// (the caller's path by messages then). `span_of(r)`: rank r's block in `recv`;
/// `whole`: as allgather_two_level's.
template <typename SpanOf>
std::optional<Status> allgather_by_hosts(Op& op, const ShmPlan& plan, void* recv, const SpanOf& span_of, size_t whole,
                                         bool two_level, bool ring) {
  const int n = op.size();
  if (two_level) {
    LaneViews v(op, plan);
    if (v.past_lanes()) return allgather_past_lanes(v.group, v.lanes, op.rank(), recv, span_of, whole, n);
    return allgather_two_level(*v.local, *v.across, v.group, plan.by_index, recv, span_of, whole, n);
  }
  if (!ring || plan.by_host.empty()) return std::nullopt;
  // Block i of the view is its rank's.
  Op hosts = in_host_order(op, plan);
  const std::span<const int> order = plan.by_host;
  return allgather_ring(hosts, recv, [&](size_t i) { return span_of(static_cast<size_t>(order[i])); });
}

}  // namespace

Status allgather(Op& op, const void* send, void* recv, size_t count, DataType type) {
  const int n = op.size();
  const size_t block = count * size_of(type);
  if (send != nullptr) copy_block(at(recv, static_cast<size_t>(op.rank()) * block), send, block);
  if (n == 1) return Status::ok();
  REMORA_ASSIGN_OR_RETURN(ShmPlan * seg, segment(op));
  if (seg != nullptr) {
    REMORA_ASSIGN_OR_RETURN(const bool done, allgather_shm(op, *seg, recv, block));
    if (done) return Status::ok();
    const bool two_level = two_level_takes(CollectiveKind::kAllgather, op.config(), block, *seg);
    const bool ring = select_algorithm(CollectiveKind::kAllgather, op.config(), n, block) == Algo::kRing;
    auto span_of = [block](size_t r) { return Span{r * block, block}; };
    const size_t whole = static_cast<size_t>(n) * block;
    if (auto ran = allgather_by_hosts(op, *seg, recv, span_of, whole, two_level, ring)) return *ran;
  }
  return allgather_messages(op, recv, block);
}

Status allgather_messages(Op& op, void* recv, size_t block) {
  const Algo algo = select_algorithm(CollectiveKind::kAllgather, op.config(), op.size(), block);
  if (algo == Algo::kRecursiveDoubling) return allgather_rd(op, recv, block);
  if (algo == Algo::kBruck) return allgather_bruck(op, recv, block);
  return allgather_ring(op, recv, [block](size_t i) { return Span{i * block, block}; });
}

Status allgatherv(Op& op, const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                  std::span<const size_t> displs, DataType type) {
  const size_t elem = size_of(type);
  const auto me = static_cast<size_t>(op.rank());
  if (send != nullptr) {
    REMORA_RETURN_IF_ERROR(check_own("allgatherv", send_count, recv_counts[me]));
    copy_block(at(recv, displs[me] * elem), send, send_count * elem);
  }
  const int n = op.size();
  if (n == 1) return Status::ok();
  auto span_of = [&](size_t i) { return Span{displs[i] * elem, recv_counts[i] * elem}; };
  REMORA_ASSIGN_OR_RETURN(ShmPlan * seg, segment(op));
  if (seg != nullptr) {
    // Blocks of one size (a device allgather's segments, say) above the slot run in two
    // levels as an allgather's would; otherwise the ring host by host.
    const bool equal =
        std::all_of(recv_counts.begin(), recv_counts.end(), [&](size_t c) { return c == recv_counts.front(); });
    const bool two_level =
        equal && two_level_takes(CollectiveKind::kAllgather, op.config(), recv_counts.front() * elem, *seg);
    if (auto ran = allgather_by_hosts(op, *seg, recv, span_of, 0, two_level, /*ring=*/true)) return *ran;
  }
  return allgather_ring(op, recv, span_of);
}

Status reduce(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop, int root) {
  const size_t bytes = count * size_of(type);
  if (op.size() == 1) {
    if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
    return Status::ok();
  }
  if (count == 0) return Status::ok();
  REMORA_ASSIGN_OR_RETURN(ShmPlan * seg, segment(op));
  if (seg != nullptr) {
    REMORA_ASSIGN_OR_RETURN(const bool done, reduce_shm(op, *seg, send, recv, count, type, rop, root));
    if (done) return Status::ok();
  }
  if (select_algorithm(CollectiveKind::kReduce, op.config(), op.size(), bytes) != Algo::kChain) {
    if (seg != nullptr && !seg->flat()) return reduce_by_group(op, *seg, send, recv, count, type, rop, root);
    return reduce_tree(op, send, recv, count, type, rop, root);
  }
  if (seg != nullptr && !seg->by_host.empty()) {
    // The chain host by host, toward the root.
    Op hosts = in_host_order(op, *seg);
    return reduce_chain(hosts, send, recv, count, type, rop, seg->place[static_cast<size_t>(root)]);
  }
  return reduce_chain(op, send, recv, count, type, rop, root);
}

Status allreduce(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop) {
  const size_t bytes = count * size_of(type);
  if (count == 0) return Status::ok();
  REMORA_ASSIGN_OR_RETURN(ShmPlan * seg, segment(op));
  if (seg != nullptr) {
    REMORA_ASSIGN_OR_RETURN(const bool done, allreduce_shm(op, *seg, send, recv, count, type, rop));
    if (done) return Status::ok();
    if (two_level_takes(CollectiveKind::kAllreduce, op.config(), bytes, *seg)) {
      LaneViews v(op, *seg);
      if (v.past_lanes()) return allreduce_past_lanes(v.group, v.lanes, send, recv, count, type);
      return allreduce_two_level(*v.local, *v.across, v.group_past(), send, recv, count, type, rop, op.size());
    }
  }
  if (select_algorithm(CollectiveKind::kAllreduce, op.config(), op.size(), bytes) == Algo::kRing) {
    if (seg != nullptr && !seg->by_host.empty()) {
      // The ring host by host (its own ring state: other neighbours).
      Op hosts = in_host_order(op, *seg);
      return allreduce_ring(hosts, "reduce_ring.hosts", send, recv, count, type, rop);
    }
    return allreduce_ring(op, "reduce_ring", send, recv, count, type, rop);
  }
  REMORA_RETURN_IF_ERROR(allreduce_rd(op, send, recv, count, type, rop));
  if (rop == ReduceOp::kAvg) finish_avg(type, recv, count, op.size());
  return Status::ok();
}

Status reduce_scatter(Op& op, const void* send, void* recv, size_t recv_count, DataType type, ReduceOp rop) {
  const int n = op.size();
  const size_t block = recv_count * size_of(type);
  if (recv_count == 0) return Status::ok();
  if (n == 1) {
    if (send != recv) std::memcpy(recv, send, block);
    return Status::ok();
  }
  REMORA_ASSIGN_OR_RETURN(ShmPlan * seg, segment(op));
  if (seg != nullptr && two_level_takes(CollectiveKind::kReduceScatter, op.config(), block, *seg)) {
    LaneViews v(op, *seg);
    if (v.past_lanes()) {
      return reduce_scatter_past_lanes(v.group, v.lanes, seg->leaders.size(), seg->by_index, send, recv, recv_count,
                                       type);
    }
    return reduce_scatter_two_level(*v.local, *v.across, v.group_past(), seg->by_index, send, recv, recv_count, type,
                                    rop);
  }
  // Below the ring's sizes: an allreduce of the whole input (`whole` elements) into
  // scratch, of which this rank keeps its block.
  const size_t whole = recv_count * static_cast<size_t>(n);
  const size_t mine = static_cast<size_t>(op.rank()) * block;
  if (seg != nullptr) {
    // Through the segments where it fits (which also says the call's shape to the group
    // where it does not).
    const bool fits = shm_takes(CollectiveKind::kReduceScatter, op.config(), block, *seg);
    std::byte* all = fits ? grow(op.comm().scratch().c, whole * size_of(type)) : nullptr;
    REMORA_ASSIGN_OR_RETURN(const bool done, allreduce_shm(op, *seg, send, all, whole, type, rop));
    if (done) {
      std::memcpy(recv, all + mine, block);
      return Status::ok();
    }
  }
  if (select_algorithm(CollectiveKind::kReduceScatter, op.config(), n, block) != Algo::kRing) {
    // By recursive doubling (log n rounds, fewer than reduce + scatter's).
    std::byte* all = grow(op.comm().scratch().c, whole * size_of(type));
    REMORA_RETURN_IF_ERROR(allreduce_rd(op, send, all, whole, type, rop));
    std::memcpy(recv, all + mine, block);
    if (rop == ReduceOp::kAvg) finish_avg(type, recv, recv_count, n);
    return Status::ok();
  }
  if (seg != nullptr && !seg->by_host.empty()) {
    // The ring host by host: block i of the view is its rank's.
    Op hosts = in_host_order(op, *seg);
    return reduce_scatter_ring(hosts, "reduce_ring.hosts", seg->by_host, send, recv, recv_count, type, rop);
  }
  return reduce_scatter_ring(op, "reduce_ring", {}, send, recv, recv_count, type, rop);
}

}  // namespace remora::coll
