// plugin/nixl/release.h — which NIXL release loaded the plugin, and whether its plugin
// layout is one nixl_abi.h matches.
//
// NIXL_PLUGIN_API_VERSION has stayed 1 while the engine class changed, and a plugin
// built for another layout would be called through the wrong vtable slots: so the
// plugin refuses to start in any release it was not verified against. NIXL offers no
// call that says its version; the plugin finds the libnixl.so loaded in the process
// (dl_iterate_phdr: it is there, since that library is what loads plugins) and reads:
//   1. the pip distribution that installed it: the wheel puts libnixl.so in
//      site-packages/.nixl_cu12.mesonpy.libs/ (nixl_cu13 alike), next to
//      nixl_cu12-<version>.dist-info/METADATA, whose Version line is authoritative;
//   2. else the version NIXL compiled into libnixl_common.so beside it (its NIXL_VERSION,
//      the string NIXL itself logs after "NIXL version: " at start-up): the one
//      MAJOR.MINOR.PATCH string in that file's read-only data (a source build).
// When both are found they must agree.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "remora/status.h"

namespace remora::nixl_plugin {

/// The NIXL releases whose plugin layout nixl_abi.h was verified against.
std::span<const std::string_view> supported_releases();

/// What was found about the running NIXL.
struct NixlRelease {
  std::string version;   ///< "1.5.1"
  std::string library;   ///< path of the loaded libnixl.so
  std::string evidence;  ///< where the version came from
};

/// The running NIXL's release; kUnsupported naming what was looked at when it cannot be
/// told, kUnsupported naming the version when it is not a supported one.
/// REMORA_NIXL_LIBRARY (a path) stands for the loaded library (tests).
Result<NixlRelease> detect_nixl_release();

// --- the pieces, for tests -----------------------------------------------------------------

/// The Version of a wheel's dist-info for a libnixl.so at `library_path`
/// (".../site-packages/.nixl_cuXX.mesonpy.libs/libnixl.so"); kNotFound-like kUnsupported
/// when the path is not a wheel's or no single matching dist-info exists.
Result<std::string> version_from_dist_info(const std::string& library_path);
/// NIXL_VERSION from the bytes of a libnixl_common.so: the string after "NIXL version: ",
/// else the one MAJOR.MINOR.PATCH string; kUnsupported if none or several.
Result<std::string> version_from_binary(std::string_view file_bytes);

}  // namespace remora::nixl_plugin
