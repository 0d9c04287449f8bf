// library/config_variables.cc — the top of the library, the one place that sees every
// layer: it gathers each layer's rows of the configuration table (core::variable_tables,
// for reading, the unknown-variable warning and config_variables()), and keeps the rows
// of the variables read outside the library proper: the NCCL net plugin's (it links this
// library in and reads them with read_config_variable), the NIXL backend plugin's
// (plugin/nixl: text, read with getenv) and the Python build's.
#include <array>
#include <vector>

#include "coll/variables.h"
#include "core/env.h"
#include "device/variables.h"
#include "remora/config_variable.h"
#include "transport/variables.h"

namespace remora {
namespace {

constexpr const char* kPlugin = "The NCCL net plugin";
constexpr const char* kNixlPlugin = "The NIXL backend plugin";
constexpr ConfigVariable kOutsideRows[] = {
    {.name = "REMORA_NCCL_IFNAME",
     .section = kPlugin,
     .kind = ConfigKind::kText,
     .default_text = "unset (then `NCCL_SOCKET_IFNAME`, then every interface but `lo*`, `docker*`)",
     .max = 1024,
     .doc = "the interfaces offered as NCCL devices, in `NCCL_SOCKET_IFNAME`'s syntax (prefixes, `^` to exclude, "
            "`=` for exact names)"},
    {.name = "REMORA_NCCL_IDLE_POLLS",
     .section = kPlugin,
     .default_text = "16",
     .min = 1,
     .max = 1'000'000,
     .doc = "`test` calls in a row that found their request running before `test` may wait"},
    {.name = "REMORA_NCCL_IDLE_WAIT_US",
     .section = kPlugin,
     .default_text = "0",
     .min = 0,
     .max = 100'000,
     .doc = "the longest such wait, µs; 0: `test` never waits, as NCCL expects (docs/nccl.md)"},
    {.name = "REMORA_NIXL_ADDRESS",
     .section = kNixlPlugin,
     .kind = ConfigKind::kText,
     .default_text = "0.0.0.0:0",
     .max = 1024,
     .doc = "where the backend listens, `host:port`; a wildcard host advertises every interface that is up "
            "(loopback last), another host exactly itself (NIXL's parameter `address` wins)"},
    {.name = "REMORA_NIXL_IFNAME",
     .section = kNixlPlugin,
     .kind = ConfigKind::kText,
     .default_text = "unset (every interface)",
     .max = 1024,
     .doc = "with a wildcard address, the comma-separated names of the interfaces it advertises (NIXL's parameter "
            "`ifname` wins)"},
    {.name = "REMORA_NIXL_LIBRARY",
     .section = kNixlPlugin,
     .kind = ConfigKind::kText,
     .default_text = "unset",
     .max = 4096,
     .doc = "a path standing for the loaded `libnixl.so` when the plugin tells NIXL's release (tests; docs/nixl.md)"},
    {.name = "REMORA_PYTHON_LIBRARY",
     .section = "Building the Python packages",
     .kind = ConfigKind::kText,
     .default_text = "unset (the package builds the library itself)",
     .max = 4096,
     .doc = "a `libremora.a` of the same tree to link into the `remora` and `remora_torch` extensions"},
};

}  // namespace

namespace core {

std::span<const VariableTable> variable_tables() noexcept {
  static const std::array<VariableTable, 5> kTables = {core_variables(), transport::variables(), device::variables(),
                                                       coll::variables(), kOutsideRows};
  return kTables;
}

// Here rather than in env.cc: core's own users (the fuzz harnesses among them) link
// core without the layers above it, whose tables this reads.
const ConfigVariable* find_variable(std::string_view name) noexcept {
  for (VariableTable table : variable_tables()) {
    for (const ConfigVariable& v : table) {
      if (v.name == name) return &v;
    }
  }
  return nullptr;
}

}  // namespace core

std::span<const ConfigVariable> config_variables() noexcept {
  static const std::vector<ConfigVariable> kAll = [] {
    std::vector<ConfigVariable> all;
    for (core::VariableTable table : core::variable_tables()) all.insert(all.end(), table.begin(), table.end());
    return all;
  }();
  return kAll;
}

Result<std::optional<uint64_t>> read_config_variable(const ConfigVariable& v) { return core::read_value(v); }

}  // namespace remora
