// remora/communicator.h — collectives with MPI semantics over remora endpoints.
//
// A Communicator is a group of ranks 0..size-1 over endpoints between them, opened when
// an operation first needs one (init opens those of its exchange of addresses: about
// 2·log2(size) per rank), and split() makes sub-communicators that share them.
// connections() says what a rank holds.
//
// Every operation exists in two forms: blocking (`allreduce`, returns Status, waits up
// to the communicator's timeout) and asynchronous (`iallreduce`, returns a Request; a
// wait on it given no timeout is bounded by the context's REMORA_WAIT_TIMEOUT_MS, like
// every Request::wait, while the operation itself stays bounded by the communicator's).
// As in MPI, every rank of a communicator must call the same collectives in the same
// order; buffers (and count/displacement arrays of the v-forms) must stay valid until
// the operation completes. Asynchronous collectives of one communicator run in the
// order they were posted; different communicators may run concurrently.
//
// Counts and displacements are in elements of `type`. In-place: pass kInPlace as the
// send buffer (allreduce, reduce at the root, scan, exscan, allgather(v) — the rank's
// block is already in place in recv —, gather(v) at the root, reduce_scatter — the
// input is recv with size*count elements —) or as the receive buffer of scatter(v) at
// the root (its block stays in send). alltoall(v) has no in-place form. Zero counts are
// allowed everywhere.
//
// Failure: a collective that fails (a dead rank, a protocol error, the timeout) breaks
// its communicator and every communicator sharing its endpoints: the endpoints are
// closed so that the failure reaches every surviving rank quickly, and every later
// operation fails with the first error. Nothing hangs: each operation is bounded by
// CommOptions::timeout (REMORA_COLL_TIMEOUT_MS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remora/context.h"
#include "remora/launch.h"
#include "remora/request.h"
#include "remora/status.h"
#include "remora/store.h"
#include "remora/types.h"

