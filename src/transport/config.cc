// transport/config.cc — the Context's configuration: Config::from_env reads the
// REMORA_* variables of what a Context runs (logging, registration, progress engine,
// endpoints), Config::validate checks the transport's limits, apply() lays
// ContextOptions over them. The parsing helpers and the unknown-variable warning are
// core's (core/env.h); the collectives read and check their own variables
// (coll/comm_core.cc, coll/launch.cc).
#include "remora/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "core/crc32c.h"
#include "core/env.h"
#include "core/log.h"
#include "transport/variables.h"
#include "wire/auth.h"

namespace remora {
namespace {

constexpr uint32_t kMaxWaitTimeoutMs = 86'400'000;  // 24 h: longer waits ask for kForever
constexpr uint32_t kMaxPendingHandshakes = 65536;
constexpr uint32_t kMinPeerTimeoutMs = 1000;        // below, a busy machine's scheduling delays look like death
constexpr uint32_t kMaxPeerTimeoutMs = 3'600'000;
constexpr size_t kMaxAuthKeyFileBytes = 64 * 1024;  // a secret, not a data file

/// A variable that is auto (true) or off (false), when set.
Status read_auto_off(const char* name, bool* out) {
  const auto text = core::getenv_view(name);
  if (!text) return Status::ok();
  if (*text != "auto" && *text != "off") {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: '{}' is not one of auto|off", name, *text));
  }
  *out = *text == "auto";
  return Status::ok();
}

}  // namespace

namespace transport {

core::VariableList variables() noexcept {
  static constexpr std::string_view kVariables[] = {"REMORA_STREAMS",
                                                    "REMORA_CHUNK_SIZE",
                                                    "REMORA_EAGER_LIMIT",
                                                    "REMORA_EAGER_CREDIT",
                                                    "REMORA_MAX_OUTSTANDING",
                                                    "REMORA_MAX_UNEXPECTED",
                                                    "REMORA_RMA_WINDOW",
                                                    "REMORA_STAGING_BUFFERS",
                                                    "REMORA_SPIN_US",
                                                    "REMORA_PROGRESS_LINGER_US",
                                                    "REMORA_PROGRESS_POLL_US",
                                                    "REMORA_CONNECT_TIMEOUT_MS",
                                                    "REMORA_HANDSHAKE_TIMEOUT_MS",
                                                    "REMORA_MAX_PENDING_HANDSHAKES",
                                                    "REMORA_WAIT_TIMEOUT_MS",
                                                    "REMORA_PEER_TIMEOUT_MS",
                                                    "REMORA_PIN",
                                                    "REMORA_DEVICE_PATH",
                                                    "REMORA_DEVMEM_IFNAME",
                                                    "REMORA_RXQ_SOCKET",
                                                    "REMORA_RXQ_DEVICE_AREA",
                                                    "REMORA_ZCRX_AREA",
                                                    "REMORA_CHECKSUM",
                                                    "REMORA_SAME_HOST",
                                                    "REMORA_PULL_HUGEPAGES",
                                                    "REMORA_AUTH_KEY",
                                                    "REMORA_AUTH_KEY_FILE"};
  return kVariables;
}

}  // namespace transport

Result<AuthKey> AuthKey::from_secret(std::string_view secret) {
  if (secret.empty()) return Status(StatusCode::kInvalidArgument, "the shared authentication secret is empty");
  AuthKey key;
  key.bytes = wire::derive_auth_key(std::as_bytes(std::span(secret.data(), secret.size())));
  return key;
}

Result<std::optional<AuthKey>> AuthKey::from_env() {
  // std::getenv, not core::getenv_view: a variable set to "" is a mistake to report
  // (REMORA_AUTH_KEY=$SECRET with SECRET unset), not "no authentication".
  const char* inline_secret = std::getenv("REMORA_AUTH_KEY");
  const char* file = std::getenv("REMORA_AUTH_KEY_FILE");
  if (inline_secret != nullptr && file != nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "REMORA_AUTH_KEY and REMORA_AUTH_KEY_FILE are both set: set only one of them");
  }
  if (inline_secret != nullptr) {
    if (*inline_secret == '\0') {
      return Status(StatusCode::kInvalidArgument, "REMORA_AUTH_KEY is set but empty: set it to the job's secret, or unset it");
    }
    REMORA_ASSIGN_OR_RETURN(AuthKey key, from_secret(inline_secret));
    return std::optional<AuthKey>(key);
  }
  if (file == nullptr) return std::optional<AuthKey>();
  if (*file == '\0') {
    return Status(StatusCode::kInvalidArgument, "REMORA_AUTH_KEY_FILE is set but empty: set it to a file holding the job's secret");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return Status(StatusCode::kInvalidArgument,
                  std::string("REMORA_AUTH_KEY_FILE: cannot read '") + file + "': " + std::strerror(errno));
  }
  std::string secret;
  char buf[4096];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    secret.append(buf, static_cast<size_t>(in.gcount()));
    if (secret.size() > kMaxAuthKeyFileBytes) {
      return Status(StatusCode::kInvalidArgument, std::string("REMORA_AUTH_KEY_FILE: '") + file +
                                                      "' is larger than 64 KiB; it should hold only the secret");
    }
  }
  if (in.bad()) {
    return Status(StatusCode::kInvalidArgument, std::string("REMORA_AUTH_KEY_FILE: cannot read '") + file + "'");
  }
  // `echo secret > file` and `openssl rand -hex 32 > file` end the secret with a newline.
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.empty()) {
    return Status(StatusCode::kInvalidArgument, std::string("REMORA_AUTH_KEY_FILE: '") + file + "' holds no secret");
  }
  auto key = from_secret(secret);
  std::fill(secret.begin(), secret.end(), '\0');
  REMORA_RETURN_IF_ERROR(key.status());
  return std::optional<AuthKey>(*key);
}

