// transport/config.cc — the Context's configuration: the table of the REMORA_*
// variables of what a Context runs (registration, progress engine, endpoints), one row
// each with the Config and ContextOptions fields it sets; Config::from_env,
// Config::validate, apply(), ContextOptions::set and config_value all walk that table.
// Core keeps REMORA_LOG's row (core/log.cc) and the parsing (core/env.h); the
// collectives keep theirs (coll/comm_core.cc).
#include "remora/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "core/crc32c.h"
#include "core/env.h"
#include "core/log.h"
#include "net/seal.h"
#include "transport/variables.h"
#include "wire/auth.h"

namespace remora {
namespace {

constexpr size_t kMaxAuthKeyFileBytes = 64 * 1024;  // a secret, not a data file

/// A row's Config field and the ContextOptions field that overrides it (null: none).
template <typename T>
struct Fields {
  T Config::*config;
  std::optional<T> ContextOptions::*option = nullptr;
};
/// A kText row's Config field: a NUL-terminated character array, and the ContextOptions
/// text that overrides it (null: environment only).
template <size_t N>
struct TextField {
  std::array<char, N> Config::*config;
  std::optional<std::array<char, N>> ContextOptions::*option = nullptr;
};
template <typename B>
constexpr bool kIsText =
    std::is_same_v<B, TextField<16>> || std::is_same_v<B, TextField<108>> || std::is_same_v<B, TextField<256>>;
using Binding = std::variant<std::monostate, Fields<uint32_t>, Fields<size_t>, Fields<bool>, Fields<LogLevel>,
                             Fields<PinMode>, Fields<DevicePathMode>, Fields<ZcrxMode>, Fields<ChecksumMode>,
                             Fields<EncryptMode>, Fields<RailSplit>, TextField<16>, TextField<108>, TextField<256>>;

/// Copies `text` into a text field (the caller checked its length).
template <size_t N>
void store_text(std::array<char, N>& field, std::string_view text) {
  field.fill('\0');
  std::copy_n(text.begin(), std::min(text.size(), N - 1), field.begin());
}

struct Row {
  const ConfigVariable& var;
  std::string_view config_field;  ///< the Config member's name (config_value)
  Binding bind;
};

constexpr std::string_view kPinWords[] = {"try", "require", "off"};
constexpr std::string_view kPathWords[] = {"auto", "devmem", "zcrx", "staging"};
constexpr std::string_view kZcrxModeWords[] = {"nic", "copy"};
constexpr std::string_view kChecksumWords[] = {"none", "crc32c"};
constexpr std::string_view kEncryptWords[] = {"off", "on", "aes256gcm", "chacha20poly1305", "aegis256", "aegis128l"};
constexpr std::string_view kRailSplitWords[] = {"rate", "equal"};
constexpr std::string_view kAutoOff[] = {"auto", "off"};  // a switch: auto is true
static_assert(static_cast<int>(PinMode::kOff) == 2 && static_cast<int>(DevicePathMode::kStaging) == 3 &&
                  static_cast<int>(ZcrxMode::kCopy) == 1 && static_cast<int>(ChecksumMode::kCrc32c) == 1 &&
                  static_cast<int>(EncryptMode::kAegis128l) == 5,
              "the words follow the enumerations");

constexpr const char* kContext = "Context";
constexpr uint64_t kGiB = uint64_t{1} << 30;

// The rows, in the order docs/configuration.md lists them.
constexpr ConfigVariable kVariables[] = {
    {.name = "REMORA_STREAMS",
     .section = kContext,
     .default_text = "2",
     .min = 1,
     .max = 64,
     .field = "streams_per_endpoint",
     .doc = "data streams (TCP connections) per endpoint; the connecting side's count is used"},
    {.name = "REMORA_CHUNK_SIZE",
     .section = kContext,
     .kind = ConfigKind::kBytes,
     .default_text = "512K",
     .min = 4096,
     .max = kGiB,
     .field = "chunk_bytes",
     .doc = "rendezvous chunk size"},
    {.name = "REMORA_EAGER_LIMIT",
     .section = kContext,
     .kind = ConfigKind::kBytes,
     .default_text = "64K",
     .min = 0,
     .max = 1 << 20,
     .field = "eager_limit",
     .doc = "largest message sent inline on the control stream"},
    {.name = "REMORA_EAGER_CREDIT",
     .section = kContext,
     .kind = ConfigKind::kBytes,
     .default_text = "1M",
     .min = 64,
     .max = 4 * kGiB,
     .field = "eager_credit",
     .doc = "bytes of unexpected eager messages this side buffers per endpoint (the peer's credit); at least the "
            "eager limit + 64"},
    {.name = "REMORA_MAX_OUTSTANDING",
     .section = kContext,
     .default_text = "65536",
     .min = 1,
     .max = 1 << 24,
     .field = "max_outstanding",
     .doc = "posted operations per endpoint not yet complete; more fail with `no_resource`"},
    {.name = "REMORA_MAX_UNEXPECTED",
     .section = kContext,
     .default_text = "65536",
     .min = 1,
     .max = 1 << 24,
     .field = "max_unexpected",
     .doc = "unexpected large-message announcements and undelivered notifications per endpoint"},
    {.name = "REMORA_RMA_WINDOW",
     .section = kContext,
     .default_text = "256",
     .min = 1,
     .max = 65536,
     .field = "rma_window",
     .doc = "one-sided requests a peer may have in service at this side per endpoint"},
    {.name = "REMORA_STAGING_BUFFERS",
     .section = kContext,
     .default_text = "8",
     .min = 2,
     .max = 1024,
     .field = "staging_buffers",
     .doc = "chunk-sized pinned buffers per endpoint and direction that device memory moves through"},
    {.name = "REMORA_DEVICE_PATH",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kPathWords,
     .field = "device_path",
     .doc = "the data path of device-memory transfers (docs/device-memory.md)"},
    {.name = "REMORA_DEVMEM_IFNAME",
     .section = kContext,
     .kind = ConfigKind::kText,
     .default_text = "unset",
     .max = 15,
     .doc = "the NIC devmem TCP and zcrx use"},
    {.name = "REMORA_RXQ_SOCKET",
     .section = kContext,
     .kind = ConfigKind::kText,
     .default_text = "unset",
     .max = 107,
     .doc = "the Unix socket of `remora rxq serve`, which steers data streams to devmem RX queues"},
    {.name = "REMORA_RXQ_DEVICE_AREA",
     .section = kContext,
     .kind = ConfigKind::kBytes,
     .default_text = "0",
     .min = 0,
     .max = 64 * kGiB,
     .doc = "with `REMORA_RXQ_SOCKET`: device memory each endpoint takes as its own devmem receive area; 0: rxq's "
            "host buffer"},
    {.name = "REMORA_ZCRX_AREA",
     .section = kContext,
     .kind = ConfigKind::kBytes,
     .default_text = "16M",
     .min = 64 << 10,
     .max = 64 * kGiB,
     .field = "zcrx_area",
     .doc = "with `REMORA_DEVICE_PATH=zcrx`: host memory each endpoint registers as its zcrx receive area"},
    {.name = "REMORA_ZCRX_MODE",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "nic",
     .choices = kZcrxModeWords,
     .field = "zcrx_mode",
     .doc = "with `REMORA_DEVICE_PATH=zcrx`: `nic`, a NIC queue `remora rxq serve` reserves; `copy`, a device-less "
            "queue of the endpoint's own (Linux 7.1+; the kernel copies every byte)"},
    {.name = "REMORA_SPIN_US",
     .section = kContext,
     .default_text = "200",
     .min = 0,
     .max = 60'000'000,
     .field = "spin_us",
     .doc = "µs a waiting thread polls without progress before it blocks; 0: block at once"},
    {.name = "REMORA_PROGRESS_LINGER_US",
     .section = kContext,
     .default_text = "1000",
     .min = 0,
     .max = 60'000'000,
     .field = "progress_linger_us",
     .doc = "µs the progress thread stays parked after the last spinning waiter left"},
    {.name = "REMORA_PROGRESS_POLL_US",
     .section = kContext,
     .default_text = "100",
     .min = 0,
     .max = 60'000'000,
     .field = "progress_poll_us",
     .doc = "µs the progress thread keeps polling after it served something"},
    {.name = "REMORA_PROGRESS_THREADS",
     .section = kContext,
     .default_text = "0",
     .min = 0,
     .max = 64,
     .field = "progress_threads",
     .doc = "threads that move data-stream bytes: 1, the progress thread alone; N, it and N-1 workers that "
            "send and receive chunks of host memory; 0, one per rail, at most half the usable CPUs (docs/rails.md)",
     .range_note = "0 (one per rail), 1–64"},
    {.name = "REMORA_CONNECT_TIMEOUT_MS",
     .section = kContext,
     .default_text = "10000",
     .min = 1,
     .max = 3'600'000,
     .field = "connect_timeout_ms",
     .doc = "default deadline of `connect` (TCP connect, handshake, data streams)"},
    {.name = "REMORA_HANDSHAKE_TIMEOUT_MS",
     .section = kContext,
     .default_text = "10000",
     .min = 1,
     .max = 3'600'000,
     .field = "handshake_timeout_ms",
     .doc = "an accepted connection that has not finished its handshake by then is closed"},
    {.name = "REMORA_MAX_PENDING_HANDSHAKES",
     .section = kContext,
     .default_text = "256",
     .min = 1,
     .max = 65536,
     .field = "max_pending_handshakes",
     .doc = "handshakes in progress at once, per listener and per context; raise it above a large job's rank count"},
    {.name = "REMORA_WAIT_TIMEOUT_MS",
     .section = kContext,
     .default_text = "300000",
     .min = 1,
     .max = 86'400'000,
     .field = "wait_timeout_ms",
     .doc = "bound of every wait given no timeout (`remora::kDefaultTimeout`)"},
    {.name = "REMORA_PEER_TIMEOUT_MS",
     .section = kContext,
     .default_text = "30000",
     .min = 1000,
     .max = 3'600'000,
     .field = "peer_timeout_ms",
     .doc = "a peer silent this long while anything is outstanding on its endpoint is declared dead"},
    {.name = "REMORA_CHECKSUM",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "none",
     .choices = kChecksumWords,
     .field = "checksum",
     .doc = "`crc32c`: every payload carries a CRC-32C the receiver checks; both sides must agree"},
    {.name = "REMORA_ENCRYPT",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "off",
     .choices = kEncryptWords,
     .field = "encrypt",
     .doc = "`on` (or a cipher): every byte on every connection sealed (AEAD); needs `REMORA_AUTH_KEY`; both sides "
            "must agree; `on` prefers AEGIS-256, then AES-256-GCM; `aegis128l` is the fastest (docs/encryption.md)"},
    {.name = "REMORA_SAME_HOST",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kAutoOff,
     .field = "same_host_pulls",
     .doc = "`auto`: a peer on this host reads chunks straight out of this process's memory, the control "
            "stream between them runs in shared memory, and small puts, gets and atomics into pool buffers go "
            "through a mapping; `off`: every byte on TCP"},
    {.name = "REMORA_PULL_HUGEPAGES",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kAutoOff,
     .field = "pull_huge_pages",
     .doc = "`auto`: memory a same-host peer pulls again and again is collapsed into huge pages"},
    {.name = "REMORA_FAILOVER",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kAutoOff,
     .field = "failover",
     .doc = "`auto`: a data stream that breaks is retired and its unconfirmed chunks are sent again on the "
            "others (two streams or more, both sides); `off`: a broken data stream fails the endpoint"},
    {.name = "REMORA_SEGMENTS",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "auto",
     .choices = kAutoOff,
     .field = "segments",
     .doc = "`auto`: a batch's items of one key between host memory on both sides travel as one segmented "
            "request (both sides, not between same-host peers that pull); `off`: one put or get per item"},
    {.name = "REMORA_PIN",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "try",
     .choices = kPinWords,
     .field = "pin_mode",
     .doc = "page locking at registration: `require` fails with `no_resource` where RLIMIT_MEMLOCK refuses"},
    {.name = "REMORA_RAILS",
     .section = kContext,
     .kind = ConfigKind::kText,
     .default_text = "unset",
     .max = 255,
     .field = "rails",
     .doc = "the NICs an endpoint's data streams use, as NCCL_SOCKET_IFNAME: name prefixes, `^` to exclude, `=` "
            "exact, or addresses (docs/rails.md)"},
    {.name = "REMORA_RAIL_SPLIT",
     .section = kContext,
     .kind = ConfigKind::kChoice,
     .default_text = "rate",
     .choices = kRailSplitWords,
     .field = "rail_split",
     .doc = "with rails: `rate` gives each chunk to the stream expected to deliver it first; `equal` splits every "
            "transfer equally over the rails, as NCCL's socket transport does (for comparison)"},
    {.name = "REMORA_AUTH_KEY",
     .section = kContext,
     .kind = ConfigKind::kSecret,
     .default_text = "unset",
     .field = "auth_key",
     .doc = "the job's shared secret: every connection and the rendezvous store then authenticate both ways"},
    {.name = "REMORA_AUTH_KEY_FILE",
     .section = kContext,
     .kind = ConfigKind::kSecret,
     .default_text = "unset",
     .doc = "a file holding the secret instead (one trailing newline dropped); not with `REMORA_AUTH_KEY`"},
};

const ConfigVariable& var(std::string_view name) {
  for (const ConfigVariable& v : kVariables) {
    if (v.name == name) return v;
  }
  std::abort();  // a name of this file's own table: a typo here is a bug
}

/// Every row of the table but the two secrets (AuthKey::from_env reads them) with its
/// fields; REMORA_LOG's row is core's.
const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = [] {
    std::vector<Row> r{
        {core::core_variables()[0], "log_level", Fields<LogLevel>{&Config::log_level, &ContextOptions::log_level}},
        {var("REMORA_STREAMS"), "streams_per_endpoint",
         Fields<uint32_t>{&Config::streams_per_endpoint, &ContextOptions::streams_per_endpoint}},
        {var("REMORA_CHUNK_SIZE"), "chunk_bytes", Fields<size_t>{&Config::chunk_bytes, &ContextOptions::chunk_bytes}},
        {var("REMORA_EAGER_LIMIT"), "eager_limit", Fields<size_t>{&Config::eager_limit, &ContextOptions::eager_limit}},
        {var("REMORA_EAGER_CREDIT"), "eager_credit",
         Fields<size_t>{&Config::eager_credit, &ContextOptions::eager_credit}},
        {var("REMORA_MAX_OUTSTANDING"), "max_outstanding",
         Fields<uint32_t>{&Config::max_outstanding, &ContextOptions::max_outstanding}},
        {var("REMORA_MAX_UNEXPECTED"), "max_unexpected",
         Fields<uint32_t>{&Config::max_unexpected, &ContextOptions::max_unexpected}},
        {var("REMORA_RMA_WINDOW"), "rma_window", Fields<uint32_t>{&Config::rma_window, &ContextOptions::rma_window}},
        {var("REMORA_STAGING_BUFFERS"), "staging_buffers",
         Fields<uint32_t>{&Config::staging_buffers, &ContextOptions::staging_buffers}},
        {var("REMORA_DEVICE_PATH"), "device_path",
         Fields<DevicePathMode>{&Config::device_path, &ContextOptions::device_path}},
        {var("REMORA_DEVMEM_IFNAME"), "devmem_ifname", TextField<16>{&Config::devmem_ifname}},
        {var("REMORA_RXQ_SOCKET"), "rxq_socket", TextField<108>{&Config::rxq_socket}},
        {var("REMORA_RXQ_DEVICE_AREA"), "rxq_device_area", Fields<size_t>{&Config::rxq_device_area}},
        {var("REMORA_ZCRX_AREA"), "zcrx_area", Fields<size_t>{&Config::zcrx_area, &ContextOptions::zcrx_area}},
        {var("REMORA_ZCRX_MODE"), "zcrx_mode", Fields<ZcrxMode>{&Config::zcrx_mode, &ContextOptions::zcrx_mode}},
        {var("REMORA_SPIN_US"), "spin_us", Fields<uint32_t>{&Config::spin_us, &ContextOptions::spin_us}},
        {var("REMORA_PROGRESS_LINGER_US"), "progress_linger_us",
         Fields<uint32_t>{&Config::progress_linger_us, &ContextOptions::progress_linger_us}},
        {var("REMORA_PROGRESS_POLL_US"), "progress_poll_us",
         Fields<uint32_t>{&Config::progress_poll_us, &ContextOptions::progress_poll_us}},
        {var("REMORA_PROGRESS_THREADS"), "progress_threads",
         Fields<uint32_t>{&Config::progress_threads, &ContextOptions::progress_threads}},
        {var("REMORA_CONNECT_TIMEOUT_MS"), "connect_timeout_ms",
         Fields<uint32_t>{&Config::connect_timeout_ms, &ContextOptions::connect_timeout_ms}},
        {var("REMORA_HANDSHAKE_TIMEOUT_MS"), "handshake_timeout_ms",
         Fields<uint32_t>{&Config::handshake_timeout_ms, &ContextOptions::handshake_timeout_ms}},
        {var("REMORA_MAX_PENDING_HANDSHAKES"), "max_pending_handshakes",
         Fields<uint32_t>{&Config::max_pending_handshakes, &ContextOptions::max_pending_handshakes}},
        {var("REMORA_WAIT_TIMEOUT_MS"), "wait_timeout_ms",
         Fields<uint32_t>{&Config::wait_timeout_ms, &ContextOptions::wait_timeout_ms}},
        {var("REMORA_PEER_TIMEOUT_MS"), "peer_timeout_ms",
         Fields<uint32_t>{&Config::peer_timeout_ms, &ContextOptions::peer_timeout_ms}},
        {var("REMORA_CHECKSUM"), "checksum", Fields<ChecksumMode>{&Config::checksum, &ContextOptions::checksum}},
        {var("REMORA_ENCRYPT"), "encrypt", Fields<EncryptMode>{&Config::encrypt, &ContextOptions::encrypt}},
        {var("REMORA_SAME_HOST"), "same_host_pulls",
         Fields<bool>{&Config::same_host_pulls, &ContextOptions::same_host_pulls}},
        {var("REMORA_PULL_HUGEPAGES"), "pull_huge_pages",
         Fields<bool>{&Config::pull_huge_pages, &ContextOptions::pull_huge_pages}},
        {var("REMORA_FAILOVER"), "failover", Fields<bool>{&Config::failover, &ContextOptions::failover}},
        {var("REMORA_SEGMENTS"), "segments", Fields<bool>{&Config::segments, &ContextOptions::segments}},
        {var("REMORA_PIN"), "pin_mode", Fields<PinMode>{&Config::pin_mode, &ContextOptions::pin_mode}},
        {var("REMORA_RAILS"), "rails", TextField<256>{&Config::rails, &ContextOptions::rails}},
        {var("REMORA_RAIL_SPLIT"), "rail_split", Fields<RailSplit>{&Config::rail_split, &ContextOptions::rail_split}},
    };
    return r;
  }();
  return kRows;
}

/// A number, as a row's field holds it: a count or size, a choice's position, or a
/// switch (position 0, "auto", is true).
template <typename T>
T from_number(uint64_t n) {
  if constexpr (std::is_same_v<T, bool>) {
    return n == 0;
  } else {
    return static_cast<T>(n);
  }
}
template <typename T>
uint64_t to_number(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 0 : 1;
  } else {
    return static_cast<uint64_t>(v);
  }
}

