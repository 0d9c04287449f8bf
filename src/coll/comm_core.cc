// coll/comm_core.cc — a communicator's core (comm_core.h) and the collectives' rows of the
// configuration table (REMORA_COLL_*, REMORA_*_ALGO, and the launcher's REMORA_RANK, ...).
#include "coll/comm_core.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <future>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "coll/shm_segment.h"
#include "coll/variables.h"
#include "core/env.h"
#include "core/log.h"
#include "engine/engine_of.h"
#include "engine/request_state.h"

namespace remora::coll {
namespace {

constexpr uint64_t kCollectiveBit = uint64_t{1} << 63;
constexpr uint32_t kCommIdMask = (1u << 23) - 1;
constexpr uint32_t kSeqMask = (1u << 24) - 1;

Duration left_until(Clock::time_point deadline) {
  auto now = Clock::now();
  return deadline <= now ? Duration::zero() : std::chrono::duration_cast<Duration>(deadline - now);
}

constexpr const char* kSection = "Collectives and launching";
constexpr uint64_t kMaxRanks = uint64_t{1} << 24;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr std::string_view kRingRd[] = {"auto", "ring", "rd"};
constexpr std::string_view kTreeChain[] = {"auto", "tree", "chain"};
constexpr Algo kRingRdAlgos[] = {Algo::kAuto, Algo::kRing, Algo::kRecursiveDoubling};
constexpr Algo kTreeChainAlgos[] = {Algo::kAuto, Algo::kTree, Algo::kChain};

// The rows, in the order docs/configuration.md lists them. The launcher's variables are
// read by detect_launch (launch.cc) with the other launchers' (torchrun's, Open MPI's,
// ...), REMORA_HOST by the bootstraps; the rest by CollConfig::from_env below.
constexpr ConfigVariable kVariables[] = {
    {.name = "REMORA_RANK",
     .section = kSection,
     .default_text = "unset",
     .min = 0,
     .max = kMaxRanks - 1,
     .doc = "this process's rank (set by `remora run`); with `REMORA_WORLD_SIZE` it wins over every other launcher's"},
    {.name = "REMORA_WORLD_SIZE",
     .section = kSection,
     .default_text = "unset",
     .min = 1,
     .max = kMaxRanks,
     .doc = "the number of ranks"},
    {.name = "REMORA_LOCAL_RANK",
     .section = kSection,
     .default_text = "0",
     .min = 0,
     .max = kMaxRanks - 1,
     .doc = "rank among the processes on this host"},
    {.name = "REMORA_LOCAL_WORLD_SIZE",
     .section = kSection,
     .default_text = "1",
     .min = 1,
     .max = kMaxRanks,
     .doc = "processes on this host"},
    {.name = "REMORA_STORE",
     .section = kSection,
     .kind = ConfigKind::kText,
     .default_text = "MASTER_ADDR:MASTER_PORT",
     .max = 1024,
     .doc = "`host:port` of the rendezvous store, which rank 0 hosts; needed with more than one rank unless "
            "`MASTER_ADDR` and `MASTER_PORT` are set"},
    {.name = "REMORA_HOST",
     .section = kSection,
     .kind = ConfigKind::kText,
     .default_text = "the local address of the store connection",
     .max = 1024,
     .doc = "the address the other ranks reach this rank at (it listens there; with REMORA_RAILS on the wildcard "
            "address)"},
    {.name = "REMORA_ALLREDUCE_ALGO",
     .section = kSection,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kRingRd,
     .doc = "allreduce and reduce_scatter: pipelined ring or recursive doubling; `auto`: ring from "
            "`REMORA_RING_THRESHOLD`"},
    {.name = "REMORA_REDUCE_ALGO",
     .section = kSection,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kTreeChain,
     .doc = "reduce: binomial tree or pipelined chain; `auto`: chain from `REMORA_RING_THRESHOLD` above 2 ranks"},
    {.name = "REMORA_BCAST_ALGO",
     .section = kSection,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kTreeChain,
     .doc = "broadcast: tree or chain; `auto`: chain for messages of 4 pieces or more above 2 ranks"},
    {.name = "REMORA_ALLGATHER_ALGO",
     .section = kSection,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kRingRd,
     .doc = "allgather: ring or recursive doubling (Bruck off powers of two); `auto`: rd up to a 64 KiB result"},
    {.name = "REMORA_RING_THRESHOLD",
     .section = kSection,
     .kind = ConfigKind::kBytes,
     .default_text = "2M at 2 ranks, 64K above",
     .min = 0,
     .max = 1024 * kGiB,
     .doc = "bytes from which `auto` picks the ring (allreduce, reduce_scatter) and the chain (reduce); set, it "
            "applies at every rank count"},
    {.name = "REMORA_COLL_PIPELINE",
     .section = kSection,
     .kind = ConfigKind::kBytes,
     .default_text = "1M",
     .min = 4096,
     .max = kGiB,
     .doc = "piece size of rings and chains (a ring's scratch holds 4 pieces)"},
    {.name = "REMORA_COLL_DEVICE_SEGMENT",
     .section = kSection,
     .kind = ConfigKind::kBytes,
     .default_text = "4M",
     .min = 0,
     .max = kGiB,
     .doc = "segment of device-memory staging in collectives; the same on every rank (docs/device-memory.md)",
     .range_note = "0 (off), 4K–1G"},
    {.name = "REMORA_COLL_SHM",
     .section = kSection,
     .kind = ConfigKind::kBytes,
     .default_text = "16K",
     .min = 0,
     .max = 64 * 1024,
     .doc =
         "largest broadcast, reduce, allreduce, reduce_scatter input, allgather block, alltoall's whole send buffer, "
         "an alltoallv's blocks for the other ranks with its counts (16 bytes per rank; and any barrier) that goes "
         "through the shared memory of a communicator's ranks of one host (groups of up to 16); rank 0's counts, "
         "and 0 on any rank turns it off (docs/guide.md, \"Collectives\")",
     .range_note = "0 (off), 1–64K"},
    {.name = "REMORA_COLL_SHM_GROUP",
     .section = kSection,
     .kind = ConfigKind::kCount,
     .default_text = "16",
     .min = 2,
     .max = 16,
     .doc = "most ranks of one host that share a segment: a host with more makes the fewest groups that hold them, "
            "of sizes one apart at most, whose leaders meet by messages, and a large allreduce runs in two levels, "
            "a large reduce_scatter or allgather too where the smallest group has two ranks or more and none more "
            "than twice as many; rank 0's counts (docs/guide.md, \"Collectives\")"},
    {.name = "REMORA_COLL_TIMEOUT_MS",
     .section = kSection,
     .default_text = "300000",
     .min = 1,
     .max = 86'400'000,
     .doc = "bound on every collective and on `init`'s rendezvous; `CommOptions::timeout` overrides it"},
};

const ConfigVariable& var(std::string_view name) {
  for (const ConfigVariable& v : kVariables) {
    if (v.name == name) return v;
  }
  std::abort();  // a name of this file's own table: a typo here is a bug
}

/// An algorithm variable's choice, or `fallback` when unset.
Result<Algo> read_algo(std::string_view name, std::span<const Algo> algos, Algo fallback) {
  REMORA_ASSIGN_OR_RETURN(auto n, core::read_value(var(name)));
  return n ? algos[*n] : fallback;
}

/// A number or size variable, or `fallback` when unset.
Result<uint64_t> read_number(std::string_view name, uint64_t fallback) {
  REMORA_ASSIGN_OR_RETURN(auto n, core::read_value(var(name)));
  return n.value_or(fallback);
}

Status check_device_segment(size_t bytes) {
  if ((bytes != 0 && bytes < 4096) || bytes > (size_t{1} << 30)) {
    return Status(StatusCode::kInvalidArgument, "REMORA_COLL_DEVICE_SEGMENT must be 0 (off) or 4K..1G");
  }
  return Status::ok();
}

}  // namespace

core::VariableTable variables() noexcept { return kVariables; }

std::string_view to_string(Algo a) noexcept {
  switch (a) {
    case Algo::kAuto: return "auto";
    case Algo::kRing: return "ring";
    case Algo::kRecursiveDoubling: return "rd";
    case Algo::kTree: return "tree";
    case Algo::kChain: return "chain";
    case Algo::kPairwise: return "pairwise";
    case Algo::kLinear: return "linear";
    case Algo::kDissemination: return "dissemination";
    case Algo::kBruck: return "bruck";
    case Algo::kLocal: return "local";
  }
  return "?";
}

Result<CollConfig> CollConfig::from_env(const CommOptions& options) {
  CollConfig c;
  const auto default_ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.timeout).count();
  REMORA_ASSIGN_OR_RETURN(const uint64_t ms, read_number("REMORA_COLL_TIMEOUT_MS", static_cast<uint64_t>(default_ms)));
  c.timeout = std::chrono::milliseconds(ms);
  REMORA_ASSIGN_OR_RETURN(c.allreduce, read_algo("REMORA_ALLREDUCE_ALGO", kRingRdAlgos, c.allreduce));
  REMORA_ASSIGN_OR_RETURN(c.broadcast, read_algo("REMORA_BCAST_ALGO", kTreeChainAlgos, c.broadcast));
  REMORA_ASSIGN_OR_RETURN(c.reduce, read_algo("REMORA_REDUCE_ALGO", kTreeChainAlgos, c.reduce));
  REMORA_ASSIGN_OR_RETURN(c.allgather, read_algo("REMORA_ALLGATHER_ALGO", kRingRdAlgos, c.allgather));
  REMORA_ASSIGN_OR_RETURN(auto threshold, core::read_value(var("REMORA_RING_THRESHOLD")));
  if (threshold) c.ring_threshold = static_cast<size_t>(*threshold);
  REMORA_ASSIGN_OR_RETURN(c.pipeline_bytes, read_number("REMORA_COLL_PIPELINE", c.pipeline_bytes));
  REMORA_ASSIGN_OR_RETURN(c.device_segment_bytes, read_number("REMORA_COLL_DEVICE_SEGMENT", c.device_segment_bytes));
  REMORA_RETURN_IF_ERROR(check_device_segment(c.device_segment_bytes));
  REMORA_ASSIGN_OR_RETURN(c.shm_bytes, read_number("REMORA_COLL_SHM", c.shm_bytes));
  REMORA_ASSIGN_OR_RETURN(c.shm_group, read_number("REMORA_COLL_SHM_GROUP", c.shm_group));
  if (options.timeout) {
    if (*options.timeout <= Duration::zero()) return Status(StatusCode::kInvalidArgument, "CommOptions::timeout must be positive");
    c.timeout = *options.timeout;
  }
  return c;
}

