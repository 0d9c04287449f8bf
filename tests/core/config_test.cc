// Tests for core: size and integer parsing, configuration from REMORA_* (Status and
// Result: status_test.cc).
#include "remora/config.h"

#include <stdlib.h>

#include <limits>
#include <set>
#include <string>
#include <variant>

#include <gtest/gtest.h>

#include "core/env.h"
#include "core/log.h"
#include "remora/status.h"
#include "scoped_env.h"

namespace remora {
namespace {

using testing::ScopedEnv;

TEST(ParseSize, SuffixesAndErrors) {
  EXPECT_EQ(core::parse_size("4096").value(), 4096u);
  EXPECT_EQ(core::parse_size("512K").value(), 512u * 1024);
  EXPECT_EQ(core::parse_size("64KiB").value(), 64u * 1024);
  EXPECT_EQ(core::parse_size("1m").value(), 1u << 20);
  EXPECT_EQ(core::parse_size("2G").value(), uint64_t{2} << 30);
  for (const char* bad : {"", "K", "-1", "12X", "1.5M", "99999999999999999999", "17179869184G"}) {
    auto r = core::parse_size(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(ParseUint, RangeAndGarbage) {
  EXPECT_EQ(core::parse_uint("7", 1, 64).value(), 7u);
  EXPECT_FALSE(core::parse_uint("0", 1, 64).is_ok());
  EXPECT_FALSE(core::parse_uint("65", 1, 64).is_ok());
  EXPECT_FALSE(core::parse_uint("3a", 0, 100).is_ok());
  EXPECT_FALSE(core::parse_uint("18446744073709551616", 0, std::numeric_limits<uint64_t>::max()).is_ok());
  EXPECT_EQ(core::parse_uint("18446744073709551615", 0, std::numeric_limits<uint64_t>::max()).value(),
            std::numeric_limits<uint64_t>::max());
}

TEST(Config, DefaultsValidate) { EXPECT_TRUE(Config{}.validate().is_ok()); }

TEST(Config, EnvironmentOverridesDefaults) {
  ScopedEnv a("REMORA_STREAMS", "4");
  ScopedEnv b("REMORA_CHUNK_SIZE", "128K");
  ScopedEnv c("REMORA_PIN", "require");
  ScopedEnv d("REMORA_SPIN_US", "0");
  ScopedEnv e("REMORA_PROGRESS_POLL_US", "0");
  auto cfg = Config::from_env();
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->streams_per_endpoint, 4u);
  EXPECT_EQ(cfg->chunk_bytes, 128u * 1024);
  EXPECT_EQ(cfg->pin_mode, PinMode::kRequire);
  EXPECT_EQ(cfg->spin_us, 0u);
  EXPECT_EQ(cfg->progress_poll_us, 0u);
}

TEST(Config, MalformedVariableIsAnErrorNamingIt) {
  struct Case {
    const char* name;
    const char* value;
  };
  for (const Case& c : {Case{"REMORA_STREAMS", "0"}, Case{"REMORA_STREAMS", "65"}, Case{"REMORA_STREAMS", "two"},
                        Case{"REMORA_CHUNK_SIZE", "1K"}, Case{"REMORA_CHUNK_SIZE", "lots"},
                        Case{"REMORA_EAGER_LIMIT", "2M"}, Case{"REMORA_PIN", "maybe"}, Case{"REMORA_LOG", "loud"},
                        Case{"REMORA_PROGRESS_POLL_US", "-1"}, Case{"REMORA_PROGRESS_POLL_US", "60000001"}}) {
    ScopedEnv e(c.name, c.value);
    auto cfg = Config::from_env();
    ASSERT_FALSE(cfg.is_ok()) << c.name << "=" << c.value;
    EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(cfg.status().message().find(c.name), std::string::npos) << cfg.status().message();
  }
}

TEST(Config, OptionsWinOverEnvironment) {
  ScopedEnv a("REMORA_STREAMS", "4");
  Config base = Config::from_env().value();
  Config cfg = apply(base, ContextOptions{.streams_per_endpoint = 1, .eager_limit = 100});
  EXPECT_EQ(cfg.streams_per_endpoint, 1u);
  EXPECT_EQ(cfg.eager_limit, 100u);
  EXPECT_EQ(cfg.chunk_bytes, base.chunk_bytes);
}

// The authentication key: set by ContextOptions, kept from the base otherwise; an empty
// secret is refused.
TEST(Config, AuthKeyOption) {
  auto key = AuthKey::from_secret("secret");
  ASSERT_TRUE(key.is_ok()) << key.status().to_string();
  const Config keyed = apply(Config{}, ContextOptions{.auth_key = *key});
  ASSERT_TRUE(keyed.auth_key.has_value());
  EXPECT_EQ(keyed.auth_key->bytes, key->bytes);
  EXPECT_TRUE(apply(keyed, ContextOptions{}).auth_key.has_value());
  EXPECT_FALSE(apply(Config{}, ContextOptions{}).auth_key.has_value());
  EXPECT_NE(AuthKey::from_secret("secreT")->bytes, key->bytes);
  EXPECT_EQ(AuthKey::from_secret("").status().code(), StatusCode::kInvalidArgument);
}

// Every field of Config can be set through ContextOptions, and lands where it belongs.
TEST(Config, EveryOptionReachesItsField) {
  const Config d;
  const Config c = apply(d, ContextOptions{.log_level = LogLevel::kDebug,
                                           .streams_per_endpoint = d.streams_per_endpoint + 1,
                                           .chunk_bytes = d.chunk_bytes + 1,
                                           .eager_limit = d.eager_limit + 1,
                                           .eager_credit = d.eager_credit + 1,
                                           .max_outstanding = d.max_outstanding + 1,
                                           .max_unexpected = d.max_unexpected + 1,
                                           .rma_window = d.rma_window + 1,
                                           .spin_us = d.spin_us + 1,
                                           .progress_linger_us = d.progress_linger_us + 1,
                                           .progress_poll_us = d.progress_poll_us + 1,
                                           .connect_timeout_ms = d.connect_timeout_ms + 1,
                                           .handshake_timeout_ms = d.handshake_timeout_ms + 1,
                                           .max_pending_handshakes = d.max_pending_handshakes + 1,
                                           .wait_timeout_ms = d.wait_timeout_ms + 1,
                                           .peer_timeout_ms = d.peer_timeout_ms + 1,
                                           .pin_mode = PinMode::kOff,
                                           .staging_buffers = d.staging_buffers + 1});
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.streams_per_endpoint, d.streams_per_endpoint + 1);
  EXPECT_EQ(c.chunk_bytes, d.chunk_bytes + 1);
  EXPECT_EQ(c.eager_limit, d.eager_limit + 1);
  EXPECT_EQ(c.eager_credit, d.eager_credit + 1);
  EXPECT_EQ(c.max_outstanding, d.max_outstanding + 1);
  EXPECT_EQ(c.max_unexpected, d.max_unexpected + 1);
  EXPECT_EQ(c.rma_window, d.rma_window + 1);
  EXPECT_EQ(c.spin_us, d.spin_us + 1);
  EXPECT_EQ(c.progress_linger_us, d.progress_linger_us + 1);
  EXPECT_EQ(c.progress_poll_us, d.progress_poll_us + 1);
  EXPECT_EQ(c.connect_timeout_ms, d.connect_timeout_ms + 1);
  EXPECT_EQ(c.handshake_timeout_ms, d.handshake_timeout_ms + 1);
  EXPECT_EQ(c.max_pending_handshakes, d.max_pending_handshakes + 1);
  EXPECT_EQ(c.wait_timeout_ms, d.wait_timeout_ms + 1);
  EXPECT_EQ(c.peer_timeout_ms, d.peer_timeout_ms + 1);
  EXPECT_EQ(c.pin_mode, PinMode::kOff);
  EXPECT_EQ(c.staging_buffers, d.staging_buffers + 1);
}

// Handshakes in progress at once: 256 unless REMORA_MAX_PENDING_HANDSHAKES says
// otherwise; 1 to 65536, anything else refused naming the variable.
TEST(Config, MaxPendingHandshakesFromDefaultsAndEnvironment) {
  EXPECT_EQ(Config{}.max_pending_handshakes, 256u);
  {
    ScopedEnv e("REMORA_MAX_PENDING_HANDSHAKES", "16");
    auto cfg = Config::from_env();
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    EXPECT_EQ(cfg->max_pending_handshakes, 16u);
  }
  for (const char* bad : {"0", "65537", "many"}) {
    ScopedEnv e("REMORA_MAX_PENDING_HANDSHAKES", bad);
    auto cfg = Config::from_env();
    ASSERT_FALSE(cfg.is_ok()) << bad;
    EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(cfg.status().message().find("REMORA_MAX_PENDING_HANDSHAKES"), std::string::npos) << cfg.status().to_string();
  }
  Config c;
  c.max_pending_handshakes = 0;
  EXPECT_FALSE(c.validate().is_ok());
}

// The bound of a wait given no timeout: 5 minutes unless REMORA_WAIT_TIMEOUT_MS or
// ContextOptions says otherwise; 1 ms to 24 h (no bound at all is kForever, by name).
TEST(Config, WaitTimeoutFromDefaultsEnvironmentAndOptions) {
  EXPECT_EQ(Config{}.wait_timeout_ms, 300000u);
  {
    ScopedEnv e("REMORA_WAIT_TIMEOUT_MS", "1500");
    auto cfg = Config::from_env();
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    EXPECT_EQ(cfg->wait_timeout_ms, 1500u);
    EXPECT_EQ(apply(*cfg, ContextOptions{.wait_timeout_ms = 250}).wait_timeout_ms, 250u);
    EXPECT_EQ(apply(*cfg, ContextOptions{}).wait_timeout_ms, 1500u);
  }
  for (const char* bad : {"0", "-1", "abc", "86400001"}) {
    ScopedEnv e("REMORA_WAIT_TIMEOUT_MS", bad);
    auto cfg = Config::from_env();
    ASSERT_FALSE(cfg.is_ok()) << "REMORA_WAIT_TIMEOUT_MS=" << bad;
    EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(cfg.status().message().find("REMORA_WAIT_TIMEOUT_MS"), std::string::npos) << cfg.status().message();
  }
  Config c;
  c.wait_timeout_ms = 0;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.validate().message().find("REMORA_WAIT_TIMEOUT_MS"), std::string::npos) << c.validate().message();
  c.wait_timeout_ms = 86'400'001;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  c.wait_timeout_ms = 86'400'000;
  EXPECT_TRUE(c.validate().is_ok());
}

// The liveness timeout: 30 s unless REMORA_PEER_TIMEOUT_MS or ContextOptions says
// otherwise; 1 s to 1 h (shorter would declare peers on a busy machine dead).
TEST(Config, PeerTimeoutFromDefaultsEnvironmentAndOptions) {
  EXPECT_EQ(Config{}.peer_timeout_ms, 30000u);
  {
    ScopedEnv e("REMORA_PEER_TIMEOUT_MS", "1000");
    auto cfg = Config::from_env();
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
    EXPECT_EQ(cfg->peer_timeout_ms, 1000u);
    EXPECT_EQ(apply(*cfg, ContextOptions{.peer_timeout_ms = 5000}).peer_timeout_ms, 5000u);
  }
  for (const char* bad : {"0", "999", "abc", "3600001"}) {
    ScopedEnv e("REMORA_PEER_TIMEOUT_MS", bad);
    auto cfg = Config::from_env();
    ASSERT_FALSE(cfg.is_ok()) << "REMORA_PEER_TIMEOUT_MS=" << bad;
    EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(cfg.status().message().find("REMORA_PEER_TIMEOUT_MS"), std::string::npos) << cfg.status().message();
  }
  Config c;
  c.peer_timeout_ms = 999;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.validate().message().find("REMORA_PEER_TIMEOUT_MS"), std::string::npos) << c.validate().message();
  c.peer_timeout_ms = 3'600'000;
  EXPECT_TRUE(c.validate().is_ok());
}

TEST(Config, ValidateRejectsCreditBelowEagerLimit) {
  Config c;
  c.eager_limit = 64 * 1024;
  c.eager_credit = 64 * 1024;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
}

TEST(Log, LevelsReadByTheirRow) {
  const ConfigVariable* row = core::find_variable("REMORA_LOG");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(*core::parse_value(*row, "debug"), static_cast<uint64_t>(LogLevel::kDebug));
  EXPECT_EQ(*core::parse_value(*row, "warn"), static_cast<uint64_t>(LogLevel::kWarn));
  EXPECT_EQ(core::parse_value(*row, "verbose").status().code(), StatusCode::kInvalidArgument);
  ScopedEnv v("REMORA_LOG", "trace");
  auto c = Config::from_env();
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->log_level, LogLevel::kTrace);
}