/// Reads a row's variable from the environment into `c`.
Status read_row(const Row& row, Config& c) {
  return std::visit(
      [&](const auto& b) -> Status {
        using B = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<B, std::monostate>) {
          return Status::ok();
        } else if constexpr (kIsText<B>) {
          REMORA_ASSIGN_OR_RETURN(auto text, core::read_text(row.var));
          if (text) store_text(c.*b.config, *text);
          return Status::ok();
        } else {
          REMORA_ASSIGN_OR_RETURN(auto n, core::read_value(row.var));
          using T = std::remove_reference_t<decltype(c.*b.config)>;
          if (n) c.*b.config = from_number<T>(*n);
          return Status::ok();
        }
      },
      row.bind);
}

/// The value of a row's field of `c` as a number, for its range check; nullopt: text.
std::optional<uint64_t> number_of(const Row& row, const Config& c) {
  return std::visit(
      [&](const auto& b) -> std::optional<uint64_t> {
        using B = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<B, std::monostate> || kIsText<B>) {
          return std::nullopt;
        } else {
          return to_number(c.*b.config);
        }
      },
      row.bind);
}

const Row* row_of_field(std::string_view field) {
  if (field.empty()) return nullptr;
  for (const Row& r : rows()) {
    if (r.var.field == field) return &r;
  }
  return nullptr;
}

