// Uses an installed remora through its public header only. Prints one line and
// exits 0 when the library agrees with the header and the package version.
#include <cstdio>
#include <string>
#include <string_view>

#include <remora/remora.h>

#ifndef REMORA_EXPECTED_VERSION
#error "build with -DREMORA_EXPECTED_VERSION=\"x.y.z\" (the version the package claims)"
#endif

int main() {
  const char* version = remora::version_string();
  const std::string_view timeout = remora::to_string(remora::StatusCode::kTimeout);
  const std::string header_version = std::to_string(remora::kVersionMajor) + "." +
                                     std::to_string(remora::kVersionMinor) + "." +
                                     std::to_string(remora::kVersionPatch);
  std::printf("remora-consumer: version=%s timeout=%.*s\n", version == nullptr ? "(null)" : version,
              static_cast<int>(timeout.size()), timeout.data());

  int failures = 0;
  if (version == nullptr || !std::string_view(version).starts_with(header_version)) {
    std::fprintf(stderr, "FAIL: version_string() does not start with the header's %s\n", header_version.c_str());
    ++failures;
  }
  if (header_version != REMORA_EXPECTED_VERSION) {
    std::fprintf(stderr, "FAIL: header version %s != package version %s\n", header_version.c_str(),
                 REMORA_EXPECTED_VERSION);
    ++failures;
  }
  if (timeout != "timeout") {
    std::fprintf(stderr, "FAIL: to_string(kTimeout) is not \"timeout\"\n");
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}
