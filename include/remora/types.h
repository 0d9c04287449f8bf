// remora/types.h — small strong types shared by the public API.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace remora {

/// A message tag for two-sided send/recv. Strong so it never swaps with a size.
enum class Tag : uint64_t {};

/// Identifies a registered region within one MemoryRegistry.
enum class RegionId : uint32_t {};

/// Identifies an endpoint within a Context (and on the wire in the handshake).
enum class EndpointId : uint64_t {};

/// Timeouts everywhere are durations.
using Duration = std::chrono::nanoseconds;
/// "No deadline": a wait given kForever ends only when what it waits for happens or
/// fails (a dead peer, a closed endpoint or listener, a destroyed context). Never a
/// default: a caller asks for it by name.
inline constexpr Duration kForever = Duration::max();
/// "The context's default bound": what every wait that takes a timeout uses when the
/// caller passes none (Request::wait, wait_all, Listener::accept,
/// Endpoint::wait_notification). It stands for Config::wait_timeout_ms of the context
/// the wait belongs to (REMORA_WAIT_TIMEOUT_MS, default 300000 = 5 min). A wait that
/// runs that bound out fails with kTimeout, and its message names
/// REMORA_WAIT_TIMEOUT_MS. A sentinel, not a length: it is never a real timeout.
inline constexpr Duration kDefaultTimeout = Duration::min();

/// Access rights of a registered region. Remote rights are what a RemoteKey can grant.
enum class Access : uint32_t {
  kNone = 0,
  kLocalWrite = 1u << 0,    ///< local operations may write into it (receives, get results)
  kRemoteRead = 1u << 1,    ///< a peer holding a key may read it (get)
  kRemoteWrite = 1u << 2,   ///< a peer holding a key may write it (put)
  kRemoteAtomic = 1u << 3,  ///< a peer holding a key may run 64-bit atomics on it
};
inline constexpr Access kAllAccess = static_cast<Access>(0xF);
inline constexpr Access kRemoteAccessMask = static_cast<Access>(0xE);

constexpr Access operator|(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<uint32_t>(a) | static_cast<uint32_t>(b));
}
constexpr Access operator&(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<uint32_t>(a) & static_cast<uint32_t>(b));
}
/// True when every right in `wanted` is in `have`.
constexpr bool has_access(Access have, Access wanted) noexcept { return (have & wanted) == wanted; }

/// Log verbosity (REMORA_LOG).
enum class LogLevel : uint8_t { kError = 0, kWarn, kInfo, kDebug, kTrace };

/// What kind of memory a region or buffer is: where it lives. A memory domain of a
/// kind not named here (the test double of remora/testing/test_device.h) reports a
/// value of its own above these; the library treats any such kind as device memory.
enum class MemoryKind : uint8_t { kHost = 0, kCuda = 1, kDmabuf = 2 };
std::string_view to_string(MemoryKind kind) noexcept;

}  // namespace remora
