// plugin/nixl/wire.h — the three things the NIXL backend hands to other agents, as pure
// encode/decode functions (no I/O): the connection info of an engine (getConnInfo), the
// public data of a registration (getPublicData: a remora RemoteKey), and a notification
// message (a tagged remora message naming the sending agent).
//
// NIXL carries the first two inside its agent metadata, which anyone may hand to
// loadRemoteMD, so every decoder treats its input as hostile: exact sizes, known
// versions, bounded lengths, a clear error otherwise. A forged key still decodes (it is
// well-formed); the target refuses it when a transfer names it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remora/memory.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora::nixl_plugin {

/// The memory kinds the backend moves (NIXL's DRAM_SEG and VRAM_SEG).
enum class MemKind : uint8_t { kDram = 0, kVram = 1 };

/// Where an engine listens, and where it runs.
struct ConnInfo {
  /// "<boot id>/<network namespace inode>": equal for two engines that can reach each
  /// other over loopback (same kernel, same network namespace).
  std::string host;
  /// "host:port" of its listener, tried in order; loopback addresses last. Another
  /// host's loopback addresses are never tried.
  std::vector<std::string> addresses;
  /// Random per engine (16 hex digits): an agent restarted at the same address is told
  /// apart from the one before it, whose connection the other agents may not yet have
  /// seen fail. Empty when the text had none.
  std::string instance;
};

/// At most this many addresses in a connection info, each at most kMaxAddressBytes.
inline constexpr size_t kMaxAddresses = 64;
inline constexpr size_t kMaxAddressBytes = 128;

/// "remora-nixl/1 host=<host> id=<instance> addr=<a>,<b>,..." (text, for logs and
/// people; id= left out when empty).
std::string encode_conn_info(const ConnInfo& info);
/// kInvalidArgument naming what is wrong (unknown version, missing field, too many or
/// too long addresses, a character outside [0-9A-Za-z.:/[]_-]).
Result<ConnInfo> decode_conn_info(std::string_view text);

/// True for "127.x.x.x:port", "[::1]:port" and "localhost:port".
bool is_loopback_address(std::string_view address);

/// A registration as another agent sees it: its kind, its start address and length in
/// the registering process (NIXL's remote descriptors name addresses there), and the
/// remote key granting remote reads and writes of all of it.
struct PublicData {
  MemKind kind = MemKind::kDram;
  uint64_t base = 0;
  RemoteKey key;
};

/// Exactly kPublicDataBytes: "RMNX", version 1, kind, 2 zero bytes, base (u64 LE), the
/// key's 40 serialized bytes.
inline constexpr size_t kPublicDataBytes = 56;
std::string encode_public_data(const PublicData& data);
Result<PublicData> decode_public_data(std::string_view bytes);

/// The tag of notification messages on an engine's endpoints (nothing else is sent there).
inline constexpr Tag kNotificationTag{0x4e49584cu};
/// Largest notification message on the wire (header and agent name included).
inline constexpr size_t kMaxNotificationBytes = 64 * 1024;
/// Header bytes before the agent name: "RNTF" and the name's length (u16 LE).
inline constexpr size_t kNotificationHeaderBytes = 6;

/// The message for `message` from `agent`. kInvalidArgument when it would exceed
/// kMaxNotificationBytes (saying by how much) or the name is longer than 65535 bytes.
Result<std::vector<std::byte>> encode_notification(std::string_view agent, std::string_view message);

struct NotificationMessage {
  std::string agent;
  std::string message;
};
/// kProtocol for anything that is not a notification message.
Result<NotificationMessage> decode_notification(std::span<const std::byte> bytes);

}  // namespace remora::nixl_plugin