namespace remora {

namespace coll {
class CommCore;
struct CommAccess;
}  // namespace coll

/// The element type of a buffer a communicator moves or reduces. Counts and
/// displacements are in elements of it. Every type takes every ReduceOp but kAvg,
/// which needs a floating type.
enum class DataType : uint8_t {
  kInt8,      ///< int8_t
  kUint8,     ///< uint8_t (also: raw bytes)
  kInt32,     ///< int32_t
  kUint32,    ///< uint32_t
  kInt64,     ///< int64_t
  kUint64,    ///< uint64_t
  kFloat16,   ///< IEEE 754 binary16, as its 16 bits (uint16_t)
  kBFloat16,  ///< bfloat16, as its 16 bits (uint16_t)
  kFloat32,   ///< float
  kFloat64,   ///< double
};
/// Bytes per element.
size_t size_of(DataType type) noexcept;
/// "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64".
std::string_view to_string(DataType type) noexcept;
/// Accepts the names above and the short forms "fp16", "bf16", "fp32", "fp64", "half", "float", "double".
Result<DataType> parse_data_type(std::string_view name);
/// True for the floating types (kFloat16, kBFloat16, kFloat32, kFloat64).
inline constexpr bool is_floating(DataType t) noexcept {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
}

/// kAvg: sum, then divide by the communicator size; floating types only, and not for
/// scan/exscan (kInvalidArgument otherwise).
enum class ReduceOp : uint8_t {
  kSum,   ///< a + b
  kProd,  ///< a * b
  kMin,   ///< the smaller
  kMax,   ///< the larger
  kAvg,   ///< the sum divided by the communicator size
};
/// "sum", "prod", "min", "max", "avg".
std::string_view to_string(ReduceOp op) noexcept;
/// Accepts the names above; kInvalidArgument otherwise.
Result<ReduceOp> parse_reduce_op(std::string_view name);

/// The collectives whose algorithm Communicator::algorithm reports. The v-forms run
/// their plain form's algorithm family (allgatherv: ring, and where every count is the
/// same the allgather's two levels over hosts; gatherv, scatterv: linear; alltoallv:
/// pairwise).
enum class CollectiveKind : uint8_t {
  kBarrier,        ///< barrier
  kBroadcast,      ///< broadcast
  kReduce,         ///< reduce
  kAllreduce,      ///< allreduce
  kGather,         ///< gather, gatherv
  kScatter,        ///< scatter, scatterv
  kAllgather,      ///< allgather (allgatherv runs the ring, see above)
  kReduceScatter,  ///< reduce_scatter
  kAlltoall,       ///< alltoall, alltoallv
};
/// "barrier", "broadcast", "reduce", "allreduce", "gather", "scatter", "allgather", "reduce_scatter", "alltoall".
std::string_view to_string(CollectiveKind kind) noexcept;
/// Accepts the names above; kInvalidArgument (listing them) otherwise.
Result<CollectiveKind> parse_collective_kind(std::string_view name);

/// Which algorithm a collective runs, and how many communication steps it takes.
struct AlgorithmChoice {
  /// "ring", "rd" (recursive doubling), "bruck", "tree" (binomial), "chain" (pipelined),
  /// "pairwise", "linear", "dissemination", or "local" when nothing crosses the network
  /// (one rank, or nothing to reduce), or "shm": through the communicator's shared memory
  /// (a barrier, or a broadcast, reduce, allreduce, reduce_scatter or allgather of at
  /// most REMORA_COLL_SHM bytes, a reduce_scatter's whole input, an allgather's per rank,
  /// with the algorithm left to the communicator, once its ranks, all of one host and at
  /// most 16, set it up at the first of these calls; after that also an alltoall whose
  /// send buffer fits, and an alltoallv where every rank's blocks for the others fit with
  /// 16 bytes per rank, though this answers for the alltoall only: an alltoallv's path
  /// depends on every rank's counts), or "hier": the same calls where the ranks span hosts,
  /// each host's ranks (in groups of up to 16) through their shared memory to a leader,
  /// and the leaders by messages (rd for allreduce and reduce_scatter, tree for broadcast
  /// and reduce, dissemination for barrier, the allgather's own choice for the groups'
  /// blocks, pairwise for the alltoall's); also an allreduce too large for the shared
  /// memory that would take the ring, where the groups are all of one size: a ring
  /// within each group, an allreduce of each block across them, a ring within; and a
  /// reduce_scatter that would take the ring there: a ring within, a ring across; and an
  /// allgather of blocks above REMORA_COLL_SHM that would take the ring there: a ring
  /// across, a ring within.
  std::string_view name;
  /// Sequential communication steps on the critical path: rounds in which a rank sends to
  /// and/or receives from its peers of that round, each round waiting for the one before.
  /// Pipelining into pieces is not counted (a ring step is one step however many pieces
  /// it moves). ring allreduce 2(n-1); ring allgather and reduce_scatter n-1; rd log2(p)
  /// for p the largest power of two <= n, plus 2 (fold in, fold out) when n > p, except
  /// allgather (log2 n, powers of two only); bruck, tree and dissemination ceil(log2 n),
  /// except a tree over G groups of at most L ranks (the ranks span hosts and share
  /// memory within them: the tree among the groups' representatives, then within each
  /// group) ceil(log2 G) + ceil(log2 L); chain n-1; pairwise n-1 (up to 8 of them in
  /// flight at once); linear 1 (the root exchanges with every rank at once); shm 1; hier
  /// 2 (allreduce, reduce_scatter, barrier), 1 (broadcast, reduce) or 1 plus one per
  /// REMORA_COLL_SHM bytes of the whole result (allgather), plus the leaders' algorithm's
  /// steps among the groups, or in two levels over G groups of L: allreduce 2(L-1) plus
  /// the steps across them, reduce_scatter and allgather (L-1) + (G-1); local 0.
  int steps = 0;
};

/// An algorithm a collective can be asked to run (CollectiveOptions::algorithm, or the
/// REMORA_*_ALGO variables). Which operation supports which:
///
/// | operation | algorithms |
/// |---|---|
/// | allreduce, reduce_scatter | kRing, kRecursiveDoubling |
/// | allgather | kRing, kRecursiveDoubling (Bruck when the size is not a power of two), kBruck |
/// | broadcast, reduce | kTree, kChain |
/// | barrier | kDissemination |
/// | gather(v), scatter(v) | kLinear |
/// | alltoall(v) | kPairwise |
/// | allgatherv | kRing (naming it keeps every count's allgatherv on one ring) |
/// | scan, exscan | kRecursiveDoubling |
///
/// kAuto is accepted everywhere: the communicator's choice by size and rank count.
enum class CollAlgorithm : uint8_t {
  kAuto,               ///< the communicator decides (REMORA_*_ALGO, then size and rank count)
  kRing,               ///< "ring"
  kRecursiveDoubling,  ///< "rd"
  kTree,               ///< "tree" (binomial)
  kChain,              ///< "chain" (pipelined)
  kPairwise,           ///< "pairwise"
  kLinear,             ///< "linear"
  kDissemination,      ///< "dissemination"
  kBruck,              ///< "bruck"
};
/// "auto", "ring", "rd", "tree", "chain", "pairwise", "linear", "dissemination", "bruck";
/// "?" for a value outside the enumeration.
std::string_view to_string(CollAlgorithm algorithm) noexcept;
/// Accepts the names above; kInvalidArgument (listing them) otherwise.
Result<CollAlgorithm> parse_coll_algorithm(std::string_view name);

/// Options of one collective call (the model is Gloo's AllreduceOptions). Every field
/// left unset takes the communicator's value (CommOptions, then REMORA_*), so `{}` is
/// the call as it runs without options. Use designated initialisers:
/// `comm->allreduce(..., {.algorithm = remora::CollAlgorithm::kRing})`.
/// An algorithm the operation does not support (see CollAlgorithm), a value outside
/// the enumeration or a timeout that is not positive fail the call with
/// kInvalidArgument before anything is sent; the communicator stays usable.
/// Every rank must pass the same algorithm: ranks running different algorithms do not
/// match and fail the collective (as ranks calling different collectives would).
struct CollectiveOptions {
  /// The algorithm to run; kAuto: the communicator's choice (REMORA_*_ALGO overrides
  /// included). Overrides REMORA_*_ALGO for this call.
  CollAlgorithm algorithm = CollAlgorithm::kAuto;
  /// Bound on this call (blocking form: the call; i-form: the operation, counted from
  /// when it starts to run). Overrides CommOptions::timeout / REMORA_COLL_TIMEOUT_MS.
  std::optional<Duration> timeout = std::nullopt;
};

/// MPI_IN_PLACE: pass as the send buffer (as the receive buffer of scatter(v) at the root).
inline void* const kInPlace = reinterpret_cast<void*>(uintptr_t{1});

/// Options of a communicator; unset values come from REMORA_* (docs/configuration.md).
struct CommOptions {
  /// Bound on every operation and on init's rendezvous (REMORA_COLL_TIMEOUT_MS, default 300 s).
  std::optional<Duration> timeout = std::nullopt;
};

/// What a rank holds to reach the other ranks of its job (Communicator::connections).
struct ConnectionStats {
  int peers = 0;                ///< ranks this rank has an endpoint to
  size_t sockets = 0;           ///< TCP connections of those endpoints (1 control + the data streams each)
  int sealed_peers = 0;         ///< of those peers, the ones whose connections are sealed (REMORA_ENCRYPT)
  size_t descriptors = 0;       ///< file descriptors this process has open, all of them
  size_t descriptor_limit = 0;  ///< its soft RLIMIT_NOFILE (raised toward the hard one when more are needed)
  /// The communicator's shared segment (docs/guide.md, "Collectives"), set up at its
  /// first barrier, broadcast, reduce, allreduce, reduce_scatter, allgather or allgatherv: how many
  /// ranks map this rank's, itself included (0: it has none), and why it has none
  /// ("REMORA_COLL_SHM=0 on a rank", "REMORA_SAME_HOST=off", "no two ranks share a
  /// host", a rank that could not map it, ...; "not set up yet" before that call).
  int segment_ranks = 0;
  std::string no_segment;
};

/// A group of ranks running collectives and point-to-point messages over a mesh of
/// endpoints (see the top of this file). Made by init() or split(), held
/// by unique_ptr (neither copyable nor movable). Every call may be made from any thread; operations of one
/// communicator run one at a time, in the order they were called or posted.
class Communicator {
 public:
  /// Rank, size and store address from the launcher's environment (see launch.h).
  /// Rank 0 hosts the store on the store address's port; every rank connects to it,
  /// publishes where it listens, and learns every rank's address by an exchange with
  /// about 2·log2(size) of them, whose endpoints it opens; endpoints to other ranks open
  /// when first needed (docs/scaling.md). A rank that never shows up fails init on every
  /// rank with kTimeout naming it.
  static Result<std::unique_ptr<Communicator>> init(Context& ctx, const CommOptions& options = {});
  /// Explicit launch information.
  static Result<std::unique_ptr<Communicator>> init(Context& ctx, const LaunchInfo& launch,
                                                    const CommOptions& options = {});
  ~Communicator();  ///< waits for posted operations of this communicator, up to the timeout
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// This process's rank in the communicator, 0 <= rank() < size().
  int rank() const noexcept;
  /// Number of ranks.
  int size() const noexcept;
  /// Unique among the communicators of this job that share a rank with this one.
  uint32_t id() const noexcept;

