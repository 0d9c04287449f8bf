// coll/allgather_ring.h — the ring allgather, a template over how blocks lie in the
// receive buffer (equal blocks for allgather, counts and displacements for allgatherv).
#pragma once

#include <span>

#include "coll/algo_helpers.h"

namespace remora::coll {

/// Ring: at step s a rank forwards the block it received at step s-1 (its own at
/// s = 0) to the right and receives the next one from the left straight into place.
/// Every receive is posted up front (they match in order on one tag). A block may lie
/// in `parts` pieces apart, each its own message: `block(i, k)` is {offset, bytes} of
/// part k of rank i's block in recv.
template <typename PartOf>
Status allgather_ring_parts(Op& op, void* recv, size_t parts, PartOf block) {
  const int n = op.size();
  const int r = op.rank();
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  Inflight recvs(op), sends(op);
  for (int s = 0; s < n - 1; ++s) {
    const auto b = static_cast<size_t>(mod(r - s - 1, n));
    for (size_t k = 0; k < parts; ++k) {
      const Span x = block(b, k);
      recvs.recv(left, at(recv, x.offset), x.bytes);
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    const auto b = static_cast<size_t>(mod(r - s, n));
    for (size_t k = 0; k < parts; ++k) {
      if (s > 0) REMORA_RETURN_IF_ERROR(recvs.wait_oldest());
      const Span x = block(b, k);
      sends.send(right, at(recv, x.offset), x.bytes);
    }
  }
  Status s = recvs.finish();
  Status t = sends.finish();
  return s.is_ok() ? t : s;
}

/// The ring over blocks of one piece each: `block(i)` is {offset, bytes} of rank i's
/// block in recv.
template <typename BlockOf>
Status allgather_ring(Op& op, void* recv, BlockOf block) {
  return allgather_ring_parts(op, recv, 1, [&](size_t i, size_t) { return block(i); });
}

/// Allgather of equal blocks in two levels over the groups' lanes (ShmPlan::lanes): the
/// ring among `across` (the lanes at this rank's index in every group) straight into
/// place, then the ring within `local` (this rank's group's lanes) of each lane's
/// blocks, one part per group. `by_index`: the communicator's ranks index by index, each
/// index's in the order of the groups, -1 where a group has none. `span_of(r)`: where
/// rank r's block lies in recv. Where the groups differ, lane i also carries the block
/// of its group's rank i + lanes (a second part per group, empty where there is none):
/// that rank sends it first and takes the result back at the end (`group`: this rank's
/// whole group, lanes first; allgather_past_lanes): the `whole` bytes from recv's start
/// in one message where the blocks fill them, else every other rank's block (of
/// `ranks`), one message each.
template <typename SpanOf>
Status allgather_two_level(Op& local, Op& across, Op& group, std::span<const int> by_index, void* recv,
                           const SpanOf& span_of, size_t whole, int ranks) {
  const auto groups = static_cast<size_t>(across.size());
  const auto lanes = static_cast<size_t>(local.size());
  const size_t parts = by_index.size() > lanes * groups ? 2 : 1;  // a rank past some lane
  auto of = [&](size_t index, size_t g) {
    const size_t at = index * groups + g;
    if (at >= by_index.size() || by_index[at] < 0) return Span{0, 0};
    return span_of(static_cast<size_t>(by_index[at]));
  };
  const auto me = static_cast<size_t>(local.rank());
  const size_t g_me = static_cast<size_t>(across.rank());
  const size_t past_at = (me + lanes) * groups + g_me;
  const int past = past_at < by_index.size() && by_index[past_at] >= 0 ? static_cast<int>(me + lanes) : -1;
  if (past >= 0) {
    const Span x = of(me + lanes, g_me);
    Request in = group.recv(past, at(recv, x.offset), x.bytes);
    REMORA_RETURN_IF_ERROR(group.wait(in, x.bytes));
  }
  REMORA_RETURN_IF_ERROR(
      allgather_ring_parts(across, recv, parts, [&](size_t g, size_t k) { return of(me + k * lanes, g); }));
  REMORA_RETURN_IF_ERROR(allgather_ring_parts(
      local, recv, parts * groups, [&](size_t i, size_t p) { return of(i + (p / groups) * lanes, p % groups); }));
  if (past < 0) return Status::ok();
  if (whole > 0) {
    Request out = group.send(past, recv, whole);
    return group.wait(out);
  }
  Inflight outs(group);
  for (int r = 0; r < ranks; ++r) {
    if (r == by_index[past_at]) continue;
    const Span x = span_of(static_cast<size_t>(r));
    outs.send(past, at(recv, x.offset), x.bytes);
  }
  return outs.finish();
}

/// A rank of `group` past its first `lanes` ranks in allgather_two_level (rank `rank` of
/// the communicator, its block in place in `recv` at span_of(rank)): it sends its block
/// to the lane `lanes` places before it, then takes the result from it, `whole` bytes
/// at once or every other rank's block (of `ranks`) one by one.
template <typename SpanOf>
Status allgather_past_lanes(Op& group, int lanes, int rank, void* recv, const SpanOf& span_of, size_t whole,
                            int ranks) {
  const int lane = group.rank() - lanes;
  const Span mine = span_of(static_cast<size_t>(rank));
  Request out = group.send(lane, at(recv, mine.offset), mine.bytes);
  REMORA_RETURN_IF_ERROR(group.wait(out));
  if (whole > 0) {
    Request in = group.recv(lane, recv, whole);
    return group.wait(in, whole);
  }
  Inflight ins(group);
  for (int r = 0; r < ranks; ++r) {
    if (r == rank) continue;
    const Span x = span_of(static_cast<size_t>(r));
    ins.recv(lane, at(recv, x.offset), x.bytes);
  }
  return ins.finish();
}

}  // namespace remora::coll
