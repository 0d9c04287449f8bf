// Tests for core/env.h's machinery that the layers feed: reading one variable with an
// error naming it, and the unknown-REMORA_*-variable warning checked against every
// layer's list (the lists are the layers'; core names only its own).
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

bool known(std::string_view name) {
  for (core::VariableList list : core::known_variable_lists()) {
    if (std::find(list.begin(), list.end(), name) != list.end()) return true;
  }
  return false;
}

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

TEST(ReadEnv, NamesTheVariableInItsError) {
  uint32_t field = 7;
  EXPECT_TRUE(core::read_env_uint("REMORA_TEST_UNSET_VARIABLE", &field, 1, 10).is_ok());
  EXPECT_EQ(field, 7u);
  {
    ScopedEnv v("REMORA_TEST_VALUE", "11");
    Status s = core::read_env_uint("REMORA_TEST_VALUE", &field, 1, 10);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message().rfind("REMORA_TEST_VALUE: ", 0), 0u) << s.message();
    EXPECT_EQ(field, 7u);
  }
  {
    ScopedEnv v("REMORA_TEST_VALUE", "2K");
    size_t size = 0;
    ASSERT_TRUE(core::read_env_size("REMORA_TEST_VALUE", &size).is_ok());
    EXPECT_EQ(size, 2048u);
  }
}

}  // namespace
}  // namespace remora
