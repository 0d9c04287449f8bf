// plugin/nccl/handle.h — what the plugin puts in NCCL's opaque connection handle, and
// the hello a connector sends first: encoded and decoded without I/O, so that connect(),
// the acceptor and the fuzzer (tests/fuzz/nccl_handle_fuzz.cc) read a peer's bytes the
// same way. The handle travels between the processes of one job through NCCL's own
// bootstrap, as NCCL_NET_HANDLE_MAXSIZE bytes that the plugin must not trust.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "net_abi.h"

namespace remora::nccl_plugin {

inline constexpr uint32_t kHandleMagic = 0x524d4e43;  // "CNMR"
inline constexpr uint16_t kHandleVersion = 1;

using Secret = std::array<uint8_t, 16>;

/// The listen handle, laid out as the host lays out the struct (both ends of a handle
/// run the same plugin build).
struct Handle {
  uint32_t magic;
  uint16_t version;
  uint16_t port;
  char host[64];  // numeric, IPv6 in brackets, NUL-terminated
  Secret secret;
  uint64_t stage;  // the connector's own: its pending connection (0 as the listener wrote it)
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);

/// The first message on a connection: the handle's secret, proving the connector holds
/// this listen's handle.
struct Hello {
  uint32_t magic;
  Secret secret;
};

using HandleBytes = std::span<const std::byte, NCCL_NET_HANDLE_MAXSIZE>;

/// Writes `h` over all NCCL_NET_HANDLE_MAXSIZE bytes of `out` (zeros after it).
void encode_handle(const Handle& h, std::span<std::byte, NCCL_NET_HANDLE_MAXSIZE> out) noexcept;

/// Reads a handle; false when the bytes are not a remora listen handle of this version
/// (wrong magic or version, port 0, a host that is empty or not NUL-terminated within
/// its 64 bytes). `*out` is written only on success.
[[nodiscard]] bool decode_handle(HandleBytes in, Handle* out) noexcept;

/// Why a received hello is refused ("" when it carries `secret`): a wrong size or magic
/// is not a remora NCCL connection; another secret is another listen's handle.
[[nodiscard]] const char* check_hello(std::span<const std::byte> received, const Secret& secret) noexcept;

}  // namespace remora::nccl_plugin
