// remora/config.h — run-time configuration, resolved from defaults, REMORA_*
// environment variables and explicit options (in that order; later wins). Every
// variable is a row of the library's configuration table (config_variables()), which
// `remora config` prints and docs/configuration.md lists.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "remora/config_variable.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {

/// How registration treats page pinning (REMORA_PIN).
enum class PinMode : uint8_t {
  kTry,      ///< lock pages; if RLIMIT_MEMLOCK refuses, log a warning once and go on unpinned
  kRequire,  ///< lock pages or fail registration with kNoResource
  kOff,      ///< never lock pages (validation still happens)
};

/// Which data path transfers of device memory take (REMORA_DEVICE_PATH). auto: the best
/// one that works (devmem TCP, io_uring zcrx, else staging), each one passed over
/// recorded with why; the others demand that path, and a transfer it cannot take fails
/// with the reason (docs/device-memory.md).
enum class DevicePathMode : uint8_t { kAuto, kDevmem, kZcrx, kStaging };

/// How the zcrx path gets its queue (REMORA_ZCRX_MODE). kNic: `remora rxq serve` reserves
/// an RX queue of a NIC with header split and steers each data stream's flow there, so
/// the NIC writes the payload into the area (REMORA_RXQ_SOCKET). kCopy: each endpoint
/// registers a device-less queue of its own (ZCRX_REG_NODEV, Linux 7.1+), no NIC, no
/// rxq, and reads every data stream through it: the kernel copies the bytes into the
/// area, so nothing is zero-copy; for kernels and machines without such a NIC
/// (docs/device-memory.md). Used with REMORA_DEVICE_PATH=zcrx.
enum class ZcrxMode : uint8_t { kNic, kCopy };

/// End-to-end integrity of transfers (REMORA_CHECKSUM). kCrc32c: every chunk of every
/// transfer carries a CRC-32C on the control stream and the receiver checks it; a
/// mismatch fails that operation with kDataCorrupt (docs/protocol.md, "Checksums"). Both
/// sides of an endpoint must use the same mode (a differing peer is refused at connect).
/// Needs a build with ISA-L (libisal-dev); without it kCrc32c is refused (kUnsupported).
enum class ChecksumMode : uint8_t { kNone, kCrc32c };

/// Encryption in flight (REMORA_ENCRYPT; docs/encryption.md). kOff: bytes travel in the
/// clear (authentication, when a key is set, still applies). Otherwise every byte after
/// the handshake on every connection (control, data streams, the rendezvous store) is
/// sealed in AEAD records under keys derived per connection and direction from the job
/// secret and the handshake's fresh nonces (libsodium). kOn: the first both sides offer of
/// AEGIS-256 (where the build's libsodium has it, 1.0.19 on, and the CPU has AES
/// instructions), AES-256-GCM (AES instructions), ChaCha20-Poly1305; the others name the
/// cipher (kAegis256, and kAegis128l, the fastest, with a 128-bit key, which `on` takes
/// only from a side that names it, are refused by a build without them). Needs
/// REMORA_AUTH_KEY (kInvalidArgument without it). Both sides must agree: a peer that does
/// not encrypt, or names another cipher, is refused at connect.
enum class EncryptMode : uint8_t { kOff, kOn, kAes256Gcm, kChacha20Poly1305, kAegis256, kAegis128l };

/// How an endpoint with several rails (REMORA_RAILS) gives chunks to its data streams
/// (REMORA_RAIL_SPLIT). kRate: each chunk to the stream expected to deliver it first, by
/// measured rate, so a slow rail gets fewer (docs/rails.md). kEqual: each chunk to the
/// next stream in turn, splitting every transfer equally over the rails as NCCL's socket
/// transport splits a message over its sockets, so the slowest rail sets the pace; it is
/// there for comparison (bench/rails.py measures kRate against it).
enum class RailSplit : uint8_t { kRate, kEqual };

/// The key every handshake proves knowledge of when a job secret is configured
/// (REMORA_AUTH_KEY or REMORA_AUTH_KEY_FILE; docs/configuration.md): 32 bytes derived
/// from the secret (BLAKE2b under a fixed label), never the secret itself. Endpoints and
/// the rendezvous store then authenticate both ways by an HMAC challenge-response over
/// fresh nonces (docs/protocol.md, "Authentication"); a peer that cannot prove it holds
/// the same secret gets no endpoint and no store access (kAccessDenied on its side).
struct AuthKey {
  std::array<std::byte, 32> bytes{};

