// mem/shared_arena.h — memory a same-host peer may map (docs/protocol.md, "Direct
// mappings"): a memfd sealed against shrinking and growing that holds a registered
// region's bytes from offset 0 and, right after them, one state page saying which
// registration the bytes are and whether it still stands. The pool makes its arenas of
// small buffers this way; a peer that took the memfd puts and gets through its own
// mapping, and reads the state page before each access.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace remora::detail {

struct SharedArenaState {
  static constexpr uint64_t kMagic = 0x31504d4441524d52;  // "RMRADMP1"
  static constexpr size_t kPageBytes = 4096;
  /// Buffers up to this size come from shared arenas (a larger one moves by pulls).
  static constexpr size_t kMaxBuffer = size_t{16} << 10;

  uint64_t magic = kMagic;
  uint32_t region = 0;  ///< the registration's id and generation (a RemoteKey's)
  uint32_t generation = 0;
  std::atomic<uint32_t> live{0};  ///< 1 while registered; 0 for good from the owner's deregistration on
};
static_assert(sizeof(SharedArenaState) <= SharedArenaState::kPageBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

}  // namespace remora::detail