Result<Config> Config::from_env() {
  Config c;
  REMORA_ASSIGN_OR_RETURN(c.auth_key, AuthKey::from_env());
  if (auto text = core::getenv_view("REMORA_LOG")) {
    if (!core::parse_log_level(*text, &c.log_level)) {
      return Status(StatusCode::kInvalidArgument,
                    "REMORA_LOG: '" + std::string(*text) + "' is not one of error|warn|info|debug|trace");
    }
  }
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_STREAMS", &c.streams_per_endpoint, 1, 64));
  REMORA_RETURN_IF_ERROR(core::read_env_size("REMORA_CHUNK_SIZE", &c.chunk_bytes));
  REMORA_RETURN_IF_ERROR(core::read_env_size("REMORA_EAGER_LIMIT", &c.eager_limit));
  REMORA_RETURN_IF_ERROR(core::read_env_size("REMORA_EAGER_CREDIT", &c.eager_credit));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_MAX_OUTSTANDING", &c.max_outstanding, 1, 1u << 24));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_MAX_UNEXPECTED", &c.max_unexpected, 1, 1u << 24));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_RMA_WINDOW", &c.rma_window, 1, 65536));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_STAGING_BUFFERS", &c.staging_buffers, 2, 1024));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_SPIN_US", &c.spin_us, 0, 10'000'000));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_PROGRESS_LINGER_US", &c.progress_linger_us, 0, 10'000'000));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_PROGRESS_POLL_US", &c.progress_poll_us, 0, 10'000'000));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_CONNECT_TIMEOUT_MS", &c.connect_timeout_ms, 1, 3'600'000));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_HANDSHAKE_TIMEOUT_MS", &c.handshake_timeout_ms, 1, 3'600'000));
  REMORA_RETURN_IF_ERROR(
      core::read_env_uint("REMORA_MAX_PENDING_HANDSHAKES", &c.max_pending_handshakes, 1, kMaxPendingHandshakes));
  REMORA_RETURN_IF_ERROR(core::read_env_uint("REMORA_WAIT_TIMEOUT_MS", &c.wait_timeout_ms, 1, kMaxWaitTimeoutMs));
  REMORA_RETURN_IF_ERROR(
      core::read_env_uint("REMORA_PEER_TIMEOUT_MS", &c.peer_timeout_ms, kMinPeerTimeoutMs, kMaxPeerTimeoutMs));
  if (auto text = core::getenv_view("REMORA_PIN")) {
    if (*text == "try") {
      c.pin_mode = PinMode::kTry;
    } else if (*text == "require") {
      c.pin_mode = PinMode::kRequire;
    } else if (*text == "off") {
      c.pin_mode = PinMode::kOff;
    } else {
      return Status(StatusCode::kInvalidArgument,
                    "REMORA_PIN: '" + std::string(*text) + "' is not one of try|require|off");
    }
  }
  if (auto text = core::getenv_view("REMORA_DEVICE_PATH")) {
    if (*text == "auto") {
      c.device_path = DevicePathMode::kAuto;
    } else if (*text == "devmem") {
      c.device_path = DevicePathMode::kDevmem;
    } else if (*text == "zcrx") {
      c.device_path = DevicePathMode::kZcrx;
    } else if (*text == "staging") {
      c.device_path = DevicePathMode::kStaging;
    } else {
      return Status(StatusCode::kInvalidArgument,
                    "REMORA_DEVICE_PATH: '" + std::string(*text) + "' is not one of auto|devmem|zcrx|staging");
    }
  }
  if (auto text = core::getenv_view("REMORA_CHECKSUM")) {
    if (*text == "none") {
      c.checksum = ChecksumMode::kNone;
    } else if (*text == "crc32c") {
      c.checksum = ChecksumMode::kCrc32c;
    } else {
      return Status(StatusCode::kInvalidArgument,
                    "REMORA_CHECKSUM: '" + std::string(*text) + "' is not one of none|crc32c");
    }
  }
  REMORA_RETURN_IF_ERROR(read_auto_off("REMORA_SAME_HOST", &c.same_host_pulls));
  REMORA_RETURN_IF_ERROR(read_auto_off("REMORA_PULL_HUGEPAGES", &c.pull_huge_pages));
  if (auto text = core::getenv_view("REMORA_DEVMEM_IFNAME")) {
    if (text->size() >= c.devmem_ifname.size()) {
      return Status(StatusCode::kInvalidArgument,
                    "REMORA_DEVMEM_IFNAME: '" + std::string(*text) + "' is longer than an interface name (15 characters)");
    }
    std::copy(text->begin(), text->end(), c.devmem_ifname.begin());
  }
  if (auto text = core::getenv_view("REMORA_RXQ_SOCKET")) {
    if (text->size() >= c.rxq_socket.size()) {
      return Status(StatusCode::kInvalidArgument, "REMORA_RXQ_SOCKET: '" + std::string(*text) +
                                                      "' is longer than a Unix socket path (107 characters)");
    }
    std::copy(text->begin(), text->end(), c.rxq_socket.begin());
  }
  REMORA_RETURN_IF_ERROR(core::read_env_size("REMORA_RXQ_DEVICE_AREA", &c.rxq_device_area));
  REMORA_RETURN_IF_ERROR(core::read_env_size("REMORA_ZCRX_AREA", &c.zcrx_area));
  core::warn_unknown_variables(core::known_variable_lists());
  REMORA_RETURN_IF_ERROR(c.validate());
  return c;
}

