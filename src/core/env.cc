// core/env.cc — REMORA_* value parsing and the unknown-variable warning (env.h).
#include "core/env.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/log.h"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace remora::core {

Result<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max) {
  if (text.empty()) return Status(StatusCode::kInvalidArgument, "empty number");
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return Status(StatusCode::kInvalidArgument, "'" + std::string(text) + "' is not a non-negative integer");
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return Status(StatusCode::kInvalidArgument, "'" + std::string(text) + "' overflows 64 bits");
    }
    value = value * 10 + digit;
  }
  if (value < min || value > max) {
    return Status(StatusCode::kInvalidArgument,
                  "'" + std::string(text) + "' is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

Result<uint64_t> parse_size(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return Status(StatusCode::kInvalidArgument, "'" + std::string(text) + "' is not a size (e.g. 4096, 512K, 1M, 2G)");
  auto number = parse_uint(text.substr(0, digits), 0, std::numeric_limits<uint64_t>::max());
  if (!number) return number.status();
  std::string suffix;
  for (char c : text.substr(digits)) suffix += static_cast<char>((c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c);
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    shift = 30;
  } else {
    return Status(StatusCode::kInvalidArgument, "'" + std::string(text) + "' has an unknown size suffix (use K, M or G)");
  }
  uint64_t value = *number;
  if (shift != 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return Status(StatusCode::kInvalidArgument, "'" + std::string(text) + "' overflows 64 bits");
  }
  return value << shift;
}

std::optional<std::string_view> getenv_view(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string_view(value);
}

Status env_error(const char* name, const Status& parse_error) {
  return Status(StatusCode::kInvalidArgument, std::string(name) + ": " + parse_error.message());
}

Status read_env_size(const char* name, size_t* field) {
  if (auto text = getenv_view(name)) {
    auto v = parse_size(*text);
    if (!v) return env_error(name, v.status());
    *field = static_cast<size_t>(*v);
  }
  return Status::ok();
}

VariableList core_variables() noexcept {
  static constexpr std::string_view kVariables[] = {"REMORA_LOG"};
  return kVariables;
}

void warn_unknown_variables(std::span<const VariableList> lists) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "REMORA_", 7) != 0) continue;
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool known = false;
    for (VariableList list : lists) {
      for (std::string_view k : list) known = known || name == k;
    }
    if (!known && name.substr(0, 12) != "REMORA_TEST_" && name.substr(0, 13) != "REMORA_BENCH_") {
      REMORA_LOG(kWarn, "unknown environment variable {} ignored (see docs/configuration.md)", name);
    }
  }
}

}  // namespace remora::core
