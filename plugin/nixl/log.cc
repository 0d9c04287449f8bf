// plugin/nixl/log.cc — the NIXL backend's messages on stderr (log.h).
#include "log.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace remora::nixl_plugin {

namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("REMORA_LOG");
  if (v == nullptr) return LogLevel::kWarn;
  const std::string_view s(v);
  if (s == "error") return LogLevel::kError;
  if (s == "info") return LogLevel::kInfo;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "trace") return LogLevel::kTrace;
  return LogLevel::kWarn;
}

}  // namespace

void log(LogLevel level, std::string_view message) {
  static const LogLevel threshold = level_from_env();
  if (level > threshold) return;
  std::string line = "NIXL/REMORA: ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines of threads do not mix
}

}  // namespace remora::nixl_plugin
