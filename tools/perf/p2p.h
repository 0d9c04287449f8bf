// tools/perf/p2p.h — the plan of a p2p run (what the driver sends its follower) and the
// driver's part of one step of it, shared by `remora bench p2p` and `remora bench
// staging`. Private to tools/perf.
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

#include "perf.h"
#include "session.h"

namespace remora::perf::internal {

/// One measurement of a p2p plan: a message size, its counts, and the memory of both
/// sides' message buffers.
struct P2pStep {
  Step counts;
  MemoryKind driver_memory = MemoryKind::kHost;
  MemoryKind follower_memory = MemoryKind::kHost;
};

/// What the driver sends the follower first (kPlanTag). Each step then starts with the
/// driver's kStepTag message, which carries the test devices' copy rate (it may come
/// from a measurement of this same run), and ends with the follower's verdict on what
/// it received (kVerdictTag, with its staged transfers during the step).
struct P2pPlan {
  P2pMode mode = P2pMode::kBandwidth;
  uint32_t window = 64;
  bool distinct_buffers = false;
  BufferSource buffers = BufferSource::kPool;  ///< for host memory; device memory is registered explicitly
  bool inject_corruption = false;              ///< P2pOptions::inject_corruption
  std::vector<P2pStep> steps;

  /// The kinds of the driver's (follower's) buffers over every step, each once.
  std::vector<MemoryKind> driver_memory() const;
  std::vector<MemoryKind> follower_memory() const;
};

nlohmann::json to_json(const P2pPlan& plan);
/// The plan to_json made; kProtocol naming the field for anything else.
Result<P2pPlan> p2p_plan_from_json(const nlohmann::json& j);

/// The driver's part of plan.steps[index]: sets the copy rate of the test devices on
/// both sides (bytes/s per copy engine, 0: unlimited), times the step, and checks the
/// data on both sides (a mismatch is an error). `row` gets what the step measured.
Status drive_p2p_step(DriverSession& d, const P2pPlan& plan, size_t index, double copy_rate, const ProgressFn& progress,
                      P2pRow* row);

/// One row as JSON ("results" of bench p2p, the pairs of bench staging).
nlohmann::json row_json(P2pMode mode, uint32_t window, const P2pRow& row);

}  // namespace remora::perf::internal
