// coll/world.cc — the endpoints between the ranks of a job (world.h): lazy connection,
// one endpoint per pair whoever dials first, failure detection, notification routing.
#include "coll/world.h"

#include <algorithm>
#include <array>
#include <future>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/little_endian.h"
#include "core/log.h"
#include "engine/engine_of.h"
#include "engine/request_state.h"
#include "net/address.h"
#include "net/socket.h"
#include "remora/version.h"
#include "wire/handshake.h"

namespace remora::coll {
namespace {

constexpr uint32_t kCommIdMask = (1u << 23) - 1;
/// Bit 63 of a notification's value: the application's (Communicator::put), not an algorithm's.
constexpr uint64_t kUserBit = uint64_t{1} << 63;
/// The waiters_ key of communicator `comm`'s application mailboxes (above every id).
uint32_t user_waiters_key(uint32_t comm) { return comm | (1u << 24); }
/// Probes of failed_ranks at once: each is a connection and a thread.
constexpr size_t kProbesAtOnce = 32;

/// Whether a remora listener at `address` answers a liveness probe (a HELLO of role
/// probe, docs/protocol.md) by `deadline`: one connection and 96 bytes, no endpoint.
/// A refused connection (the process is gone), a reset, or no answer in time (stopped,
/// or its host unreachable) is an error.
Status probe_listener(const std::string& address, Clock::time_point deadline) {
  REMORA_ASSIGN_OR_RETURN(net::HostPort hp, net::parse_host_port(address));
  REMORA_ASSIGN_OR_RETURN(std::vector<net::SockAddr> addrs, net::resolve(hp, /*passive=*/false));
  Status last(StatusCode::kUnreachable, "no address for " + address);
  for (const auto& a : addrs) {
    auto fd = net::connect_tcp(a, deadline);
    if (!fd) {
      last = fd.status();
      continue;
    }
    const wire::Hello hello{.version = kWireVersion, .role = wire::Role::kProbe, .stream_count = 1, .rma_window = 1};
    REMORA_RETURN_IF_ERROR(net::write_all(fd->get(), wire::encode_hello(hello), deadline));
    std::array<std::byte, wire::kHelloAckSize> in{};
    REMORA_RETURN_IF_ERROR(net::read_exact(fd->get(), in, deadline));
    // Any well-formed answer, of this version or another, is a live process.
    return wire::decode_hello_ack(in).status();
  }
  return last;
}
/// Endpoints connect_all opens at once, each on a thread of its own.
constexpr size_t kDialsAtOnce = 16;

Duration left_until(Clock::time_point deadline) {
  const auto now = Clock::now();
  return deadline <= now ? Duration::zero() : std::chrono::duration_cast<Duration>(deadline - now);
}

}  // namespace

World::World(Context& ctx, int rank, int size, std::vector<std::shared_ptr<Endpoint>> peers)
    : ctx_(ctx),
      rank_(rank),
      size_(size),
      connected_(new std::atomic<Endpoint*>[static_cast<size_t>(size)]),
      streams_(ctx.config().streams_per_endpoint),
      peers_(static_cast<size_t>(size)),
      dialing_(static_cast<size_t>(size), false),
      dead_(static_cast<size_t>(size), false) {
  for (int r = 0; r < size_; ++r) connected_[static_cast<size_t>(r)].store(nullptr, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  for (int r = 0; r < size_ && static_cast<size_t>(r) < peers.size(); ++r) {
    if (r != rank_ && peers[static_cast<size_t>(r)]) adopt_locked(r, std::move(peers[static_cast<size_t>(r)]));
  }
}

World::World(Context& ctx, int rank, int size, std::shared_ptr<Rendezvous> rendezvous, AddressBook book)
    : World(ctx, rank, size, std::vector<std::shared_ptr<Endpoint>>()) {
  rendezvous_ = std::move(rendezvous);
  book_ = std::move(book);
  addresses_.resize(static_cast<size_t>(size));
  if (rendezvous_) addresses_[static_cast<size_t>(rank)] = rendezvous_->address();
}

World::~World() {
  for (auto& [r, ep] : snapshot()) {
    ep->set_notification_handler({});
    ep->close();  // orderly: the peers can still receive what this rank sent
  }
}

void World::serve() {
  if (rendezvous_) rendezvous_->serve(weak_from_this(), epoch_);
}

void World::keep_store(std::unique_ptr<Store> store, std::unique_ptr<StoreServer> server) {
  store_ = std::move(store);
  server_ = std::move(server);
}

void World::set_rendezvous(std::shared_ptr<Rendezvous> rendezvous, std::vector<std::string> addresses, uint64_t epoch) {
  rendezvous_ = std::move(rendezvous);
  std::lock_guard lock(mu_);
  addresses_ = std::move(addresses);
  epoch_ = epoch;
}

void World::learn_addresses(std::vector<std::string> addresses) {
  std::lock_guard lock(mu_);
  addresses_ = std::move(addresses);
  book_ = nullptr;  // every address known: the store it asked may go
}

std::string World::address_of(int r) const {
  std::lock_guard lock(mu_);
  return r >= 0 && static_cast<size_t>(r) < addresses_.size() ? addresses_[static_cast<size_t>(r)] : std::string();
}

void World::adopt_locked(int r, std::shared_ptr<Endpoint> ep) {
  // ~World removes the handler before anything it touches goes away.
  ep->set_notification_handler([this, r](const Notification& n) { route(r, n); });
  connected_[static_cast<size_t>(r)].store(ep.get(), std::memory_order_release);
  peers_[static_cast<size_t>(r)] = std::move(ep);
}

std::vector<std::pair<int, std::shared_ptr<Endpoint>>> World::snapshot() const {
  std::vector<std::pair<int, std::shared_ptr<Endpoint>>> out;
  std::lock_guard lock(mu_);
  for (int r = 0; r < size_; ++r) {
    if (peers_[static_cast<size_t>(r)]) out.emplace_back(r, peers_[static_cast<size_t>(r)]);
  }
  return out;
}

Result<Endpoint*> World::endpoint(int r, Clock::time_point deadline) {
  if (Endpoint* ep = connected_[static_cast<size_t>(r)].load(std::memory_order_acquire)) return ep;
  std::unique_lock lock(mu_);
  for (;;) {
    if (failed_) return failure_;
    if (peers_[static_cast<size_t>(r)]) return peers_[static_cast<size_t>(r)].get();
    if (!dialing_[static_cast<size_t>(r)]) break;
    // Another thread of this rank dials r, or r's dial was preferred over ours.
    if (dialed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return Status(StatusCode::kTimeout, fmt::format("rank {}: no endpoint to rank {} before the deadline", rank_, r));
    }
  }
  if (!book_ && addresses_.empty()) {
    return Status(StatusCode::kInternal,
                  fmt::format("rank {}: no endpoint to rank {} in a world given every endpoint", rank_, r));
  }
  dialing_[static_cast<size_t>(r)] = true;
  lock.unlock();
  const Status dialed = dial(r, deadline);
  lock.lock();
  dialing_[static_cast<size_t>(r)] = false;
  dialed_.notify_all();
  if (!dialed.is_ok()) {
    // A refusal is no failure when r's own endpoint arrived meanwhile (it won).
    if (peers_[static_cast<size_t>(r)]) return peers_[static_cast<size_t>(r)].get();
    return dialed;
  }
  if (failed_) return failure_;
  if (peers_[static_cast<size_t>(r)]) return peers_[static_cast<size_t>(r)].get();
  // Refused, and r's endpoint is on its way: the rendezvous thread adopts it.
  while (!peers_[static_cast<size_t>(r)] && !failed_) {
    if (dialed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return Status(StatusCode::kTimeout,
                    fmt::format("rank {}: rank {} refused this rank's endpoint for its own, which did not come "
                                "before the deadline",
                                rank_, r));
    }
  }
  if (failed_) return failure_;
  return peers_[static_cast<size_t>(r)].get();
}

Status World::dial(int r, Clock::time_point deadline) {
  std::string address = address_of(r);
  if (address.empty()) {
    if (!book_) return Status(StatusCode::kInternal, fmt::format("rank {}: no address of rank {}", rank_, r));
    auto looked_up = book_(r, deadline);
    if (!looked_up) return looked_up.status().with_context(fmt::format("rank {}: the address of rank {}", rank_, r));
    address = std::move(*looked_up);
    std::lock_guard lock(mu_);
    addresses_[static_cast<size_t>(r)] = address;
  }
  REMORA_RETURN_IF_ERROR(net::ensure_descriptors(per_endpoint_descriptors(), fmt::format("an endpoint to rank {}", r)));
  auto ep = ctx_.connect(address, left_until(deadline));
  if (!ep) {
    const StatusCode code = ep.status().code() == StatusCode::kTimeout || ep.status().code() == StatusCode::kNoResource
                                ? ep.status().code()
                                : StatusCode::kPeerFailed;
    return Status(
        code, fmt::format("rank {} could not connect to rank {} at {}: {}", rank_, r, address, ep.status().message()));
  }
  std::array<std::byte, kMeshHelloBytes> hello{};
  core::store_u32(hello.data(), kMeshMagic);
  core::store_u32(hello.data() + 4, static_cast<uint32_t>(rank_));
  core::store_u64(hello.data() + 8, epoch_);
  uint32_t answer = 0;
  Request got = (*ep)->recv(std::as_writable_bytes(std::span(&answer, 1)), kMeshAnswerTag);
  Status s = (*ep)->send(hello, kOpeningTag).wait(left_until(deadline));
  if (s.is_ok()) s = got.wait(left_until(deadline));
  if (!s.is_ok()) {
    (*ep)->abort();
    return Status(s.code() == StatusCode::kTimeout ? s.code() : StatusCode::kPeerFailed,
                  fmt::format("rank {}: rank {} at {} did not answer its hello: {}", rank_, r, address, s.message()));
  }
  if (answer == static_cast<uint32_t>(Answer::kBroken)) {
    (*ep)->close();
    return Status(StatusCode::kPeerFailed, fmt::format("rank {}: rank {} has broken its communicators (a failure, or "
                                                       "an abort, there)",
                                                       rank_, r));
  }
  std::lock_guard lock(mu_);
  if (answer != static_cast<uint32_t>(Answer::kAccepted) || peers_[static_cast<size_t>(r)] || failed_) {
    (*ep)->close();  // refused: r's own endpoint is the pair's (or comes)
    return Status::ok();
  }
  adopt_locked(r, std::move(*ep));
  return Status::ok();
}

World::Answer World::offer(int from, const std::shared_ptr<Endpoint>& ep) {
  std::lock_guard lock(mu_);
  if (failed_) return Answer::kBroken;
  if (from < 0 || from >= size_ || from == rank_ || peers_[static_cast<size_t>(from)]) return Answer::kRefused;
  // Both dial: the endpoint dialed by the higher rank is the pair's.
  if (dialing_[static_cast<size_t>(from)] && from < rank_) return Answer::kRefused;
  adopt_locked(from, ep);
  dialed_.notify_all();
  return Answer::kAccepted;
}

Status World::prepare(std::span<const int> ranks) {
  size_t missing = 0;
  {
    std::lock_guard lock(mu_);
    for (int r : ranks) missing += r != rank_ && !peers_[static_cast<size_t>(r)];
  }
  if (missing == 0) return Status::ok();
  return net::ensure_descriptors(missing * per_endpoint_descriptors(),
                                 fmt::format("endpoints to {} more ranks", missing));
}

size_t World::per_endpoint_descriptors() const noexcept {
  // The control and data sockets, and with same-host on the shared-memory channel's
  // memfd and two eventfds (docs/protocol.md), which a peer of this host takes.
  return 1 + streams_ + (ctx_.config().same_host_pulls ? 3 : 0);
}

Status World::connect_all(std::span<const int> ranks, Clock::time_point deadline) {
  std::vector<int> missing;
  for (int r : ranks) {
    if (r != rank_ && connected(r) == nullptr) missing.push_back(r);
  }
  for (size_t at = 0; at < missing.size(); at += kDialsAtOnce) {
    std::vector<std::future<Status>> dials;
    for (size_t i = at; i < std::min(missing.size(), at + kDialsAtOnce); ++i) {
      dials.push_back(
          std::async(std::launch::async, [this, r = missing[i], deadline] { return endpoint(r, deadline).status(); }));
    }
    Status first;
    for (auto& d : dials) {
      Status s = d.get();
      if (first.is_ok() && !s.is_ok()) first = std::move(s);
    }
    REMORA_RETURN_IF_ERROR(first);
  }
  return Status::ok();
}

ConnectionStats World::connections() const {
  ConnectionStats s;
  for (const auto& [r, ep] : snapshot()) {
    if (ep->failed()) continue;
    ++s.peers;
    s.sockets += 1 + ep->data_streams();
    if (!ep->stats().encryption.empty()) ++s.sealed_peers;
  }
  s.descriptors = net::open_descriptors();
  s.descriptor_limit = net::descriptor_limit();
  return s;
}

void World::note_dead_peers() {
  std::vector<int> died;
  for (const auto& [r, ep] : snapshot()) {
    // kAborted: this side closed or aborted it, which says nothing about the peer.
    if (ep->failed() && ep->failure().code() != StatusCode::kAborted && !ep->peer_said_goodbye()) died.push_back(r);
  }
  std::lock_guard lock(mu_);
  for (int r : died) dead_[static_cast<size_t>(r)] = true;
}

std::vector<int> World::dead_ranks(Duration timeout) {
  note_dead_peers();
  bool failed = false;
  std::vector<std::shared_ptr<Endpoint>> peers;
  {
    std::lock_guard lock(mu_);
    failed = failed_;
    peers = peers_;
  }
  // Once the world has failed every endpoint is ended (this rank aborted the rest), so
  // what they say is partial: a peer may have died after this rank aborted, and a
  // survivor's GOODBYE can be lost when it aborts with a full socket; and a lazy world
  // has no endpoint to most ranks. Ask each such rank's listener instead, which a
  // surviving rank keeps open: a probe that its progress thread answers is a live
  // process; a refused connection (a dead process) or no answer in time (a stopped one,
  // or a host gone) is not. At most kProbesAtOnce at a time, all by one deadline.
  std::vector<int> ask;
  for (int r = 0; failed && r < size_; ++r) {
    const auto& ep = peers[static_cast<size_t>(r)];
    if (r == rank_ || (ep && (!ep->failed() || ep->peer_said_goodbye())) || address_of(r).empty()) continue;
    ask.push_back(r);
  }
  // One deadline for every probe, however many rounds of kProbesAtOnce they take.
  const auto deadline = Clock::now() + timeout;
  std::vector<std::pair<int, bool>> answers;
  for (size_t at = 0; at < ask.size(); at += kProbesAtOnce) {
    std::vector<std::pair<int, std::future<bool>>> probes;
    for (size_t i = at; i < std::min(ask.size(), at + kProbesAtOnce); ++i) {
      probes.emplace_back(ask[i], std::async(std::launch::async, [address = address_of(ask[i]), deadline] {
                            const Status answered = probe_listener(address, deadline);
                            if (!answered)
                              REMORA_LOG(kInfo, "failed_ranks: {} did not answer: {}", address, answered.message());
                            return answered.is_ok();
                          }));
    }
    for (auto& [r, alive] : probes) answers.emplace_back(r, alive.get());
  }
  std::vector<int> out;
  std::lock_guard lock(mu_);
  for (auto [r, alive] : answers) dead_[static_cast<size_t>(r)] = !alive;
  for (int r = 0; r < size_; ++r) {
    if (dead_[static_cast<size_t>(r)]) out.push_back(r);
  }
  return out;
}

void World::route(int from, const Notification& n) {
  const uint32_t comm = static_cast<uint32_t>(n.value >> 40) & kCommIdMask;
  const bool user = (n.value & kUserBit) != 0;
  std::vector<std::shared_ptr<detail::RequestState>> wake;
  {
    std::lock_guard lock(mu_);
    if (user) {
      if (std::find(closed_user_ids_.begin(), closed_user_ids_.end(), comm) != closed_user_ids_.end()) return;
      user_mail_[comm][from].push_back(static_cast<uint32_t>(n.value));
    } else {
      mail_[comm].push_back(Incoming{from, n});
    }
    if (auto it = waiters_.find(user ? user_waiters_key(comm) : comm); it != waiters_.end()) {
      wake.swap(it->second);
      waiters_.erase(it);
    }
  }
  // Taken out of waiters_ under mu_, so each is completed exactly once.
  for (auto& w : wake) w->complete(Status::ok(), 0);
}

void World::fail(const Status& why) {
  std::map<uint32_t, std::vector<std::shared_ptr<detail::RequestState>>> wake;
  // Before the aborts below end every endpoint here: which peers had died by then.
  note_dead_peers();
  {
    std::lock_guard lock(mu_);
    if (failed_) return;
    failed_ = true;
    failure_ = why;
    wake.swap(waiters_);
    dialed_.notify_all();
  }
  REMORA_LOG(kWarn, "collectives: rank {} breaks its communicators: {}", rank_, why.to_string());
  // abort, not close: the peers must see a failure, not a rank that finished.
  for (auto& [r, ep] : snapshot()) ep->abort();
  for (auto& [comm, ws] : wake) {
    for (auto& w : ws) w->complete(why, 0);
  }
}

Status World::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

bool World::failed() const { return failed_.load(std::memory_order_acquire); }

uint32_t World::next_comm_id() const {
  std::lock_guard lock(mu_);
  return next_comm_id_;
}

void World::note_comm_ids_used(uint32_t up_to_exclusive) {
  std::lock_guard lock(mu_);
  next_comm_id_ = std::max(next_comm_id_, up_to_exclusive);
}

bool World::poll_notification(uint32_t comm_id, Incoming* out) {
  std::lock_guard lock(mu_);
  auto it = mail_.find(comm_id);
  if (it == mail_.end() || it->second.empty()) return false;
  *out = it->second.front();
  it->second.pop_front();
  return true;
}

Status World::wait_notification(uint32_t comm_id, Incoming* out, Clock::time_point deadline,
                                std::span<const int> from) {
  // A Request that route() completes: its wait spins first, driving progress from
  // this thread (a wake-up across CPUs costs far more than the wait itself on small
  // messages), then blocks — and tells the progress thread so, which otherwise stays
  // parked for the spinner it last saw and leaves the notification unread.
  const std::shared_ptr<engine::ProgressEngine>& engine = detail::engine_of(ctx_);
  while (true) {
    auto waiter = detail::RequestState::make(engine, Tag{});
    {
      std::lock_guard lock(mu_);
      auto it = mail_.find(comm_id);
      if (it != mail_.end() && !it->second.empty()) {
        *out = it->second.front();
        it->second.pop_front();
        return Status::ok();
      }
      if (failed_) return failure_;
      waiters_[comm_id].push_back(waiter);
    }
    const bool expired = Clock::now() >= deadline;
    if (!wait_briefly(comm_id, waiter, deadline)) {
      for (const auto& [r, ep] : snapshot()) {
        if (!ep->failed()) continue;
        if (!ep->closed_by_peer() || std::find(from.begin(), from.end(), r) != from.end()) return ep->failure();
      }
      if (expired) return Status(StatusCode::kTimeout, "no notification before the collective's deadline");
    }
  }
}

bool World::wait_briefly(uint32_t key, const std::shared_ptr<detail::RequestState>& waiter,
                         Clock::time_point deadline) {
  // Endpoint failures do not route here: the callers look at them every 20 ms of waiting.
  if (const auto now = Clock::now(); now < deadline) {
    (void)detail::make_request(waiter).wait(std::min<Duration>(deadline - now, std::chrono::milliseconds(20)));
  }
  if (waiter->done()) return true;
  std::lock_guard lock(mu_);
  forget_waiter_locked(key, waiter);
  return false;
}

void World::forget_waiter_locked(uint32_t key, const std::shared_ptr<detail::RequestState>& waiter) {
  if (auto it = waiters_.find(key); it != waiters_.end()) {
    std::erase(it->second, waiter);
    if (it->second.empty()) waiters_.erase(it);
  }
}

uint64_t World::user_notify_value(uint32_t comm_id, uint32_t value) noexcept {
  return kUserBit | (uint64_t{comm_id & kCommIdMask} << 40) | value;
}

Result<uint32_t> World::wait_user_notification(uint32_t comm_id, int from, Clock::time_point deadline) {
  // As wait_notification: a Request that route() completes, spinning then blocking.
  const std::shared_ptr<engine::ProgressEngine>& engine = detail::engine_of(ctx_);
  const uint32_t key = user_waiters_key(comm_id);
  // The endpoint `from` will put through, opened now if neither side has yet: through
  // it this wait sees `from` fail.
  if (auto ep = endpoint(from, deadline); !ep) return ep.status();
  while (true) {
    auto waiter = detail::RequestState::make(engine, Tag{});
    {
      std::lock_guard lock(mu_);
      if (auto box = user_mail_.find(comm_id); box != user_mail_.end()) {
        if (auto q = box->second.find(from); q != box->second.end() && !q->second.empty()) {
          const uint32_t value = q->second.front();
          q->second.pop_front();
          return value;
        }
      }
      if (failed_) return failure_;
      waiters_[key].push_back(waiter);
    }
    // Everything `from` sent before its endpoint ended has been routed by then.
    if (const Endpoint* ep = connected(from); ep != nullptr && ep->failed()) {
      std::lock_guard lock(mu_);
      forget_waiter_locked(key, waiter);
      auto box = user_mail_.find(comm_id);
      if (box == user_mail_.end() || box->second[from].empty()) return ep->failure();
      continue;
    }
    const bool expired = Clock::now() >= deadline;
    if (!wait_briefly(key, waiter, deadline) && expired) {
      return Status(StatusCode::kTimeout, "no notification from that rank within the timeout");
    }
  }
}

void World::close_user_mailboxes(uint32_t comm_id) {
  std::lock_guard lock(mu_);
  user_mail_.erase(comm_id);
  closed_user_ids_.push_back(comm_id);
}

}  // namespace remora::coll