// Every option reaches its field by name (ContextOptions::set, what the Python package
// uses), as a number, a switch or text, and config_value reads it back; every row that
// names a field is settable, and nothing else is.
TEST(ConfigTable, EveryFieldIsSettableByNameAndReadsBack) {
  size_t fields = 0;
  for (const ConfigVariable& v : config_variables()) {
    if (v.field.empty() || v.field == "auth_key") continue;
    ++fields;
    SCOPED_TRACE(std::string(v.name));
    ContextOptions o;
    if (v.kind == ConfigKind::kText) {
      // Text (REMORA_RAILS): the longest taken reads back; longer ones and numbers do not.
      const std::string text(v.max, 'e');
      ASSERT_TRUE(o.set(v.field, ConfigValue(text)).is_ok());
      auto back = config_value(apply(Config{}, o), v.field);
      ASSERT_TRUE(back.is_ok()) << back.status().to_string();
      EXPECT_EQ(std::get<std::string>(*back), text);
      EXPECT_EQ(o.set(v.field, ConfigValue(text + "e")).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(o.set(v.field, ConfigValue(uint64_t{1})).code(), StatusCode::kInvalidArgument);
      continue;
    }
    ConfigValue value =
        v.kind == ConfigKind::kChoice ? ConfigValue(uint64_t{v.choices.size() - 1}) : ConfigValue(v.max);
    if (v.field == "eager_credit") value = ConfigValue(uint64_t{2} << 20);  // above the eager limit
    ASSERT_TRUE(o.set(v.field, value).is_ok()) << o.set(v.field, value).to_string();
    Config c = apply(Config{}, o);
    auto back = config_value(c, v.field);
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    if (std::holds_alternative<bool>(*back)) {
      EXPECT_EQ(std::get<bool>(*back), false) << "the last word of a switch is off";
    } else {
      EXPECT_EQ(std::get<uint64_t>(*back), std::get<uint64_t>(value));
    }
    if (v.kind == ConfigKind::kCount || v.kind == ConfigKind::kBytes) {
      if (v.max < UINT64_MAX) {
        EXPECT_EQ(o.set(v.field, ConfigValue(v.max + 1)).code(), StatusCode::kInvalidArgument);
      }
      if (v.min > 0) {
        EXPECT_EQ(o.set(v.field, ConfigValue(v.min - 1)).code(), StatusCode::kInvalidArgument);
      }
      EXPECT_EQ(o.set(v.field, ConfigValue(std::string("nonsense"))).code(), StatusCode::kInvalidArgument);
    }
    if (v.kind == ConfigKind::kChoice) {
      ContextOptions t;
      ASSERT_TRUE(t.set(v.field, ConfigValue(std::string(v.choices[0]))).is_ok());
      auto first = config_value(apply(Config{}, t), v.field);
      ASSERT_TRUE(first.is_ok());
      if (std::holds_alternative<bool>(*first)) {
        EXPECT_TRUE(std::get<bool>(*first));
      } else {
        EXPECT_EQ(std::get<uint64_t>(*first), 0u);
      }
      EXPECT_EQ(t.set(v.field, ConfigValue(uint64_t{v.choices.size()})).code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GE(fields, 20u);
  ContextOptions o;
  const Status unknown = o.set("no_such_option", ConfigValue(uint64_t{1}));
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("streams_per_endpoint"), std::string::npos) << "it lists the options";
  EXPECT_EQ(o.set("streams_per_endpoint", ConfigValue(true)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(o.set("chunk_bytes", ConfigValue(std::string("64K"))).is_ok());
  EXPECT_EQ(o.chunk_bytes, std::optional<size_t>(65536));
  ASSERT_TRUE(o.set("same_host_pulls", ConfigValue(false)).is_ok());
  EXPECT_EQ(o.same_host_pulls, std::optional<bool>(false));
  ASSERT_TRUE(o.set("auth_key", ConfigValue(std::string("secret"))).is_ok());
  EXPECT_TRUE(o.auth_key.has_value());
  EXPECT_EQ(std::get<std::string>(*config_value(apply(Config{}, o), "auth_key")), "set");
}

// The environment-only fields read back too, and every variable's row is unique.
TEST(ConfigTable, EnvironmentOnlyFieldsReadBackAndNamesAreUnique) {
  ScopedEnv a("REMORA_DEVMEM_IFNAME", "eth7");
  ScopedEnv b("REMORA_ZCRX_AREA", "1M");
  auto c = Config::from_env();
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(std::get<std::string>(*config_value(*c, "devmem_ifname")), "eth7");
  EXPECT_EQ(std::get<uint64_t>(*config_value(*c, "zcrx_area")), uint64_t{1} << 20);
  std::set<std::string_view> names;
  for (const ConfigVariable& v : config_variables()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " has two rows";
    EXPECT_FALSE(v.doc.empty()) << v.name;
    EXPECT_FALSE(v.section.empty()) << v.name;
    EXPECT_EQ(v.name.substr(0, 7), "REMORA_");
  }
}

}  // namespace
}  // namespace remora
