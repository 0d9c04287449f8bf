// coll/external_store.cc — init_communicator: Communicator bootstrap through a
// key-value store the application provides (remora/external_store.h). The same lazy
// world as coll/bootstrap.cc, with addresses published in ExternalStore instead of a
// rendezvous store hosted by rank 0.
#include "remora/external_store.h"

#include <sched.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "coll/rendezvous.h"
#include "core/cpus.h"
#include "core/env.h"
#include "engine/engine_of.h"
#include "engine/progress.h"

namespace remora {
namespace {

using coll::Clock;

Duration left_until(Clock::time_point deadline) {
  const auto now = Clock::now();
  return deadline > now ? Duration(deadline - now) : Duration::zero();
}

Result<std::unique_ptr<Communicator>> bootstrap(Context& ctx, ExternalStore& store, const ExternalBootstrap& boot,
                                                const coll::CollConfig& config) {
  const int rank = boot.rank;
  const int size = boot.size;
  if (const int cpus = core::usable_cpus(); boot.local_size > cpus) {
    detail::engine_of(ctx)->set_yield_polls(1);
  }
  std::vector<int> members(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) members[static_cast<size_t>(i)] = i;
  if (size == 1) {
    auto world = std::make_shared<coll::World>(ctx, 0, 1, std::vector<std::shared_ptr<Endpoint>>(1));
    return coll::CommAccess::make(std::make_shared<coll::CommCore>(world, 0, members, 0, config));
  }

  std::string host = boot.host;
  if (host.empty()) {
    if (auto h = core::getenv_view("REMORA_HOST")) host = std::string(*h);
  }
  if (host.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "no address to listen on: pass ExternalBootstrap::host or set REMORA_HOST to an address of this "
                  "host that the other ranks can reach");
  }
  // Kept open for the job's life: ranks connect when they first need each other, and
  // the survivors of a failure meet there again (shrink) without the external store.
  auto rendezvous = coll::Rendezvous::listen(ctx, host, coll::max_opening_bytes(size));
  if (!rendezvous) return rendezvous.status().with_context(fmt::format("rank {} could not listen on {}", rank, host));
  const std::string prefix = boot.key_prefix;
  auto world = std::make_shared<coll::World>(
      ctx, rank, size, *rendezvous, [&store, prefix](int r, coll::Clock::time_point until) -> Result<std::string> {
        auto v = store.get(prefix + "addr/" + std::to_string(r), left_until(until));
        if (!v) {
          return v.status().with_context(
              fmt::format("waiting for rank {}'s address (\"{}addr/{}\") in the external store", r, prefix, r));
        }
        return std::string(reinterpret_cast<const char*>(v->data()), v->size());
      });
  world->serve();
  const std::string mine = (*rendezvous)->address();
  REMORA_RETURN_IF_ERROR(
      store.set(prefix + "addr/" + std::to_string(rank), std::as_bytes(std::span(mine.data(), mine.size()))));
  return coll::CommAccess::started(std::make_shared<coll::CommCore>(world, 0, members, rank, config));
}

}  // namespace

Result<std::unique_ptr<Communicator>> init_communicator(Context& ctx, ExternalStore& store,
                                                        const ExternalBootstrap& boot, const CommOptions& options) {
  if (boot.size < 1 || boot.rank < 0 || boot.rank >= boot.size) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("init_communicator: rank {} of size {} (need 0 <= rank < size)", boot.rank, boot.size));
  }
  REMORA_ASSIGN_OR_RETURN(auto config, coll::CollConfig::from_env(options));
  auto comm = bootstrap(ctx, store, boot, config);
  if (!comm) {
    return comm.status().with_context(fmt::format("init_communicator (rank {} of {})", boot.rank, boot.size));
  }
  return comm;
}

}  // namespace remora
