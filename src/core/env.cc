#include "core/env.h"

#include <cstdlib>
#include <limits>
#include <string>

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

}  // namespace remora::core
