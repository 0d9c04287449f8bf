// plugin/nixl/log.h — the NIXL backend's messages. NIXL reports only status codes to its
// callers, so the reason behind each failure is written here, to stderr, prefixed
// "NIXL/REMORA: ". The level is REMORA_LOG's (error, warn — the default —, info, debug,
// trace), as for the rest of remora.
#pragma once

#include <string_view>

#include "remora/config.h"

namespace remora::nixl_plugin {

/// Writes one line when `level` is at or below REMORA_LOG's. Thread-safe.
void log(LogLevel level, std::string_view message);

}  // namespace remora::nixl_plugin
