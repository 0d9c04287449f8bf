#include "core/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace remora::core {
namespace {

std::atomic<int> g_level{-1};

int init_level() noexcept {
  LogLevel level = LogLevel::kWarn;
  if (const char* env = std::getenv("REMORA_LOG")) {
    if (!parse_log_level(env, &level)) {
      std::fprintf(stderr, "remora[%d] WARN REMORA_LOG=%s is not one of error|warn|info|debug|trace; using warn\n",
                   static_cast<int>(getpid()), env);
    }
  }
  return static_cast<int>(level);
}

}  // namespace

LogLevel log_level() noexcept {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = init_level();
    g_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) noexcept { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

bool parse_log_level(std::string_view text, LogLevel* out) noexcept {
  std::string lower;
  for (char c : text) lower += static_cast<char>((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},   {"warning", LogLevel::kWarn},
      {"info", LogLevel::kInfo},   {"debug", LogLevel::kDebug}, {"trace", LogLevel::kTrace}};
  for (const auto& [name, level] : kNames) {
    if (lower == name) {
      *out = level;
      return true;
    }
  }
  return false;
}

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
  }
  return "?";
}

void log_line(LogLevel level, std::string_view message) noexcept {
  // One write per line so lines from several threads/processes do not interleave.
  std::string line = fmt::format("remora[{}] {} {}\n", getpid(), to_string(level), message);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace remora::core
