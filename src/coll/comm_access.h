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
  /// The last step of a bootstrap over a mesh just made: a barrier, so that no rank
  /// leaves init before every rank has its endpoints. Without it a rank that went on to
  /// dial a rank's listener again (shrink meets there) could reach one still accepting
  /// its init peers, which took the connection for one of them and waited out the
  /// timeout for a hello that never came (ShrinkInProcess, about 1 run in 150).
  static Result<std::unique_ptr<Communicator>> joined(std::shared_ptr<CommCore> core) {
    auto comm = make(std::move(core));
    if (Status s = comm->barrier(); !s.is_ok()) return s.with_context("the barrier that ends init");
    return comm;
  }
};

}  // namespace remora::coll