  /// The algorithm `kind` runs on this communicator for a call whose `count` × element
  /// size is `bytes` (the per-rank block for allgather, reduce_scatter, gather, scatter
  /// and alltoall, as their `count` argument; the whole vector for the others; barrier
  /// ignores it). The answer comes from the same selection the collectives make, so it
  /// follows the size thresholds, the rank count and the REMORA_*_ALGO overrides that
  /// were read when the communicator was made. Local: no communication, thread-safe.
  /// With `options`: what a call with those options runs (an algorithm `kind` does not
  /// support, which the call would refuse with kInvalidArgument, reports "invalid", 0).
  AlgorithmChoice algorithm(CollectiveKind kind, size_t bytes, const CollectiveOptions& options = {}) const;

  /// A new communicator of this one's ranks but `exclude_ranks` (ranks of this
  /// communicator: the dead, and any the application wants out), in the spirit of
  /// ncclCommShrink: the survivors keep their processes, their Context and memory.
  /// Collective over the survivors: every one of them calls it with the same list
  /// (in any order, duplicates ignored); an excluded rank does not call it. Works on a
  /// broken communicator (the usual case: after a collective failed because a rank
  /// died, see failed_ranks()) and on a healthy one, which it leaves as it was.
  ///
  /// The new communicator does not depend on the old one's store, so it works when
  /// rank 0, which hosted the store, is among the dead: the survivors connect to each
  /// other again, at the listeners they opened at init (kept open for this), over new
  /// endpoints. Its ranks are the survivors renumbered 0..m-1 in their old order; it
  /// has a fresh epoch() (the same on every survivor) that its connection hellos carry,
  /// so nothing of the old communicator's traffic, nor a late connection of another
  /// shrink attempt, can reach it. It gets this communicator's configuration, its
  /// timeout replaced by `options.timeout` when set. Only init's communicators and
  /// their splits and shrinks can shrink (kUnsupported otherwise).
  ///
  /// Bounded by `options.timeout`, else this communicator's timeout
  /// (REMORA_COLL_TIMEOUT_MS). Errors, on the ranks that see them: kInvalidArgument for
  /// a rank outside 0..size()-1 or this rank in the list (nothing is sent);
  /// kInvalidArgument naming both lists when a survivor it meets passed a different
  /// list; kPeerFailed when a survivor gave the shrink up (it disagreed with another,
  /// or failed) or a rank that should survive cannot be reached (it died: exclude it
  /// too); kTimeout naming the ranks that never connected. The shrink ends with a
  /// barrier over the new communicator, so it succeeds on every survivor or fails on
  /// every one that the failure reaches; a rank left out by every other survivor's
  /// list, which still calls shrink, fails with kTimeout. On failure, call it again
  /// (with the corrected list), at once if you like: each call is an attempt (also one
  /// refused for its arguments), numbered 1, 2, … on each survivor, and attempt k of one
  /// survivor meets only attempt k of the others. A survivor that reaches a rank still
  /// at an earlier attempt waits for it to come along (that rank's earlier attempt fails
  /// with kPeerFailed on meeting the later one); so every survivor must call shrink the
  /// same number of times. Each attempt is a new epoch. Thread-safe, but not
  /// concurrently with this communicator's own operations.
  Result<std::unique_ptr<Communicator>> shrink(std::span<const int> exclude_ranks, const CommOptions& options = {});
  /// Ranks of this communicator this rank believes dead, ascending. While the
  /// communicator is healthy: those whose endpoint ended without a GOODBYE (process
  /// killed, host gone, reset, silent past REMORA_PEER_TIMEOUT_MS). Once it is broken
  /// (a collective failed, which aborts every endpoint here): each rank whose endpoint
  /// ended without its GOODBYE is sent a probe at the listener it opened at init, all
  /// at once; a refusal (the process is gone) or no answer within `timeout` (stopped,
  /// or its host is unreachable, or too busy to answer in time) makes it dead, an
  /// answer alive.
  /// So after a rank was killed every survivor sees the same list. Local knowledge
  /// still: when failures keep racing, ranks may see different sets; make them agree
  /// before passing a list to shrink. Thread-safe; blocks up to `timeout` when broken.
  std::vector<int> failed_ranks(Duration timeout = std::chrono::seconds(5));
  /// 0 for communicators made by init and split from them; a fresh value, the same on
  /// every member, for each made by shrink (and the splits of that one).
  uint64_t epoch() const noexcept;
  /// What this rank holds for this communicator's job (shared with its splits): a
  /// communicator made by init connects to another rank only when something first needs
  /// it (an algorithm's step, a point-to-point call, an alltoall), so this grows with
  /// the algorithms run, not with size(). Thread-safe.
  ConnectionStats connections() const;

