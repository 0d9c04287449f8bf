// remora/version.h — library and wire-protocol versions.
#pragma once

#include <cstdint>

namespace remora {
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
/// Wire protocol version spoken in the handshake; a peer with another version is refused.
inline constexpr uint16_t kWireVersion = 1;
const char* version_string() noexcept;
}  // namespace remora
