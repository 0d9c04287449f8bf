// coll/algorithms.h — the collective algorithms, one entry point per operation.
//
// The public Communicator checks arguments (root and peer ranks, kAvg on integer types,
// count arrays of length size()) and resolves kInPlace before it calls these, so they
// receive only valid input. In-place is passed on as `send == recv` where the operation allows it (allreduce, scan, exscan, reduce at the
// root, reduce_scatter: send == recv means the input is recv with size*count elements),
// as send == nullptr for gather(v)/allgather(v) ("my block is already in place"), and
// as recv == nullptr for scatter(v) at the root ("my block stays in send"). Each function runs inside one Op (tags, deadline) and returns the first
// failure; it must not return before every request it posted has completed or failed
// (never leave a receive posted into a buffer the caller may free).
//
// Sizes: `count` in elements of `type`; the v-forms' counts and displacements too.
#pragma once

#include <cstddef>
#include <span>

#include "coll/comm_core.h"
#include "remora/communicator.h"

namespace remora::coll {

struct Span;  // algo_helpers.h

// algo_select.cc — which algorithm each collective runs. The algorithms call this to
// decide, and Communicator::algorithm reports it, so the two cannot disagree.

/// The algorithm `kind` runs on `n` ranks under `config` for a call whose count ×
/// element size is `bytes` (the per-rank block for allgather, reduce_scatter, gather,
/// scatter, alltoall). Never kAuto; kLocal when the call moves nothing between ranks.
Algo select_algorithm(CollectiveKind kind, const CollConfig& config, int n, size_t bytes) noexcept;
/// call_config for the operations CollectiveKind names (the algorithms each supports:
/// CollAlgorithm's table; reduce_scatter's choice is the allreduce family's).
Result<CollConfig> call_config(const CollConfig& base, CollectiveKind kind, const CollectiveOptions& options);
/// Sequential communication steps of `algo` running `kind` on `n` ranks (see
/// AlgorithmChoice::steps).
int algorithm_steps(CollectiveKind kind, Algo algo, int n) noexcept;

/// Allreduce (and reduce_scatter's whole input) from this many bytes takes the ring
/// under kAuto, unless REMORA_RING_THRESHOLD says otherwise; the reasons are in
/// collectives.cc. Above 2 ranks reduce takes the chain from the same size.
inline constexpr size_t kRingThreshold = size_t{64} * 1024;
inline constexpr size_t kRingThresholdTwoRanks = size_t{2} * 1024 * 1024;
/// config.ring_threshold where set, else the default above for `n` ranks.
size_t ring_threshold_for(const CollConfig& config, int n) noexcept;

// The entry points: the collectives that have a choice of algorithm dispatch in
// collectives.cc; the others live with their one algorithm (barrier_dissemination.cc,
// gather_linear.cc, scatter_linear.cc, alltoall_pairwise.cc, scan_recursive_doubling.cc).
// Movement: type-agnostic except for element size.
Status barrier(Op& op);
Status broadcast(Op& op, void* buf, size_t count, DataType type, int root);
Status gather(Op& op, const void* send, void* recv, size_t count, DataType type, int root);
Status gatherv(Op& op, const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
               std::span<const size_t> displs, DataType type, int root);
Status scatter(Op& op, const void* send, void* recv, size_t count, DataType type, int root);
Status scatterv(Op& op, const void* send, std::span<const size_t> send_counts, std::span<const size_t> displs,
                void* recv, size_t recv_count, DataType type, int root);
Status allgather(Op& op, const void* send, void* recv, size_t count, DataType type);
Status allgatherv(Op& op, const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                  std::span<const size_t> displs, DataType type);
Status alltoall(Op& op, const void* send, void* recv, size_t count, DataType type);
Status alltoallv(Op& op, const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                 void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_displs, DataType type);

// Reductions (kernels in reduce.h). kAvg: divide once at the end.
Status reduce(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop, int root);
Status allreduce(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop);
Status reduce_scatter(Op& op, const void* send, void* recv, size_t recv_count, DataType type, ReduceOp rop);
Status scan(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop);
Status exscan(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop);

// The algorithm families, one file each, named after it; the entry points call them.
// `bytes` / `block` in bytes, `count` in elements.
Status barrier_dissemination(Op& op);                                              // barrier_dissemination.cc
Status broadcast_tree(Op& op, void* buf, size_t bytes, int root);                 // bcast_binomial.cc
Status broadcast_chain(Op& op, void* buf, size_t bytes, int root, size_t piece);  // bcast_chain.cc
Status allgather_rd(Op& op, void* recv, size_t block);     // allgather_recursive_doubling.cc
Status allgather_bruck(Op& op, void* recv, size_t block);  // allgather_bruck.cc
// allgather_ring (a template over the block layout): allgather_ring.h.
/// allgather of equal blocks by messages, the algorithm select_algorithm picks (collectives.cc).
Status allgather_messages(Op& op, void* recv, size_t block);
Status allreduce_rd(Op& op, const void* send, void* buf, size_t count, DataType type,
                    ReduceOp rop);  // allreduce_recursive_doubling.cc
/// The ring allreduce over `op`, its registered scratch and neighbours' keys kept in
/// the communicator's state named `ring` (one per set and order of ranks that runs
/// rings) (allreduce_ring.cc).
Status allreduce_ring(Op& op, const char* ring, const void* send, void* recv, size_t count, DataType type,
                      ReduceOp rop);
/// The ring reduce-scatter over `op` (its state named `ring`): rank i of `op` gets the
/// block of the communicator's rank blocks[i], or block i where `blocks` is empty
/// (allreduce_ring.cc).
Status reduce_scatter_ring(Op& op, const char* ring, std::span<const int> blocks, const void* send, void* recv,
                           size_t recv_count, DataType type, ReduceOp rop);
/// Allreduce in two levels, for ranks in groups of `local.size()` lanes each (the ranks
/// of a host, or the first of them): the ring reduce-scatter within `local` (this
/// rank's group's lanes; none where it is one), an allreduce of this rank's block among `across` (the ranks of
/// every group at this rank's index, ring or recursive doubling by size), the ring
/// allgather within `local`. `group`, where the group has ranks past its lanes: all of
/// it, the lanes first; each rank past them runs allreduce_past_lanes. kAvg divides by
/// `ranks`, the communicator's (allreduce_ring.cc).
Status allreduce_two_level(Op& local, Op& across, Op* group, const void* send, void* recv, size_t count, DataType type,
                           ReduceOp rop, int ranks);
/// A rank of `group` past its first `lanes` ranks in allreduce_two_level: it sends each
/// block (the vector cut as the lanes cut it) to the lane that ends the reduce-scatter
/// with it, and takes it back from that lane, final (allreduce_ring.cc).
Status allreduce_past_lanes(Op& group, int lanes, const void* send, void* recv, size_t count, DataType type);
/// Reduce_scatter in two levels over the groups' lanes (ShmPlan::lanes): the ring
/// reduce-scatter within `local` (this rank's group's lanes) of runs, run i the blocks
/// of the ranks at index i, and i + lanes where there is one, of every group, group by
/// group (`by_index`: the communicator's ranks index by index, each index's in the order
/// of the groups, -1 where a group has none); then the ring reduce-scatter of this
/// rank's run among `across`, each lane ending with the blocks of its group's ranks at
/// its index and `lanes` places after it. `group`, where the group has ranks past its
/// lanes: all of it, lanes first; each of those runs reduce_scatter_past_lanes, sending
/// each lane its part of the lane's run and taking its block from the lane `lanes`
/// places before it (allreduce_ring.cc).
Status reduce_scatter_two_level(Op& local, Op& across, Op* group, std::span<const int> by_index, const void* send,
                                void* recv, size_t recv_count, DataType type, ReduceOp rop);
/// A rank of `group` past its first `lanes` ranks in reduce_scatter_two_level.
Status reduce_scatter_past_lanes(Op& group, int lanes, size_t groups, std::span<const int> by_index, const void* send,
                                 void* recv, size_t recv_count, DataType type);
/// Pairwise exchange of blocks of any sizes: `out[i]` of `send` goes to rank i, and rank
/// i's block for this rank lands at `in[i]` of `recv` (alltoall_pairwise.cc).
Status alltoall_spans(Op& op, const void* send, std::span<const Span> out, void* recv, std::span<const Span> in);
Status reduce_tree(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop,
                   int root);  // reduce_binomial.cc
Status reduce_chain(Op& op, const void* send, void* recv, size_t count, DataType type, ReduceOp rop,
                    int root);  // reduce_chain.cc

}  // namespace remora::coll
