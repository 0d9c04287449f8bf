// core/env.h — parsing REMORA_* values: sizes with K/M/G suffixes, integers, enums;
// reading one variable into a field with an error that names it; and the warning for
// REMORA_* variables that no layer reads. Each layer names and checks its own
// variables (transport/config.cc, coll/comm_core.cc, coll/launch.cc); core knows none
// of them but its own (REMORA_LOG).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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

/// kInvalidArgument "<name>: <what parsing said>".
Status env_error(const char* name, const Status& parse_error);
/// If `name` is set: parses it as an integer in [min, max] into `*field`, or fails
/// with env_error. Unset leaves `*field` as it is.
template <typename T>
Status read_env_uint(const char* name, T* field, uint64_t min, uint64_t max) {
  if (auto text = getenv_view(name)) {
    auto v = parse_uint(*text, min, max);
    if (!v) return env_error(name, v.status());
    *field = static_cast<T>(*v);
  }
  return Status::ok();
}
/// If `name` is set: parses it as a size (parse_size) into `*field`, or fails with env_error.
Status read_env_size(const char* name, size_t* field);

/// The REMORA_* variables one layer reads.
using VariableList = std::span<const std::string_view>;
/// Core's own: REMORA_LOG.
VariableList core_variables() noexcept;
/// Every layer's list. Core cannot see the layers above it, so this is defined once at
/// the top of the library (src/library/known_variables.cc), which names each layer's
/// list; not by registration at static-initialisation time, which a static library
/// drops together with an object file nothing else refers to.
std::span<const VariableList> known_variable_lists() noexcept;
/// Logs a warning for every REMORA_* variable in the environment that none of `lists`
/// names (REMORA_TEST_* and REMORA_BENCH_*, for tests and tools, excepted).
void warn_unknown_variables(std::span<const VariableList> lists);

}  // namespace remora::core
