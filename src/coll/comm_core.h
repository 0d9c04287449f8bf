// coll/comm_core.h — the machinery under remora::Communicator: communicators over a
// subset of a job's ranks (CommCore, over the World of coll/world.h), and the
// per-operation context (Op) that algorithms use to exchange data with tags and a
// deadline.
//
// Tags on the mesh's endpoints (they carry nothing but communicator traffic):
//   bit 63 = 1: collective traffic   [1][comm id:23][op seq:24][step:16]
//   bit 63 = 0: Communicator::send   [0][comm id:23][zero:8][user tag:32]
// Messages with the same tag between two ranks match in send order, so an algorithm
// may reuse a step number for successive pieces as long as both sides agree on order.
//
// Notifications (puts with notify into a rank's scratch) carry
//   [0][comm id:23 at bit 40][op seq:24 at bit 16][low 16 bits: algorithm's own use]
// and the World routes them to the communicator by id (Op::wait_notification).
// The application's (Communicator::put with a notification) carry
//   [1][comm id:23 at bit 40][zero:8][value:32]
// and go to the communicator's per-sender mailboxes (Communicator::wait_notification),
// never to an algorithm.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "coll/world.h"
#include "remora/communicator.h"
#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/request.h"
#include "remora/status.h"
#include "remora/store.h"

namespace remora::detail {
struct RequestState;
}

namespace remora::coll {

using Clock = std::chrono::steady_clock;

/// Algorithm choices (REMORA_<OP>_ALGO); kAuto picks by size and rank count.
enum class Algo : uint8_t {
  kAuto,
  kRing,               ///< allreduce (reduce-scatter + allgather, puts + notify), allgather, reduce_scatter
  kRecursiveDoubling,  ///< allreduce, allgather (any size; non-powers of two fold the excess ranks)
  kTree,               ///< broadcast, reduce: binomial tree
  kChain,              ///< broadcast, reduce: pipelined chain
  kPairwise,           ///< alltoall(v)
  kLinear,             ///< gather/scatter/alltoall: root or everyone talks to everyone directly
  kDissemination,      ///< barrier
  kBruck,              ///< allgather at a non-power-of-two size when recursive doubling is chosen, or when asked for
  kLocal,              ///< nothing crosses the network (one rank, nothing to reduce)
};
std::string_view to_string(Algo a) noexcept;
// CollectiveOptions::algorithm converts to Algo by value.
static_assert(static_cast<int>(Algo::kRing) == static_cast<int>(CollAlgorithm::kRing));
static_assert(static_cast<int>(Algo::kRecursiveDoubling) == static_cast<int>(CollAlgorithm::kRecursiveDoubling));
static_assert(static_cast<int>(Algo::kTree) == static_cast<int>(CollAlgorithm::kTree));
static_assert(static_cast<int>(Algo::kChain) == static_cast<int>(CollAlgorithm::kChain));
static_assert(static_cast<int>(Algo::kPairwise) == static_cast<int>(CollAlgorithm::kPairwise));
static_assert(static_cast<int>(Algo::kLinear) == static_cast<int>(CollAlgorithm::kLinear));
static_assert(static_cast<int>(Algo::kDissemination) == static_cast<int>(CollAlgorithm::kDissemination));
static_assert(static_cast<int>(Algo::kBruck) == static_cast<int>(CollAlgorithm::kBruck));

/// Collective configuration, resolved from REMORA_* and CommOptions.
struct CollConfig {
  Duration timeout = std::chrono::seconds(300);  ///< REMORA_COLL_TIMEOUT_MS
  Algo allreduce = Algo::kAuto;                  ///< REMORA_ALLREDUCE_ALGO=auto|ring|rd
  Algo broadcast = Algo::kAuto;                  ///< REMORA_BCAST_ALGO=auto|tree|chain
  Algo reduce = Algo::kAuto;                     ///< REMORA_REDUCE_ALGO=auto|tree|chain
  Algo allgather = Algo::kAuto;                  ///< REMORA_ALLGATHER_ALGO=auto|ring|rd (bruck: per call only)
  Algo alltoall = Algo::kAuto;                   ///< per call only (pairwise: by messages even when small)
  /// REMORA_RING_THRESHOLD: allreduce bytes from which auto picks the ring (and reduce
  /// the chain); unset: ring_threshold_for's defaults, which depend on the rank count.
  std::optional<size_t> ring_threshold;
  size_t pipeline_bytes = 1024 * 1024;  ///< REMORA_COLL_PIPELINE: piece size of rings and chains
  /// Piece size of recursive doubling's exchanges (not a REMORA_* setting): larger than
  /// the default eager limit, so each piece goes by rendezvous straight into place.
  size_t exchange_piece_bytes = 256 * 1024;
  /// REMORA_COLL_DEVICE_SEGMENT: the segment of device-memory staging in collectives
  /// (coll/device_stage.h; all but the v-forms); from 4 segments up, copies overlap the network.
  /// Like every REMORA_COLL_* setting, the same on every rank. 0: whole staging only.
  size_t device_segment_bytes = 4 * 1024 * 1024;
  /// REMORA_COLL_SHM: the largest broadcast, reduce, allreduce and allgather block (an
  /// alltoall's whole send buffer; an alltoallv's blocks for the other ranks with its
  /// counts) that goes through the shared segments of the communicator's ranks of one
  /// host (coll/shm_segment.h). Rank 0's counts; 0 on any rank: no segment.
  size_t shm_bytes = 16 * 1024;
  /// REMORA_COLL_SHM_GROUP: the most ranks of one host that share one segment (2–16;
  /// a host with more makes the fewest groups that hold them, of sizes one apart at
  /// most). Rank 0's counts.
  size_t shm_group = 16;

