// coll/shrink.cc — Communicator::shrink (a new communicator of the survivors, built
// without the old communicator's store), failed_ranks and epoch.
//
// The survivors meet at the listeners every rank opened at init and kept open, each
// knowing every other's address from init. New rank i dials every new rank j < i and
// accepts one connection from every rank above it, as init's mesh does, over new
// endpoints: nothing the old endpoints carried (the old ones were aborted when the
// communicator broke) can reach the new communicator. On each new endpoint both sides
// send a hello: magic, new rank, the attempt's epoch and number, the communicator's
// lineage, and the list of old ranks this rank keeps. Equal attempts and lists, or the
// attempt fails: a clear error instead of a communicator whose members disagree.
// Attempts are numbered (1, 2, …, the same count on every survivor), so a rank that
// meets one still at an attempt it has given up waits for it to come along, and a rank
// that meets one already at a later attempt gives its own up at once. Wire layout,
// little-endian:
//   [magic u32 "SHRK"][new rank u32][epoch u64][count u32][attempt u32][lineage u64]
//   [count × old rank u32]
#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "coll/rendezvous.h"
#include "core/little_endian.h"
#include "core/log.h"
#include "remora/communicator.h"

namespace remora {
namespace {

using coll::Clock;

constexpr uint32_t kHelloMagic = coll::kShrinkMagic;
constexpr size_t kHelloHeader = 32;
static_assert(coll::max_opening_bytes(0) == kHelloHeader);
/// How often a rank waiting for connections looks at the endpoints it already has.
constexpr auto kAcceptSlice = std::chrono::milliseconds(50);
/// How long a rank waits before dialing again a survivor still at an earlier attempt
/// (first, and at most).
constexpr auto kRedialFirst = std::chrono::milliseconds(5);
constexpr auto kRedialMax = std::chrono::milliseconds(200);

Duration left_until(Clock::time_point deadline) {
  const auto now = Clock::now();
  return deadline > now ? Duration(deadline - now) : Duration::zero();
}

struct Hello {
  uint32_t rank = 0;
  uint64_t epoch = 0;
  uint32_t attempt = 0;        ///< this communicator's shrink attempt, from 1
  uint64_t lineage = 0;        ///< the communicator being shrunk (old epoch and id), whatever the attempt
  std::vector<uint32_t> keep;  ///< old ranks (of the communicator being shrunk) that survive
};

std::vector<std::byte> encode(const Hello& h) {
  std::vector<std::byte> out(kHelloHeader + 4 * h.keep.size());
  core::store_u32(out.data(), kHelloMagic);
  core::store_u32(out.data() + 4, h.rank);
  core::store_u64(out.data() + 8, h.epoch);
  core::store_u32(out.data() + 16, static_cast<uint32_t>(h.keep.size()));
  core::store_u32(out.data() + 20, h.attempt);
  core::store_u64(out.data() + 24, h.lineage);
  for (size_t i = 0; i < h.keep.size(); ++i) core::store_u32(out.data() + kHelloHeader + 4 * i, h.keep[i]);
  return out;
}

std::optional<Hello> decode(std::span<const std::byte> in) {
  if (in.size() < kHelloHeader || core::load_u32(in.data()) != kHelloMagic) return std::nullopt;
  Hello h;
  h.rank = core::load_u32(in.data() + 4);
  h.epoch = core::load_u64(in.data() + 8);
  const uint32_t count = core::load_u32(in.data() + 16);
  h.attempt = core::load_u32(in.data() + 20);
  h.lineage = core::load_u64(in.data() + 24);
  if (in.size() != kHelloHeader + 4 * size_t{count}) return std::nullopt;
  h.keep.resize(count);
  for (size_t i = 0; i < count; ++i) h.keep[i] = core::load_u32(in.data() + kHelloHeader + 4 * i);
  return h;
}

std::string ranks_text(const std::vector<uint32_t>& ranks) {
  std::string out = "{";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "}";
}

/// SplitMix64's finaliser: spreads (old epoch, communicator, attempt) over 64 bits.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// One rank's side of the survivors' meeting.
class Meeting {
 public:
  Meeting(Context& ctx, coll::Rendezvous& rendezvous, Hello mine, std::vector<std::string> addresses, size_t old_size,
          Clock::time_point deadline)
      : ctx_(ctx),
        rendezvous_(rendezvous),
        mine_(std::move(mine)),
        mine_bytes_(encode(mine_)),
        addresses_(std::move(addresses)),
        old_size_(old_size),
        deadline_(deadline),
        peers_(addresses_.size()) {}

