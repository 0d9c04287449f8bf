// coll/bootstrap.cc — Communicator::init: the launcher's environment, the rendezvous
// store (hosted by rank 0), address exchange and the full mesh.
//
// Keys: "remora/arrivals" is a counter every rank bumps once; ranks of one run share
// the generation g = (ticket - 1) / size, and publish under "remora/<g>/addr/<rank>".
// Rank 0 hosts a fresh store per run, so g is 0 there; the prefix keeps runs apart
// when ranks connect to a store that outlived an earlier, complete run.
#include <sched.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "coll/rendezvous.h"
#include "core/cpus.h"
#include "core/env.h"
#include "engine/engine_of.h"
#include "engine/progress.h"
#include "net/address.h"
#include "remora/communicator.h"

namespace remora {
namespace {

using coll::Clock;

Duration left_until(Clock::time_point deadline) {
  const auto now = Clock::now();
  return deadline > now ? Duration(deadline - now) : Duration::zero();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > shown) out += fmt::format(" and {} more", ranks.size() - shown);
  return out;
}

/// Rank 0's server listens on every interface of the store address's family, or only on
/// loopback when the store address is a loopback one (every rank is on this host then, and
/// nothing else should reach the store).
Result<std::unique_ptr<StoreServer>> start_server(const std::string& store_address, const std::optional<AuthKey>& key,
                                                  EncryptMode encrypt) {
  REMORA_ASSIGN_OR_RETURN(auto hp, net::parse_host_port(store_address));
  REMORA_ASSIGN_OR_RETURN(auto addrs, net::resolve(hp, /*passive=*/false));
  const bool v6 = !addrs.empty() && addrs.front().family() == AF_INET6;
  const bool loopback =
      !addrs.empty() && std::all_of(addrs.begin(), addrs.end(), [](const net::SockAddr& a) { return net::is_loopback(a); });
  const std::string any =
      loopback ? net::to_string(addrs.front()) : fmt::format("{}:{}", v6 ? "[::]" : "0.0.0.0", hp.port);
  auto server = StoreServer::start(any, key, encrypt);
  if (!server) {
    return server.status().with_context(
        fmt::format("rank 0 could not host the rendezvous store on port {} (of {})", hp.port, store_address));
  }
  return server;
}

/// How long rank 0 waits, after an init that failed, for the other ranks to have
/// asked its store who never showed up (they ask once; then its store goes).
constexpr auto kExplainGrace = std::chrono::seconds(2);

/// Why init failed with `failed`, in the terms users need: the ranks that never
/// published their address, asked of the store once (every rank on this path asks, and
/// rank 0 keeps its store until they did or kExplainGrace passed, so that a rank that
/// fails after rank 0 still finds out). `failed` as it is when every rank showed up.
Status explain(const Status& failed, Store& store, const std::vector<std::string>& keys, int rank,
               const std::string& prefix, const std::string& store_address, Duration timeout) {
  const int size = static_cast<int>(keys.size());
  auto absent = store.wait_missing(keys, std::chrono::milliseconds(1));
  if (!absent) {
    return failed.with_context(
        fmt::format("rank {}; the rendezvous store {} went away (rank 0 gave up, or died) "
                    "before it could say which ranks were missing",
                    rank, store_address));
  }
  std::vector<int> missing;  // `absent` keeps the order of `keys`
  size_t next = 0;
  for (int r = 0; r < size && next < absent->size(); ++r) {
    if (keys[static_cast<size_t>(r)] == (*absent)[next]) {
      missing.push_back(r);
      ++next;
    }
  }
  const std::string asked = prefix + "asked";
  if (rank != 0) {
    (void)store.add(asked, 1);
  } else {
    const int64_t others = size - 1 - static_cast<int64_t>(missing.size());
    for (const auto until = Clock::now() + kExplainGrace; Clock::now() < until;) {
      auto n = store.add(asked, 0);
      if (!n || *n >= others) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // rank 0's own store: a cheap poll
    }
  }
  if (missing.empty()) return failed;
  return Status(StatusCode::kTimeout,
                fmt::format("rank {}: rank(s) {} of {} never showed up at the rendezvous store {} within {} ms "
                            "(REMORA_COLL_TIMEOUT_MS): {}",
                            rank, rank_list(missing), size, store_address,
                            std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count(), failed.message()));
}

Result<std::unique_ptr<Communicator>> bootstrap(Context& ctx, const LaunchInfo& launch, const coll::CollConfig& config) {
  const int rank = launch.rank;
  // More ranks on this host than CPUs: a spinning waiter mostly keeps the rank it
  // waits for off the CPU, so waiting threads yield after every empty poll.
  if (const int cpus = core::usable_cpus(); launch.local_size > cpus) {
    detail::engine_of(ctx)->set_yield_polls(1);
    REMORA_LOG(kInfo, "collectives: {} ranks on this host share {} CPUs; waiting threads yield after every empty poll",
               launch.local_size, cpus);
  }
  const int size = launch.size;
  const auto deadline = Clock::now() + config.timeout;
  std::vector<int> members(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) members[static_cast<size_t>(i)] = i;

  if (size == 1) {
    // Nothing to meet: no store, no sockets.
    auto world = std::make_shared<coll::World>(ctx, 0, 1, std::vector<std::shared_ptr<Endpoint>>(1));
    return coll::CommAccess::make(std::make_shared<coll::CommCore>(world, 0, members, 0, config));
  }
  if (launch.store_address.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "no rendezvous store address: set REMORA_STORE=host:port (or MASTER_ADDR and MASTER_PORT)");
  }

