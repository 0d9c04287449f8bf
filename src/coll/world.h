// coll/world.h — the endpoints between the ranks of a job, shared by every communicator
// made from it (splits included).
//
// A world made by init is lazy: it holds an endpoint to a rank only once something
// needs one (an algorithm's step, a point-to-point call, an alltoall), and opens it
// then. Both ranks of a pair may want their endpoint at the same moment; exactly one
// endpoint results. The dialer sends a MESH hello (coll/rendezvous.h) and waits for the
// other rank's answer, which that rank's rendezvous thread gives at once (World::offer):
//   - it holds an endpoint to the dialer already: refused (the dialer uses that one);
//   - it is dialing the dialer itself: the endpoint dialed by the higher rank wins, so a
//     dialer of lower rank is refused, one of higher rank accepted;
//   - otherwise accepted.
// A refused dialer waits for the endpoint the other rank dials, which its own
// rendezvous thread accepts. Addresses come from the job's address book (the
// rendezvous store, or the application's store) until init has given every rank the
// whole table, which shrink needs when the store's rank is gone.
//
// A world made by shrink (or of one rank) is given every endpoint up front.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "coll/rendezvous.h"
#include "remora/communicator.h"
#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/status.h"
#include "remora/store.h"

namespace remora::detail {
struct RequestState;
}

namespace remora::coll {

class World : public std::enable_shared_from_this<World> {
 public:
  struct Incoming {
    int from = -1;  ///< world rank of the sender
    Notification note;
  };
  /// A rank's listener address ("host:port"), waiting for it up to the deadline.
  using AddressBook = std::function<Result<std::string>(int rank, Clock::time_point deadline)>;

  /// A world given every endpoint (null at `rank`).
  World(Context& ctx, int rank, int size, std::vector<std::shared_ptr<Endpoint>> peers);
  /// A lazy world: no endpoint yet; `book` gives the addresses of the ranks it dials
  /// (until learn_addresses), `rendezvous` serves its MESH hellos. Call serve() once
  /// the world is shared.
  World(Context& ctx, int rank, int size, std::shared_ptr<Rendezvous> rendezvous, AddressBook book);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  /// Registers this (lazy) world with its rendezvous, which then answers its MESH hellos.
  void serve();
  /// Keeps `store` and, on rank 0, `server` for the world's life (either may be null).
  void keep_store(std::unique_ptr<Store> store, std::unique_ptr<StoreServer> server);

  /// Where the ranks meet again to shrink (Communicator::shrink): this rank's
  /// rendezvous, every rank's listener address, and the world's epoch (0 for init's;
  /// each shrink makes a world with a fresh one). Set once, before the world is shared.
  void set_rendezvous(std::shared_ptr<Rendezvous> rendezvous, std::vector<std::string> addresses, uint64_t epoch);
  const std::shared_ptr<Rendezvous>& rendezvous() const noexcept { return rendezvous_; }
  /// Every rank's address, as init's exchange gave them: the world asks its address
  /// book no more (and drops it: the store behind it may go).
  void learn_addresses(std::vector<std::string> addresses);
  /// "host:port" of world rank `r`'s listener; empty when unknown.
  std::string address_of(int r) const;
  uint64_t epoch() const noexcept { return epoch_; }