  static Result<CollConfig> from_env(const CommOptions& options);
};

/// The configuration one call runs under: `base` with the call's options applied.
/// `allowed` lists the algorithms the operation (`what`, for the message) supports;
/// `field` is the CollConfig member the algorithm choice sets (null where the
/// operation has only one algorithm). kInvalidArgument for an algorithm outside
/// `allowed` or outside the enumeration, or a timeout that is not positive.
Result<CollConfig> call_config(const CollConfig& base, std::string_view what, std::initializer_list<Algo> allowed,
                               Algo CollConfig::*field, const CollectiveOptions& options);

class CommCore;
struct ShmPlan;

/// Temporary buffers the reductions keep per communicator (CommCore::scratch), so that
/// small collectives do not allocate every call.
struct Scratch {
  std::vector<std::byte> a, b, c;
  std::vector<uint64_t> counts;  ///< an alltoallv's through the segments
};

/// One collective (or p2p) operation in progress: its tags, its deadline.
class Op {
 public:
  Op(CommCore& comm, uint32_t seq, Clock::time_point deadline, const CollConfig& config)
      : comm_(comm), seq_(seq), deadline_(deadline), config_(config) {}
  /// A view of `parent` over some of its communicator's ranks, `members` (communicator
  /// ranks, which outlive the view), this rank being members[me]: the same tags,
  /// deadline and configuration, but rank() is `me`, size() is members.size(), and
  /// peers are indices into `members`. An algorithm run on it talks to those ranks only
  /// (the hosts' leaders of a hierarchical collective, coll/shm_segment.h). An algorithm
  /// that keeps state in the communicator between calls keeps it per view, by name (the
  /// rings' scratch and keys).
  Op(const Op& parent, std::span<const int> members, int me)
      : comm_(parent.comm_),
        seq_(parent.seq_),
        deadline_(parent.deadline_),
        config_(parent.config_),
        view_(members.data()),
        view_rank_(me),
        view_size_(static_cast<int>(members.size())) {}

  int rank() const noexcept;
  int size() const noexcept;
  CommCore& comm() noexcept { return comm_; }
  uint32_t seq() const noexcept { return seq_; }
  Clock::time_point deadline() const noexcept { return deadline_; }
  /// The configuration this call runs under: the communicator's, with the call's
  /// CollectiveOptions applied (algorithm choice, timeout). Algorithms read this one.
  const CollConfig& config() const noexcept { return config_; }
  Tag tag(uint32_t step) const noexcept;

