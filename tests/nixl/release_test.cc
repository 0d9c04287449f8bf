// How the NIXL backend tells which NIXL release loaded it (plugin/nixl/release.h): from a
// wheel's dist-info beside the loaded libnixl.so, else from the version NIXL compiled into
// libnixl_common.so; and that it refuses every release but the supported ones, saying
// which it found and where. Wheel layouts are made in a temporary folder; the real
// wheel's are covered by tests/nixl/test_plugin.py.
#include "release.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace remora::nixl_plugin {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

class TempTree {
 public:
  TempTree() {
    std::string tmpl = (fs::temp_directory_path() / "remora-nixl-XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fs::path path(const std::string& rel) const { return root_ / rel; }
  void write(const std::string& rel, const std::string& bytes) const {
    fs::create_directories(path(rel).parent_path());
    std::ofstream(path(rel), std::ios::binary) << bytes;
  }

 private:
  fs::path root_;
};

/// A wheel's site-packages: .nixl_cu12.mesonpy.libs/libnixl.so and its dist-info.
std::string make_wheel(const TempTree& t, const std::string& version, const std::string& dist = "nixl_cu12") {
  t.write("site/." + dist + ".mesonpy.libs/libnixl.so", "ELF");
  t.write("site/" + dist + "-" + version + ".dist-info/METADATA",
          "Metadata-Version: 2.4\nName: " + dist + "\nVersion: " + version + "\nSummary: x\n\nVersion: 9.9.9\n");
  return t.path("site/." + dist + ".mesonpy.libs/libnixl.so").string();
}

class ScopedLibrary {
 public:
  explicit ScopedLibrary(const std::string& path) { setenv("REMORA_NIXL_LIBRARY", path.c_str(), 1); }
  ~ScopedLibrary() { unsetenv("REMORA_NIXL_LIBRARY"); }
};

TEST(NixlRelease, OnlyVerifiedReleasesAreSupported) {
  ASSERT_FALSE(supported_releases().empty());
  EXPECT_EQ(supported_releases().back(), "1.5.1");
}

TEST(NixlRelease, AWheelSaysItsVersionInItsDistInfo) {
  TempTree t;
  Result<std::string> v = version_from_dist_info(make_wheel(t, "1.5.1"));
  ASSERT_TRUE(v) << v.status().to_string();
  EXPECT_EQ(*v, "1.5.1");  // the headers' Version, not the one after the blank line
  TempTree t13;
  EXPECT_EQ(*version_from_dist_info(make_wheel(t13, "1.5.0", "nixl_cu13")), "1.5.0");
}

TEST(NixlRelease, NoWheelOrAnAmbiguousOneSaysSo) {
  TempTree t;
  t.write("lib/libnixl.so", "ELF");
  EXPECT_FALSE(version_from_dist_info(t.path("lib/libnixl.so").string()));
  const std::string lib = make_wheel(t, "1.5.1");
  t.write("site/nixl_cu12-1.4.1.dist-info/METADATA", "Version: 1.4.1\n");  // two: which one?
  Result<std::string> two = version_from_dist_info(lib);
  ASSERT_FALSE(two);
  EXPECT_NE(two.status().message().find("2 nixl_cu12-*.dist-info"), std::string::npos) << two.status().message();
}

TEST(NixlRelease, ASourceBuildSaysItsVersionInLibnixlCommon) {
  // As the compiler lays out NIXL's log line: "NIXL version: " then NIXL_VERSION.
  EXPECT_EQ(*version_from_binary("\x7f"
                                 "ELF\0junk\0NIXL version: \0\0\0"
                                 "1.5.1\0other 2.0\0"s),
            "1.5.1");
  // Elsewhere in the file: the one MAJOR.MINOR.PATCH string.
  EXPECT_EQ(*version_from_binary("a\0"
                                 "1.4.1\0"
                                 "1.4.1\0b.c.d\0"
                                 "1.2\0"s),
            "1.4.1");
  EXPECT_FALSE(
      version_from_binary("a\0"
                          "1.4.1\0"
                          "1.5.0\0"s));  // which one?
  EXPECT_FALSE(version_from_binary("nothing here"));
}

TEST(NixlRelease, TheSupportedReleaseLoads) {
  TempTree t;
  ScopedLibrary lib(make_wheel(t, "1.5.1"));
  t.write("site/.nixl_cu12.mesonpy.libs/libnixl_common.so",
          "x\0NIXL version: \0"
          "1.5.1\0"s);
  Result<NixlRelease> r = detect_nixl_release();
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(r->version, "1.5.1");
  EXPECT_EQ(r->evidence, "the wheel's dist-info");
}

TEST(NixlRelease, AnotherReleaseIsRefusedNamingIt) {
  TempTree t;
  ScopedLibrary lib(make_wheel(t, "1.4.0"));
  Result<NixlRelease> r = detect_nixl_release();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("NIXL 1.4.0"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("1.5.1"), std::string::npos) << r.status().message();
}

TEST(NixlRelease, TwoDisagreeingAnswersAreRefused) {
  TempTree t;
  ScopedLibrary lib(make_wheel(t, "1.5.1"));
  t.write("site/.nixl_cu12.mesonpy.libs/libnixl_common.so",
          "NIXL version: \0"
          "1.6.0\0"s);
  Result<NixlRelease> r = detect_nixl_release();
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("two versions"), std::string::npos) << r.status().message();
}

TEST(NixlRelease, ASourceBuildOfTheSupportedReleaseLoads) {
  TempTree t;
  t.write("prefix/lib/libnixl.so", "ELF");
  t.write("prefix/lib/libnixl_common.so",
          "NIXL version: \0"
          "1.5.1\0"s);
  ScopedLibrary lib(t.path("prefix/lib/libnixl.so").string());
  Result<NixlRelease> r = detect_nixl_release();
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(r->evidence, "the version compiled into libnixl_common.so");
}

TEST(NixlRelease, NoNixlInTheProcessIsRefused) {
  // This test program loads no libnixl.so.
  Result<NixlRelease> r = detect_nixl_release();
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("no libnixl.so is loaded"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace remora::nixl_plugin
