// transport/variables.h — the REMORA_* variables the transport reads (Config::from_env,
// transport/config.cc), for core's unknown-variable warning (core/env.h).
#pragma once

#include "core/env.h"

namespace remora::transport {

/// REMORA_STREAMS, REMORA_CHUNK_SIZE, ... REMORA_PIN: every variable Config::from_env
/// reads but REMORA_LOG (core's).
core::VariableTable variables() noexcept;

}  // namespace remora::transport