Status no_such_field(std::string_view field) {
  std::string known;
  for (const Row& r : rows()) {
    if (!r.var.field.empty()) known += fmt::format("{}{}", known.empty() ? "" : ", ", r.var.field);
  }
  return Status(StatusCode::kInvalidArgument,
                fmt::format("no option '{}': the options are {}, auth_key", field, known));
}

}  // namespace

namespace transport {

core::VariableTable variables() noexcept { return kVariables; }

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
  for (const Row& row : rows()) REMORA_RETURN_IF_ERROR(read_row(row, c));
  core::warn_unknown_variables(core::variable_tables());
  REMORA_RETURN_IF_ERROR(c.validate());
  return c;
}

Status Config::validate() const {
  for (const Row& row : rows()) {
    if (auto n = number_of(row, *this); n && row.var.kind != ConfigKind::kChoice) {
      REMORA_RETURN_IF_ERROR(core::check_range(row.var, *n));
    } else if (n && *n >= row.var.choices.size()) {
      return Status(StatusCode::kInvalidArgument, fmt::format("{} ({}) holds {}, which is none of {}", row.var.field,
                                                              row.var.name, *n, row.var.range()));
    }
  }
  // What one row cannot say alone.
  if (eager_credit < eager_limit + 64) {
    return Status(
        StatusCode::kInvalidArgument,
        "eager_credit (REMORA_EAGER_CREDIT) must exceed eager_limit (REMORA_EAGER_LIMIT) by at least 64 bytes");
  }
  if (checksum == ChecksumMode::kCrc32c && !core::crc32c_available()) {
    return Status(StatusCode::kUnsupported,
                  "checksum (REMORA_CHECKSUM=crc32c): this remora was built without ISA-L, its CRC-32C library; "
                  "install libisal-dev and rebuild, or unset REMORA_CHECKSUM");
  }
  if (encrypt != EncryptMode::kOff) {
    if (!auth_key) {
      return Status(StatusCode::kInvalidArgument,
                    "encrypt (REMORA_ENCRYPT): the keys are derived from the job secret, and none is set: set "
                    "REMORA_AUTH_KEY (or REMORA_AUTH_KEY_FILE), or REMORA_ENCRYPT=off");
    }
    // A cipher named that this build or CPU cannot run is refused here, not at the first
    // connection's seal_socket.
    const std::optional<net::SealCipher> named =
        encrypt == EncryptMode::kOn ? std::nullopt : net::single_cipher(net::offered_ciphers(encrypt));
    if (std::string why = named ? net::cipher_missing(*named) : std::string(); !why.empty()) {
      return Status(StatusCode::kUnsupported, fmt::format("encrypt (REMORA_ENCRYPT={}): {}; choose another or on",
                                                          net::cipher_name(*named), why));
    }
    if (device_path == DevicePathMode::kDevmem || device_path == DevicePathMode::kZcrx) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("encrypt (REMORA_ENCRYPT) with REMORA_DEVICE_PATH={}: that path's payload never "
                                "reaches the CPU, where it would be sealed; use REMORA_DEVICE_PATH=auto or staging",
                                device_path == DevicePathMode::kDevmem ? "devmem" : "zcrx"));
    }
    if (rxq_socket[0] != '\0') {
      return Status(StatusCode::kInvalidArgument,
                    "encrypt (REMORA_ENCRYPT) with REMORA_RXQ_SOCKET: streams steered to devmem RX queues deliver "
                    "their bytes to device memory, where they cannot be opened; unset one of them");
    }
  }
  return Status::ok();
}

