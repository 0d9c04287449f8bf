// remora/pool.h — explicit reuse of registered memory (the Lunasa idea).
//
// A Pool registers large arenas once and hands out ref-counted Buffers from
// power-of-two size classes. Releasing the last reference returns the buffer to
// the pool's free list — never to the OS while the pool lives. Registration is the
// expensive part; a Pool pays it once per arena, not once per use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "remora/memory.h"
#include "remora/status.h"

namespace remora {

class Context;

struct PoolOptions {
  size_t arena_bytes = size_t{64} << 20;  ///< bytes registered per arena (classes above get their own arena)
  size_t min_buffer_bytes = 4096;        ///< smallest size class
  size_t max_bytes = 0;                  ///< cap on bytes registered by this pool; 0 = no cap
  Access access = Access::kLocalWrite | Access::kRemoteRead | Access::kRemoteWrite;
};

struct PoolStats {
  uint64_t registrations = 0;     ///< arenas registered
  uint64_t bytes_registered = 0;  ///< sum of arena sizes
  uint64_t hits = 0;              ///< allocations served from a free list
  uint64_t misses = 0;            ///< allocations that needed a new arena
  uint64_t buffers_in_use = 0;
  uint64_t bytes_in_use = 0;      ///< capacity of buffers currently handed out
};

namespace detail {
struct PoolCore;
struct PoolSlot;
}

/// A registered buffer from a Pool. Copies share the buffer (reference counted);
/// the last copy to go returns it to the pool. Copying/destroying is thread-safe;
/// the bytes themselves are the user's to synchronise.
class Buffer {
 public:
  Buffer() noexcept = default;
  Buffer(const Buffer& other) noexcept;
  Buffer& operator=(const Buffer& other) noexcept;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  ~Buffer();

  bool valid() const noexcept { return slot_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  std::byte* data() const noexcept;
  size_t size() const noexcept;      ///< bytes requested
  size_t capacity() const noexcept;  ///< size class
  std::span<std::byte> span() const noexcept { return {data(), size()}; }
  /// The arena's region and this buffer's offset in it.
  const Region& region() const noexcept;
  uint64_t region_offset() const noexcept;
  /// A key granting the pool's remote rights over exactly this buffer's bytes.
  RemoteKey remote_key() const;
  /// Number of Buffer handles sharing this buffer.
  uint32_t use_count() const noexcept;
  /// Drop this handle now.
  void reset() noexcept;

 private:
  friend struct detail::PoolCore;
  std::shared_ptr<detail::PoolCore> core_;
  detail::PoolSlot* slot_ = nullptr;
};

/// Thread-safe. Buffers may outlive the Pool object: arenas are released when the
/// pool and every buffer are gone.
class Pool {
 public:
  Pool(MemoryRegistry& registry, PoolOptions options = {});
  /// Uses the context's registry (and so its pin mode).
  Pool(Context& context, PoolOptions options = {});
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// A buffer of at least `bytes` (0 is allowed and gives the smallest class).
  /// kNoResource if max_bytes would be exceeded or registration is refused.
  Result<Buffer> allocate(size_t bytes);
  PoolStats stats() const;
  const PoolOptions& options() const noexcept;

 private:
  std::shared_ptr<detail::PoolCore> core_;
};

}  // namespace remora
