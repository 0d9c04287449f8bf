// core/env.h — reading REMORA_* variables by their rows of the configuration table
// (remora/config_variable.h): sizes with K/M/G suffixes, integers, choices and text,
// each with an error that names the variable; the warning for REMORA_* variables that
// no row names. Each layer keeps the
// rows of its own variables (transport/config.cc, coll/comm_core.cc, ...); core knows
// none of them but its own (REMORA_LOG).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "remora/config_variable.h"
#include "remora/status.h"

namespace remora::core {

/// "4096", "512K", "64KiB", "1M", "2G" → bytes. Binary multiples. Rejects overflow,
/// negatives, empty strings and trailing garbage.
Result<uint64_t> parse_size(std::string_view text);
/// A plain non-negative decimal integer in [min, max].
Result<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max);
/// The variable's value if set (and non-empty).
std::optional<std::string_view> getenv_view(const char* name);

/// One layer's rows of the configuration table (remora/config_variable.h).
using VariableTable = std::span<const ConfigVariable>;
/// Core's own: REMORA_LOG.
VariableTable core_variables() noexcept;
/// Every layer's table, in the order of docs/configuration.md. Core cannot see the
/// layers above it, so this is defined once at the top of the library
/// (src/library/config_variables.cc), which names each layer's table; not by
/// registration at static-initialisation time, which a static library drops together
/// with an object file nothing else refers to.
std::span<const VariableTable> variable_tables() noexcept;
/// The row named `name` among every layer's; null when none is.
const ConfigVariable* find_variable(std::string_view name) noexcept;

/// `text` as `v` takes it: a kCount or kBytes value in [v.min, v.max], or the position
/// of a kChoice's word. kInvalidArgument "<name>: '<text>' ..." saying what it takes.
Result<uint64_t> parse_value(const ConfigVariable& v, std::string_view text);
/// `v` read from the environment: nullopt when unset (or empty), else parse_value.
Result<std::optional<uint64_t>> read_value(const ConfigVariable& v);
/// A kText `v` read from the environment: nullopt when unset (or empty); kInvalidArgument
/// when longer than v.max characters.
Result<std::optional<std::string_view>> read_text(const ConfigVariable& v);
/// kInvalidArgument "<field> (<name>) must be <range>" unless `value` is in [v.min, v.max].
Status check_range(const ConfigVariable& v, uint64_t value);
/// "4K", "1G", "4096": a byte count with the largest binary suffix that divides it.
std::string size_text(uint64_t bytes);

/// Logs a warning for every REMORA_* variable in the environment that no row of
/// `tables` names (REMORA_TEST_* and REMORA_BENCH_*, for tests and tools, excepted).
void warn_unknown_variables(std::span<const VariableTable> tables);

}  // namespace remora::core
