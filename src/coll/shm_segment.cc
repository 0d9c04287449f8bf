// coll/shm_segment.cc — see shm_segment.h.
#include "coll/shm_segment.h"

#include <sched.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "coll/algo_helpers.h"
#include "coll/algorithms.h"
#include "coll/comm_core.h"
#include "coll/reduce.h"
#include "core/log.h"
#include "engine/futex.h"
#include "net/same_host.h"

namespace remora::coll {
namespace {

constexpr char kMagic[8] = {'r', 'e', 'm', 'o', 'r', 'a', 'C', 'S'};
constexpr size_t kLinesAt = 256;
constexpr size_t kLineBytes = 128;  // two cache lines: no false sharing with a neighbour's prefetch
static_assert(kLinesAt + ShmSegment::kDepth * ShmSegment::kMaxRanks * kLineBytes <= ShmSegment::kHeaderBytes);

struct Header {
  char magic[8];
  uint32_t ranks;
  uint32_t slot;
  uint8_t nonce[16];
};

/// Steps of the set-up's messages (above every algorithm's).
constexpr uint32_t kOfferStep = 0xFF00, kAnswerStep = 0xFF01, kVerdictStep = 0xFF02;

/// Rank 0's offer.
struct Offer {
  uint32_t ok = 0;  ///< rank 0 made a segment
  int32_t pid = 0;
  int32_t fd = -1;
  uint32_t slot = 0;
  ShmSegment::Nonce nonce{};
};

size_t segment_bytes(int ranks, size_t slot) {
  return ShmSegment::kHeaderBytes + static_cast<size_t>(ranks) * ShmSegment::kDepth * slot;
}

/// Why this rank keeps the communicator's collectives on messages ("" when it need not).
std::string local_refusal(Op& op) {
  const Config& c = op.comm().world().context().config();
  if (op.config().shm_bytes == 0) return "REMORA_COLL_SHM=0";
  if (!c.same_host_pulls) return "REMORA_SAME_HOST=off";
  if (c.encrypt != EncryptMode::kOff) return "REMORA_ENCRYPT: collectives stay sealed on TCP";
  return "";
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

struct alignas(64) ShmSegment::Line {
  std::atomic<uint32_t> seq;       ///< the last round of this parity the rank published
  std::atomic<uint32_t> sleepers;  ///< ranks blocked on seq (futex)
  ShmShape shape;                  ///< of that round
  std::byte data[kInlineBytes];    ///< its data, when at most kInlineBytes
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared between processes: must be lock-free");

Result<ShmSegment> ShmSegment::create(std::span<const int> members, size_t slot) {
  const auto ranks = static_cast<int>(members.size());
  if (ranks < 2 || ranks > kMaxRanks || slot == 0 || slot % 64 != 0) {
    return Status(StatusCode::kInvalidArgument, fmt::format("shared segment of {} ranks and {} bytes", ranks, slot));
  }
  ShmSegment s;
  REMORA_ASSIGN_OR_RETURN(s.memory_, net::SharedMemory::create("remora-coll-segment", segment_bytes(ranks, slot)));
  s.ranks_ = ranks;
  s.me_ = 0;
  std::copy(members.begin(), members.end(), s.members_.begin());
  s.slot_ = slot;
  if (::getrandom(s.nonce_.data(), s.nonce_.size(), 0) != static_cast<ssize_t>(s.nonce_.size())) {
    return Status(StatusCode::kInternal, "getrandom for a shared segment's nonce failed");
  }
  auto* h = reinterpret_cast<Header*>(s.memory_.base());
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->ranks = static_cast<uint32_t>(ranks);
  h->slot = static_cast<uint32_t>(slot);
  std::memcpy(h->nonce, s.nonce_.data(), s.nonce_.size());
  // Each line holds the last round of its residue, or kDepth less before the first:
  // line i starts at round i - kDepth (line 0 at round 0, which everyone has passed).
  for (int r = 0; r < ranks; ++r) {
    for (uint32_t i = 1; i < kDepth; ++i) s.line(r, i).seq.store(i - kDepth, std::memory_order_relaxed);
  }
  return s;
}

Result<ShmSegment> ShmSegment::adopt(net::Fd fd, std::span<const int> members, int me, size_t slot,
                                     const Nonce& nonce) {
  const auto ranks = static_cast<int>(members.size());
  ShmSegment s;
  REMORA_ASSIGN_OR_RETURN(s.memory_, net::SharedMemory::adopt(std::move(fd), "communicator segment"));
  if (ranks < 2 || ranks > kMaxRanks || slot == 0 || slot % 64 != 0 || me <= 0 || me >= ranks ||
      s.memory_.size() != segment_bytes(ranks, slot)) {
    return Status(StatusCode::kProtocol,
                  fmt::format("the communicator segment offered has {} bytes, not those of {} ranks of {} bytes",
                              s.memory_.size(), ranks, slot));
  }
  Header h;
  std::memcpy(&h, s.memory_.base(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.ranks != static_cast<uint32_t>(ranks) || h.slot != slot ||
      std::memcmp(h.nonce, nonce.data(), nonce.size()) != 0) {
    return Status(StatusCode::kProtocol,
                  "the descriptor offered is not the communicator segment offered (its nonce "
                  "differs: another process of that pid?)");
  }
  s.ranks_ = ranks;
  s.me_ = me;
  std::copy(members.begin(), members.end(), s.members_.begin());
  s.slot_ = slot;
  s.nonce_ = nonce;
  return s;
}

int ShmSegment::index_of(int comm_rank) const noexcept {
  for (int i = 0; i < ranks_; ++i) {
    if (members_[static_cast<size_t>(i)] == comm_rank) return i;
  }
  return -1;
}

ShmSegment::Line& ShmSegment::line(int r, uint32_t round) const noexcept {
  static_assert(sizeof(Line) == 64, "one cache line");
  const size_t index = static_cast<size_t>(r) * kDepth + (round % kDepth);
  return *reinterpret_cast<Line*>(memory_.base() + kLinesAt + index * kLineBytes);
}

std::byte* ShmSegment::buffer(int r, uint32_t round) const noexcept {
  const size_t index = static_cast<size_t>(r) * kDepth + (round % kDepth);
  return memory_.base() + kHeaderBytes + index * slot_;
}

const std::byte* ShmSegment::data(int r, size_t bytes) const noexcept {
  return bytes <= kInlineBytes ? line(r, round_).data : buffer(r, round_);
}

Status ShmSegment::wait_for(Op& op, int r, uint32_t target) {
  Line& l = line(r, target);
  auto seen = [&](uint32_t seq) -> Result<bool> {
    // The line of target's residue holds target, kDepth rounds less before the rank
    // publishes it, or kDepth more once it went on (only while this rank waits for an
    // older round before it publishes): anything else is not a round an honest rank can
    // be at.
    const auto ahead = static_cast<int32_t>(seq - target);
    constexpr auto kD = static_cast<int32_t>(kDepth);
    if (ahead != 0 && ahead != -kD && ahead != kD) {
      return Status(StatusCode::kProtocol,
                    fmt::format("communicator segment corrupt: rank {} says round {} where this rank waits for {}",
                                member(r), seq, target));
    }
    return ahead >= 0;
  };
  REMORA_ASSIGN_OR_RETURN(bool done, seen(l.seq.load(std::memory_order_acquire)));
  if (done) {
    net::sync_acquire(memory_.sync_key());
    return Status::ok();
  }
  World& world = op.comm().world();
  Endpoint* ep = world.connected(op.comm().world_rank(member(r)));
  if (ep == nullptr) ep = world.connected(op.comm().world_rank(member(0)));  // the leader's: it has r's
  // Once it blocks, the endpoint's heartbeat watches the awaited rank (nothing is
  // outstanding on it otherwise): a stopped process fails it at the peer timeout.
  struct Watch {
    Endpoint* ep = nullptr;
    void start(Endpoint* e) {
      if (ep == nullptr && e != nullptr) (ep = e)->watch_peer(true);
    }
    ~Watch() {
      if (ep != nullptr) ep->watch_peer(false);
    }
  } watch;
  const auto spin = std::chrono::microseconds(world.context().config().spin_us);
  const Clock::time_point start = Clock::now();
  for (uint32_t i = 1;; ++i) {
    cpu_relax();
    REMORA_ASSIGN_OR_RETURN(done, seen(l.seq.load(std::memory_order_acquire)));
    if (done) break;
    if ((i & 127) != 0) continue;
    // A few microseconds went by: let a process that shares this CPU run (the awaited
    // rank, where ranks outnumber CPUs). Returns at once when none waits.
    sched_yield();
    const Clock::time_point now = Clock::now();
    if (world.failed()) return world.failure();
    if (ep != nullptr && ep->failed()) {
      REMORA_ASSIGN_OR_RETURN(done, seen(l.seq.load(std::memory_order_acquire)));
      if (done) break;
      Status why = ep->failure();
      return Status(StatusCode::kPeerFailed,
                    fmt::format("rank {} failed while this rank waited for it in the communicator segment: {}",
                                member(r), why.to_string()));
    }
    if (now >= op.deadline()) {
      return Status(StatusCode::kTimeout, fmt::format("collective timed out waiting for rank {} in the communicator "
                                                      "segment (REMORA_COLL_TIMEOUT_MS)",
                                                      member(r)));
    }
    if (now - start < spin) continue;
    // Block until the rank publishes (it wakes sleepers after its store), at most 10 ms
    // at a time so that failures and the deadline are seen.
    watch.start(ep);
    l.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seq = l.seq.load(std::memory_order_seq_cst);
    REMORA_ASSIGN_OR_RETURN(done, seen(seq));
    if (!done) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(op.deadline() - now);
      engine::futex_wait(&l.seq, seq,
                         std::clamp(left, std::chrono::nanoseconds(0), std::chrono::nanoseconds(10'000'000)),
                         engine::FutexScope::kShared);
    }
    l.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (done) break;
  }
  net::sync_acquire(memory_.sync_key());
  return Status::ok();
}

Status ShmSegment::next_round(Op& op) {
  // Nobody still reads the line and buffer of the next round's residue, last used kDepth
  // rounds before it: everyone has published the round after that one.
  const uint32_t done_by_all = round_ + 2 - kDepth;
  for (int r = 0; r < ranks_; ++r) {
    if (r != me_) REMORA_RETURN_IF_ERROR(wait_for(op, r, done_by_all));
  }
  ++round_;
  return Status::ok();
}

std::byte* ShmSegment::mine(size_t bytes) const noexcept {
  return bytes <= kInlineBytes ? line(me_, round_).data : buffer(me_, round_);
}

void ShmSegment::release(const ShmShape& shape) {
  Line& l = line(me_, round_);
  l.shape = shape;
  net::sync_release(memory_.sync_key());
  l.seq.store(round_, std::memory_order_seq_cst);
  // After the store: a rank that counted itself a sleeper before it looked at seq either
  // saw the new value or is counted here.
  if (l.sleepers.load(std::memory_order_seq_cst) != 0) engine::futex_wake_all(&l.seq, engine::FutexScope::kShared);
}

Status ShmSegment::publish(Op& op, const ShmShape& shape, const void* data, size_t bytes) {
  REMORA_RETURN_IF_ERROR(next_round(op));
  bytes = std::min(bytes, slot_);
  if (bytes > 0) std::memcpy(mine(bytes), data, bytes);
  release(shape);
  return Status::ok();
}

Status ShmSegment::wait_rank(Op& op, int r, const ShmShape& shape) {
  REMORA_RETURN_IF_ERROR(wait_for(op, r, round_));
  const ShmShape theirs = line(r, round_).shape;
  if (theirs == shape) return Status::ok();
  return Status(StatusCode::kProtocol,
                fmt::format("rank {} calls another collective than this rank's (kind {} of {} bytes, detail {:#x}; "
                            "this rank: kind {} of {} bytes, detail {:#x}): ranks disagree on the call, its size, "
                            "its root or its algorithm",
                            member(r), theirs.kind, theirs.bytes, theirs.detail, shape.kind, shape.bytes, shape.detail));
}

Status ShmSegment::wait_all(Op& op, const ShmShape& shape) {
  for (int r = 0; r < ranks_; ++r) {
    if (r != me_) REMORA_RETURN_IF_ERROR(wait_rank(op, r, shape));
  }
  return Status::ok();
}

namespace {

/// What each rank tells the others at the set-up (allgathered).
struct HostRecord {
  std::array<std::byte, 16> boot_id;  ///< zero: unknown (then alone)
  uint64_t netns;                     ///< zero: unknown (then alone)
  uint32_t flags;                     ///< kWilling, kShares; bits 8-15: REMORA_COLL_SHM_GROUP
  uint32_t slot;                      ///< its REMORA_COLL_SHM, rounded up (rank 0's counts)
};
static_assert(sizeof(HostRecord) == 32);
constexpr uint32_t kWilling = 1;  ///< REMORA_COLL_SHM is not 0
constexpr uint32_t kShares = 2;   ///< may share memory with ranks of its host

/// Groups the ranks of `table`: ranks of one host (boot id and network namespace) that
/// may share memory, in order of rank; a host with more than rank 0's
/// REMORA_COLL_SHM_GROUP of them splits into the fewest groups that hold them, of sizes
/// that differ by one at most, the larger first (so hosts with the same number of ranks
/// make groups of one size, which two-level calls need); every other rank alone. Groups
/// in order of their lowest rank.
void group_ranks(std::span<const HostRecord> table, ShmPlan& plan) {
  const int most = std::clamp(static_cast<int>((table[0].flags >> 8) & 0xFF), 1, ShmSegment::kMaxRanks);
  constexpr std::array<std::byte, 16> kNone{};
  const auto shares = [&](const HostRecord& h) {
    return (h.flags & kShares) != 0 && h.boot_id != kNone && h.netns != 0;
  };
  struct Host {
    int ranks = 0;  // of this host that share
    int made = 0;   // its groups so far
    int open = -1;  // the last of them
  };
  std::map<std::pair<std::array<std::byte, 16>, uint64_t>, Host> hosts;
  for (const HostRecord& h : table) {
    if (shares(h)) ++hosts[{h.boot_id, h.netns}].ranks;
  }
  std::vector<int> sizes;
  plan.leaders.clear();
  plan.group_of.assign(table.size(), -1);
  plan.index_in.assign(table.size(), 0);
  for (size_t r = 0; r < table.size(); ++r) {
    const HostRecord& h = table[r];
    Host* host = shares(h) ? &hosts[{h.boot_id, h.netns}] : nullptr;
    int g = -1;
    if (host != nullptr && host->open >= 0) {
      const int groups = (host->ranks + most - 1) / most;
      const int room = host->ranks / groups + (host->made - 1 < host->ranks % groups ? 1 : 0);
      if (sizes[static_cast<size_t>(host->open)] < room) g = host->open;
    }
    if (g < 0) {
      g = static_cast<int>(plan.leaders.size());
      plan.leaders.push_back(static_cast<int>(r));
      sizes.push_back(0);
      if (host != nullptr) {
        host->open = g;
        ++host->made;
      }
    }
    plan.index_in[r] = sizes[static_cast<size_t>(g)]++;
    plan.group_of[r] = g;
  }
  plan.widest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  plan.narrowest = sizes.empty() ? 0 : *std::min_element(sizes.begin(), sizes.end());
}

/// The communicator ranks of group g, ascending.
std::vector<int> members_of(const ShmPlan& plan, int g) {
  std::vector<int> m;
  for (size_t r = 0; r < plan.group_of.size(); ++r) {
    if (plan.group_of[r] == g) m.push_back(static_cast<int>(r));
  }
  return m;
}

/// The communicator ranks a rank of the group `members` keeps endpoints to while it has
/// the segment (a rank waiting in it watches the endpoint of the rank it waits for):
/// every other member where the group is the whole communicator (every rank reads every
/// other's data); else the leader its members, and each member its leader.
std::vector<int> watched(std::span<const int> members, int me, bool whole) {
  std::vector<int> peers;
  for (int r : members) {
    if (r != me && (whole || me == members[0] || r == members[0])) peers.push_back(r);
  }
  return peers;
}

/// Whether this rank may open the endpoints to `peers` it lacks: "" or why not (the
/// open-file limit), so that a rank short of descriptors keeps messages instead of
/// failing the communicator.
std::string descriptors_for(Op& op, std::span<const int> peers) {
  std::vector<int> ranks;
  for (int r : peers) ranks.push_back(op.comm().world_rank(r));
  Status s = op.comm().world().prepare(ranks);
  return s.is_ok() ? "" : s.message();
}

/// The segment of the group `members` (this rank among them), made by its first rank
/// and offered to the others over `op`'s messages; the first rank tells everyone
/// whether all took it. `why` says why not, where this rank knows. `whole`: the group
/// is the communicator.
Result<std::optional<ShmSegment>> share_segment(Op& op, std::span<const int> members, bool whole, size_t slot,
                                                std::string& why) {
  const int me = op.rank();
  const std::vector<int> peers = watched(members, me, whole);
  std::optional<ShmSegment> seg;
  uint32_t ok = 0;
  if (me == members[0]) {
    Offer offer;
    why = descriptors_for(op, peers);
    auto made = why.empty() ? ShmSegment::create(members, slot) : Status(StatusCode::kNoResource, why);
    if (made) {
      seg.emplace(std::move(*made));
      offer = Offer{.ok = 1,
                    .pid = static_cast<int32_t>(::getpid()),
                    .fd = seg->fd(),
                    .slot = static_cast<uint32_t>(slot),
                    .nonce = seg->nonce()};
    } else {
      why = "this rank could not make it: " + made.status().message();
    }
    for (int r : members.subspan(1)) REMORA_RETURN_IF_ERROR(op.wait(op.send(r, &offer, sizeof offer, kOfferStep)));
    ok = offer.ok;
    for (int r : members.subspan(1)) {
      uint32_t answer = 0;
      REMORA_RETURN_IF_ERROR(op.wait(op.recv(r, &answer, sizeof answer, kAnswerStep), sizeof answer));
      if (answer != 1 && ok == 1) {
        ok = 0;
        why = fmt::format("rank {} could not map it", r);
      }
    }
    for (int r : members.subspan(1)) REMORA_RETURN_IF_ERROR(op.wait(op.send(r, &ok, sizeof ok, kVerdictStep)));
    if (seg) seg->close_fd();  // every rank that took it has it
  } else {
    Offer offer;
    REMORA_RETURN_IF_ERROR(op.wait(op.recv(members[0], &offer, sizeof offer, kOfferStep), sizeof offer));
    uint32_t answer = 0;
    if (offer.ok != 1) {
      why = fmt::format("rank {} did not make one", members[0]);
    } else {
      const auto index = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
      auto taken = net::take_peer_fd(offer.pid, offer.fd);
      Result<ShmSegment> adopted =
          taken ? ShmSegment::adopt(std::move(*taken), members, index, offer.slot, offer.nonce) : taken.status();
      if (adopted && (why = descriptors_for(op, peers)).empty()) {
        seg.emplace(std::move(*adopted));
        answer = 1;
      } else if (!adopted) {
        why = fmt::format("this rank could not map rank {}'s: {}", members[0], adopted.status().message());
      }
    }
    REMORA_RETURN_IF_ERROR(op.wait(op.send(members[0], &answer, sizeof answer, kAnswerStep)));
    REMORA_RETURN_IF_ERROR(op.wait(op.recv(members[0], &ok, sizeof ok, kVerdictStep), sizeof ok));
  }
  if (ok != 1) seg.reset();
  return seg;
}

}  // namespace

Result<ShmPlan*> shm_plan(Op& op) {
  CommCore& comm = op.comm();
  if (comm.shm_decided()) return comm.shm();
  const int n = comm.size();
  const int me = comm.rank();
  if (n < 2) {
    comm.set_shm(nullptr, 0, "one rank");
    return nullptr;
  }
  // Each step of the set-up runs as an operation of its own (every rank reserves the
  // same numbers), so that its messages never meet the call's.
  Op hosts(comm, comm.reserve_seq(), op.deadline(), op.config());
  Op offers(comm, comm.reserve_seq(), op.deadline(), op.config());
  Op verdicts(comm, comm.reserve_seq(), op.deadline(), op.config());

  // Every rank learns every rank's host and whether it takes part. A rank with
  // REMORA_COLL_SHM=0 still tells (no), so that one rank set apart from the others makes
  // no segment rather than a hang; one with REMORA_SAME_HOST=off or REMORA_ENCRYPT is a
  // group of its own.
  std::string why = local_refusal(op);
  const net::HostIdentity self = net::this_host();
  std::vector<HostRecord> table(static_cast<size_t>(n));
  HostRecord& mine = table[static_cast<size_t>(me)];
  mine = HostRecord{.boot_id = self.boot_id,
                    .netns = self.netns,
                    .flags = (op.config().shm_bytes != 0 ? kWilling : 0u) | (why.empty() ? kShares : 0u) |
                             static_cast<uint32_t>(std::min<size_t>(op.config().shm_group, 255) << 8),
                    .slot = static_cast<uint32_t>(std::min<size_t>((op.config().shm_bytes + 63) / 64 * 64, 1u << 30))};
  REMORA_RETURN_IF_ERROR(allgather_bruck(hosts, table.data(), sizeof(HostRecord)));
  auto plan = std::make_unique<ShmPlan>();
  plan->slot = table[0].slot;
  group_ranks(table, *plan);
  const bool willing =
      std::all_of(table.begin(), table.end(), [](const HostRecord& h) { return (h.flags & kWilling) != 0; });
  auto off = [&](std::string_view reason) -> Result<ShmPlan*> {
    REMORA_LOG(kDebug, "communicator {}: collectives stay on messages: {}", comm.id(), reason);
    comm.set_shm(nullptr, 0, std::string(reason));
    return nullptr;
  };
  if (!willing) return off("REMORA_COLL_SHM=0 on a rank");
  if (plan->leaders.size() == static_cast<size_t>(n)) {
    return off(why.empty() ? "no two ranks share a host" : why);
  }

  const int g = plan->group_of[static_cast<size_t>(me)];
  std::vector<int> members = members_of(*plan, g);
  if (members.size() > 1) {
    REMORA_ASSIGN_OR_RETURN(plan->segment, share_segment(offers, members, plan->flat(), plan->slot, why));
  }
  if (!plan->flat()) {
    // Every rank learns which groups have their segment; a group without one is split
    // into ranks alone.
    std::vector<uint8_t> ok(static_cast<size_t>(n));
    ok[static_cast<size_t>(me)] = members.size() == 1 || plan->segment ? 1 : 0;
    REMORA_RETURN_IF_ERROR(allgather_bruck(verdicts, ok.data(), 1));
    if (std::find(ok.begin(), ok.end(), 0) != ok.end()) {
      for (size_t r = 0; r < table.size(); ++r) {
        if (ok[r] == 0) table[r].flags &= ~kShares;
      }
      group_ranks(table, *plan);
      members = members_of(*plan, plan->group_of[static_cast<size_t>(me)]);
      if (plan->leaders.size() == static_cast<size_t>(n)) return off("no group of ranks could map its segment");
    }
  } else if (!plan->segment) {
    return off(why.empty() ? "another rank could not map the segment" : why);
  }
  if (plan->segment) {
    // A rank waiting in the segment watches the endpoint of the rank it waits for (or,
    // where it has none, its leader's, which has).
    std::vector<int> ranks;
    for (int r : watched(members, me, plan->flat())) ranks.push_back(comm.world_rank(r));
    REMORA_RETURN_IF_ERROR(comm.world().connect_all(ranks, op.deadline()));
  }
  plan->reps.reserve(plan->leaders.size());
  for (int grp = 0; grp < static_cast<int>(plan->leaders.size()); ++grp) {
    for (int r : members_of(*plan, grp)) plan->by_host.push_back(r);
  }
  if (std::is_sorted(plan->by_host.begin(), plan->by_host.end())) {
    plan->by_host.clear();
  } else {
    plan->place.resize(plan->by_host.size());
    for (size_t i = 0; i < plan->by_host.size(); ++i) plan->place[static_cast<size_t>(plan->by_host[i])] = static_cast<int>(i);
  }
  if (!plan->flat()) plan->local = members_of(*plan, plan->group_of[static_cast<size_t>(me)]);
  if (const int lanes = plan->lanes(); lanes > 0) {
    // The lanes of a large allreduce: the group's first `lanes` ranks, and for them the
    // ranks at the same index in every group.
    const int at = plan->index_in[static_cast<size_t>(me)];
    plan->lane_ranks.assign(plan->local.begin(), plan->local.begin() + lanes);
    for (size_t r = 0; at < lanes && r < plan->group_of.size(); ++r) {
      if (plan->index_in[r] == at) plan->across.push_back(static_cast<int>(r));
    }
  }
  if (plan->blocks_take_lanes()) {
    plan->by_index.assign(static_cast<size_t>(plan->widest) * plan->leaders.size(), -1);
    for (size_t r = 0; r < plan->group_of.size(); ++r) {
      const auto at = static_cast<size_t>(plan->index_in[r]) * plan->leaders.size() + static_cast<size_t>(plan->group_of[r]);
      plan->by_index[at] = static_cast<int>(r);
    }
  }
  const int ranks = plan->segment ? static_cast<int>(members.size()) : 0;
  if (ranks == 0 && why.empty()) why = "no other rank of its host in its group";
  comm.set_shm(std::move(plan), ranks, why);
  return comm.shm();
}

namespace {

/// The shape of a call through the segment, or of one by messages (`through` false).
ShmShape shape_of(ShmKind through, bool fits, uint32_t detail, size_t bytes) {
  // Each kind through the segment is followed by its kind by messages.
  const auto kind = static_cast<uint32_t>(through) + (fits ? 0 : 1);
  return ShmShape{.kind = kind, .detail = detail, .bytes = bytes};
}

uint32_t reduction(DataType type, ReduceOp rop) {
  return (static_cast<uint32_t>(type) << 8) | static_cast<uint32_t>(rop);
}

/// Combines every rank's `count` elements in index order into `out` (kAvg divides by
/// the segment's ranks).
void combine_all(const ShmSegment& seg, void* out, size_t count, DataType type, ReduceOp rop) {
  std::array<const void*, ShmSegment::kMaxRanks> inputs{};
  const size_t bytes = count * size_of(type);
  const int n = seg.ranks();
  for (int r = 0; r < n; ++r) inputs[static_cast<size_t>(r)] = seg.data(r, bytes);
  // Every rank that combines does it on the same bytes in the same order.
  reduce_many(type, rop, out, std::span(inputs.data(), static_cast<size_t>(n)), count);
  if (rop == ReduceOp::kAvg) finish_avg(type, out, count, n);
}

/// The call does not go through the segment: this rank's shape only, where it has one.
Result<bool> shape_only(Op& op, ShmPlan& plan, const ShmShape& shape) {
  if (plan.segment) REMORA_RETURN_IF_ERROR(plan.segment->publish(op, shape, nullptr, 0));
  return false;
}

/// The groups' representatives for a call rooted at `root`: each group's leader, but
/// the root for its own group.
std::span<const int> reps_for(ShmPlan& plan, int root) {
  plan.reps.assign(plan.leaders.begin(), plan.leaders.end());
  plan.reps[static_cast<size_t>(plan.group_of[static_cast<size_t>(root)])] = root;
  return plan.reps;
}

/// This rank's view among the leaders `reps` (its group's index).
Op among(Op& op, const ShmPlan& plan, std::span<const int> reps) {
  return Op(op, reps, plan.group_of[static_cast<size_t>(op.rank())]);
}

/// The leader publishes its `total` bytes at `data` to its group in rounds of a slot
/// each (one round where there are none); a member copies `bytes` of them, from offset
/// `from`, into `out`.
Status hand_out(Op& op, ShmSegment& seg, const ShmShape& shape, const std::byte* data, size_t total, std::byte* out,
                size_t from, size_t bytes) {
  for (size_t at = 0; at == 0 || at < total; at += seg.slot()) {
    const size_t end = std::min(at + seg.slot(), total);
    if (seg.me() == 0) {
      REMORA_RETURN_IF_ERROR(seg.publish(op, shape, data + at, end - at));
      continue;
    }
    REMORA_RETURN_IF_ERROR(seg.publish(op, shape, nullptr, 0));
    REMORA_RETURN_IF_ERROR(seg.wait_rank(op, 0, shape));
    const size_t lo = std::max(at, from), hi = std::min(end, from + bytes);
    if (lo < hi) std::memcpy(out + (lo - from), seg.data(0, end - at) + (lo - at), hi - lo);
  }
  return Status::ok();
}

/// Every rank group by group, each group in rank order (plan.by_host, or rank order
/// where that is empty): where each group starts there, and the rank at each place.
struct ByGroup {
  explicit ByGroup(const ShmPlan& p) : plan(p), first(p.leaders.size() + 1, 0) {
    for (int g : plan.group_of) ++first[static_cast<size_t>(g) + 1];
    for (size_t g = 0; g + 1 < first.size(); ++g) first[g + 1] += first[g];
  }
  size_t groups() const noexcept { return first.size() - 1; }
  size_t width(size_t g) const noexcept { return first[g + 1] - first[g]; }
  /// Group g's j-th rank.
  size_t rank(size_t g, size_t j) const noexcept {
    const size_t place = first[g] + j;
    return plan.by_host.empty() ? place : static_cast<size_t>(plan.by_host[place]);
  }
  const ShmPlan& plan;
  std::vector<size_t> first;
};

/// An alltoall over several groups, after each member published its send buffer: the
/// leader (a rank alone is its own) packs, for every group, the blocks each of its
/// members sends to each of that group's; the leaders exchange those runs by messages;
/// each leader lays out every member's received blocks and hands them back in rounds
/// of a slot (so ranks of different groups exchange one message per pair of groups).
Status alltoall_by_group(Op& op, ShmPlan& plan, const void* send, std::byte* out, size_t block, const ShmShape& shape) {
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  const size_t n = plan.group_of.size(), whole = n * block;
  const size_t mine = seg == nullptr ? 1 : static_cast<size_t>(seg->ranks());
  const size_t stay = (mine - 1) * whole;  // the other members' received blocks
  if (seg == nullptr || seg->me() == 0) {
    if (seg != nullptr) REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
    const ByGroup order(plan);
    const size_t k = order.groups();
    std::vector<Span> runs(k);
    for (size_t g = 0, at = 0; g < k; ++g) {
      runs[g] = Span{at, mine * order.width(g) * block};
      at += runs[g].bytes;
    }
    Scratch& scratch = op.comm().scratch();
    std::byte* packed = grow(scratch.a, whole * mine);
    std::byte* got = grow(scratch.b, whole * mine);
    // To group g: member i's block for g's member j at (i * |g| + j) blocks into its run.
    for (size_t i = 0; i < mine; ++i) {
      const auto* from = i == 0 ? static_cast<const std::byte*>(send) : seg->data(static_cast<int>(i), whole);
      for (size_t g = 0; g < k; ++g) {
        std::byte* to = packed + runs[g].offset + i * order.width(g) * block;
        for (size_t j = 0; j < order.width(g); ++j) copy_block(to + j * block, from + order.rank(g, j) * block, block);
      }
    }
    Op leaders = among(op, plan, plan.leaders);
    REMORA_RETURN_IF_ERROR(alltoall_spans(leaders, packed, runs, got, runs));
    // From group g: its member j's block for this group's member i at (j * mine + i).
    std::byte* laid = stay > 0 ? grow(scratch.c, stay) : nullptr;
    for (size_t g = 0; g < k; ++g) {
      for (size_t j = 0; j < order.width(g); ++j) {
        const size_t r = order.rank(g, j);
        for (size_t i = 0; i < mine; ++i) {
          std::byte* to = i == 0 ? out : laid + (i - 1) * whole;
          copy_block(to + r * block, got + runs[g].offset + (j * mine + i) * block, block);
        }
      }
    }
    return seg == nullptr ? Status::ok() : hand_out(op, *seg, shape, laid, stay, nullptr, 0, 0);
  }
  // A member: its blocks are the leader's laid-out bytes [(i - 1) * whole, i * whole).
  return hand_out(op, *seg, shape, nullptr, stay, out, static_cast<size_t>(seg->me() - 1) * whole, whole);
}

/// An alltoallv's header in a segment: u64 bytes to each of `n` ranks, then from each,
/// in rank order, padded to a multiple of 64 bytes (so never in the line).
size_t counts_header(size_t n) { return (2 * n * sizeof(uint64_t) + 63) / 64 * 64; }

/// Where, in a rank's published alltoallv data, its block for each rank starts (its own
/// has none), from its header `counts`; whether its header and blocks fit `slot`.
/// Sizes are clamped, so a hostile header cannot overflow the sum.
bool block_starts(std::span<const uint64_t> counts, size_t self, size_t slot, std::span<size_t> starts) {
  const size_t n = starts.size();
  uint64_t end = counts_header(n);
  for (size_t j = 0; j < n; ++j) {
    starts[j] = static_cast<size_t>(std::min<uint64_t>(end, slot + 1));
    if (j != self) end += std::min<uint64_t>(counts[j], slot + 1);  // n · (slot + 1) at most
  }
  return end <= slot;
}

Status disagree(size_t sender, uint64_t sends, size_t receiver, uint64_t expects) {
  return Status(StatusCode::kProtocol,
                fmt::format("alltoallv: rank {} sends {} bytes to rank {}, which expects {}: ranks disagree on the "
                            "counts",
                            sender, sends, receiver, expects));
}

/// An alltoallv over several groups, after each member published its counts and, where
/// they fit, its blocks. The leader (a rank alone is its own) sends every other leader
/// whether its group's fit and a table of what each of its members sends to each of
/// that group's, and, where they fit, those blocks right behind. Where any group's do
/// not, every leader tells its members so and all run it by messages. Otherwise each
/// checks the tables against its members' counts (and its members' counts among
/// themselves), writes its own blocks, and hands its members theirs: a round saying
/// where each member's blocks end, then as many rounds of a slot as they fill.
Result<bool> alltoallv_by_group(Op& op, ShmPlan& plan, const void* send, std::span<const size_t> send_displs,
                                void* recv, std::span<const size_t> recv_displs, size_t elem,
                                std::span<const uint64_t> own, bool fits, const ShmShape& shape) {
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  const size_t n = plan.group_of.size(), me = static_cast<size_t>(op.rank());
  const size_t mine = seg == nullptr ? 1 : static_cast<size_t>(seg->ranks());
  const size_t head = counts_header(n), slot = plan.slot;
  const size_t ends_bytes = (mine * sizeof(uint64_t) + 63) / 64 * 64;  // the hand-out's first round
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);
  Scratch& scratch = op.comm().scratch();
  if (seg != nullptr && seg->me() != 0) {
    // A member: the leader's verdict and where each member's blocks end, then its blocks.
    REMORA_RETURN_IF_ERROR(seg->publish(op, shape, nullptr, 0));
    REMORA_RETURN_IF_ERROR(seg->wait_rank(op, 0, shape));
    std::array<uint64_t, ShmSegment::kMaxRanks> ends{};
    std::memcpy(ends.data(), seg->data(0, ends_bytes), mine * sizeof(uint64_t));
    if (ends[0] == 0) return false;
    const auto i = static_cast<size_t>(seg->me());
    const uint64_t from = i == 1 ? 0 : ends[i - 1], to = ends[i];
    uint64_t expected = 0;
    for (size_t s = 0; s < n; ++s) expected += s == me ? 0 : own[n + s];
    if (ends[0] != 1 || to < from || to - from != expected || ends[mine - 1] < to) {
      return Status(StatusCode::kProtocol,
                    fmt::format("communicator segment corrupt: the leader hands this rank bytes [{}, {}) of {} where "
                                "it expects {}",
                                from, to, ends[mine - 1], expected));
    }
    std::byte* mine_in = grow(scratch.a, expected);
    REMORA_RETURN_IF_ERROR(hand_out(op, *seg, shape, nullptr, ends[mine - 1], mine_in, from, expected));
    for (size_t s = 0; s < n; ++s) {
      const size_t bytes = own[n + s];
      const std::byte* block = s == me ? in + send_displs[me] * elem : mine_in;
      if (bytes > 0) std::memcpy(out + recv_displs[s] * elem, block, bytes);
      if (s != me) mine_in += bytes;
    }
    return true;
  }
  // The leader: every member's counts (its own first), copied once, and where each
  // member's blocks start in what it published.
  if (seg != nullptr) REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
  std::vector<uint64_t> counts(mine * 2 * n);
  std::vector<size_t> starts(mine * n);
  std::copy(own.begin(), own.end(), counts.begin());
  bool group_fits = fits;
  for (size_t i = 1; i < mine; ++i) {
    const std::span<uint64_t> c(counts.data() + i * 2 * n, 2 * n);
    std::memcpy(c.data(), seg->data(static_cast<int>(i), head), 2 * n * sizeof(uint64_t));
    const auto rank = static_cast<size_t>(seg->member(static_cast<int>(i)));
    group_fits = block_starts(c, rank, slot, std::span(starts.data() + i * n, n)) && group_fits;
  }
  const auto member = [&](size_t i) {
    return seg == nullptr ? me : static_cast<size_t>(seg->member(static_cast<int>(i)));
  };
  const auto sends = [&](size_t i, size_t r) { return counts[i * 2 * n + r]; };
  const auto expects = [&](size_t i, size_t r) { return counts[i * 2 * n + n + r]; };
  std::array<uint64_t, ShmSegment::kMaxRanks> ends{};  // ends_bytes of them: mine <= kMaxRanks
  // Every member's block for every other member of the group agrees with what that one
  // expects (they go from one to the other without a message, which would catch it).
  for (size_t i = 0; group_fits && i < mine; ++i) {
    for (size_t j = 0; j < mine; ++j) {
      if (i != j && sends(i, member(j)) != expects(j, member(i))) {
        return disagree(member(i), sends(i, member(j)), member(j), expects(j, member(i)));
      }
    }
  }
  // To every other group g: whether this group fits and a table of member i's bytes for
  // g's member j at (i * |g| + j), in u64 words (the same count comes back: |g| * mine);
  // then, where it fits, those blocks in that order in a second message.
  const ByGroup order(plan);
  const size_t k = order.groups(), own_group = static_cast<size_t>(plan.group_of[me]);
  std::vector<size_t> words_at(k + 1, 0);
  for (size_t g = 0; g < k; ++g) words_at[g + 1] = words_at[g] + (g == own_group ? 0 : 1 + mine * order.width(g));
  std::vector<uint64_t> tables_out(words_at[k]), tables_in(words_at[k]);
  std::vector<Span> blocks_out(k), blocks_in(k);
  size_t all_out = 0, all_in = 0;  // bytes of every block message out, and in
  for (size_t g = 0; g < k; ++g) {
    if (g == own_group) continue;
    const size_t width = order.width(g);
    uint64_t* table = tables_out.data() + words_at[g];
    table[0] = group_fits ? 1 : 0;
    for (size_t i = 0; i < mine; ++i) {
      for (size_t j = 0; j < width; ++j) table[1 + i * width + j] = sends(i, order.rank(g, j));
    }
    blocks_out[g] = Span{all_out, 0};
    for (size_t w = 1; group_fits && w <= mine * width; ++w) blocks_out[g].bytes += table[w];
    all_out += blocks_out[g].bytes;
  }
  std::byte* packed = grow(scratch.a, all_out);
  for (size_t g = 0; group_fits && g < k; ++g) {
    if (g == own_group) continue;
    std::byte* to = packed + blocks_out[g].offset;
    for (size_t i = 0; i < mine; ++i) {
      for (size_t j = 0; j < order.width(g); ++j) {
        const size_t r = order.rank(g, j);
        const uint64_t bytes = sends(i, r);
        if (bytes == 0) continue;
        std::memcpy(to, i == 0 ? in + send_displs[r] * elem : seg->data(static_cast<int>(i), head) + starts[i * n + r],
                    bytes);
        to += bytes;
      }
    }
  }
  // The leaders' exchange: every table first, then the blocks of the groups that fit
  // (sent right behind their table; received once the table said how many). Nothing
  // waits for a step of its own to learn whether every group fits.
  Op leaders = among(op, plan, plan.leaders);
  Inflight io(leaders);
  for (size_t g = 0; g < k; ++g) {
    if (g != own_group)
      io.recv(static_cast<int>(g), tables_in.data() + words_at[g], (words_at[g + 1] - words_at[g]) * 8);
  }
  for (size_t g = 0; g < k; ++g) {
    if (g == own_group) continue;
    io.send(static_cast<int>(g), tables_out.data() + words_at[g], (words_at[g + 1] - words_at[g]) * 8);
    if (group_fits) io.send(static_cast<int>(g), packed + blocks_out[g].offset, blocks_out[g].bytes);
  }
  for (size_t g = 0; g + 1 < k; ++g) REMORA_RETURN_IF_ERROR(io.wait_oldest());  // the tables
  bool all_fit = group_fits;
  for (size_t g = 0; g < k; ++g) {
    if (g == own_group) continue;
    const uint64_t* table = tables_in.data() + words_at[g];
    const auto corrupt = [&] {
      return Status(StatusCode::kProtocol,
                    fmt::format("alltoallv: the table from rank {}, its group's leader, is corrupt", plan.leaders[g]));
    };
    if (table[0] > 1) return corrupt();
    all_fit = all_fit && table[0] == 1;
    blocks_in[g] = Span{all_in, 0};
    for (size_t w = 1; table[0] == 1 && w <= mine * order.width(g); ++w) {
      // Only what this group's members expect is received (and the table checked against
      // it below); a larger claim is corruption.
      if (table[w] > slot) return corrupt();
      blocks_in[g].bytes += table[w];
    }
    all_in += blocks_in[g].bytes;
  }
  std::byte* got = grow(scratch.b, all_in);
  for (size_t g = 0; g < k; ++g) {
    if (g != own_group && tables_in[words_at[g]] == 1) {
      io.recv(static_cast<int>(g), got + blocks_in[g].offset, blocks_in[g].bytes);
    }
  }
  REMORA_RETURN_IF_ERROR(io.finish());
  if (!all_fit) {
    if (seg != nullptr) REMORA_RETURN_IF_ERROR(seg->publish(op, shape, ends.data(), ends_bytes));
    return false;
  }
  // Where each block for member i from rank r is: from another group, in what its
  // leader sent (a table of its member j's bytes for member i at (j * mine + i), checked
  // against the members' counts, then those blocks); from this group, where its member
  // published it (the leader's own in its send buffer).
  std::vector<const std::byte*> block_from(mine * n, nullptr);  // (receiver i, sender r)
  for (size_t g = 0; g < k; ++g) {
    const size_t width = order.width(g);
    const uint64_t* table = tables_in.data() + words_at[g] + 1;
    const std::byte* at = got + blocks_in[g].offset;
    for (size_t j = 0; j < width; ++j) {
      const size_t r = order.rank(g, j);
      for (size_t i = 0; i < mine; ++i) {
        if (g == own_group) {
          block_from[i * n + r] = j == 0 ? in + send_displs[member(i)] * elem
                                         : seg->data(static_cast<int>(j), head) + starts[j * n + member(i)];
          continue;
        }
        if (table[j * mine + i] != expects(i, r)) return disagree(r, table[j * mine + i], member(i), expects(i, r));
        block_from[i * n + r] = at;
        at += expects(i, r);
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    const std::byte* block = r == me ? in + send_displs[me] * elem : block_from[r];
    if (expects(0, r) > 0) std::memcpy(out + recv_displs[r] * elem, block, expects(0, r));
  }
  if (seg == nullptr) return true;
  ends[0] = 1;
  uint64_t laid_bytes = 0;
  for (size_t i = 1; i < mine; ++i) {
    for (size_t r = 0; r < n; ++r) laid_bytes += r == member(i) ? 0 : expects(i, r);
    ends[i] = laid_bytes;
  }
  std::byte* laid = grow(scratch.c, laid_bytes);
  for (size_t i = 1, at = 0; i < mine; ++i) {
    for (size_t r = 0; r < n; ++r) {
      const uint64_t bytes = r == member(i) ? 0 : expects(i, r);
      if (bytes > 0) std::memcpy(laid + at, block_from[i * n + r], bytes);
      at += bytes;
    }
  }
  REMORA_RETURN_IF_ERROR(seg->publish(op, shape, ends.data(), ends_bytes));
  REMORA_RETURN_IF_ERROR(hand_out(op, *seg, shape, laid, laid_bytes, nullptr, 0, 0));
  return true;
}

}  // namespace

bool shm_takes(CollectiveKind kind, const CollConfig& call, size_t bytes, const ShmPlan& plan) noexcept {
  const size_t slot = plan.slot;
  switch (kind) {
    case CollectiveKind::kBarrier: return true;
    case CollectiveKind::kAllreduce: return call.allreduce == Algo::kAuto && bytes <= slot;
    case CollectiveKind::kReduce: return call.reduce == Algo::kAuto && bytes <= slot;
    case CollectiveKind::kBroadcast: return call.broadcast == Algo::kAuto && bytes <= slot;
    case CollectiveKind::kAllgather: return call.allgather == Algo::kAuto && bytes <= slot;
    case CollectiveKind::kAlltoall:  // `bytes` is a block: a rank's whole send buffer must fit
      return call.alltoall == Algo::kAuto && bytes <= slot / std::max<size_t>(plan.group_of.size(), 1);
    case CollectiveKind::kReduceScatter:  // `bytes` is a block: the whole input must fit
      return call.allreduce == Algo::kAuto && bytes <= slot / std::max<size_t>(plan.group_of.size(), 1) &&
             !two_level_takes(kind, call, bytes, plan);
    default: return false;
  }
}

bool two_level_takes(CollectiveKind kind, const CollConfig& call, size_t bytes, const ShmPlan& plan) noexcept {
  const Algo named = kind == CollectiveKind::kAllgather ? call.allgather : call.allreduce;
  if (named != Algo::kAuto || plan.lanes() == 0) return false;
  if (kind != CollectiveKind::kAllreduce && !plan.blocks_take_lanes()) return false;
  if (select_algorithm(kind, call, static_cast<int>(plan.group_of.size()), bytes) != Algo::kRing) return false;
  return kind == CollectiveKind::kReduceScatter || (kind == CollectiveKind::kAllreduce && bytes > plan.slot) ||
         (kind == CollectiveKind::kAllgather && bytes > plan.slot);
}

AlgorithmChoice shm_algorithm(CollectiveKind kind, const CollConfig& call, size_t bytes, const ShmPlan& plan) noexcept {
  if (plan.flat()) return {"shm", 1};
  const int k = static_cast<int>(plan.leaders.size());
  switch (kind) {
    case CollectiveKind::kAllgather: {
      // The rings across and within a group's lanes (two_level_takes), and where the
      // groups differ, the blocks into the lanes and the result back.
      if (two_level_takes(kind, call, bytes, plan)) {
        return {"hier", (k - 1) + (plan.lanes() - 1) + (plan.widest > plan.lanes() ? 2 : 0)};
      }
      const size_t widest = static_cast<size_t>(plan.widest) * bytes;
      const size_t whole = plan.group_of.size() * bytes;
      const int rounds = static_cast<int>(std::max<size_t>((whole + plan.slot - 1) / plan.slot, 1));
      return {"hier", 1 + rounds + algorithm_steps(kind, select_algorithm(kind, call, k, widest), k)};
    }
    case CollectiveKind::kBarrier: return {"hier", 2 + algorithm_steps(kind, Algo::kDissemination, k)};
    case CollectiveKind::kAlltoall: {
      // The send buffers to the leader, the leaders' exchange, the widest group's
      // received blocks back in rounds of a slot (alltoall_by_group).
      const size_t back = static_cast<size_t>(plan.widest - 1) * plan.group_of.size() * bytes;
      const int rounds = static_cast<int>(std::max<size_t>((back + plan.slot - 1) / plan.slot, 1));
      return {"hier", 1 + rounds + algorithm_steps(kind, Algo::kPairwise, k)};
    }
    case CollectiveKind::kAllreduce: {
      if (!two_level_takes(kind, call, bytes, plan)) {
        return {"hier", 2 + algorithm_steps(kind, Algo::kRecursiveDoubling, k)};
      }
      // Reduce-scatter and allgather rings within a group's lanes, the allreduce of a
      // block across; where the groups differ, the blocks into the lanes and back.
      const int lanes = plan.lanes();
      const size_t block = bytes / static_cast<size_t>(lanes);
      return {"hier", 2 * (lanes - 1) + algorithm_steps(kind, select_algorithm(kind, call, k, block), k) +
                          (plan.widest > lanes ? 2 : 0)};
    }
    case CollectiveKind::kReduceScatter:
      // The whole input as an allreduce (shm_takes), or the reduce-scatter rings within a
      // group's lanes and across (two_level_takes), and where the groups differ, the
      // parts into the lanes and the blocks back.
      if (shm_takes(kind, call, bytes, plan)) return {"hier", 2 + algorithm_steps(kind, Algo::kRecursiveDoubling, k)};
      return {"hier", (plan.lanes() - 1) + (k - 1) + (plan.widest > plan.lanes() ? 2 : 0)};
    default: return {"hier", 1 + algorithm_steps(kind, Algo::kTree, k)};
  }
}

Result<bool> allreduce_shm(Op& op, ShmPlan& plan, const void* send, void* recv, size_t count, DataType type,
                           ReduceOp rop) {
  const size_t bytes = count * size_of(type);
  const bool fits = shm_takes(CollectiveKind::kAllreduce, op.config(), bytes, plan);
  const ShmShape shape = shape_of(ShmKind::kAllreduce, fits, reduction(type, rop), bytes);
  if (!fits) return shape_only(op, plan, shape);
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  if (plan.flat()) {
    REMORA_RETURN_IF_ERROR(seg->publish(op, shape, send, bytes));
    REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
    combine_all(*seg, recv, count, type, rop);
    return true;
  }
  // Hierarchical: the group's sum to its leader, the leaders' allreduce, the leader's
  // result to the group (a round of its own).
  const ReduceOp partial = rop == ReduceOp::kAvg ? ReduceOp::kSum : rop;
  if (seg != nullptr) {
    REMORA_RETURN_IF_ERROR(seg->publish(op, shape, send, bytes));
    if (seg->me() != 0) {
      REMORA_RETURN_IF_ERROR(seg->publish(op, shape, nullptr, 0));
      REMORA_RETURN_IF_ERROR(seg->wait_rank(op, 0, shape));
      if (bytes > 0) std::memcpy(recv, seg->data(0, bytes), bytes);
      return true;
    }
    REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
    combine_all(*seg, recv, count, type, partial);
  } else if (send != recv) {
    std::memcpy(recv, send, bytes);
  }
  Op leaders = among(op, plan, plan.leaders);
  REMORA_RETURN_IF_ERROR(allreduce_rd(leaders, recv, recv, count, type, partial));
  if (rop == ReduceOp::kAvg) finish_avg(type, recv, count, op.size());
  if (seg != nullptr) REMORA_RETURN_IF_ERROR(seg->publish(op, shape, recv, bytes));
  return true;
}

Result<bool> reduce_shm(Op& op, ShmPlan& plan, const void* send, void* recv, size_t count, DataType type,
                        ReduceOp rop, int root) {
  const size_t bytes = count * size_of(type);
  const bool fits = shm_takes(CollectiveKind::kReduce, op.config(), bytes, plan);
  const ShmShape shape =
      shape_of(ShmKind::kReduce, fits, (static_cast<uint32_t>(root) << 16) | reduction(type, rop), bytes);
  if (!fits) return shape_only(op, plan, shape);
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  const int me = op.rank();
  if (plan.flat()) {
    REMORA_RETURN_IF_ERROR(seg->publish(op, shape, send, bytes));
    if (me != root) return true;  // the root reads it before it starts its next round
    REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
    combine_all(*seg, recv, count, type, rop);
    return true;
  }
  // Hierarchical: each group's sum to its representative (the root in its own group),
  // then the representatives' tree to the root.
  const ReduceOp partial = rop == ReduceOp::kAvg ? ReduceOp::kSum : rop;
  const std::span<const int> reps = reps_for(plan, root);
  const bool rep = reps[static_cast<size_t>(plan.group_of[static_cast<size_t>(me)])] == me;
  const void* mine = send;
  if (seg != nullptr) {
    REMORA_RETURN_IF_ERROR(seg->publish(op, shape, send, bytes));
    if (!rep) return true;
    REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
    void* out = me == root ? recv : grow(op.comm().scratch().c, bytes);
    combine_all(*seg, out, count, type, partial);
    mine = out;
  }
  Op leaders = among(op, plan, reps);
  REMORA_RETURN_IF_ERROR(
      reduce_tree(leaders, mine, recv, count, type, partial, plan.group_of[static_cast<size_t>(root)]));
  if (me == root && rop == ReduceOp::kAvg) finish_avg(type, recv, count, op.size());
  return true;
}

Result<bool> broadcast_shm(Op& op, ShmPlan& plan, void* buf, size_t bytes, int root) {
  const bool fits = shm_takes(CollectiveKind::kBroadcast, op.config(), bytes, plan);
  const ShmShape shape = shape_of(ShmKind::kBroadcast, fits, static_cast<uint32_t>(root), bytes);
  if (!fits) return shape_only(op, plan, shape);
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  const int me = op.rank();
  // Hierarchical: the representatives (the root in its own group) first get it down
  // their tree; each then publishes it to its group. Flat: the root is everyone's.
  const std::span<const int> reps = plan.flat() ? std::span<const int>() : reps_for(plan, root);
  const int from = plan.flat() ? root : reps[static_cast<size_t>(plan.group_of[static_cast<size_t>(me)])];
  if (!plan.flat() && from == me) {
    Op leaders = among(op, plan, reps);
    REMORA_RETURN_IF_ERROR(broadcast_tree(leaders, buf, bytes, plan.group_of[static_cast<size_t>(root)]));
  }
  if (seg == nullptr) return true;
  REMORA_RETURN_IF_ERROR(seg->publish(op, shape, buf, from == me ? bytes : 0));
  if (from == me) return true;
  REMORA_RETURN_IF_ERROR(seg->wait_rank(op, seg->index_of(from), shape));
  if (bytes > 0) std::memcpy(buf, seg->data(seg->index_of(from), bytes), bytes);
  return true;
}

Status broadcast_by_group(Op& op, ShmPlan& plan, void* buf, size_t bytes, int root) {
  const auto me = static_cast<size_t>(op.rank());
  const std::span<const int> reps = reps_for(plan, root);
  const auto groups = static_cast<int>(reps.size()), ranks = static_cast<int>(plan.local.size());
  const int first = plan.group_of[static_cast<size_t>(root)];
  const int rep = reps[static_cast<size_t>(plan.group_of[me])];
  const int rep_at = plan.index_in[static_cast<size_t>(rep)];
  // The two trees as one, so that a representative's sends into its group go out
  // together with those to other groups, as one tree over every rank would send them.
  const BinomialEdges across =
      rep == op.rank() ? binomial_edges(mod(plan.group_of[me] - first, groups), groups) : BinomialEdges{};
  const BinomialEdges within = binomial_edges(mod(plan.index_in[me] - rep_at, ranks), ranks);
  const auto across_rank = [&](int place) { return reps[static_cast<size_t>(mod(place + first, groups))]; };
  const auto within_rank = [&](int place) { return plan.local[static_cast<size_t>(mod(place + rep_at, ranks))]; };
  Inflight io(op);
  if (across.parent >= 0 || within.parent >= 0) {
    io.recv(across.parent >= 0 ? across_rank(across.parent) : within_rank(within.parent), buf, bytes);
    REMORA_RETURN_IF_ERROR(io.wait_oldest());
  }
  for (int place : across.sends()) io.send(across_rank(place), buf, bytes);
  for (int place : within.sends()) io.send(within_rank(place), buf, bytes);
  return io.finish();
}

Status reduce_by_group(Op& op, ShmPlan& plan, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp rop, int root) {
  const auto me = static_cast<size_t>(op.rank());
  const ReduceOp partial = rop == ReduceOp::kAvg ? ReduceOp::kSum : rop;
  const std::span<const int> reps = reps_for(plan, root);
  const int rep = reps[static_cast<size_t>(plan.group_of[me])];
  const void* mine = send;
  if (plan.local.size() > 1) {
    // The representative's partial result goes to scratch the trees do not use (the
    // root's straight into its result).
    void* out = op.rank() == root ? recv : grow(op.comm().scratch().c, count * size_of(type));
    Op group(op, plan.local, plan.index_in[me]);
    REMORA_RETURN_IF_ERROR(
        reduce_tree(group, send, out, count, type, partial, plan.index_in[static_cast<size_t>(rep)]));
    if (rep != op.rank()) return Status::ok();
    mine = out;
  }
  Op leaders = among(op, plan, reps);
  REMORA_RETURN_IF_ERROR(
      reduce_tree(leaders, mine, recv, count, type, partial, plan.group_of[static_cast<size_t>(root)]));
  if (op.rank() == root && rop == ReduceOp::kAvg) finish_avg(type, recv, count, op.size());
  return Status::ok();
}

Result<bool> alltoall_shm(Op& op, ShmPlan& plan, const void* send, void* recv, size_t block) {
  const bool fits = shm_takes(CollectiveKind::kAlltoall, op.config(), block, plan);
  const ShmShape shape = shape_of(ShmKind::kAlltoall, fits, 0, block);
  if (!fits) return shape_only(op, plan, shape);
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  const auto n = static_cast<size_t>(op.size()), me = static_cast<size_t>(op.rank());
  const size_t whole = n * block;
  // Every rank publishes its whole send buffer: in one group each takes its block out
  // of each other's; over several, the leader takes them all.
  if (seg != nullptr) REMORA_RETURN_IF_ERROR(seg->publish(op, shape, send, whole));
  auto* out = static_cast<std::byte*>(recv);
  if (!plan.flat()) {
    REMORA_RETURN_IF_ERROR(alltoall_by_group(op, plan, send, out, block, shape));
    return true;
  }
  REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
  for (size_t r = 0; r < n; ++r) {
    const std::byte* from = r == me ? static_cast<const std::byte*>(send) : seg->data(static_cast<int>(r), whole);
    if (block > 0) std::memcpy(out + r * block, from + me * block, block);
  }
  return true;
}

Result<bool> alltoallv_shm(Op& op, ShmPlan& plan, const void* send, std::span<const size_t> send_counts,
                           std::span<const size_t> send_displs, void* recv, std::span<const size_t> recv_counts,
                           std::span<const size_t> recv_displs, DataType type) {
  const auto n = static_cast<size_t>(op.size()), me = static_cast<size_t>(op.rank());
  const size_t elem = size_of(type), slot = plan.slot, head = counts_header(n);
  const bool takes = op.config().alltoall == Algo::kAuto && head <= slot;
  const ShmShape shape = shape_of(ShmKind::kAlltoallv, takes, static_cast<uint32_t>(type) << 8, 0);
  if (!takes) return shape_only(op, plan, shape);
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  // This rank's counts in bytes (its header), and whether its blocks for the others fit
  // after them.
  std::vector<uint64_t>& own = op.comm().scratch().counts;
  own.resize(2 * n);
  size_t total = head;
  for (size_t r = 0; r < n; ++r) {
    own[r] = send_counts[r] * elem;
    own[n + r] = recv_counts[r] * elem;
    total += r == me ? 0 : own[r];
  }
  const bool fits = total <= slot;
  if (seg != nullptr) {
    REMORA_RETURN_IF_ERROR(seg->publish_with(op, shape, fits ? total : head, [&](std::byte* at) {
      std::memset(at, 0, head);
      std::memcpy(at, own.data(), own.size() * sizeof(uint64_t));
      if (!fits) return;
      std::byte* block = at + head;
      for (size_t r = 0; r < n; ++r) {
        if (r == me || own[r] == 0) continue;
        std::memcpy(block, static_cast<const std::byte*>(send) + send_displs[r] * elem, own[r]);
        block += own[r];
      }
    }));
  }
  if (!plan.flat()) {
    return alltoallv_by_group(op, plan, send, send_displs, recv, recv_displs, elem, own, fits, shape);
  }
  REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
  // Each rank's header, copied once (what a hostile rank writes later changes nothing
  // checked here): whether its blocks fit, and where the one for this rank starts.
  std::array<uint64_t, 2 * ShmSegment::kMaxRanks> counts_of{};  // one group: n <= kMaxRanks
  std::array<size_t, ShmSegment::kMaxRanks> starts_of{};
  const std::span<uint64_t> counts(counts_of.data(), 2 * n);
  const std::span<size_t> starts(starts_of.data(), n);
  std::array<size_t, ShmSegment::kMaxRanks> from{};
  std::array<uint64_t, ShmSegment::kMaxRanks> to_me{}, from_me{};
  bool all_fit = true;
  for (size_t r = 0; r < n; ++r) {
    std::memcpy(counts.data(), seg->data(static_cast<int>(r), head), 2 * n * sizeof(uint64_t));
    all_fit = block_starts(counts, r, slot, starts) && all_fit;
    from[r] = starts[me];
    to_me[r] = counts[me];
    from_me[r] = counts[n + me];
  }
  // Every rank read the same headers: all go on here, or all by messages.
  if (!all_fit) return false;
  auto* out = static_cast<std::byte*>(recv);
  for (size_t r = 0; r < n; ++r) {
    if (to_me[r] != own[n + r]) return disagree(r, to_me[r], me, own[n + r]);
    if (from_me[r] != own[r]) return disagree(me, own[r], r, from_me[r]);
  }
  for (size_t r = 0; r < n; ++r) {
    const std::byte* block = r == me ? static_cast<const std::byte*>(send) + send_displs[me] * elem
                                     : seg->data(static_cast<int>(r), head) + from[r];
    if (own[n + r] > 0) std::memcpy(out + recv_displs[r] * elem, block, own[n + r]);
  }
  return true;
}

Result<bool> allgather_shm(Op& op, ShmPlan& plan, void* recv, size_t block) {
  const bool fits = shm_takes(CollectiveKind::kAllgather, op.config(), block, plan);
  const ShmShape shape = shape_of(ShmKind::kAllgather, fits, 0, block);
  if (!fits) return shape_only(op, plan, shape);
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  auto* out = static_cast<std::byte*>(recv);
  const auto me = static_cast<size_t>(op.rank());
  if (seg != nullptr) REMORA_RETURN_IF_ERROR(seg->publish(op, shape, out + me * block, block));
  if (plan.flat()) {
    REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
    for (int r = 0; r < op.size(); ++r) {
      if (r != op.rank() && block > 0) std::memcpy(out + static_cast<size_t>(r) * block, seg->data(r, block), block);
    }
    return true;
  }
  // Hierarchical: the group's blocks to its leader, the leaders' allgather of their
  // groups' blocks (each group's in a run of `widest` blocks, in the order of its
  // ranks), the whole result to the group in rounds of a slot each.
  const size_t whole = static_cast<size_t>(op.size()) * block;
  if (seg == nullptr || seg->me() == 0) {
    const size_t run = static_cast<size_t>(plan.widest) * block;
    std::byte* runs = grow(op.comm().scratch().c, plan.leaders.size() * run);
    std::byte* mine = runs + static_cast<size_t>(plan.group_of[me]) * run;
    if (seg == nullptr) {
      copy_block(mine, out + me * block, block);
    } else {
      REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
      for (int j = 0; j < seg->ranks(); ++j) copy_block(mine + static_cast<size_t>(j) * block, seg->data(j, block), block);
    }
    Op leaders = among(op, plan, plan.leaders);
    REMORA_RETURN_IF_ERROR(allgather_messages(leaders, runs, run));
    for (size_t r = 0; r < plan.group_of.size(); ++r) {
      const auto at_run = static_cast<size_t>(plan.group_of[r]) * run + static_cast<size_t>(plan.index_in[r]) * block;
      copy_block(out + r * block, runs + at_run, block);
    }
  }
  if (seg == nullptr) return true;
  REMORA_RETURN_IF_ERROR(hand_out(op, *seg, shape, out, whole, out, 0, whole));
  return true;
}

Status barrier_shm(Op& op, ShmPlan& plan) {
  const ShmShape shape{.kind = static_cast<uint32_t>(ShmKind::kBarrier)};
  ShmSegment* seg = plan.segment ? &*plan.segment : nullptr;
  if (plan.flat()) {
    REMORA_RETURN_IF_ERROR(seg->publish(op, shape, nullptr, 0));
    return seg->wait_all(op, shape);
  }
  // Hierarchical: the group arrives at its leader, the leaders meet, the leader lets
  // its group go (a round of its own).
  if (seg != nullptr) {
    REMORA_RETURN_IF_ERROR(seg->publish(op, shape, nullptr, 0));
    if (seg->me() != 0) {
      REMORA_RETURN_IF_ERROR(seg->publish(op, shape, nullptr, 0));
      return seg->wait_rank(op, 0, shape);
    }
    REMORA_RETURN_IF_ERROR(seg->wait_all(op, shape));
  }
  Op leaders = among(op, plan, plan.leaders);
  REMORA_RETURN_IF_ERROR(barrier_dissemination(leaders));
  if (seg != nullptr) REMORA_RETURN_IF_ERROR(seg->publish(op, shape, nullptr, 0));
  return Status::ok();
}

}  // namespace remora::coll
