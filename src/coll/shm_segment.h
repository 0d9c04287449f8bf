// coll/shm_segment.h — a communicator's shared segment: memory every rank of a
// communicator maps when all of them run on one host, through which small barriers and
// allreduces, reduces, broadcasts and allgathers go without messages (docs/guide.md,
// "Collectives"; docs/protocol.md, "Communicator segment").
//
// Set up once, at the communicator's first barrier, broadcast, reduce, allreduce or
// allgather (every rank makes that call), over messages: rank 0 makes a sealed memfd
// (net/shared_memory.h) and offers its descriptor, its pid and a random nonce; every
// other rank takes it with pidfd_getfd and maps it, and checks the size and the nonce (a
// pid names another process on another host or in another pid namespace); rank 0 gathers
// the answers and tells everyone whether all took it. Otherwise, or with
// REMORA_SAME_HOST=off, REMORA_ENCRYPT or REMORA_COLL_SHM=0 on any rank, or more than
// kMaxRanks ranks, the communicator uses messages only, for its whole life. Rank 0's
// slot (REMORA_COLL_SHM) is everyone's.
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
// offset comes from this rank's own arguments and the sealed size it checked.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

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

  /// Rank 0's: a new segment for `ranks` ranks with `slot` bytes per buffer (a multiple
  /// of 64).
  static Result<ShmSegment> create(int ranks, size_t slot);
  /// Another rank's: maps rank 0's memfd `fd` and checks it is the segment offered (size,
  /// magic, ranks, slot bytes and nonce): kProtocol otherwise.
  static Result<ShmSegment> adopt(net::Fd fd, int ranks, int me, size_t slot, const Nonce& nonce);

  int fd() const noexcept { return memory_.fd(); }
  void close_fd() noexcept { memory_.close_fd(); }
  const Nonce& nonce() const noexcept { return nonce_; }
  size_t slot() const noexcept { return slot_; }

  /// Starts the next round: waits until every other rank published the last one, then
  /// publishes `shape` and `bytes` of `data` (bytes <= slot()) as this rank's.
  Status publish(Op& op, const ShmShape& shape, const void* data, size_t bytes);
  /// Waits until rank r published this round, and checks its shape equals `shape`
  /// (kProtocol naming the rank otherwise).
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
  /// Waits until rank r's seq reaches `target` (this round or the one before).
  Status wait_for(Op& op, int r, uint32_t target);

  net::SharedMemory memory_;
  int ranks_ = 0;
  int me_ = -1;
  size_t slot_ = 0;
  Nonce nonce_{};
  uint32_t round_ = 0;  ///< this rank's: never read back from the segment
};

/// The communicator's segment, set up at the first call here; null where it is off.
/// Every rank calls it at the same point (its first barrier, broadcast, reduce,
/// allreduce or allgather).
Result<ShmSegment*> shm_segment(Op& op);

/// Whether a call of `kind` of `bytes` (one rank's block for an allgather) goes through
/// a segment of `slot` bytes under `call`: a barrier always; the others when the
/// algorithm is the communicator's choice and the data fits a slot.
bool shm_takes(CollectiveKind kind, const CollConfig& call, size_t bytes, size_t slot) noexcept;

/// The collectives through `seg` where shm_takes says so: true. Otherwise they publish
/// only the call's shape, so that a rank that disagrees fails at once, and return false
/// (the caller runs the messages' algorithm). allgather_shm finds this rank's block in
/// place in `recv`. Only a reduce's root and a broadcast's other ranks wait for anyone.
Result<bool> allreduce_shm(Op& op, ShmSegment& seg, const void* send, void* recv, size_t count, DataType type,
                           ReduceOp rop);
Result<bool> reduce_shm(Op& op, ShmSegment& seg, const void* send, void* recv, size_t count, DataType type,
                        ReduceOp rop, int root);
Result<bool> broadcast_shm(Op& op, ShmSegment& seg, void* buf, size_t bytes, int root);
Result<bool> allgather_shm(Op& op, ShmSegment& seg, void* recv, size_t block);
Status barrier_shm(Op& op, ShmSegment& seg);

}  // namespace remora::coll
