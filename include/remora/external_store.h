// remora/external_store.h — Communicator bootstrap through a key-value store the
// application already has (torch.distributed's c10d::Store under torchrun, a job
// scheduler's KV service, ...) instead of remora's own rendezvous store.
//
// Each rank listens on `host`, publishes its listener address under
// "<key_prefix>addr/<rank>", and builds the same lazily connected communicator as
// Communicator::init, reading the addresses of the ranks it dials during its exchange
// of addresses. The store is used only during this call.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remora/communicator.h"
#include "remora/context.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {

/// The two operations bootstrap needs from a key-value store shared by every rank.
/// Called from the thread that calls init_communicator only.
class ExternalStore {
 public:
  virtual ~ExternalStore() = default;
  /// Stores `value` under `key`, visible to every rank.
  virtual Status set(std::string_view key, std::span<const std::byte> value) = 0;
  /// Waits up to `timeout` for `key` to exist, then returns its value (kTimeout when
  /// it did not appear in time).
  virtual Result<std::vector<std::byte>> get(std::string_view key, Duration timeout) = 0;
};

/// Who this rank is, and where it listens.
struct ExternalBootstrap {
  int rank = 0;
  int size = 1;
  /// Ranks on this host (more than its CPUs: waiting threads yield, as in Communicator::init).
  int local_size = 1;
  /// The address this rank listens on, reachable by every other rank; empty: REMORA_HOST
  /// (kInvalidArgument when neither is set and size > 1).
  std::string host;
  /// Prepended to every key, to keep several communicators in one store apart.
  std::string key_prefix = "remora/";
};

/// A communicator of `boot.size` ranks, met through `store`; bounded by
/// options.timeout (REMORA_COLL_TIMEOUT_MS). Every rank must call it with the same
/// size and key_prefix. kTimeout names the ranks that never published their address.
Result<std::unique_ptr<Communicator>> init_communicator(Context& ctx, ExternalStore& store,
                                                        const ExternalBootstrap& boot, const CommOptions& options = {});

}  // namespace remora