  /// The new endpoints, indexed by new rank (null at this rank), or the first error;
  /// on an error every endpoint made so far is aborted, so that the survivors waiting
  /// on this one learn of it at once.
  Result<std::vector<std::shared_ptr<Endpoint>>> run() {
    Status s = dial_lower();
    if (s.is_ok()) s = accept_higher();
    if (!s.is_ok()) {
      for (auto& ep : peers_) {
        if (ep) ep->abort();
      }
      return s;
    }
    return std::move(peers_);
  }

 private:
  int me() const { return static_cast<int>(mine_.rank); }
  int size() const { return static_cast<int>(addresses_.size()); }
  uint32_t old_rank(int new_rank) const { return mine_.keep[static_cast<size_t>(new_rank)]; }

  /// Receives the answer to this rank's hello on `ep` by `deadline`: the failure when
  /// none comes, kProtocol for garbage.
  Result<Hello> receive_answer(Endpoint& ep, Clock::time_point deadline) {
    std::vector<std::byte> buf(kHelloHeader + 4 * old_size_);
    Request r = ep.recv(buf, coll::kShrinkAnswerTag);
    Status s = r.wait(left_until(deadline));
    if (!s.is_ok()) return s;
    auto h = decode(std::span(buf).first(r.bytes()));
    if (!h) return Status(StatusCode::kProtocol, fmt::format("a malformed shrink hello from {}", ep.peer_address()));
    return *h;
  }

  /// The dialer's hello opens the connection (coll/rendezvous.h); the acceptor answers with its own.
  Status send_hello(Endpoint& ep, Tag tag) { return ep.send(mine_bytes_, tag).wait(left_until(deadline_)); }

  Status disagreement(const Hello& theirs) const {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("shrink: the survivors disagree on the ranks to exclude: this rank (old rank {}) keeps "
                              "old ranks {}, old rank {} keeps {}; every survivor must pass the same list",
                              old_rank(me()), ranks_text(mine_.keep),
                              theirs.rank < theirs.keep.size() ? theirs.keep[theirs.rank] : theirs.rank,
                              ranks_text(theirs.keep)));
  }

  /// A hello of another communicator's shrink (a split sharing this listener).
  Status other_communicator(uint32_t their_old_rank) const {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("shrink: old rank {} is shrinking another communicator than this rank (old rank {}): "
                              "every survivor must call shrink on the same communicator",
                              their_old_rank, old_rank(me())));
  }

  /// `theirs` is at a later attempt: this one was given up there, so it cannot succeed.
  Status overtaken(uint32_t their_old_rank, uint32_t their_attempt) const {
    return Status(StatusCode::kPeerFailed,
                  fmt::format("shrink: old rank {} gave attempt {} up and is at attempt {}: call shrink again (every "
                              "survivor calls it the same number of times)",
                              their_old_rank, mine_.attempt, their_attempt));
  }

  Status unreachable(int j, const std::string& address, const Status& why) const {
    if (why.code() == StatusCode::kTimeout) {
      return Status(StatusCode::kTimeout,
                    fmt::format("shrink: old rank {} at {} did not answer before the deadline: {}", old_rank(j),
                                address, why.message()));
    }
    return Status(StatusCode::kPeerFailed,
                  fmt::format("shrink: old rank {} at {} cannot be reached ({}): it died (then every survivor must "
                              "exclude it) or gave this shrink up",
                              old_rank(j), address, why.to_string()));
  }

  Status dial_lower() {
    for (int j = 0; j < me(); ++j) {
      if (Status s = dial(j); !s.is_ok()) return s;
    }
    return Status::ok();
  }