  /// The `color` of a rank that joins no communicator in split().
  static constexpr int kUndefined = -1;
  /// Collective over this communicator. Ranks with the same `color` form a new
  /// communicator, ranked by (key, old rank). color < 0 (kUndefined) returns nullptr.
  /// The new communicator shares this one's endpoints (and its failures).
  Result<std::unique_ptr<Communicator>> split(int color, int key);

  // --- point to point inside the communicator ----------------------------------
  // Messages to or from communicator rank `peer` (not this rank) with a tag of the
  // caller's choice, below 2^32 (the rest of the wire tag names the communicator).
  // A send matches the receive of the same communicator, peer and tag; messages with
  // the same tag match in send order. Argument errors (a bad peer, a null buffer, a
  // tag of 2^32 or more) are kInvalidArgument and break nothing.

  /// Posts a send of `count` elements; the buffer must stay valid until the Request
  /// completes (when the bytes are handed to the transport).
  Request isend(const void* buf, size_t count, DataType type, int peer, Tag tag);
  /// Posts a receive of up to `count` elements; Request::bytes() says how many came.
  Request irecv(void* buf, size_t count, DataType type, int peer, Tag tag);
  /// isend, then a wait bounded by the communicator's timeout.
  Status send(const void* buf, size_t count, DataType type, int peer, Tag tag);
  /// irecv, then a wait bounded by the communicator's timeout.
  Status recv(void* buf, size_t count, DataType type, int peer, Tag tag);
  /// Posts a receive of up to `count` elements from whichever other rank's message with
  /// `tag` comes first (MPI_ANY_SOURCE); `*source` is set to that rank before the
  /// Request completes. It takes exactly one message; those it does not take stay for
  /// later receives, and messages of one rank and tag are still received in send order
  /// whichever form receives them (remora::recv_any, endpoint.h, says how). A rank that
  /// closed its endpoints orderly (it finished) drops out; a failed one fails the receive.
  Request irecv_any(void* buf, size_t count, DataType type, Tag tag, int* source);

