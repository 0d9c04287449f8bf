// remora/config_variable.h — the rows of the library's configuration table: one per
// REMORA_* variable, with its name, what it takes, its default, the ContextOptions
// field that sets it too and what it does (remora/config.h applies them; `remora
// config` prints them; docs/configuration.md lists them).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "remora/status.h"

namespace remora {

/// How the value of a configuration variable reads (ConfigVariable::kind).
enum class ConfigKind : uint8_t {
  kCount,   ///< a plain non-negative decimal integer: "256"
  kBytes,   ///< a size, with an optional K, M or G suffix (binary multiples): "512K"
  kChoice,  ///< one of ConfigVariable::choices: "auto"
  kText,    ///< text of at most ConfigVariable::max characters: an interface name, a path
  kSecret,  ///< a secret, or the path of a file that holds one; never shown
};

/// One REMORA_* variable: its name, what it takes and does, and the ContextOptions field
/// that sets it too. Each layer of the library keeps a table of these beside the code
/// that reads them, and the same rows drive reading the environment, range checks, the
/// warning about unknown REMORA_* variables, ContextOptions::set, the Python package's
/// keyword arguments and docs/configuration.md (`remora config --markdown`).
struct ConfigVariable {
  std::string_view name{};     ///< "REMORA_STREAMS"
  std::string_view section{};  ///< the docs' table that lists it ("Context", "Collectives and launching", ...)
  ConfigKind kind = ConfigKind::kCount;
  std::string_view default_text{};              ///< as the docs show it: "2", "512K", "auto", "unset"
  uint64_t min = 0;                             ///< kCount, kBytes: the smallest value taken
  uint64_t max = 0;                             ///< kCount, kBytes: the largest; kText: the longest text
  std::span<const std::string_view> choices{};  ///< kChoice: the words taken, in the order of the values they set
  std::string_view field{};  ///< the ContextOptions field (and Python keyword) that sets it; empty: environment only
  std::string_view doc{};    ///< what it does, in one line
  std::string_view range_note{};  ///< shown instead of the computed range where that says too little ("0 (off), 4K–1G")

  /// What it takes, as the docs show it: "1–64", "4K–1G", "`auto`, `off`", "at most 15 characters".
  std::string range() const;
};

/// Every REMORA_* variable the library, its NCCL plugin and its Python build read, in
/// the order of docs/configuration.md.
std::span<const ConfigVariable> config_variables() noexcept;

/// `v` (a kCount, kBytes or kChoice row) read from the environment as the library reads
/// its own: nullopt when unset or empty; a number in [v.min, v.max], or the position of
/// a kChoice's word; kInvalidArgument naming the variable and what it takes.
Result<std::optional<uint64_t>> read_config_variable(const ConfigVariable& v);

/// A value for ContextOptions::set and what config_value returns: a number (kCount,
/// kBytes; for a kChoice, the position of its word), a switch (a kChoice of two words
/// that sets a bool: true is the first word, "auto"), or text, which is read as the
/// environment's would be ("512K", "off", "zcrx"; for auth_key, the secret).
using ConfigValue = std::variant<uint64_t, bool, std::string>;

}  // namespace remora
