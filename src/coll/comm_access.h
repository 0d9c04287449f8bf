// coll/comm_access.h — the library's own way to make a Communicator around a CommCore
// and to reach the core of one: both are private in the public header, so that
// applications see neither (bootstrap, split, the tests and the tools' internals use
// this instead).
#pragma once

#include <memory>
#include <utility>

#include "coll/comm_core.h"
#include "remora/communicator.h"

namespace remora::coll {

/// Friend of Communicator. Internal: not part of the installed API.
struct CommAccess {
  /// A Communicator over `core`.
  static std::unique_ptr<Communicator> make(std::shared_ptr<CommCore> core) {
    return std::unique_ptr<Communicator>(new Communicator(std::move(core)));
  }
  /// The machinery under `comm` (its world, configuration, run/post).
  static CommCore& core(Communicator& comm) noexcept { return comm.core(); }
  /// The last step of a bootstrap (coll/bootstrap.cc): every rank learns every rank's
  /// listener address from the others, by an allgather of fixed records (Bruck's, over
  /// the 2·log2(size) endpoints it opens), so that a shrink can meet without the store
  /// whose rank may be gone; no rank leaves init before every rank has started.
  static Result<std::unique_ptr<Communicator>> started(std::shared_ptr<CommCore> core);
};

}  // namespace remora::coll