  // --- one-sided operations inside the communicator -------------------------------
  // Puts into memory another rank registered with its Context and granted this rank
  // (its RemoteKey, handed over any way: allgather is the usual one), over the
  // communicator's endpoint to that rank, with an optional 32-bit notification that
  // the target takes with wait_notification. Each communicator has its own
  // notifications, kept per sending rank in arrival order; those of a destroyed
  // communicator are dropped. Not ordered with collectives or with each other (see
  // Endpoint::put); a notification is delivered after its own put's data only.

  /// Writes `local` into rank `peer`'s memory at `remote_offset` within `key`'s window,
  /// as Endpoint::put does (the same errors from the target: kInvalidKey for a key
  /// revoked by deregistration, kOutOfRange, kAccessDenied, ...). With `notify`, `peer`
  /// receives the value through wait_notification(this rank) once the data is placed;
  /// the Request completes when the target placed every byte and queued the
  /// notification. A zero-length put with `notify` is a notification alone (checked
  /// against `key` like any put). kInvalidArgument for a bad peer or this rank itself.
  Request put(int peer, std::span<const std::byte> local, const RemoteKey& key, uint64_t remote_offset,
              std::optional<uint32_t> notify = std::nullopt);
  /// Takes the oldest notification rank `from` sent this rank with put on this
  /// communicator, waiting up to `timeout` (kDefaultTimeout: the communicator's
  /// timeout; kForever: none) while driving progress. kTimeout takes nothing (a later
  /// call still gets it). Fails with the endpoint's failure once `from`'s endpoint ended
  /// and every notification it sent before was taken, and with the first failure once
  /// the communicator is broken. kInvalidArgument for a bad rank or this rank itself.
  /// Thread-safe; two threads waiting on one rank each take a different notification.
  Result<uint32_t> wait_notification(int from, Duration timeout = kDefaultTimeout);

