// core/log.h — the internal logger. Level from REMORA_LOG (error, warn, info, debug,
// trace; its row is core's in core/env.h's table); lines go to stderr as
// "remora[pid] LEVEL message".
#pragma once

#include <atomic>
#include <string_view>

#include <fmt/format.h>

#include "remora/types.h"

namespace remora::core {

/// Current level; initialised from REMORA_LOG on first use, changeable at run time.
LogLevel log_level() noexcept;
void set_log_level(LogLevel level) noexcept;
std::string_view to_string(LogLevel level) noexcept;

void log_line(LogLevel level, std::string_view message) noexcept;

}  // namespace remora::core

#define REMORA_LOG(level, ...)                                                       \
  do {                                                                               \
    if (::remora::LogLevel::level <= ::remora::core::log_level()) {                  \
      ::remora::core::log_line(::remora::LogLevel::level, ::fmt::format(__VA_ARGS__)); \
    }                                                                                \
  } while (0)