Status Config::validate() const {
  auto bad = [](std::string msg) { return Status(StatusCode::kInvalidArgument, std::move(msg)); };
  if (streams_per_endpoint < 1 || streams_per_endpoint > 64)
    return bad("streams_per_endpoint (REMORA_STREAMS) must be 1..64");
  if (chunk_bytes < 4096 || chunk_bytes > (size_t{1} << 30))
    return bad("chunk_bytes (REMORA_CHUNK_SIZE) must be 4K..1G");
  if (eager_limit > (size_t{1} << 20)) return bad("eager_limit (REMORA_EAGER_LIMIT) must be at most 1M");
  if (zcrx_area < (size_t{64} << 10) || zcrx_area > (size_t{64} << 30)) {
    return bad("zcrx_area (REMORA_ZCRX_AREA) must be between 64K and 64G");
  }
  if (eager_credit < eager_limit + 64)
    return bad("eager_credit (REMORA_EAGER_CREDIT) must exceed eager_limit by at least 64 bytes");
  if (eager_credit > (size_t{1} << 32)) return bad("eager_credit (REMORA_EAGER_CREDIT) must be at most 4G");
  if (max_outstanding < 1) return bad("max_outstanding (REMORA_MAX_OUTSTANDING) must be at least 1");
  if (max_unexpected < 1) return bad("max_unexpected (REMORA_MAX_UNEXPECTED) must be at least 1");
  if (rma_window < 1 || rma_window > 65536) return bad("rma_window (REMORA_RMA_WINDOW) must be 1..65536");
  if (staging_buffers < 2 || staging_buffers > 1024) {
    return bad("staging_buffers (REMORA_STAGING_BUFFERS) must be 2..1024");
  }
  if (connect_timeout_ms < 1) return bad("connect_timeout_ms must be at least 1");
  if (handshake_timeout_ms < 1) return bad("handshake_timeout_ms must be at least 1");
  if (max_pending_handshakes < 1 || max_pending_handshakes > kMaxPendingHandshakes) {
    return bad("max_pending_handshakes (REMORA_MAX_PENDING_HANDSHAKES) must be 1..65536");
  }
  if (wait_timeout_ms < 1 || wait_timeout_ms > kMaxWaitTimeoutMs) {
    return bad(
        "wait_timeout_ms (REMORA_WAIT_TIMEOUT_MS) must be 1..86400000 (24 h); "
        "wait without a bound with remora::kForever");
  }
  if (peer_timeout_ms < kMinPeerTimeoutMs || peer_timeout_ms > kMaxPeerTimeoutMs) {
    return bad("peer_timeout_ms (REMORA_PEER_TIMEOUT_MS) must be 1000..3600000 (1 s to 1 h)");
  }
  if (checksum == ChecksumMode::kCrc32c && !core::crc32c_available()) {
    return Status(StatusCode::kUnsupported,
                  "checksum (REMORA_CHECKSUM=crc32c): this remora was built without ISA-L, its CRC-32C library; "
                  "install libisal-dev and rebuild, or unset REMORA_CHECKSUM");
  }
  return Status::ok();
}

