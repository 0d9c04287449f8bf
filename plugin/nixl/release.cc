// plugin/nixl/release.cc — learning the running NIXL's release (release.h).
#include "release.h"

#include <link.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

namespace remora::nixl_plugin {

namespace fs = std::filesystem;

namespace {

// Verified, for each: the vtable of nixlBackendEngine and of the UCX plugin's engine
// (27 slots), the base constructor's member offsets inlined into the POSIX plugin and
// libnixl.so's test of initErr at +0xa0, all read from that release's nixl-cu12 wheel
// and equal to 1.5.1's (nixl_abi.h); and every test of tests/nixl passing against that
// wheel's agent (docs/nixl.md, "Releases"). CI runs them against 1.5.1.
constexpr std::array<std::string_view, 3> kSupported = {"1.4.1", "1.5.0", "1.5.1"};

Status unsupported(std::string what) { return Status(StatusCode::kUnsupported, std::move(what)); }

bool is_version(std::string_view s) {
  int dots = 0;
  bool digit = false;
  for (char c : s) {
    if (c == '.') {
      if (!digit) return false;
      ++dots;
      digit = false;
    } else if (c >= '0' && c <= '9') {
      digit = true;
    } else {
      return false;
    }
  }
  return dots == 2 && digit;
}

int find_library(dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const std::string_view n(name);
  const size_t slash = n.rfind('/');
  if (n.substr(slash == std::string_view::npos ? 0 : slash + 1) != "libnixl.so") return 0;
  *static_cast<std::optional<std::string>*>(data) = std::string(n);
  return 1;
}

std::optional<std::string> loaded_libnixl() {
  if (const char* forced = std::getenv("REMORA_NIXL_LIBRARY"); forced != nullptr && *forced != '\0') {
    return std::string(forced);
  }
  std::optional<std::string> found;
  dl_iterate_phdr(find_library, &found);
  return found;
}

std::optional<std::string> read_file(const fs::path& p) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) return std::nullopt;
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return std::nullopt;
  return out;
}

}  // namespace

std::span<const std::string_view> supported_releases() { return kSupported; }

Result<std::string> version_from_dist_info(const std::string& library_path) {
  std::error_code ec;
  const fs::path lib = fs::weakly_canonical(library_path, ec);
  const std::string dir = lib.parent_path().filename().string();  // ".nixl_cu12.mesonpy.libs"
  constexpr std::string_view kSuffix = ".mesonpy.libs";
  if (dir.size() <= kSuffix.size() + 1 || dir[0] != '.' || !dir.ends_with(kSuffix)) {
    return unsupported(lib.string() + " is not in a NIXL wheel's library folder");
  }
  const std::string dist = dir.substr(1, dir.size() - 1 - kSuffix.size());  // "nixl_cu12"
  const fs::path site = lib.parent_path().parent_path();
  std::vector<fs::path> infos;
  for (const fs::directory_entry& e : fs::directory_iterator(site, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(dist + "-") && name.ends_with(".dist-info")) infos.push_back(e.path());
  }
  if (infos.size() != 1) {
    return unsupported(std::to_string(infos.size()) + " " + dist + "-*.dist-info folders in " + site.string());
  }
  std::optional<std::string> metadata = read_file(infos[0] / "METADATA");
  if (!metadata) return unsupported("cannot read " + (infos[0] / "METADATA").string());
  std::istringstream lines(*metadata);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) break;  // the headers end at the first blank line
    if (line.starts_with("Version: ")) return line.substr(9);
  }
  return unsupported((infos[0] / "METADATA").string() + " has no Version");
}

Result<std::string> version_from_binary(std::string_view bytes) {
  // NIXL logs "NIXL version: " << NIXL_VERSION: two literals, next to each other.
  constexpr std::string_view kLabel("NIXL version: \0", 15);
  if (size_t at = bytes.find(kLabel); at != std::string_view::npos) {
    size_t p = at + kLabel.size();
    while (p < bytes.size() && bytes[p] == '\0') ++p;
    const size_t end = bytes.find('\0', p);
    if (end != std::string_view::npos && is_version(bytes.substr(p, end - p)))
      return std::string(bytes.substr(p, end - p));
  }
  std::optional<std::string> only;
  size_t start = 0;
  for (size_t i = 0; i <= bytes.size(); ++i) {
    if (i < bytes.size() && bytes[i] != '\0') continue;
    const std::string_view s = bytes.substr(start, i - start);
    if (s.size() >= 5 && s.size() <= 16 && is_version(s)) {
      if (only && *only != s) return unsupported("several version strings (" + *only + ", " + std::string(s) + ")");
      only = std::string(s);
    }
    start = i + 1;
  }
  if (!only) return unsupported("no version string");
  return *only;
}

Result<NixlRelease> detect_nixl_release() {
  std::optional<std::string> lib = loaded_libnixl();
  if (!lib) {
    return unsupported("no libnixl.so is loaded in this process, so the NIXL release cannot be told");
  }
  NixlRelease r{.version = {}, .library = *lib, .evidence = {}};
  Result<std::string> wheel = version_from_dist_info(*lib);
  std::optional<std::string> common = read_file(fs::path(*lib).parent_path() / "libnixl_common.so");
  Result<std::string> built =
      common ? version_from_binary(*common) : Result<std::string>(unsupported("no libnixl_common.so beside it"));
  if (wheel && built && *wheel != *built) {
    return unsupported("the NIXL at " + *lib + " says two versions: " + *wheel + " (its dist-info) and " + *built +
                       " (libnixl_common.so)");
  }
  if (wheel) {
    r.version = *wheel;
    r.evidence = "the wheel's dist-info";
  } else if (built) {
    r.version = *built;
    r.evidence = "the version compiled into libnixl_common.so";
  } else {
    return unsupported("cannot tell the release of the NIXL at " + *lib + ": " + wheel.status().message() + "; " +
                       built.status().message());
  }
  for (std::string_view v : kSupported) {
    if (v == r.version) return r;
  }
  std::string list;
  for (std::string_view v : kSupported) list += (list.empty() ? "" : ", ") + std::string(v);
  return unsupported("NIXL " + r.version + " (" + r.library + ", from " + r.evidence +
                     ") is not a release this plugin was built and tested for (" + list +
                     "): its plugin interface may differ, so the plugin does not load. Install a supported "
                     "NIXL (pip install nixl-cu12==" +
                     std::string(kSupported.back()) + ") or a remora built for this one.");
}

}  // namespace remora::nixl_plugin
