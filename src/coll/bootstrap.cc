// STUB: Communicator::init (store + launcher environment) arrives in its own commit.
#include "coll/comm_core.h"
#include "remora/communicator.h"

namespace remora {
Result<std::unique_ptr<Communicator>> Communicator::init(Context&, const CommOptions&) {
  return Status(StatusCode::kUnsupported, "not implemented yet");
}
Result<std::unique_ptr<Communicator>> Communicator::init(Context&, const LaunchInfo&, const CommOptions&) {
  return Status(StatusCode::kUnsupported, "not implemented yet");
}
}  // namespace remora