Result<CollConfig> call_config(const CollConfig& base, std::string_view what, std::initializer_list<Algo> allowed,
                               Algo CollConfig::*field, const CollectiveOptions& options) {
  CollConfig c = base;
  REMORA_RETURN_IF_ERROR(check_device_segment(c.device_segment_bytes));
  if (options.timeout) {
    if (*options.timeout <= Duration::zero()) {
      return Status(StatusCode::kInvalidArgument, fmt::format("{}: CollectiveOptions::timeout must be positive", what));
    }
    c.timeout = *options.timeout;
  }
  if (options.algorithm == CollAlgorithm::kAuto) return c;
  std::string names = "auto";
  for (Algo a : allowed) names += fmt::format(", {}", to_string(a));
  const auto value = static_cast<unsigned>(options.algorithm);
  if (value > static_cast<unsigned>(CollAlgorithm::kBruck)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: algorithm value {} is not a CollAlgorithm (use one of {})", what, value, names));
  }
  const auto algo = static_cast<Algo>(value);
  if (std::find(allowed.begin(), allowed.end(), algo) == allowed.end()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: algorithm '{}' is not supported (use one of {})", what, to_string(algo), names));
  }
  if (field != nullptr) c.*field = algo;
  return c;
}

// --- Op -------------------------------------------------------------------------------