Config apply(Config base, const ContextOptions& o) {
  for (const Row& row : rows()) {
    std::visit(
        [&](const auto& b) {
          using B = std::decay_t<decltype(b)>;
          if constexpr (kIsText<B>) {
            if (b.option != nullptr && (o.*b.option).has_value()) base.*b.config = *(o.*b.option);
          } else if constexpr (!std::is_same_v<B, std::monostate>) {
            if (b.option != nullptr && (o.*b.option).has_value()) base.*b.config = *(o.*b.option);
          }
        },
        row.bind);
  }
  if (o.auth_key) base.auth_key = o.auth_key;
  return base;
}

Status ContextOptions::set(std::string_view field, const ConfigValue& value) {
  if (field == "auth_key") {
    const auto* secret = std::get_if<std::string>(&value);
    if (secret == nullptr) return Status(StatusCode::kInvalidArgument, "auth_key takes the secret, as text");
    REMORA_ASSIGN_OR_RETURN(auth_key, AuthKey::from_secret(*secret));
    return Status::ok();
  }
  const Row* row = row_of_field(field);
  if (row == nullptr) return no_such_field(field);
  const ConfigVariable& v = row->var;
  if (v.kind == ConfigKind::kText) {
    const auto* text = std::get_if<std::string>(&value);
    if (text == nullptr) return Status(StatusCode::kInvalidArgument, fmt::format("{} takes text", field));
    if (text->size() > v.max) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{} ({}) takes at most {} characters, not {}", field, v.name, v.max, text->size()));
    }
    std::visit(
        [&](const auto& b) {
          using B = std::decay_t<decltype(b)>;
          if constexpr (kIsText<B>) {
            if (b.option != nullptr) {
              auto& option = this->*b.option;
              option.emplace();
              store_text(*option, *text);
            }
          }
        },
        row->bind);
    return Status::ok();
  }
  uint64_t n = 0;
  if (const auto* text = std::get_if<std::string>(&value)) {
    REMORA_ASSIGN_OR_RETURN(n, core::parse_value(v, *text));
  } else if (const auto* flag = std::get_if<bool>(&value)) {
    if (!std::holds_alternative<Fields<bool>>(row->bind)) {
      return Status(StatusCode::kInvalidArgument, fmt::format("{} takes {}, not true or false", field, v.range()));
    }
    n = *flag ? 0 : 1;
  } else {
    n = std::get<uint64_t>(value);
    if (v.kind == ConfigKind::kChoice && n >= v.choices.size()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("{} takes {} (positions 0 to {}), not {}", field, v.range(), v.choices.size() - 1, n));
    }
    if (v.kind != ConfigKind::kChoice) REMORA_RETURN_IF_ERROR(core::check_range(v, n));
  }
  std::visit(
      [&](const auto& b) {
        using B = std::decay_t<decltype(b)>;
        if constexpr (!std::is_same_v<B, std::monostate> && !kIsText<B>) {
          using T = typename std::remove_reference_t<decltype(this->*b.option)>::value_type;
          if (b.option != nullptr) this->*b.option = from_number<T>(n);
        }
      },
      row->bind);
  return Status::ok();
}

Result<ConfigValue> config_value(const Config& config, std::string_view field) {
  if (field == "auth_key") return ConfigValue(std::string(config.auth_key ? "set" : "unset"));
  for (const Row& row : rows()) {
    if (row.config_field != field) continue;
    if (std::holds_alternative<std::monostate>(row.bind)) return Status(StatusCode::kInternal, "a row without a field");
    ConfigValue value = std::visit(
        [&](const auto& b) -> ConfigValue {
          using B = std::decay_t<decltype(b)>;
          if constexpr (std::is_same_v<B, std::monostate>) {
            return ConfigValue();
          } else if constexpr (kIsText<B>) {
            return ConfigValue(std::string((config.*b.config).data()));
          } else if constexpr (std::is_same_v<B, Fields<bool>>) {
            return ConfigValue(config.*b.config);
          } else {
            return ConfigValue(to_number(config.*b.config));
          }
        },
        row.bind);
    return value;
  }
  return no_such_field(field);
}

}  // namespace remora
