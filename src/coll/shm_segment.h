// coll/shm_segment.h — a communicator's shared segments: memory the ranks of one host
// map, in groups of up to kMaxRanks of them, through which small barriers and
// allreduces, reduces, broadcasts, allgathers, alltoalls and alltoallvs go without
// messages (docs/guide.md, "Collectives"; docs/protocol.md, "Communicator segment").
//
// Set up once, at the communicator's first barrier, broadcast, reduce, allreduce,
// reduce_scatter, allgather or allgatherv (every rank makes that call), over messages: every rank
// allgathers its host (boot id, network namespace) and whether it takes part, and all
// compute the same groups (a rank with REMORA_SAME_HOST=off or REMORA_ENCRYPT alone;
// REMORA_COLL_SHM=0 on any rank: none at all). A group's leader (its lowest rank) makes
// a sealed memfd (net/shared_memory.h) and offers its descriptor, its pid and a random
// nonce; every other member takes it with pidfd_getfd and maps it, and checks the size
// and the nonce (a pid names another process in another pid namespace); the leader
// gathers the answers and tells its members whether all took it, and every rank then
// learns which groups have theirs (a group without one splits into ranks alone). Rank
// 0's slot (REMORA_COLL_SHM) is everyone's. One group: every call is one round (flat).
// Several: a call goes through each group's segment to its leader (a reduce's or
// broadcast's root for its own group), the leaders run the messages' algorithm among
// themselves on an Op that views only them, and a second round brings an allreduce's
// result or a barrier's release back to the group (an allgather's whole result, an
// alltoall's received blocks: as many rounds as they fill slots).
//
// Layout: a 16 KiB header (magic, ranks, slot bytes, nonce; then per rank kDepth lines
// of their own, used by rounds in turn, each holding `seq` (the last round that used
// it), `sleepers` (the ranks blocked on that `seq`), the round's shape (what the rank
// calls: collective, type and operation, root, bytes) and up to kInlineBytes of its
// data); then per rank kDepth buffers of `slot` bytes for larger data.
//
// A round: a rank waits until every other rank published the round kDepth - 1 before (so
// nobody still reads the line and buffer it is about to fill, last used kDepth rounds
// before), writes its shape and contribution, stores `seq`, and waits until the ranks it
// needs published this round. So a rank is at most kDepth - 1 rounds ahead of another,
// and a `seq` no honest rank could have written is corruption (kProtocol). A shape that
// differs from this rank's is kProtocol naming the rank: ranks calling different
// collectives, sizes or algorithms fail at once, as they do with messages. Waits spin
// for REMORA_SPIN_US (yielding the CPU every few microseconds, for ranks that outnumber
// CPUs), then block on a futex in the segment (the publisher wakes it), and stop at the
// deadline, when the world fails, or when the endpoint to the awaited rank fails (a dead
// or stopped process). Contents a hostile rank writes are only values: every size and
// offset comes from this rank's own arguments and the sealed size it checked, but an
// alltoallv's, which come from the other ranks' published counts, copied once and
// checked against the slot and against this rank's own counts before any is used.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "coll/comm_core.h"
#include "net/shared_memory.h"
#include "remora/communicator.h"
#include "remora/status.h"

namespace remora::coll {

/// What a rank publishes beside its contribution; ranks that disagree fail.
struct ShmShape {
  uint32_t kind = 0;    ///< ShmKind
  uint32_t detail = 0;  ///< type and operation, root (docs/protocol.md)
  uint64_t bytes = 0;
  bool operator==(const ShmShape&) const = default;
};

/// Each kind through the segment is followed by the same call by messages (too large,
/// or an algorithm named), which publishes its shape only.
enum class ShmKind : uint32_t {
  kBarrier = 1,
  kAllreduce = 2,  ///< 3: by messages
  kReduce = 4,     ///< 5: by messages
  kBroadcast = 6,  ///< 7: by messages
  kAllgather = 8,  ///< 9: by messages
  kAlltoall = 10,  ///< 11: by messages
  kAlltoallv = 12,  ///< 13: by messages
};

class ShmSegment {
 public:
  static constexpr int kMaxRanks = 16;
  static constexpr size_t kHeaderBytes = 16384;
  /// Rounds a rank may be ahead of another, plus one: lines and buffers per rank, used
  /// by rounds in turn. More than two lets a broadcast's root or a reduce's other ranks,
  /// who wait for nobody, run ahead where CPUs are shared.
  static constexpr uint32_t kDepth = 4;
  static_assert((kDepth & (kDepth - 1)) == 0, "a power of two: rounds wrap at 2^32");
  /// Data of at most this many bytes travels in the round's line, beside `seq` and the
  /// shape: one cache line from the publisher's CPU per rank and round.
  static constexpr size_t kInlineBytes = 40;
  using Nonce = std::array<uint8_t, 16>;

