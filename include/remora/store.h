// remora/store.h — the rendezvous store: a small TCP key-value service that ranks use
// to find each other (hosted by rank 0, like torch.distributed's TCPStore).
//
// Keys are strings (1..1024 bytes), values are byte strings (up to 64 MiB). Operations:
// set, get (waits until the key exists), wait for several keys, atomic add on a
// signed 64-bit counter, check (non-blocking existence test), remove. Every blocking call
// has a deadline and fails with kTimeout naming the keys it was waiting for, so a rank
// that never shows up turns into a clear error, not a hang. A server that goes away
// fails every call with kPeerFailed.
//
// Wire format (docs/protocol.md, "Rendezvous store"): little-endian frames on one TCP
// connection per client; requests are answered in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remora/config.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {

namespace detail {
class StoreServerCore;
class StoreClientCore;
}  // namespace detail

/// Serves the store on a listening socket with its own thread. Destroying it closes
/// every client connection (their calls fail with kPeerFailed).
class StoreServer {
 public:
  /// Listens on "host:port" (port 0 picks one; "0.0.0.0:29500", "[::]:0"). With the
  /// environment's key (AuthKey::from_env: REMORA_AUTH_KEY, REMORA_AUTH_KEY_FILE), every
  /// client must authenticate before its first request is served; an unreadable key is
  /// kInvalidArgument. Without a key on a non-loopback address it warns once per process.
  /// With the environment's REMORA_ENCRYPT (docs/encryption.md), every connection is
  /// sealed after its authentication; a client whose setting differs is refused.
  static Result<std::unique_ptr<StoreServer>> start(std::string_view address);
  /// The same with an explicit key (nullopt: no authentication) and encryption (it needs
  /// the key: kInvalidArgument without one), ignoring the environment.
  static Result<std::unique_ptr<StoreServer>> start(std::string_view address, const std::optional<AuthKey>& key,
                                                    EncryptMode encrypt = EncryptMode::kOff);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  std::string address() const;  ///< "host:port" actually bound

 private:
  explicit StoreServer(std::unique_ptr<detail::StoreServerCore> core);
  std::unique_ptr<detail::StoreServerCore> core_;
};

/// A connection to a StoreServer. Thread-safe (calls are serialised).
class Store {
 public:
  /// Connects to "host:port", retrying until `timeout` (the server may start later
  /// than its clients). kTimeout / kUnreachable with the address in the message.
  /// With the environment's key (AuthKey::from_env), the client and the server prove to
  /// each other that they hold it before any request; a server without it, with another
  /// key, or one that cannot prove it fails the call with kAccessDenied (not retried).
  /// Without a key, a server that requires one fails the first request with kAccessDenied.
  static Result<std::unique_ptr<Store>> connect(std::string_view address, Duration timeout);
  /// With the environment's REMORA_ENCRYPT the connection is sealed after authenticating;
  /// a store whose setting differs fails it with kUnsupported naming REMORA_ENCRYPT.
  /// The same with an explicit key (nullopt: none) and encryption (it needs the key),
  /// ignoring the environment.
  static Result<std::unique_ptr<Store>> connect(std::string_view address, Duration timeout,
                                                const std::optional<AuthKey>& key,
                                                EncryptMode encrypt = EncryptMode::kOff);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  Status set(std::string_view key, std::span<const std::byte> value);
  Status set(std::string_view key, std::string_view value);
  /// Waits up to `timeout` for `key` to exist, then returns its value.
  Result<std::vector<std::byte>> get(std::string_view key, Duration timeout);
  /// Waits up to `timeout` until every key exists. kTimeout lists the missing ones.
  Status wait(std::span<const std::string> keys, Duration timeout);
  /// Waits up to `timeout` until every key exists, and returns the keys that still did
  /// not at the timeout (empty: every key exists), in the order given: a timeout is an
  /// answer here, not an error. The list comes with the server's timeout reply, so it is
  /// known even when the server goes away right after. Errors as for wait().
  Result<std::vector<std::string>> wait_missing(std::span<const std::string> keys, Duration timeout);
  /// Atomically adds `delta` to the counter at `key` (created as 0) and returns the
  /// new value. A key holding a value that is not a counter is kInvalidArgument.
  Result<int64_t> add(std::string_view key, int64_t delta);
  /// Whether `key` exists now (never waits).
  Result<bool> check(std::string_view key);
  /// Removes `key`; true if it existed.
  Result<bool> remove(std::string_view key);

  /// The local address of this client's connection ("10.0.0.2"), i.e. the interface
  /// through which the store (rank 0) is reachable: what a rank advertises to others.
  std::string local_host() const;

 private:
  explicit Store(std::unique_ptr<detail::StoreClientCore> core);
  std::unique_ptr<detail::StoreClientCore> core_;
};

}  // namespace remora