  /// Derives the key from a shared secret. kInvalidArgument when it is empty.
  static Result<AuthKey> from_secret(std::string_view secret);
  /// The key the environment names: REMORA_AUTH_KEY (the secret itself) or
  /// REMORA_AUTH_KEY_FILE (a file holding it; one trailing newline is dropped). Neither
  /// set: nullopt (no authentication). kInvalidArgument, naming the variable, when both
  /// are set, when the secret is empty, or when the file cannot be read.
  static Result<std::optional<AuthKey>> from_env();
};

/// The fully resolved configuration of a Context. Plain data; copyable.
struct Config {
  LogLevel log_level = LogLevel::kWarn;
  uint32_t streams_per_endpoint = 2;       ///< K data streams per endpoint (REMORA_STREAMS)
  size_t chunk_bytes = 512 * 1024;         ///< rendezvous chunk size (REMORA_CHUNK_SIZE)
  size_t eager_limit = 64 * 1024;          ///< largest message sent inline (REMORA_EAGER_LIMIT)
  size_t eager_credit = 1024 * 1024;       ///< unexpected-eager bytes a peer may have buffered here (REMORA_EAGER_CREDIT)
  uint32_t max_outstanding = 65536;        ///< posted-but-incomplete ops per endpoint (REMORA_MAX_OUTSTANDING)
  uint32_t max_unexpected = 65536;         ///< unexpected large-message announcements / queued notifications per endpoint (REMORA_MAX_UNEXPECTED)
  uint32_t rma_window = 256;               ///< RMA requests a peer may have in service here per endpoint (REMORA_RMA_WINDOW)
  uint32_t spin_us = 200;                  ///< how long a waiting thread polls before it blocks (REMORA_SPIN_US)
  uint32_t progress_linger_us = 1000;      ///< progress thread yields to spinning waiters this long (REMORA_PROGRESS_LINGER_US)
  uint32_t progress_poll_us = 100;         ///< progress thread polls this long after it served something, then sleeps (REMORA_PROGRESS_POLL_US)
  /// Threads that move data-stream bytes: the progress thread and, above 1, that many
  /// minus one workers that send and receive chunks of host memory; 0: one per rail, at
  /// most half the CPUs the process may use, at least 1 (REMORA_PROGRESS_THREADS). A
  /// context's config() holds the number it took.
  uint32_t progress_threads = 0;
  uint32_t connect_timeout_ms = 10000;     ///< connect + handshake deadline (REMORA_CONNECT_TIMEOUT_MS)
  uint32_t handshake_timeout_ms = 10000;   ///< accepted sockets must finish the handshake by then (REMORA_HANDSHAKE_TIMEOUT_MS)
  /// Handshakes a server side keeps in progress at once: accepted connections that have
  /// not sent their whole HELLO, per listener, and endpoints waiting for their data
  /// streams, per context. At the bound the oldest is dropped once it has waited a short
  /// grace (younger ones may be a storm of honest clients: new connections wait in the
  /// kernel's backlog meanwhile; endpoints may exceed it up to four times), so half-open
  /// connections bound memory and descriptors and cannot keep a real client out.
  /// 1 to 65536 (REMORA_MAX_PENDING_HANDSHAKES).
  uint32_t max_pending_handshakes = 256;
  /// Bound of a wait given no timeout (remora::kDefaultTimeout): Request::wait, wait_all,
  /// Listener::accept, Endpoint::wait_notification. 1 ms to 24 h (REMORA_WAIT_TIMEOUT_MS).
  uint32_t wait_timeout_ms = 300000;
  /// A peer that sends nothing for this long while operations are outstanding on its
  /// endpoint (in either direction) is declared dead: TCP_USER_TIMEOUT on every stream
  /// and a heartbeat on the control stream. 1000 ms to 1 h (REMORA_PEER_TIMEOUT_MS).
  uint32_t peer_timeout_ms = 30000;
  PinMode pin_mode = PinMode::kTry;        ///< REMORA_PIN=try|require|off
  /// Chunk-sized pinned buffers per endpoint and direction through which device memory
  /// moves when no zero-copy path exists; 2 (double buffering) to 1024 (REMORA_STAGING_BUFFERS).
  uint32_t staging_buffers = 8;
  /// REMORA_DEVICE_PATH=auto|devmem|zcrx|staging.
  DevicePathMode device_path = DevicePathMode::kAuto;
  /// The NIC devmem TCP and zcrx use (REMORA_DEVMEM_IFNAME), NUL-terminated, at most
  /// 15 characters (IFNAMSIZ); empty: none. A character array, not a std::string: g++ 12
  /// warns maybe-uninitialized on string members of option aggregates (an error in the
  /// release preset). Set through the environment only.
  std::array<char, 16> devmem_ifname{};
  /// The Unix socket of `remora rxq serve` (REMORA_RXQ_SOCKET), NUL-terminated, at most
  /// 107 characters; empty: none. Endpoints with device memory domains ask it to steer
  /// their data streams to devmem RX queues (docs/device-memory.md). Environment only.
  std::array<char, 108> rxq_socket{};
  /// REMORA_RXQ_DEVICE_AREA: with rxq, each endpoint's own devmem receive area, this many
  /// bytes of its context's device memory, handed to rxq as a dmabuf (TCPX's model: the
  /// NIC writes into device memory); 0 (default): flows land in rxq's host buffer.
  /// Environment only.
  size_t rxq_device_area = 0;
  /// REMORA_ZCRX_AREA: with REMORA_DEVICE_PATH=zcrx, the bytes of host memory each
  /// endpoint registers as its io_uring zcrx queue's receive area (rounded up to pages;
  /// every byte of its data streams passes through it).
  size_t zcrx_area = size_t{16} << 20;
  /// REMORA_ZCRX_MODE=nic|copy (see ZcrxMode).
  ZcrxMode zcrx_mode = ZcrxMode::kNic;
  /// REMORA_CHECKSUM=none|crc32c (see ChecksumMode).
  ChecksumMode checksum = ChecksumMode::kNone;
  /// REMORA_SAME_HOST=auto|off. auto: a peer on this host (same kernel, same network
  /// namespace) that the kernel lets this process read (process_vm_readv: the rules of
  /// ptrace) reads the chunks of messages and puts this side sends straight out of its
  /// memory, one copy instead of two through loopback TCP, and this side does the same
  /// to it (docs/protocol.md, "Same-host pulls"). off: every byte goes over TCP.
  bool same_host_pulls = true;
  /// REMORA_PULL_HUGEPAGES=auto|off. auto: memory of this process that a same-host peer
  /// pulls again and again (every page of a 2 MiB frame, twice over) is collapsed into
  /// transparent huge pages once (madvise(MADV_COLLAPSE), Linux 6.1), which makes the
  /// peer's reads of it about 2.5x faster; the contents do not change.
  /// EndpointStats::huge_pages_promoted counts the frames. off: memory is left as it is.
  bool pull_huge_pages = true;
  /// REMORA_FAILOVER=auto|off. auto: where both sides offer it and an endpoint has two
  /// data streams or more, a data stream that breaks (reset, error, or, with rails,
  /// silent past the peer timeout while another rail works) is retired and every chunk on it the
  /// peer had not read whole is sent again on the others; the operation completes
  /// intact (docs/rails.md, "Surviving a broken connection"). A send of a chunked
  /// message then completes once the peer said it read every chunk, not once the kernel
  /// took the bytes. off: a broken data stream fails the endpoint, as before.
  bool failover = true;
  /// REMORA_SEGMENTS=auto|off. auto: where both sides offer it, a batch's items of one
  /// key between host memory on both sides (Endpoint::put_batch, get_batch) travel as
  /// one segmented request of up to 1024 items, their bytes in chunks of the usual size,
  /// so a list of small blocks moves about as fast as one buffer of their total size
  /// (docs/protocol.md "Segments"); not between peers that pull each other's memory
  /// (same-host pulls). off: every item is a put or get of its own, as before.
  bool segments = true;
  /// REMORA_ENCRYPT=off|on|aes256gcm|chacha20poly1305|aegis256|aegis128l (see EncryptMode).
  EncryptMode encrypt = EncryptMode::kOff;
  /// REMORA_RAILS: the local interfaces (NICs) this context's endpoints spread their
  /// data streams over, in NCCL_SOCKET_IFNAME's syntax: comma-separated name prefixes
  /// ("eth,ens"), `^` first to exclude ("^docker,lo"), `=` for exact names ("=eth0,eth1"),
  /// or IP addresses ("10.0.1.5,10.0.2.5"); NUL-terminated, at most 255 characters.
  /// Empty (default): one rail, the route's, as without rails. With rails, a connecting
  /// endpoint opens REMORA_STREAMS data streams per rail, each bound to its rail's
  /// address, toward the addresses the listener advertises, and gives chunks to the
  /// streams by their measured rate (docs/rails.md).
  std::array<char, 256> rails{};
  /// REMORA_RAIL_SPLIT=rate|equal (see RailSplit).
  RailSplit rail_split = RailSplit::kRate;
  /// The shared job secret's key (AuthKey::from_env: REMORA_AUTH_KEY, REMORA_AUTH_KEY_FILE);
  /// nullopt: connections are not authenticated.
  std::optional<AuthKey> auth_key = std::nullopt;