  // --- collectives (blocking) --------------------------------------------------
  // Each returns when this rank's part is done (its buffers may be reused), with the
  // first failure; `options` as CollectiveOptions says.

  /// Returns once every rank has called it.
  Status barrier(const CollectiveOptions& options = {});
  /// Root's `buf` to every rank's `buf`.
  Status broadcast(void* buf, size_t count, DataType type, int root, const CollectiveOptions& options = {});
  /// op over every rank's `send`, into `recv` at the root (recv is ignored elsewhere).
  Status reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                const CollectiveOptions& options = {});
  /// op over every rank's `send`, into every rank's `recv`; results are bit-identical on every rank.
  Status allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                   const CollectiveOptions& options = {});
  /// Every rank's `count` elements into the root's `recv`, rank r's at r * count.
  Status gather(const void* send, void* recv, size_t count, DataType type, int root,
                const CollectiveOptions& options = {});
  /// gather with per-rank counts and displacements (the root's `recv_counts`, `displs`).
  Status gatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                 std::span<const size_t> displs, DataType type, int root, const CollectiveOptions& options = {});
  /// The root's block r (of `count` elements, at r * count) to rank r's `recv`.
  Status scatter(const void* send, void* recv, size_t count, DataType type, int root,
                 const CollectiveOptions& options = {});
  /// scatter with per-rank counts and displacements (the root's `send_counts`, `displs`).
  Status scatterv(const void* send, std::span<const size_t> send_counts, std::span<const size_t> displs, void* recv,
                  size_t recv_count, DataType type, int root, const CollectiveOptions& options = {});
  /// Every rank's `count` elements into every rank's `recv`, rank r's at r * count.
  Status allgather(const void* send, void* recv, size_t count, DataType type, const CollectiveOptions& options = {});
  /// allgather with per-rank counts and displacements. Over ranks of several hosts the
  /// ring goes host by host, and where every count is the same and a block is above
  /// REMORA_COLL_SHM, the allgather's two levels run it (docs/guide.md, "Collectives").
  Status allgatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                    std::span<const size_t> displs, DataType type, const CollectiveOptions& options = {});
  /// MPI_Reduce_scatter_block: send holds size*recv_count elements; rank r gets block r.
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                        const CollectiveOptions& options = {});
  /// Rank r's block p of `send` (count elements at p * count) to rank p's block r of `recv`.
  Status alltoall(const void* send, void* recv, size_t count, DataType type, const CollectiveOptions& options = {});
  /// alltoall with per-peer counts and displacements on both sides.
  Status alltoallv(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                   void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_displs, DataType type,
                   const CollectiveOptions& options = {});
  /// Inclusive prefix reduction: rank r gets op(send_0 .. send_r).
  Status scan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,  // no kAvg
              const CollectiveOptions& options = {});
  /// Exclusive prefix: rank r > 0 gets op(send_0 .. send_{r-1}); rank 0's recv is untouched.
  Status exscan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                const CollectiveOptions& options = {});

  // --- collectives (asynchronous) ----------------------------------------------
  // The same operations, posted: each returns at once with a Request that completes
  // (from the communicator's worker thread) when the blocking form would have
  // returned, with its status. Buffers must stay valid until then. An argument error
  // is a Request completed with kInvalidArgument.

  /// Asynchronous barrier.
  Request ibarrier(const CollectiveOptions& options = {});
  /// Asynchronous broadcast.
  Request ibroadcast(void* buf, size_t count, DataType type, int root, const CollectiveOptions& options = {});
  /// Asynchronous reduce.
  Request ireduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                  const CollectiveOptions& options = {});
  /// Asynchronous allreduce.
  Request iallreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                     const CollectiveOptions& options = {});
  /// Asynchronous gather.
  Request igather(const void* send, void* recv, size_t count, DataType type, int root,
                  const CollectiveOptions& options = {});
  /// Asynchronous gatherv.
  Request igatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                   std::span<const size_t> displs, DataType type, int root, const CollectiveOptions& options = {});
  /// Asynchronous scatter.
  Request iscatter(const void* send, void* recv, size_t count, DataType type, int root,
                   const CollectiveOptions& options = {});
  /// Asynchronous scatterv.
  Request iscatterv(const void* send, std::span<const size_t> send_counts, std::span<const size_t> displs, void* recv,
                    size_t recv_count, DataType type, int root, const CollectiveOptions& options = {});
  /// Asynchronous allgather.
  Request iallgather(const void* send, void* recv, size_t count, DataType type, const CollectiveOptions& options = {});
  /// Asynchronous allgatherv.
  Request iallgatherv(const void* send, size_t send_count, void* recv, std::span<const size_t> recv_counts,
                      std::span<const size_t> displs, DataType type, const CollectiveOptions& options = {});
  /// Asynchronous reduce_scatter.
  Request ireduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                          const CollectiveOptions& options = {});
  /// Asynchronous alltoall.
  Request ialltoall(const void* send, void* recv, size_t count, DataType type, const CollectiveOptions& options = {});
  /// Asynchronous alltoallv.
  Request ialltoallv(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                     void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                     DataType type, const CollectiveOptions& options = {});
  /// Asynchronous scan.
  Request iscan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                const CollectiveOptions& options = {});
  /// Asynchronous exscan.
  Request iexscan(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                  const CollectiveOptions& options = {});

  /// Breaks the communicator (and those sharing its endpoints) now: outstanding and
  /// later operations fail with kAborted on this rank; peers see the failure.
  void abort();
  /// The first failure (ok while healthy).
  Status failure() const;

 private:
  friend struct coll::CommAccess;  // makes communicators and reaches their core (src/coll/comm_access.h)
  explicit Communicator(std::shared_ptr<coll::CommCore> core) noexcept;
  coll::CommCore& core() noexcept { return *core_; }

  std::shared_ptr<coll::CommCore> core_;
};

}  // namespace remora