  std::unique_ptr<StoreServer> server;
  if (rank == 0) {
    // The store authenticates with the context's key (REMORA_AUTH_KEY or
    // ContextOptions::auth_key), like the endpoints the ranks then open.
    REMORA_ASSIGN_OR_RETURN(server, start_server(launch.store_address, ctx.config().auth_key, ctx.config().encrypt));
  }
  REMORA_ASSIGN_OR_RETURN(auto store, Store::connect(launch.store_address, left_until(deadline), ctx.config().auth_key,
                                                     ctx.config().encrypt));

  REMORA_ASSIGN_OR_RETURN(const int64_t ticket, store->add("remora/arrivals", 1));
  const std::string prefix = fmt::format("remora/{}/", (ticket - 1) / size);

  std::string host;
  if (auto h = core::getenv_view("REMORA_HOST")) {
    host = std::string(*h);
  } else {
    host = store->local_host();
  }
  // Kept open for the job's life: ranks connect when they first need each other, and
  // survivors of a failure meet there again (shrink).
  auto rendezvous = coll::Rendezvous::listen(ctx, host, coll::max_opening_bytes(size));
  if (!rendezvous) {
    return rendezvous.status().with_context(
        fmt::format("rank {} could not listen on {} (set REMORA_HOST to an address of this host that the other "
                    "ranks can reach)",
                    rank, host));
  }
  Store& book = *store;
  auto world = std::make_shared<coll::World>(
      ctx, rank, size, *rendezvous, [&book, prefix](int r, Clock::time_point until) -> Result<std::string> {
        REMORA_ASSIGN_OR_RETURN(auto v, book.get(prefix + "addr/" + std::to_string(r), left_until(until)));
        return std::string(reinterpret_cast<const char*>(v.data()), v.size());
      });
  world->serve();
  REMORA_RETURN_IF_ERROR(store->set(prefix + "addr/" + std::to_string(rank), (*rendezvous)->address()));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + "addr/" + std::to_string(r));
  auto comm = coll::CommAccess::started(std::make_shared<coll::CommCore>(world, 0, members, rank, config));
  if (!comm) return explain(comm.status(), *store, keys, rank, prefix, launch.store_address, config.timeout);
  // Every rank knows every address now: its store connection closes (rank 0 would
  // otherwise hold one per rank for the job's life); rank 0 keeps serving, for a rank
  // still finishing its part of the exchange.
  world->keep_store(nullptr, std::move(server));
  return comm;
}

}  // namespace

namespace coll {

Result<std::unique_ptr<Communicator>> CommAccess::started(std::shared_ptr<CommCore> core) {
  constexpr size_t kRecord = 64;  // "[v6 address]:port" fits
  World& world = core->world();
  const std::string mine = world.address_of(world.rank());
  if (mine.size() >= kRecord) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the listener address {} is longer than {} bytes", mine, kRecord - 1));
  }
  std::vector<char> record(kRecord, '\0'), table(kRecord * static_cast<size_t>(world.size()), '\0');
  std::copy(mine.begin(), mine.end(), record.begin());
  auto comm = make(std::move(core));
  if (Status s =
          comm->allgather(record.data(), table.data(), kRecord, DataType::kUint8, {.algorithm = CollAlgorithm::kBruck});
      !s.is_ok()) {
    return s.with_context("init's exchange of addresses");
  }
  std::vector<std::string> addresses;
  for (int r = 0; r < world.size(); ++r) addresses.emplace_back(table.data() + kRecord * static_cast<size_t>(r));
  world.learn_addresses(std::move(addresses));
  return comm;
}

}  // namespace coll

Result<std::unique_ptr<Communicator>> Communicator::init(Context& ctx, const CommOptions& options) {
  REMORA_ASSIGN_OR_RETURN(auto launch, detect_launch());
  return init(ctx, launch, options);
}

Result<std::unique_ptr<Communicator>> Communicator::init(Context& ctx, const LaunchInfo& launch,
                                                         const CommOptions& options) {
  if (launch.size < 1 || launch.rank < 0 || launch.rank >= launch.size) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("Communicator::init: rank {} of size {} (need 0 <= rank < size)", launch.rank, launch.size));
  }
  REMORA_ASSIGN_OR_RETURN(auto config, coll::CollConfig::from_env(options));
  auto comm = bootstrap(ctx, launch, config);
  if (!comm) {
    return comm.status().with_context(fmt::format("Communicator::init (rank {} of {})", launch.rank, launch.size));
  }
  return comm;
}

}  // namespace remora
