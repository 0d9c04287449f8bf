// core/env.h — parsing REMORA_* values: sizes with K/M/G suffixes, integers, enums.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "remora/status.h"

namespace remora::core {

/// "4096", "512K", "64KiB", "1M", "2G" → bytes. Binary multiples. Rejects overflow,
/// negatives, empty strings and trailing garbage.
Result<uint64_t> parse_size(std::string_view text);
/// A plain non-negative decimal integer in [min, max].
Result<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max);
/// The variable's value if set (and non-empty).
std::optional<std::string_view> getenv_view(const char* name);

}  // namespace remora::core