  Context& context() noexcept { return ctx_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  /// The endpoint to world rank `r` (r != rank()), opened now if this world has none
  /// yet (a lazy world), waiting at most until `deadline`. Thread-safe. Fails with the
  /// world's failure once it has failed, kPeerFailed when `r` cannot be reached,
  /// kTimeout, or kNoResource when this process is out of descriptors (naming
  /// RLIMIT_NOFILE and what it needs).
  Result<Endpoint*> endpoint(int r, Clock::time_point deadline);
  /// The endpoint to world rank `r` if this rank holds one, else null (never dials).
  Endpoint* connected(int r) const noexcept {
    return r == rank_ ? nullptr : connected_[static_cast<size_t>(r)].load(std::memory_order_acquire);
  }
  /// Before opening endpoints to all of `ranks` (an alltoall): fails with kNoResource
  /// naming RLIMIT_NOFILE when the descriptors they need exceed the hard limit, after
  /// raising the soft limit toward it where that helps.
  Status prepare(std::span<const int> ranks);
  /// Opens the endpoints to every rank of `ranks` this rank has none to yet, up to
  /// kDialsAtOnce at a time (an alltoall's first call need not dial its peers one by
  /// one); the first failure, else ok.
  Status connect_all(std::span<const int> ranks, Clock::time_point deadline);
  /// What this rank holds now: endpoints (peers connected) and their sockets.
  ConnectionStats connections() const;

  /// The answers to a MESH hello (kMeshAnswerTag's u32).
  enum class Answer : uint32_t { kRefused = 0, kAccepted = 1, kBroken = 2 };
  /// The rendezvous thread's question: may `ep`, dialed by world rank `from`, become the
  /// endpoint to it? kAccepted: it is now; kRefused: the pair's endpoint is another (see
  /// the file comment); kBroken: this world has failed (the dialer fails too).
  Answer offer(int from, const std::shared_ptr<Endpoint>& ep);

  /// World ranks this rank believes dead, ascending. While the world is healthy: those
  /// whose endpoint ended without a GOODBYE (EOF, reset, the heartbeat's silence). Once
  /// it has failed (which aborts every endpoint, hiding what happened afterwards): every
  /// rank whose endpoint failed or that this rank never reached is asked, at its
  /// listener, for a handshake within `timeout` (refused: the process is gone; no
  /// answer: stopped, or its host is); a rank whose endpoint ended with its GOODBYE is alive.
  std::vector<int> dead_ranks(Duration timeout);

  /// Records the first failure and aborts every endpoint, so that peers blocked on us
  /// fail at once; no endpoint is opened afterwards. Idempotent.
  void fail(const Status& why);
  Status failure() const;
  bool failed() const;

  /// Communicator ids: returns `count` fresh ids, all above `floor` and above every id
  /// this rank has handed out (split uses the maximum over its ranks as the floor).
  uint32_t next_comm_id() const;
  void note_comm_ids_used(uint32_t up_to_exclusive);

  /// Routed notifications for communicator `comm_id` (see coll/comm_core.h).
  bool poll_notification(uint32_t comm_id, Incoming* out);
  /// Waits until one arrives or `deadline`; drives progress while waiting. `from`
  /// names the world ranks the caller expects notifications from. The wait fails early
  /// when a peer's endpoint failed: any peer that aborted, died or was cut off, but a
  /// peer that closed orderly (it finished and destroyed its communicator) only if it
  /// is in `from` — a rank that finished first must not fail a slower one.
  Status wait_notification(uint32_t comm_id, Incoming* out, Clock::time_point deadline, std::span<const int> from);

  /// The value of an application notification (coll/comm_core.h) for `comm_id`.
  static uint64_t user_notify_value(uint32_t comm_id, uint32_t value) noexcept;
  /// The oldest application notification world rank `from` sent communicator
  /// `comm_id`, waiting until `deadline`; drives progress while waiting. Fails once the
  /// world failed, or once `from`'s endpoint ended and its mailbox is empty (opens the
  /// endpoint to `from` first if neither rank has yet).
  Result<uint32_t> wait_user_notification(uint32_t comm_id, int from, Clock::time_point deadline);
  /// Forgets communicator `comm_id`'s application mailboxes, and drops what arrives for
  /// it later (its communicator is gone; ids are never reused within a world).
  void close_user_mailboxes(uint32_t comm_id);

 private:
  /// Waits on `waiter`, queued under `key`, for at most 20 ms or until `deadline`: true
  /// when route() or fail() completed it, else false with it taken out of the queue.
  bool wait_briefly(uint32_t key, const std::shared_ptr<detail::RequestState>& waiter, Clock::time_point deadline);
  /// Takes `waiter` out of the waiters of `key` (mu_ held).
  void forget_waiter_locked(uint32_t key, const std::shared_ptr<detail::RequestState>& waiter);
  /// Makes `ep` the endpoint to `r` (mu_ held): routes its notifications here.
  void adopt_locked(int r, std::shared_ptr<Endpoint> ep);
  /// Dials `r` (no endpoint yet, not being dialed: this thread is its dialer now).
  Status dial(int r, Clock::time_point deadline);
  /// Every endpoint this rank holds now.
  std::vector<std::pair<int, std::shared_ptr<Endpoint>>> snapshot() const;
  void route(int from, const Notification& n);
  /// Marks the peers whose endpoint ended without a GOODBYE as dead.
  void note_dead_peers();

  Context& ctx_;
  const int rank_;
  const int size_;
  /// Per world rank, the endpoint once connected: read without the lock on the hot path
  /// (set once, under mu_; the shared_ptr in peers_ keeps it alive).
  std::unique_ptr<std::atomic<Endpoint*>[]> connected_;
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<Store> store_;
  std::shared_ptr<Rendezvous> rendezvous_;
  AddressBook book_;
  uint64_t epoch_ = 0;
  const uint32_t streams_;  ///< data streams of each endpoint this context opens
  /// Descriptors one endpoint takes: its sockets, and the same-host channel's.
  size_t per_endpoint_descriptors() const noexcept;

  mutable std::mutex mu_;
  std::condition_variable dialed_;                ///< an endpoint was adopted or a dial ended
  std::vector<std::shared_ptr<Endpoint>> peers_;  ///< null at rank_ and for ranks not connected
  std::vector<bool> dialing_;                     ///< a thread of this rank is dialing that rank
  std::vector<std::string> addresses_;
  std::vector<bool> dead_;  ///< per world rank: its endpoint ended without a GOODBYE
  Status failure_;
  /// Set once, under mu_; read without it by failed(), which every collective call asks.
  std::atomic<bool> failed_{false};
  uint32_t next_comm_id_ = 1;  ///< 0 is the world communicator
  std::map<uint32_t, std::deque<Incoming>> mail_;
  /// Application notifications per communicator id, per sending world rank.
  std::map<uint32_t, std::map<int, std::deque<uint32_t>>> user_mail_;
  std::vector<uint32_t> closed_user_ids_;  ///< communicators gone (close_user_mailboxes)
  /// Threads in wait_notification, per communicator: route() completes them, which
  /// wakes one that has stopped spinning (Request::wait's spin-then-block, so the
  /// progress thread knows whether a waiter is driving progress or needs it).
  std::map<uint32_t, std::vector<std::shared_ptr<detail::RequestState>>> waiters_;
};

}  // namespace remora::coll
