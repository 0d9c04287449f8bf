// coll/shm_segment.cc — see shm_segment.h.
#include "coll/shm_segment.h"

#include <sched.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "coll/reduce.h"
#include "core/log.h"
#include "engine/futex.h"

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

Result<ShmSegment> ShmSegment::create(int ranks, size_t slot) {
  if (ranks < 2 || ranks > kMaxRanks || slot == 0 || slot % 64 != 0) {
    return Status(StatusCode::kInvalidArgument, fmt::format("shared segment of {} ranks and {} bytes", ranks, slot));
  }
  ShmSegment s;
  REMORA_ASSIGN_OR_RETURN(s.memory_, net::SharedMemory::create("remora-coll-segment", segment_bytes(ranks, slot)));
  s.ranks_ = ranks;
  s.me_ = 0;
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

Result<ShmSegment> ShmSegment::adopt(net::Fd fd, int ranks, int me, size_t slot, const Nonce& nonce) {
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
  s.slot_ = slot;
  s.nonce_ = nonce;
  return s;
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
                    fmt::format("communicator segment corrupt: rank {} says round {} where this rank waits for {}", r,
                                seq, target));
    }
    return ahead >= 0;
  };
  REMORA_ASSIGN_OR_RETURN(bool done, seen(l.seq.load(std::memory_order_acquire)));
  if (done) {
    net::sync_acquire(memory_.sync_key());
    return Status::ok();
  }
  World& world = op.comm().world();
  Endpoint* ep = world.connected(op.comm().world_rank(r));
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
                    fmt::format("rank {} failed while this rank waited for it in the communicator segment: {}", r,
                                why.to_string()));
    }
    if (now >= op.deadline()) {
      return Status(StatusCode::kTimeout, fmt::format("collective timed out waiting for rank {} in the communicator "
                                                      "segment (REMORA_COLL_TIMEOUT_MS)",
                                                      r));
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

Status ShmSegment::publish(Op& op, const ShmShape& shape, const void* data, size_t bytes) {
  // Nobody still reads the line and buffer of the next round's residue, last used kDepth
  // rounds before it: everyone has published the round after that one.
  const uint32_t done_by_all = round_ + 2 - kDepth;
  for (int r = 0; r < ranks_; ++r) {
    if (r != me_) REMORA_RETURN_IF_ERROR(wait_for(op, r, done_by_all));
  }
  ++round_;
  bytes = std::min(bytes, slot_);
  Line& l = line(me_, round_);
  l.shape = shape;
  if (bytes > 0) std::memcpy(bytes <= kInlineBytes ? l.data : buffer(me_, round_), data, bytes);
  net::sync_release(memory_.sync_key());
  l.seq.store(round_, std::memory_order_seq_cst);
  // After the store: a rank that counted itself a sleeper before it looked at seq either
  // saw the new value or is counted here.
  if (l.sleepers.load(std::memory_order_seq_cst) != 0) engine::futex_wake_all(&l.seq, engine::FutexScope::kShared);
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
                            r, theirs.kind, theirs.bytes, theirs.detail, shape.kind, shape.bytes, shape.detail));
}

Status ShmSegment::wait_all(Op& op, const ShmShape& shape) {
  for (int r = 0; r < ranks_; ++r) {
    if (r != me_) REMORA_RETURN_IF_ERROR(wait_rank(op, r, shape));
  }
  return Status::ok();
}

Result<ShmSegment*> shm_segment(Op& op) {
  CommCore& comm = op.comm();
  if (comm.shm_decided()) return comm.shm();
  const int n = comm.size();
  // Rank 0's slot is everyone's. A rank with REMORA_COLL_SHM=0 still answers (no), so
  // that one rank set apart from the others makes no segment rather than a hang.
  const size_t slot = (op.config().shm_bytes + 63) / 64 * 64;
  if (n < 2 || n > ShmSegment::kMaxRanks) {
    comm.set_shm(nullptr);
    return nullptr;
  }
  std::string why = local_refusal(op);
  std::optional<ShmSegment> seg;
  uint32_t ok = 0;
  if (comm.rank() == 0) {
    Offer offer;
    if (why.empty()) {
      auto made = ShmSegment::create(n, slot);
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
    }
    for (int r = 1; r < n; ++r) REMORA_RETURN_IF_ERROR(op.wait(op.send(r, &offer, sizeof offer, kOfferStep)));
    ok = offer.ok;
    for (int r = 1; r < n; ++r) {
      uint32_t answer = 0;
      REMORA_RETURN_IF_ERROR(op.wait(op.recv(r, &answer, sizeof answer, kAnswerStep), sizeof answer));
      if (answer != 1 && ok == 1) {
        ok = 0;
        why = fmt::format("rank {} could not map it", r);
      }
    }
    for (int r = 1; r < n; ++r) REMORA_RETURN_IF_ERROR(op.wait(op.send(r, &ok, sizeof ok, kVerdictStep)));
    if (seg) seg->close_fd();  // every rank that took it has it
  } else {
    Offer offer;
    REMORA_RETURN_IF_ERROR(op.wait(op.recv(0, &offer, sizeof offer, kOfferStep), sizeof offer));
    uint32_t answer = 0;
    if (offer.ok != 1) {
      if (why.empty()) why = "rank 0 did not make one";
    } else if (why.empty()) {
      auto taken = net::take_peer_fd(offer.pid, offer.fd);
      Result<ShmSegment> adopted =
          taken ? ShmSegment::adopt(std::move(*taken), n, comm.rank(), offer.slot, offer.nonce) : taken.status();
      if (adopted) {
        seg.emplace(std::move(*adopted));
        answer = 1;
      } else {
        why = "this rank could not map rank 0's: " + adopted.status().message();
      }
    }
    REMORA_RETURN_IF_ERROR(op.wait(op.send(0, &answer, sizeof answer, kAnswerStep)));
    REMORA_RETURN_IF_ERROR(op.wait(op.recv(0, &ok, sizeof ok, kVerdictStep), sizeof ok));
  }
  if (ok != 1 || !seg) {
    REMORA_LOG(kDebug, "communicator {}: collectives stay on messages: {}", comm.id(),
               why.empty() ? "another rank refused" : why);
    comm.set_shm(nullptr);
    return nullptr;
  }
  // A rank waiting in the segment watches the endpoint of the rank it waits for.
  REMORA_RETURN_IF_ERROR(op.prepare_all_peers());
  comm.set_shm(std::make_unique<ShmSegment>(std::move(*seg)));
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

/// Combines every rank's `count` elements in rank order into `out`.
void combine_all(const ShmSegment& seg, int n, void* out, size_t count, DataType type, ReduceOp rop) {
  std::array<const void*, ShmSegment::kMaxRanks> inputs{};
  const size_t bytes = count * size_of(type);
  for (int r = 0; r < n; ++r) inputs[static_cast<size_t>(r)] = seg.data(r, bytes);
  // Every rank that combines does it on the same bytes in the same order.
  reduce_many(type, rop, out, std::span(inputs.data(), static_cast<size_t>(n)), count);
  if (rop == ReduceOp::kAvg) finish_avg(type, out, count, n);
}

}  // namespace

