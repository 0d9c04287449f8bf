// coll/variables.h — the REMORA_* variables the collectives and the launcher detection
// read (coll/comm_core.cc, coll/launch.cc, coll/bootstrap.cc), for core's
// unknown-variable warning (core/env.h).
#pragma once

#include "core/env.h"

namespace remora::coll {

/// REMORA_RANK, REMORA_WORLD_SIZE, REMORA_LOCAL_RANK, REMORA_LOCAL_WORLD_SIZE,
/// REMORA_STORE, REMORA_HOST, REMORA_COLL_TIMEOUT_MS, REMORA_*_ALGO,
/// REMORA_RING_THRESHOLD, REMORA_COLL_PIPELINE.
core::VariableTable variables() noexcept;

}  // namespace remora::coll