  /// Sends/receives `bytes` to/from communicator rank `peer` with this op's tag for
  /// `step`. A zero-byte message is still a message (it synchronises).
  Request send(int peer, const void* data, size_t bytes, uint32_t step = 0);
  Request recv(int peer, void* data, size_t bytes, uint32_t step = 0);
  /// Waits with the op's deadline. A failure (including kTimeout) is returned; the
  /// caller returns it and CommCore breaks the communicator. Received sizes are checked:
  /// a message shorter than expected is kProtocol.
  Status wait(const Request& r, size_t expected_bytes = SIZE_MAX);
  Status wait_all(std::span<const Request> rs);
  /// send to `to` and receive from `from` at once (either may be skipped with -1).
  Status sendrecv(int to, const void* sdata, size_t sbytes, int from, void* rdata, size_t rbytes, uint32_t step = 0);

  /// The world rank of peer `p` (an index into the view, if this op is one).
  int world_rank(int p) const;
  /// The endpoint to communicator rank `peer` (for RMA), opened now if the world has
  /// none yet (by the op's deadline).
  Result<Endpoint*> endpoint(int peer);
  /// Before an algorithm that talks to every other rank (alltoall, a linear root): the
  /// descriptors their endpoints need are there, or kNoResource naming RLIMIT_NOFILE
  /// now, on every rank alike, rather than a failure midway (World::prepare); then the
  /// endpoints it lacks are opened, several at once (World::connect_all).
  Status prepare_all_peers();
  /// Notification value for this op with the algorithm's low 16 bits.
  uint64_t notify_value(uint16_t low) const noexcept;
  /// Waits for a notification of this communicator (any op seq; check `note.value`)
  /// from one of the communicator ranks `from` (see World::wait_notification).
  Status wait_notification(World::Incoming* out, std::initializer_list<int> from);

 private:
  /// The communicator rank of peer `p` of this op (of its view, if it is one).
  int comm_rank(int p) const noexcept { return view_ != nullptr ? view_[p] : p; }

  CommCore& comm_;
  uint32_t seq_;
  Clock::time_point deadline_;
  CollConfig config_;
  const int* view_ = nullptr;  ///< a view's members; null: the whole communicator
  int view_rank_ = 0;
  int view_size_ = 0;
};

class BodyRef;
/// What a BodyRef may borrow: a callable of Status(Op&) other than a BodyRef.
template <typename F>
concept OpBody = !std::is_same_v<std::remove_cvref_t<F>, BodyRef> && std::is_invocable_r_v<Status, F&, Op&>;

/// A borrowed callable of Status(Op&), for the duration of one call: what a blocking
/// operation runs in the calling thread. A CommCore::Body (std::function) allocates for
/// a capture of more than 16 bytes, which most collectives' bodies have, on every call
/// (bench/results/coll.md); this only points at the caller's callable.
class BodyRef {
 public:
  // Implicit, as a std::function converts: run([&](Op& op) { ... }).
  template <OpBody F>
  BodyRef(F&& f) noexcept  // NOLINT(google-explicit-constructor)
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, Op& op) -> Status { return (*static_cast<std::remove_reference_t<F>*>(obj))(op); }) {}
  Status operator()(Op& op) const { return call_(obj_, op); }

 private:
  void* obj_;
  Status (*call_)(void*, Op&);
};

/// A communicator: `members` are world ranks in communicator-rank order.
class CommCore : public std::enable_shared_from_this<CommCore> {
 public:
  using Body = std::function<Status(Op&)>;