int Op::rank() const noexcept { return view_ != nullptr ? view_rank_ : comm_.rank(); }
int Op::size() const noexcept { return view_ != nullptr ? view_size_ : comm_.size(); }
int Op::world_rank(int p) const { return comm_.world_rank(comm_rank(p)); }

Tag Op::tag(uint32_t step) const noexcept {
  return static_cast<Tag>(kCollectiveBit | (uint64_t{comm_.id() & kCommIdMask} << 40) |
                          (uint64_t{seq_ & kSeqMask} << 16) | (step & 0xFFFFu));
}

Result<Endpoint*> Op::endpoint(int peer) {
  return comm_.world().endpoint(comm_.world_rank(comm_rank(peer)), deadline_);
}

Status Op::prepare_all_peers() {
  std::vector<int> ranks;
  for (int p = 0; p < size(); ++p) {
    if (p != rank()) ranks.push_back(comm_.world_rank(comm_rank(p)));
  }
  REMORA_RETURN_IF_ERROR(comm_.world().prepare(ranks));
  return comm_.world().connect_all(ranks, deadline_);
}

namespace {
Request failed_request(const Status& why) {
  return detail::make_request(detail::RequestState::completed(why, 0, Tag{}));
}
}  // namespace

Request Op::send(int peer, const void* data, size_t bytes, uint32_t step) {
  auto ep = endpoint(peer);
  if (!ep) return failed_request(ep.status());
  return (*ep)->send(std::span(static_cast<const std::byte*>(data), bytes), tag(step));
}

Request Op::recv(int peer, void* data, size_t bytes, uint32_t step) {
  auto ep = endpoint(peer);
  if (!ep) return failed_request(ep.status());
  return (*ep)->recv(std::span(static_cast<std::byte*>(data), bytes), tag(step));
}

