// core/log.cc — the logger (core/log.h) and core's row of the configuration table: REMORA_LOG.
#include "core/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/env.h"

namespace remora::core {
namespace {

std::atomic<int> g_level{-1};

constexpr std::string_view kLevelWords[] = {"error", "warn", "info", "debug", "trace"};
static_assert(static_cast<int>(LogLevel::kError) == 0 && static_cast<int>(LogLevel::kTrace) == 4,
              "kLevelWords follows LogLevel");
constexpr ConfigVariable kLogVariable{
    .name = "REMORA_LOG",
    .section = "Context",
    .kind = ConfigKind::kChoice,
    .default_text = "warn",
    .choices = kLevelWords,
    .field = "log_level",
    .doc = "how much the library logs, to stderr, one line per message (one log per process)"};

int init_level() noexcept {
  auto level = read_value(kLogVariable);
  if (!level) {
    std::fprintf(stderr, "remora[%d] WARN %s; logging at warn\n", static_cast<int>(getpid()),
                 level.status().message().c_str());
    return static_cast<int>(LogLevel::kWarn);
  }
  return static_cast<int>(level->value_or(static_cast<uint64_t>(LogLevel::kWarn)));
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

VariableTable core_variables() noexcept {
  static constexpr ConfigVariable kRows[] = {kLogVariable};
  return kRows;
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
