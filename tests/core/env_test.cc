// Tests for core/env.h's machinery that the layers feed: reading one variable by its row
// with an error naming it, ranges as the docs show them, and the unknown-REMORA_*-variable
// warning checked against every layer's table (the rows are the layers'; core keeps only
// REMORA_LOG's).
#include "core/env.h"

#include <stdlib.h>

#include <algorithm>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "remora/config.h"
#include "scoped_env.h"

namespace remora {
namespace {

using testing::ScopedEnv;

bool known(std::string_view name) { return core::find_variable(name) != nullptr; }

// Every layer's list reaches the warning: one variable of each layer, and one of the
// launcher's, is known; nothing outside them is.
TEST(KnownVariables, EveryLayersListIsGathered) {
  EXPECT_TRUE(known("REMORA_LOG"));              // core
  EXPECT_TRUE(known("REMORA_STREAMS"));          // transport
  EXPECT_TRUE(known("REMORA_PIN"));              // transport (Config)
  EXPECT_TRUE(known("REMORA_AUTH_KEY"));         // transport (Config, AuthKey::from_env)
  EXPECT_TRUE(known("REMORA_AUTH_KEY_FILE"));    // transport (Config, AuthKey::from_env)
  EXPECT_TRUE(known("REMORA_ALLREDUCE_ALGO"));   // coll
  EXPECT_TRUE(known("REMORA_COLL_TIMEOUT_MS"));  // coll
  EXPECT_TRUE(known("REMORA_RANK"));             // coll (launching)
  EXPECT_TRUE(known("REMORA_STORE"));            // coll (launching)
  EXPECT_FALSE(known("REMORA_STREAM"));
}

std::string warnings_of_from_env() {
  ::testing::internal::CaptureStderr();
  auto cfg = Config::from_env();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  return err;
}

TEST(KnownVariables, FromEnvWarnsOnlyAboutVariablesNoLayerReads) {
  {
    ScopedEnv typo("REMORA_STREAM", "4");
    const std::string err = warnings_of_from_env();
    EXPECT_NE(err.find("unknown environment variable REMORA_STREAM ignored"), std::string::npos) << err;
  }
  {
    ScopedEnv coll_var("REMORA_ALLREDUCE_ALGO", "ring");
    ScopedEnv launch_var("REMORA_WORLD_SIZE", "1");
    ScopedEnv test_var("REMORA_TEST_ANYTHING", "1");
    const std::string err = warnings_of_from_env();
    EXPECT_EQ(err.find("unknown environment variable"), std::string::npos) << err;
  }
}

constexpr std::string_view kWords[] = {"auto", "off"};
constexpr ConfigVariable kCount{.name = "REMORA_TEST_VALUE", .min = 1, .max = 10};
constexpr ConfigVariable kSize{.name = "REMORA_TEST_VALUE", .kind = ConfigKind::kBytes, .min = 4096, .max = 1 << 20};
constexpr ConfigVariable kSwitch{.name = "REMORA_TEST_VALUE", .kind = ConfigKind::kChoice, .choices = kWords};
constexpr ConfigVariable kText{.name = "REMORA_TEST_VALUE", .kind = ConfigKind::kText, .max = 4};

TEST(ReadValue, UnsetIsNulloptAndEveryErrorNamesTheVariableAndWhatItTakes) {
  const ConfigVariable unset{.name = "REMORA_TEST_UNSET_VARIABLE", .min = 1, .max = 10};
  auto none = core::read_value(unset);
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
  {
    ScopedEnv v("REMORA_TEST_VALUE", "11");
    auto r = core::read_value(kCount);
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("REMORA_TEST_VALUE: '11'", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find("1–10"), std::string::npos) << r.status().message();
  }
  {
    ScopedEnv v("REMORA_TEST_VALUE", "7");
    EXPECT_EQ(*core::read_value(kCount), std::optional<uint64_t>(7));
  }
  {
    ScopedEnv v("REMORA_TEST_VALUE", "2K");
    EXPECT_EQ(core::read_value(kSize).status().code(), StatusCode::kInvalidArgument);   // below 4K
    EXPECT_EQ(core::read_value(kCount).status().code(), StatusCode::kInvalidArgument);  // a count takes no suffix
  }
  {
    ScopedEnv v("REMORA_TEST_VALUE", "64K");
    EXPECT_EQ(*core::read_value(kSize), std::optional<uint64_t>(65536));
  }
  {
    ScopedEnv v("REMORA_TEST_VALUE", "off");
    EXPECT_EQ(*core::read_value(kSwitch), std::optional<uint64_t>(1));
    ScopedEnv w("REMORA_TEST_VALUE", "Off");
    auto r = core::read_value(kSwitch);
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("auto|off"), std::string::npos) << r.status().message();
  }
  {
    ScopedEnv v("REMORA_TEST_VALUE", "eth0");
    EXPECT_EQ(*core::read_text(kText), std::optional<std::string_view>("eth0"));
    ScopedEnv w("REMORA_TEST_VALUE", "eth10");
    EXPECT_EQ(core::read_text(kText).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ReadValue, RangesReadAsTheDocsShowThem) {
  EXPECT_EQ(kCount.range(), "1–10");
  EXPECT_EQ(kSize.range(), "4K–1M");
  EXPECT_EQ(kSwitch.range(), "`auto`, `off`");
  EXPECT_EQ(kText.range(), "text, at most 4 characters");
  EXPECT_EQ(core::size_text(0), "0");
  EXPECT_EQ(core::size_text(4096), "4K");
  EXPECT_EQ(core::size_text(4097), "4097");
  EXPECT_EQ(core::size_text(uint64_t{3} << 30), "3G");
  EXPECT_EQ(core::check_range(kCount, 10).code(), StatusCode::kOk);
  const Status s = core::check_range(kCount, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("REMORA_TEST_VALUE"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace remora
