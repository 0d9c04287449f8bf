// library/known_variables.cc — the top of the library, the one place that sees every
// layer: it gathers the REMORA_* variables each layer reads for core's
// unknown-variable warning (core::known_variable_lists, core/env.h). Core declares the
// function and cannot see the layers above it; this file, linked into libremora with
// them, names each layer's own list.
#include <array>

#include "coll/variables.h"
#include "core/env.h"
#include "device/variables.h"
#include "transport/variables.h"

namespace remora::core {

namespace {
// Read by the NCCL net plugin (plugin/nccl/interfaces.cc, plugin.cc), which links this library in.
constexpr std::array<std::string_view, 3> kNcclPluginVariables = {"REMORA_NCCL_IFNAME", "REMORA_NCCL_IDLE_POLLS",
                                                                  "REMORA_NCCL_IDLE_WAIT_US"};
// Read by the NIXL backend plugin (plugin/nixl/engine.cc, release.cc), which links this library in.
constexpr std::array<std::string_view, 3> kNixlPluginVariables = {"REMORA_NIXL_ADDRESS", "REMORA_NIXL_IFNAME",
                                                                  "REMORA_NIXL_LIBRARY"};
// Read by the build of the Python packages (scripts/lib/python.sh, torch_env.sh), never
// by the library; a process started from that build's environment must not warn of it.
constexpr std::array<std::string_view, 1> kBuildVariables = {"REMORA_PYTHON_LIBRARY"};
}  // namespace

std::span<const VariableList> known_variable_lists() noexcept {
  static const std::array<VariableList, 7> kLists = {core_variables(),    transport::variables(), coll::variables(),
                                                     device::variables(), kNcclPluginVariables,   kNixlPluginVariables,
                                                     kBuildVariables};
  return kLists;
}

}  // namespace remora::core
