// core/env.cc — REMORA_* value parsing and the unknown-variable warning (env.h).
#include "core/env.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <fmt/format.h>

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

namespace {

Status invalid(const ConfigVariable& v, std::string_view text, std::string_view why) {
  return Status(StatusCode::kInvalidArgument, fmt::format("{}: '{}' {} (it takes {})", v.name, text, why, v.range()));
}

std::string choice_list(std::span<const std::string_view> choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) out += fmt::format("{}`{}`", i ? ", " : "", choices[i]);
  return out;
}

}  // namespace

std::string size_text(uint64_t bytes) {
  static constexpr std::pair<unsigned, char> kSuffixes[] = {{30, 'G'}, {20, 'M'}, {10, 'K'}};
  if (bytes != 0) {
    for (auto [shift, suffix] : kSuffixes) {
      if (bytes % (uint64_t{1} << shift) == 0) return fmt::format("{}{}", bytes >> shift, suffix);
    }
  }
  return std::to_string(bytes);
}

Result<uint64_t> parse_value(const ConfigVariable& v, std::string_view text) {
  switch (v.kind) {
    case ConfigKind::kCount:
    case ConfigKind::kBytes: {
      auto n = v.kind == ConfigKind::kBytes ? parse_size(text) : parse_uint(text, 0, UINT64_MAX);
      if (!n) return invalid(v, text, v.kind == ConfigKind::kBytes ? "is not a size" : "is not a number");
      if (*n < v.min || *n > v.max) return invalid(v, text, "is out of range");
      return *n;
    }
    case ConfigKind::kChoice: {
      for (size_t i = 0; i < v.choices.size(); ++i) {
        if (text == v.choices[i]) return uint64_t{i};
      }
      std::string words;
      for (std::string_view w : v.choices) words += fmt::format("{}{}", words.empty() ? "" : "|", w);
      return Status(StatusCode::kInvalidArgument, fmt::format("{}: '{}' is not one of {}", v.name, text, words));
    }
    case ConfigKind::kText:
    case ConfigKind::kSecret: break;
  }
  return Status(StatusCode::kInvalidArgument, fmt::format("{}: takes text, not a number", v.name));
}

Result<std::optional<uint64_t>> read_value(const ConfigVariable& v) {
  const std::string name(v.name);
  auto text = getenv_view(name.c_str());
  if (!text) return std::optional<uint64_t>();
  REMORA_ASSIGN_OR_RETURN(uint64_t value, parse_value(v, *text));
  return std::optional<uint64_t>(value);
}

Result<std::optional<std::string_view>> read_text(const ConfigVariable& v) {
  const std::string name(v.name);
  auto text = getenv_view(name.c_str());
  if (!text) return std::optional<std::string_view>();
  if (text->size() > v.max) return invalid(v, *text, "is too long");
  return text;
}

Status check_range(const ConfigVariable& v, uint64_t value) {
  if (value >= v.min && value <= v.max) return Status::ok();
  return Status(StatusCode::kInvalidArgument,
                fmt::format("{} ({}) must be {}, not {}", v.field.empty() ? v.name : v.field, v.name, v.range(),
                            v.kind == ConfigKind::kBytes ? size_text(value) : std::to_string(value)));
}

const ConfigVariable* find_variable(std::string_view name) noexcept {
  for (VariableTable table : variable_tables()) {
    for (const ConfigVariable& v : table) {
      if (v.name == name) return &v;
    }
  }
  return nullptr;
}

void warn_unknown_variables(std::span<const VariableTable> tables) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "REMORA_", 7) != 0) continue;
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool known = false;
    for (VariableTable table : tables) {
      for (const ConfigVariable& v : table) known = known || name == v.name;
    }
    if (!known && name.substr(0, 12) != "REMORA_TEST_" && name.substr(0, 13) != "REMORA_BENCH_") {
      REMORA_LOG(kWarn, "unknown environment variable {} ignored (`remora config` lists every variable)", name);
    }
  }
}

}  // namespace remora::core

namespace remora {

std::string ConfigVariable::range() const {
  if (!range_note.empty()) return std::string(range_note);
  switch (kind) {
    case ConfigKind::kCount: return min == max ? std::to_string(min) : fmt::format("{}–{}", min, max);
    case ConfigKind::kBytes: return fmt::format("{}–{}", core::size_text(min), core::size_text(max));
    case ConfigKind::kChoice: return core::choice_list(choices);
    case ConfigKind::kText: return fmt::format("text, at most {} characters", max);
    case ConfigKind::kSecret: return "a secret";
  }
  return "?";
}

}  // namespace remora