Status Op::wait(const Request& r, size_t expected_bytes) {
  // One already complete (an eager send) needs no time left: no reading of the clock.
  Status s = r.done() ? r.test() : r.wait(left_until(deadline_));
  if (s.code() == StatusCode::kTimeout) {
    if (!r.done()) {  // the wait ran out, not the operation (a dial's timeout)
      return Status(StatusCode::kTimeout,
                    fmt::format("collective timed out after {} ms (REMORA_COLL_TIMEOUT_MS)",
                                std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout).count()));
    }
    s = r.test();  // it completed just after the wait gave up: its own status
  }
  if (!s.is_ok()) return s;
  if (expected_bytes != SIZE_MAX && r.bytes() != expected_bytes) {
    return Status(StatusCode::kProtocol, fmt::format("collective message of {} bytes where {} were expected "
                                                     "(ranks disagree on counts or on the call sequence)",
                                                     r.bytes(), expected_bytes));
  }
  return Status::ok();
}

Status Op::wait_all(std::span<const Request> rs) {
  Status first;
  for (const Request& r : rs) {
    // Keep waiting after a failure: no request may stay posted into caller memory.
    // A failed world closed its endpoints, so the rest complete at once.
    Status s = wait(r);
    if (!s.is_ok() && first.is_ok()) {
      first = s;
      comm_.world().fail(s);
    }
  }
  return first;
}

Status Op::sendrecv(int to, const void* sdata, size_t sbytes, int from, void* rdata, size_t rbytes, uint32_t step) {
  Request rr, sr;
  if (from >= 0) rr = recv(from, rdata, rbytes, step);
  if (to >= 0) sr = send(to, sdata, sbytes, step);
  Status first;
  if (sr.valid()) first = wait(sr);
  if (!first.is_ok()) comm_.world().fail(first);
  if (rr.valid()) {
    Status s = wait(rr, rbytes);
    if (!s.is_ok() && first.is_ok()) {
      first = s;
      comm_.world().fail(first);
    }
  }
  if (!first.is_ok()) {
    // A request whose wait timed out is still posted into caller memory: failing the
    // world closed its endpoint, which ends it; make sure before the buffers go back.
    for (const Request* r : {&sr, &rr}) {
      if (r->valid() && !r->done()) (void)r->wait(std::chrono::seconds(10));
    }
  }
  return first;
}

uint64_t Op::notify_value(uint16_t low) const noexcept {
  return (uint64_t{comm_.id() & kCommIdMask} << 40) | (uint64_t{seq_ & kSeqMask} << 16) | low;
}

Status Op::wait_notification(World::Incoming* out, std::initializer_list<int> from) {
  std::array<int, 4> world_ranks{};
  if (from.size() > world_ranks.size()) return Status(StatusCode::kInternal, "wait_notification: too many ranks");
  size_t n = 0;
  for (int r : from) world_ranks[n++] = comm_.world_rank(comm_rank(r));
  return comm_.world().wait_notification(comm_.id(), out, deadline_, std::span(world_ranks).first(n));
}

// --- CommCore -----------------------------------------------------------------------

CommCore::CommCore(std::shared_ptr<World> world, uint32_t id, std::vector<int> members, int rank, CollConfig config)
    : world_(std::move(world)), id_(id), members_(std::move(members)), rank_(rank), config_(config) {}

CommCore::~CommCore() {
  world_->close_user_mailboxes(id_);
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Status CommCore::execute(BodyRef body, const CollConfig& call) {
  if (world_->failed()) return world_->failure();
  const uint32_t seq = ++seq_ & kSeqMask;
  Op op(*this, seq, Clock::now() + call.timeout, call);
  Status s = body(op);
  if (!s.is_ok()) world_->fail(s);
  return s;
}

void CommCore::set_shm(std::unique_ptr<ShmPlan> plan, int ranks, std::string why) {
  shm_decided_ = true;
  shm_ = std::move(plan);  // set once: shm_on() readers see it after the flag
  shm_ranks_ = ranks;
  shm_why_ = std::move(why);
  shm_on_.store(shm_ != nullptr, std::memory_order_release);
  shm_known_.store(true, std::memory_order_release);
}

bool CommCore::shm_verdict(int* ranks, std::string* why) const {
  if (!shm_known_.load(std::memory_order_acquire)) return false;
  *ranks = shm_ranks_;
  *why = shm_why_;
  return true;
}

uint32_t CommCore::reserve_seq() noexcept { return ++seq_ & kSeqMask; }

Status CommCore::run(BodyRef body) { return run(body, config_); }

Status CommCore::run(BodyRef body, const CollConfig& call) {
  if (queued_or_running_.load(std::memory_order_acquire) != 0) {
    std::unique_lock lock(queue_mu_);
    queue_cv_.wait(lock, [&] { return queued_or_running_.load(std::memory_order_relaxed) == 0; });
  }
  std::lock_guard exec(exec_mu_);
  return execute(body, call);
}

Request CommCore::post(Body body) { return post(std::move(body), config_); }

Request CommCore::post(Body body, const CollConfig& call) {
  auto state = detail::RequestState::make(nullptr, Tag{});
  // Completed by the worker, not the engine; a wait without a timeout still gets the
  // context's bound.
  state->default_timeout = std::chrono::milliseconds(world_->context().config().wait_timeout_ms);
  {
    std::lock_guard lock(queue_mu_);
    queue_.push_back(Queued{std::move(body), call, state});
    ++queued_or_running_;
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_main(); });
  }
  queue_cv_.notify_all();
  return detail::make_request(state);
}