  /// The group's first rank's: a new segment for the communicator ranks `members`
  /// (ascending, 2 to kMaxRanks of them) with `slot` bytes per buffer (a multiple of 64).
  static Result<ShmSegment> create(std::span<const int> members, size_t slot);
  /// Another member's (members[me]): maps the first's memfd `fd` and checks it is the
  /// segment offered (size, magic, ranks, slot bytes and nonce): kProtocol otherwise.
  static Result<ShmSegment> adopt(net::Fd fd, std::span<const int> members, int me, size_t slot, const Nonce& nonce);

  int fd() const noexcept { return memory_.fd(); }
  void close_fd() noexcept { memory_.close_fd(); }
  const Nonce& nonce() const noexcept { return nonce_; }
  size_t slot() const noexcept { return slot_; }
  /// Its ranks: indices 0 to ranks() - 1 here, member(i) in the communicator.
  int ranks() const noexcept { return ranks_; }
  int me() const noexcept { return me_; }
  int member(int i) const noexcept { return members_[static_cast<size_t>(i)]; }
  /// The index here of communicator rank `comm_rank`, or -1.
  int index_of(int comm_rank) const noexcept;

  /// Starts the next round: waits until every other rank published the last one, then
  /// publishes `shape` and `bytes` of `data` (bytes <= slot()) as this rank's.
  Status publish(Op& op, const ShmShape& shape, const void* data, size_t bytes);
  /// As publish, but `fill(std::byte* at)` writes this rank's `bytes` (<= slot()) in
  /// place, where publish would copy them to.
  template <typename Fill>
  Status publish_with(Op& op, const ShmShape& shape, size_t bytes, Fill fill) {
    REMORA_RETURN_IF_ERROR(next_round(op));
    fill(mine(bytes));
    release(shape);
    return Status::ok();
  }
  /// Waits until rank r (an index here) published this round, and checks its shape
  /// equals `shape` (kProtocol naming the rank otherwise).
  Status wait_rank(Op& op, int r, const ShmShape& shape);
  /// wait_rank for every other rank.
  Status wait_all(Op& op, const ShmShape& shape);
  /// Rank r's `bytes` of this round (after waiting for it).
  const std::byte* data(int r, size_t bytes) const noexcept;

 private:
  struct Line;
  /// Rank r's line for rounds of `round`'s residue modulo kDepth.
  Line& line(int r, uint32_t round) const noexcept;
  /// Rank r's data buffer for those rounds (contributions above kInlineBytes).
  std::byte* buffer(int r, uint32_t round) const noexcept;
  /// publish's steps: wait until nobody reads the next round's line and buffer, and
  /// start it; where this round's `bytes` of this rank's go; store `shape` and `seq`.
  Status next_round(Op& op);
  std::byte* mine(size_t bytes) const noexcept;
  void release(const ShmShape& shape);
  /// Waits until rank r's seq reaches `target` (this round or the one before).
  Status wait_for(Op& op, int r, uint32_t target);