bool shm_takes(CollectiveKind kind, const CollConfig& call, size_t bytes, size_t slot) noexcept {
  switch (kind) {
    case CollectiveKind::kBarrier: return true;
    case CollectiveKind::kAllreduce: return call.allreduce == Algo::kAuto && bytes <= slot;
    case CollectiveKind::kReduce: return call.reduce == Algo::kAuto && bytes <= slot;
    case CollectiveKind::kBroadcast: return call.broadcast == Algo::kAuto && bytes <= slot;
    case CollectiveKind::kAllgather: return call.allgather == Algo::kAuto && bytes <= slot;
    default: return false;
  }
}

Result<bool> allreduce_shm(Op& op, ShmSegment& seg, const void* send, void* recv, size_t count, DataType type,
                           ReduceOp rop) {
  const size_t bytes = count * size_of(type);
  const bool fits = shm_takes(CollectiveKind::kAllreduce, op.config(), bytes, seg.slot());
  const ShmShape shape = shape_of(ShmKind::kAllreduce, fits, reduction(type, rop), bytes);
  REMORA_RETURN_IF_ERROR(seg.publish(op, shape, send, fits ? bytes : 0));
  if (!fits) return false;
  REMORA_RETURN_IF_ERROR(seg.wait_all(op, shape));
  combine_all(seg, op.size(), recv, count, type, rop);
  return true;
}

Result<bool> reduce_shm(Op& op, ShmSegment& seg, const void* send, void* recv, size_t count, DataType type,
                        ReduceOp rop, int root) {
  const size_t bytes = count * size_of(type);
  const bool fits = shm_takes(CollectiveKind::kReduce, op.config(), bytes, seg.slot());
  const ShmShape shape =
      shape_of(ShmKind::kReduce, fits, (static_cast<uint32_t>(root) << 16) | reduction(type, rop), bytes);
  REMORA_RETURN_IF_ERROR(seg.publish(op, shape, send, fits ? bytes : 0));
  if (!fits) return false;
  if (op.rank() != root) return true;  // the root reads it before it starts its next round
  REMORA_RETURN_IF_ERROR(seg.wait_all(op, shape));
  combine_all(seg, op.size(), recv, count, type, rop);
  return true;
}

Result<bool> broadcast_shm(Op& op, ShmSegment& seg, void* buf, size_t bytes, int root) {
  const bool fits = shm_takes(CollectiveKind::kBroadcast, op.config(), bytes, seg.slot());
  const ShmShape shape = shape_of(ShmKind::kBroadcast, fits, static_cast<uint32_t>(root), bytes);
  const bool mine = op.rank() == root;
  REMORA_RETURN_IF_ERROR(seg.publish(op, shape, buf, fits && mine ? bytes : 0));
  if (!fits) return false;
  if (mine) return true;
  REMORA_RETURN_IF_ERROR(seg.wait_rank(op, root, shape));
  if (bytes > 0) std::memcpy(buf, seg.data(root, bytes), bytes);
  return true;
}

Result<bool> allgather_shm(Op& op, ShmSegment& seg, void* recv, size_t block) {
  const bool fits = shm_takes(CollectiveKind::kAllgather, op.config(), block, seg.slot());
  const ShmShape shape = shape_of(ShmKind::kAllgather, fits, 0, block);
  auto* out = static_cast<std::byte*>(recv);
  const auto me = static_cast<size_t>(op.rank());
  REMORA_RETURN_IF_ERROR(seg.publish(op, shape, out + me * block, fits ? block : 0));
  if (!fits) return false;
  REMORA_RETURN_IF_ERROR(seg.wait_all(op, shape));
  for (int r = 0; r < op.size(); ++r) {
    if (r != op.rank() && block > 0) std::memcpy(out + static_cast<size_t>(r) * block, seg.data(r, block), block);
  }
  return true;
}

Status barrier_shm(Op& op, ShmSegment& seg) {
  const ShmShape shape{.kind = static_cast<uint32_t>(ShmKind::kBarrier)};
  REMORA_RETURN_IF_ERROR(seg.publish(op, shape, nullptr, 0));
  return seg.wait_all(op, shape);
}

}  // namespace remora::coll