void CommCore::worker_main() {
  std::unique_lock lock(queue_mu_);
  while (true) {
    queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Status s;
    {
      std::lock_guard exec(exec_mu_);
      s = execute(next.body, next.config);
    }
    static_cast<detail::RequestState*>(next.state.get())->complete(std::move(s), 0);
    lock.lock();
    --queued_or_running_;
    queue_cv_.notify_all();
  }
}

void CommCore::abort() { world_->fail(Status(StatusCode::kAborted, "communicator aborted by the application")); }

Status CommCore::failure() const { return world_->failure(); }

Status CommCore::check_root(int root) const {
  if (root < 0 || root >= size()) {
    return Status(StatusCode::kInvalidArgument, fmt::format("root {} is not a rank of this communicator (size {})", root, size()));
  }
  return Status::ok();
}

Status CommCore::check_peer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("peer {} is not another rank of this communicator (rank {}, size {})", peer, rank_, size()));
  }
  return Status::ok();
}

namespace {
Tag user_tag(uint32_t comm, uint32_t tag) { return static_cast<Tag>((uint64_t{comm & kCommIdMask} << 40) | tag); }
}  // namespace

Request CommCore::send_user(const void* data, size_t bytes, int peer, uint32_t tag) {
  auto ep = world_->endpoint(world_rank(peer), Clock::now() + config_.timeout);
  if (!ep) return failed_request(ep.status());
  return (*ep)->send(std::span(static_cast<const std::byte*>(data), bytes), user_tag(id_, tag));
}

Request CommCore::recv_user(void* data, size_t bytes, int peer, uint32_t tag) {
  auto ep = world_->endpoint(world_rank(peer), Clock::now() + config_.timeout);
  if (!ep) return failed_request(ep.status());
  return (*ep)->recv(std::span(static_cast<std::byte*>(data), bytes), user_tag(id_, tag));
}

Request CommCore::recv_user_any(void* data, size_t bytes, uint32_t tag, int* source) {
  // The receive is posted on an endpoint to every other rank: open those not open yet.
  std::vector<int> others;
  for (int r = 0; r < size(); ++r) {
    if (r != rank_) others.push_back(world_rank(r));
  }
  if (Status s = world_->prepare(others); !s.is_ok()) return failed_request(s);
  if (Status s = world_->connect_all(others, Clock::now() + config_.timeout); !s.is_ok()) return failed_request(s);
  // Indexed by communicator rank (null at this rank's), so the match's index is the source.
  std::vector<Endpoint*> endpoints(members_.size(), nullptr);
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    auto ep = world_->endpoint(world_rank(r), Clock::now() + config_.timeout);
    if (!ep) return failed_request(ep.status());
    endpoints[static_cast<size_t>(r)] = *ep;
  }
  return recv_any(endpoints, std::span(static_cast<std::byte*>(data), bytes), user_tag(id_, tag), source);
}

Request CommCore::put_user(int peer, std::span<const std::byte> local, const RemoteKey& key, uint64_t offset,
                           std::optional<uint32_t> notify) {
  auto ep = world_->endpoint(world_rank(peer), Clock::now() + config_.timeout);
  if (!ep) return failed_request(ep.status());
  PutOptions options;
  if (notify) options.notify = World::user_notify_value(id_, *notify);
  return (*ep)->put(local, key, offset, options);
}

Result<uint32_t> CommCore::wait_user_notification(int from, Duration timeout) {
  const auto deadline =
      timeout >= Duration(std::chrono::hours(24 * 365)) ? Clock::time_point::max() : Clock::now() + timeout;
  return world_->wait_user_notification(id_, world_rank(from), deadline);
}

}  // namespace remora::coll