Config apply(Config base, const ContextOptions& o) {
  if (o.log_level) base.log_level = *o.log_level;
  if (o.streams_per_endpoint) base.streams_per_endpoint = *o.streams_per_endpoint;
  if (o.chunk_bytes) base.chunk_bytes = *o.chunk_bytes;
  if (o.eager_limit) base.eager_limit = *o.eager_limit;
  if (o.eager_credit) base.eager_credit = *o.eager_credit;
  if (o.max_outstanding) base.max_outstanding = *o.max_outstanding;
  if (o.max_unexpected) base.max_unexpected = *o.max_unexpected;
  if (o.rma_window) base.rma_window = *o.rma_window;
  if (o.spin_us) base.spin_us = *o.spin_us;
  if (o.progress_linger_us) base.progress_linger_us = *o.progress_linger_us;
  if (o.progress_poll_us) base.progress_poll_us = *o.progress_poll_us;
  if (o.connect_timeout_ms) base.connect_timeout_ms = *o.connect_timeout_ms;
  if (o.handshake_timeout_ms) base.handshake_timeout_ms = *o.handshake_timeout_ms;
  if (o.max_pending_handshakes) base.max_pending_handshakes = *o.max_pending_handshakes;
  if (o.wait_timeout_ms) base.wait_timeout_ms = *o.wait_timeout_ms;
  if (o.peer_timeout_ms) base.peer_timeout_ms = *o.peer_timeout_ms;
  if (o.pin_mode) base.pin_mode = *o.pin_mode;
  if (o.staging_buffers) base.staging_buffers = *o.staging_buffers;
  if (o.device_path) base.device_path = *o.device_path;
  if (o.checksum) base.checksum = *o.checksum;
  if (o.same_host_pulls) base.same_host_pulls = *o.same_host_pulls;
  if (o.pull_huge_pages) base.pull_huge_pages = *o.pull_huge_pages;
  if (o.auth_key) base.auth_key = o.auth_key;
  return base;
}

}  // namespace remora