  /// Meets new rank j (< this rank) at its listener. A rank still at an earlier attempt
  /// (this rank gave that one up; so will it, on this hello) is dialed again until it
  /// comes to this attempt or the deadline passes.
  Status dial(int j) {
    const std::string& address = addresses_[static_cast<size_t>(j)];
    std::chrono::milliseconds pause = kRedialFirst;
    for (;;) {
      auto ep = ctx_.connect(address, left_until(deadline_));
      if (!ep) return unreachable(j, address, ep.status());
      peers_[static_cast<size_t>(j)] = *ep;
      if (Status s = send_hello(**ep, coll::kOpeningTag); !s.is_ok()) {
        return s.with_context(fmt::format("shrink hello to old rank {}", old_rank(j)));
      }
      // The answer may wait until that rank reaches its shrink: the whole deadline.
      auto theirs = receive_answer(**ep, deadline_);
      if (!theirs) {
        return Status(StatusCode::kPeerFailed, fmt::format("shrink: old rank {} gave the shrink up: {}", old_rank(j),
                                                           theirs.status().to_string()));
      }
      if (theirs->lineage != mine_.lineage) return other_communicator(old_rank(j));
      if (theirs->attempt > mine_.attempt) return overtaken(old_rank(j), theirs->attempt);
      if (theirs->attempt < mine_.attempt) {
        (*ep)->close();
        peers_[static_cast<size_t>(j)].reset();
        if (Clock::now() + pause >= deadline_) {
          return Status(StatusCode::kTimeout,
                        fmt::format("shrink: old rank {} was still at attempt {} at the deadline, this rank at attempt "
                                    "{}: every survivor must call shrink the same number of times",
                                    old_rank(j), theirs->attempt, mine_.attempt));
        }
        REMORA_LOG(kDebug, "shrink: old rank {} is still at attempt {}; dialing it again", old_rank(j),
                   theirs->attempt);
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(kRedialMax));
        continue;
      }
      if (theirs->epoch != mine_.epoch) return other_communicator(old_rank(j));
      if (theirs->keep != mine_.keep) return disagreement(*theirs);
      if (theirs->rank != static_cast<uint32_t>(j)) {
        return Status(StatusCode::kProtocol, fmt::format("shrink: {} answered as new rank {}, expected {}", address,
                                                         theirs->rank, j));
      }
      return Status::ok();
    }
  }

  Status accept_higher() {
    int missing = size() - me() - 1;
    while (missing > 0) {
      auto arrival = rendezvous_.next_shrink_hello(std::min(deadline_, Clock::now() + kAcceptSlice));
      if (!arrival) {
        if (arrival.status().code() != StatusCode::kTimeout) return arrival.status().with_context("shrink: accept");
        // A survivor that gave up aborted its endpoints: do not wait out the deadline.
        for (int j = 0; j < size(); ++j) {
          const auto& p = peers_[static_cast<size_t>(j)];
          if (p && p->failed()) {
            return Status(StatusCode::kPeerFailed,
                          fmt::format("shrink: old rank {} gave the shrink up ({}); the survivors may disagree on "
                                      "the ranks to exclude",
                                      old_rank(j), p->failure().to_string()));
          }
        }
        if (Clock::now() >= deadline_) return never_connected();
        continue;
      }
      std::shared_ptr<Endpoint> peer = std::move(arrival->endpoint);
      auto theirs = decode(arrival->hello);
      if (!theirs) {
        REMORA_LOG(kInfo, "shrink: dropping a connection from {}: a malformed shrink hello", peer->peer_address());
        peer->abort();
        continue;
      }
      // Answer before judging, so that the dialer sees what this rank saw.
      Status sent = send_hello(*peer, coll::kShrinkAnswerTag);
      if (theirs->lineage == mine_.lineage && theirs->attempt > mine_.attempt) {
        // The dialer gave this attempt up; it dials again once this rank is at its attempt.
        peer->close();
        return overtaken(theirs->rank < theirs->keep.size() ? theirs->keep[theirs->rank] : theirs->rank,
                         theirs->attempt);
      }
      if (theirs->lineage != mine_.lineage || theirs->epoch != mine_.epoch) {
        // A late dialer of an earlier attempt (it gives that up on this answer), or of
        // another communicator: this attempt goes on.
        REMORA_LOG(kInfo, "shrink: dropping a connection of another attempt from {}", peer->peer_address());
        peer->close();
        continue;
      }
      if (theirs->keep != mine_.keep) {
        peer->close();  // orderly: the answer still reaches it
        return disagreement(*theirs);
      }
      const uint32_t who = theirs->rank;
      if (who <= static_cast<uint32_t>(me()) || who >= static_cast<uint32_t>(size()) || peers_[who]) {
        peer->abort();
        return Status(StatusCode::kProtocol,
                      fmt::format("shrink: bad hello (new rank {}) from {}", who, peer->peer_address()));
      }
      if (!sent.is_ok()) return sent.with_context(fmt::format("shrink hello to old rank {}", old_rank(int(who))));
      peers_[who] = std::move(peer);
      --missing;
    }
    return Status::ok();
  }

  Status never_connected() const {
    std::vector<uint32_t> absent;
    for (int j = me() + 1; j < size(); ++j) {
      if (!peers_[static_cast<size_t>(j)]) absent.push_back(old_rank(j));
    }
    return Status(StatusCode::kTimeout,
                  fmt::format("shrink: old rank(s) {} never connected to this rank (old rank {}) before the deadline: "
                              "dead (exclude them too), or they passed another list",
                              ranks_text(absent), old_rank(me())));
  }

  Context& ctx_;
  coll::Rendezvous& rendezvous_;
  const Hello mine_;
  const std::vector<std::byte> mine_bytes_;
  const std::vector<std::string> addresses_;
  const size_t old_size_;  ///< no survivor keeps more ranks than this
  const Clock::time_point deadline_;
  std::vector<std::shared_ptr<Endpoint>> peers_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::shrink(std::span<const int> exclude_ranks,
                                                           const CommOptions& options) {
  const int n = size();
  // Every call is an attempt, also one refused here: survivors that call shrink the same
  // number of times are at the same attempt, whatever each call's arguments.
  const uint32_t attempt = core_->next_shrink_attempt();
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  for (int r : exclude_ranks) {
    if (r < 0 || r >= n) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("shrink: rank {} is not a rank of this communicator (size {})", r, n));
    }
    if (r == rank()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("shrink: this rank ({}) is in the exclude list; an excluded rank does not call shrink",
                                r));
    }
    excluded[static_cast<size_t>(r)] = true;
  }
  coll::CollConfig config = core_->config();
  if (options.timeout) {
    if (*options.timeout <= Duration::zero()) {
      return Status(StatusCode::kInvalidArgument, "shrink: CommOptions::timeout must be positive");
    }
    config.timeout = *options.timeout;
  }
  coll::World& old_world = core_->world();
  Hello mine;
  std::vector<std::string> addresses;  // by new rank
  for (int r = 0; r < n; ++r) {
    if (excluded[static_cast<size_t>(r)]) continue;
    if (r == rank()) mine.rank = static_cast<uint32_t>(mine.keep.size());
    mine.keep.push_back(static_cast<uint32_t>(r));
    addresses.push_back(old_world.address_of(core_->world_rank(r)));
  }
  mine.attempt = attempt;
  mine.lineage = mix(old_world.epoch() ^ mix(uint64_t{core_->id()} << 32));
  mine.epoch = mix(old_world.epoch() ^ mix((uint64_t{core_->id()} << 32) | attempt));
  if (mine.epoch == 0) mine.epoch = 1;  // 0 is init's
  const int m = static_cast<int>(mine.keep.size());
  const int me = static_cast<int>(mine.rank);
  std::vector<int> members(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) members[static_cast<size_t>(i)] = i;
  const auto deadline = Clock::now() + config.timeout;

  if (m > 1 && (old_world.rendezvous() == nullptr ||
                std::any_of(addresses.begin(), addresses.end(), [](const std::string& a) { return a.empty(); }))) {
    return Status(StatusCode::kUnsupported,
                  "shrink: this communicator was not made by Communicator::init or init_communicator (nor split or "
                  "shrunk from one), so its ranks have no listener to meet at again");
  }
  REMORA_LOG(kInfo, "shrink: old rank {} becomes rank {} of {} (epoch {:#x}, attempt {})", rank(), me, m, mine.epoch,
             attempt);
  std::vector<std::shared_ptr<Endpoint>> peers(static_cast<size_t>(m));
  if (m > 1) {
    Meeting meeting(old_world.context(), *old_world.rendezvous(), mine, addresses, static_cast<size_t>(n), deadline);
    REMORA_ASSIGN_OR_RETURN(peers, meeting.run());
  }
  auto world = std::make_shared<coll::World>(old_world.context(), me, m, std::move(peers));
  world->set_rendezvous(old_world.rendezvous(), std::move(addresses), mine.epoch);
  auto comm = coll::CommAccess::make(std::make_shared<coll::CommCore>(world, 0, members, me, config));
  if (m > 1) {
    // Every survivor has its whole mesh, or none goes on: a rank whose meeting failed
    // aborted its endpoints, which fails this barrier wherever it reaches.
    const auto left = std::max<Duration>(left_until(deadline), std::chrono::milliseconds(1));
    if (Status s = comm->barrier({.timeout = left}); !s.is_ok()) {
      return Status(s.code(), "shrink: a survivor gave the new communicator up: " + s.message());
    }
  }
  return comm;
}

std::vector<int> Communicator::failed_ranks(Duration timeout) {
  const std::vector<int> dead = core_->world().dead_ranks(timeout);
  std::vector<int> out;
  for (int r = 0; r < size(); ++r) {
    if (std::binary_search(dead.begin(), dead.end(), core_->world_rank(r))) out.push_back(r);
  }
  return out;
}

uint64_t Communicator::epoch() const noexcept { return core_->world().epoch(); }

ConnectionStats Communicator::connections() const {
  ConnectionStats s = core_->world().connections();
  if (!core_->shm_verdict(&s.segment_ranks, &s.no_segment)) s.no_segment = "not set up yet";
  return s;
}

}  // namespace remora