  CommCore(std::shared_ptr<World> world, uint32_t id, std::vector<int> members, int rank, CollConfig config);
  ~CommCore();
  CommCore(const CommCore&) = delete;
  CommCore& operator=(const CommCore&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  uint32_t id() const noexcept { return id_; }
  World& world() noexcept { return *world_; }
  const std::shared_ptr<World>& world_ptr() const noexcept { return world_; }
  const CollConfig& config() const noexcept { return config_; }
  int world_rank(int comm_rank) const { return members_.at(static_cast<size_t>(comm_rank)); }

  /// Runs `body` as the next operation of this communicator, in the calling thread
  /// (after every posted asynchronous op has finished). A failure breaks the world.
  /// The op runs under `call` (its timeout and algorithm choices), else config().
  Status run(BodyRef body);
  Status run(BodyRef body, const CollConfig& call);
  /// Queues `body` to run on this communicator's worker thread, in posting order.
  Request post(Body body);
  Request post(Body body, const CollConfig& call);
  /// Breaks everything now (kAborted).
  void abort();
  Status failure() const;
  /// Counts this communicator's shrink attempts (1, 2, …): every member makes the same
  /// calls in the same order, so the count names one attempt on all of them.
  uint32_t next_shrink_attempt() noexcept { return ++shrink_attempts_; }
  /// A fresh op sequence number for an operation that runs as several (a segmented
  /// collective, coll/device_stage.h). Only from a running op's body: every member
  /// makes the same calls in the same order, so the numbers agree.
  uint32_t reserve_seq() noexcept;

  /// Argument check shared by the entry points: ok, or kInvalidArgument (without
  /// breaking the communicator: nothing was sent).
  Status check_root(int root) const;
  Status check_peer(int peer) const;

  /// Point-to-point inside the communicator (Communicator::isend/irecv/irecv_any).
  Request send_user(const void* data, size_t bytes, int peer, uint32_t tag);
  Request recv_user(void* data, size_t bytes, int peer, uint32_t tag);
  Request recv_user_any(void* data, size_t bytes, uint32_t tag, int* source);
  /// One-sided inside the communicator (Communicator::put / wait_notification).
  Request put_user(int peer, std::span<const std::byte> local, const RemoteKey& key, uint64_t offset,
                   std::optional<uint32_t> notify);
  Result<uint32_t> wait_user_notification(int from, Duration timeout);

  /// The reductions' scratch buffers. Operations of one communicator run one at a
  /// time (exec_mu_), so the running one uses them without a lock or a lookup (a
  /// small allreduce's call is a few hundred nanoseconds: bench/results/coll.md).
  Scratch& scratch() noexcept { return scratch_; }

  /// The shared segments (coll/shm_segment.h): whether their set-up ran, and its plan
  /// (null where they are off). The running operation only.
  bool shm_decided() const noexcept { return shm_decided_; }
  ShmPlan* shm() const noexcept { return shm_.get(); }
  /// Sets the plan, how many ranks map this rank's segment (itself included; 0: it has
  /// none) and why it has none.
  void set_shm(std::unique_ptr<ShmPlan> plan, int ranks, std::string why);
  /// Whether the communicator has a plan (any thread, which then may read it:
  /// Communicator::algorithm).
  bool shm_on() const noexcept { return shm_on_.load(std::memory_order_acquire); }
  /// What set_shm said about this rank's segment, for any thread: false before the
  /// set-up ran.
  bool shm_verdict(int* ranks, std::string* why) const;

  /// Per-communicator state an algorithm keeps between calls (e.g. registered ring
  /// scratch and the neighbours' keys). Created on first use, lives with the comm.
  template <typename T>
  T& state(const char* name) {
    std::lock_guard lock(state_mu_);
    auto it = states_.find(std::string_view(name));  // no string made on every call
    if (it == states_.end()) {
      it = states_.emplace(name, std::shared_ptr<void>(new T(), [](void* p) { delete static_cast<T*>(p); })).first;
    }
    return *static_cast<T*>(it->second.get());
  }

 private:
  Status execute(BodyRef body, const CollConfig& call);
  void worker_main();

  std::shared_ptr<World> world_;
  const uint32_t id_;
  const std::vector<int> members_;
  const int rank_;
  const CollConfig config_;

  std::mutex exec_mu_;  ///< one operation at a time
  uint32_t seq_ = 0;    ///< guarded by exec_mu_

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  struct Queued {
    Body body;
    CollConfig config;
    std::shared_ptr<void> state;  ///< its RequestState
  };
  std::deque<Queued> queue_;
  /// Changed under queue_mu_; read without it by run(), which takes the lock only while
  /// posted operations are queued or running.
  std::atomic<size_t> queued_or_running_{0};
  bool stopping_ = false;
  std::thread worker_;  ///< started on first post()

  Scratch scratch_;  ///< used by the running operation only
  std::unique_ptr<ShmPlan> shm_;  ///< set once, by the running operation
  bool shm_decided_ = false;
  std::atomic<bool> shm_on_{false};
  int shm_ranks_ = 0;                   ///< set before shm_known_
  std::string shm_why_;                 ///< likewise
  std::atomic<bool> shm_known_{false};  ///< the two above are set
  std::mutex state_mu_;
  std::map<std::string, std::shared_ptr<void>, std::less<>> states_;
  std::atomic<uint32_t> shrink_attempts_{0};
};

}  // namespace remora::coll