  /// Defaults overridden by every REMORA_* variable that is set. A malformed value is
  /// kInvalidArgument naming the variable; an unknown REMORA_* name is logged as a warning.
  static Result<Config> from_env();
  /// Checks ranges (e.g. streams 1..64, chunk >= 4 KiB); kInvalidArgument with the reason.
  Status validate() const;
};

/// Explicit overrides for Context::create; unset fields keep the env/default value.
struct ContextOptions {
  // One optional per field of Config, same name and meaning (see Config and
  // docs/configuration.md). log_level sets the process-wide log level (the log is
  // one per process), as REMORA_LOG does.
  std::optional<LogLevel> log_level = std::nullopt;
  std::optional<uint32_t> streams_per_endpoint = std::nullopt;
  std::optional<size_t> chunk_bytes = std::nullopt;
  std::optional<size_t> eager_limit = std::nullopt;
  std::optional<size_t> eager_credit = std::nullopt;
  std::optional<uint32_t> max_outstanding = std::nullopt;
  std::optional<uint32_t> max_unexpected = std::nullopt;
  std::optional<uint32_t> rma_window = std::nullopt;
  std::optional<uint32_t> spin_us = std::nullopt;
  std::optional<uint32_t> progress_linger_us = std::nullopt;
  std::optional<uint32_t> progress_poll_us = std::nullopt;
  std::optional<uint32_t> progress_threads = std::nullopt;
  std::optional<uint32_t> connect_timeout_ms = std::nullopt;
  std::optional<uint32_t> handshake_timeout_ms = std::nullopt;
  std::optional<uint32_t> max_pending_handshakes = std::nullopt;
  std::optional<uint32_t> wait_timeout_ms = std::nullopt;
  std::optional<uint32_t> peer_timeout_ms = std::nullopt;
  std::optional<PinMode> pin_mode = std::nullopt;
  std::optional<uint32_t> staging_buffers = std::nullopt;
  std::optional<DevicePathMode> device_path = std::nullopt;
  std::optional<size_t> zcrx_area = std::nullopt;
  std::optional<ZcrxMode> zcrx_mode = std::nullopt;
  std::optional<ChecksumMode> checksum = std::nullopt;
  std::optional<bool> same_host_pulls = std::nullopt;
  std::optional<bool> pull_huge_pages = std::nullopt;
  std::optional<bool> failover = std::nullopt;
  std::optional<bool> segments = std::nullopt;
  std::optional<EncryptMode> encrypt = std::nullopt;
  /// REMORA_RAILS's text (Config::rails), NUL-terminated; `set("rails", "eth0,eth1")`
  /// fills it. (A character array, for the reason given at Config::devmem_ifname.)
  std::optional<std::array<char, 256>> rails = std::nullopt;
  std::optional<RailSplit> rail_split = std::nullopt;
  /// Authenticate with this key (AuthKey::from_secret) instead of the environment's.
  std::optional<AuthKey> auth_key = std::nullopt;
  /// Skip the environment entirely (tests that must not be perturbed by REMORA_*).
  bool ignore_env = false;

  /// Sets the field named `field` (a ConfigVariable::field) to `value`, checked as the
  /// environment's value would be. kInvalidArgument naming the field and what it takes
  /// when there is no such field, or the value is of the wrong kind, malformed or out of
  /// range. For bindings that take options by name (the Python package).
  Status set(std::string_view field, const ConfigValue& value);
};

/// Applies options on top of `base`.
Config apply(Config base, const ContextOptions& options);

/// The value of the field named `field` (a ConfigVariable::field, or an environment-only
/// field of Config: "devmem_ifname", "rxq_socket", "rxq_device_area") of
/// `config`, as ContextOptions::set takes it; auth_key: "set" or "unset", never the key.
/// kInvalidArgument when there is no such field.
Result<ConfigValue> config_value(const Config& config, std::string_view field);

}  // namespace remora