  net::SharedMemory memory_;
  int ranks_ = 0;
  int me_ = -1;
  std::array<int, kMaxRanks> members_{};
  size_t slot_ = 0;
  Nonce nonce_{};
  uint32_t round_ = 0;  ///< this rank's: never read back from the segment
};

/// What a communicator's set-up decided where it uses segments: its ranks in groups of
/// at most ShmSegment::kMaxRanks ranks of one host, each group with a segment (a rank
/// alone in its group has none), and the groups' leaders (their lowest ranks).
struct ShmPlan {
  size_t slot = 0;  ///< rank 0's REMORA_COLL_SHM, rounded up to 64
  std::optional<ShmSegment> segment;  ///< this rank's group's; none where it is alone
  std::vector<int> leaders;   ///< per group, its lowest rank; groups in that order
  std::vector<int> group_of;  ///< per communicator rank, its group
  std::vector<int> index_in;  ///< per communicator rank, its index in its group
  int widest = 0;             ///< the most ranks of any group
  int narrowest = 0;          ///< the fewest ranks of any group
  std::vector<int> reps;      ///< a call's representatives of the groups (scratch)
  /// Where the groups are several: this rank's group (in rank order). Where lanes() and
  /// this rank is one of its group's first lanes(): also the ranks at its index in every
  /// group (in the order of the groups). Where blocks_take_lanes(): every rank, index by
  /// index (each index's in the order of the groups), -1 where a group has no rank at an
  /// index.
  std::vector<int> local, across, by_index;
  /// Where lanes(): its group's first lanes() ranks (all of it where the groups are of
  /// one size).
  std::vector<int> lane_ranks;
  /// Where the groups are several and not already in rank order: every rank, group by
  /// group (each in rank order), and each rank's place there. Chains and rings of large
  /// calls follow it, so that they cross between hosts once per group, not at every step.
  std::vector<int> by_host, place;
  /// One group: every rank of one host, each call one round through the segment. Else
  /// hierarchical: through each group's segment to its leader, between the leaders by
  /// messages, and back.
  bool flat() const noexcept { return leaders.size() == 1; }
  /// Several groups, one of at least two ranks: a large allreduce may run in two levels
  /// over as many lanes as the narrowest group has ranks (all of every group where the
  /// groups are of one size; one where a rank is alone), each rank past them handing
  /// its data to the lanes and taking its result back (the *_two_level and *_past_lanes
  /// functions). 0 where it may not.
  int lanes() const noexcept { return !flat() && widest >= 2 ? narrowest : 0; }
  /// Large reduce_scatters and allgathers take the lanes only where the narrowest group
  /// has at least two ranks and none more than twice as many. Into a group of one rank
  /// the lanes carry as much as one ring over every rank ((n - 1)/n of the result, where
  /// the ring carries that much into every group and the lanes n - its ranks); where a
  /// group has more than twice the narrowest's ranks, the lanes' extra parts cost more
  /// than the link saves (bench/results/coll.md).
  bool blocks_take_lanes() const noexcept { return lanes() >= 2 && widest <= 2 * lanes(); }
};

/// The communicator's plan, set up at the first call here; null where it has none. Every
/// rank calls it at the same point (its first barrier, broadcast, reduce, allreduce,
/// reduce_scatter, allgather or allgatherv).
Result<ShmPlan*> shm_plan(Op& op);

/// Whether a call of `kind` of `bytes` (one rank's block for an allgather) goes through
/// `plan`'s segments under `call`: a barrier always; broadcast, reduce and allreduce
/// when the algorithm is the communicator's choice and the data fits a slot; allgather
/// so too (its whole result going to a hierarchical plan's members in rounds of a slot).
bool shm_takes(CollectiveKind kind, const CollConfig& call, size_t bytes, const ShmPlan& plan) noexcept;
/// Whether an allreduce of `bytes` under `call` too large for shm_takes, or a
/// reduce_scatter or allgather of blocks of `bytes`, runs in two levels over `plan`'s
/// groups: where the plan has lanes(), the algorithm is the communicator's choice, and
/// that choice over all ranks is the ring.
bool two_level_takes(CollectiveKind kind, const CollConfig& call, size_t bytes, const ShmPlan& plan) noexcept;
/// Communicator::algorithm's answer for a call shm_takes or two_level_takes takes (of `bytes` under `call`).
AlgorithmChoice shm_algorithm(CollectiveKind kind, const CollConfig& call, size_t bytes, const ShmPlan& plan) noexcept;

/// The collectives through `plan`'s segments where shm_takes says so: true. Otherwise
/// they publish only the call's shape, so that a rank of the group that disagrees fails
/// at once, and return false (the caller runs the messages' algorithm). allgather_shm
/// finds this rank's block in place in `recv`. Where the plan is hierarchical, the
/// leaders (a reduce's or broadcast's root for its own group) run the messages'
/// algorithm among themselves in between.
Result<bool> allreduce_shm(Op& op, ShmPlan& plan, const void* send, void* recv, size_t count, DataType type,
                           ReduceOp rop);
Result<bool> reduce_shm(Op& op, ShmPlan& plan, const void* send, void* recv, size_t count, DataType type,
                        ReduceOp rop, int root);
Result<bool> broadcast_shm(Op& op, ShmPlan& plan, void* buf, size_t bytes, int root);
Result<bool> allgather_shm(Op& op, ShmPlan& plan, void* recv, size_t block);
/// In one group every rank takes its blocks out of each other's published buffer; over
/// several, the leaders exchange their groups' blocks pairwise and hand them back in
/// rounds of a slot.
Result<bool> alltoall_shm(Op& op, ShmPlan& plan, const void* send, void* recv, size_t block);
/// Every rank publishes its bytes to and from each rank and, where they fit a slot
/// after them, its blocks for the others. Where every rank's fit: in one group, each
/// checks that every other agrees with it on what they exchange (kProtocol naming the
/// ranks otherwise) and takes its blocks; over several, the leaders exchange, per pair
/// of groups, whether each group's fit with a table of their sizes, then the blocks,
/// check the tables and their members' counts, and hand the blocks back. Where some
/// rank's do not fit, all return false (by messages).
Result<bool> alltoallv_shm(Op& op, ShmPlan& plan, const void* send, std::span<const size_t> send_counts,
                           std::span<const size_t> send_displs, void* recv, std::span<const size_t> recv_counts,
                           std::span<const size_t> recv_displs, DataType type);
Status barrier_shm(Op& op, ShmPlan& plan);

/// The binomial trees of a broadcast or reduce too large for the segments, where `plan`
/// has several groups: among the groups' representatives (the root for its own group,
/// else the leader), and within each group from or to its representative, so that each
/// group is reached by one message from outside it however its ranks are numbered.
Status broadcast_by_group(Op& op, ShmPlan& plan, void* buf, size_t bytes, int root);
Status reduce_by_group(Op& op, ShmPlan& plan, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp rop, int root);

}  // namespace remora::coll
