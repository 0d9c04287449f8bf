// mem/region_access.h — a peer's validated, revocable access to registered memory:
// what the passive target holds while it places or reads the bytes of one RMA
// operation.
//
// acquire_access() validates a peer's RemoteKey and returns a RegionAccess naming the
// bytes (resolve() validates the same way and only says where they are). The access does NOT keep the region
// registered: the application may deregister at any time. Instead every touch of
// the memory is bracketed by begin()/end():
//   - begin() fails once the region has been deregistered (then the caller must not
//     touch the memory and reports kRevoked / drains the bytes elsewhere);
//   - deregistration (Region::deregister / ~Region) revokes the region first, then
//     waits until no begin()/end() bracket of any access to it is open, and only then
//     unpins the pages and returns — so after it returns remora never touches the
//     memory again, and the application may free it.
// Brackets must be short and must not block (one non-blocking send/recv, one memcpy,
// one atomic instruction, or one asynchronous device copy: open from its start to its
// end, which the copy's own thread closes; see datapath/staging.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "remora/memory.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora::detail {

struct RegionUse;  // per-registration revocation word; defined in registry.cc

class RegionAccess {
 public:
  RegionAccess() noexcept = default;
  RegionAccess(RegionAccess&&) noexcept = default;
  RegionAccess& operator=(RegionAccess&&) noexcept = default;
  RegionAccess(const RegionAccess&) = delete;
  RegionAccess& operator=(const RegionAccess&) = delete;
  ~RegionAccess() = default;

  bool valid() const noexcept { return use_ != nullptr; }
  std::byte* address() const noexcept { return address_; }
  size_t length() const noexcept { return length_; }
  RegionId region() const noexcept { return region_; }
  /// Offset of address() from the region's first byte.
  uint64_t region_offset() const noexcept { return region_offset_; }
  /// The domain whose memory the region is (the host's for host memory).
  MemoryDomain* domain() const noexcept { return domain_; }
  /// The device domain of a region of device memory; null for host memory.
  MemoryDomain* device() const noexcept {
    return domain_ != nullptr && domain_->kind() != MemoryKind::kHost ? domain_ : nullptr;
  }

  /// Opens a bracket: true if the region is still registered (touch the memory, then
  /// call end()); false if it was deregistered (do not touch it; no end()).
  [[nodiscard]] bool begin() const noexcept;
  void end() const noexcept;
  /// True once the region has been deregistered (no bracket needed to ask).
  bool revoked() const noexcept;

 private:
  friend Result<RegionAccess> acquire_access(const MemoryRegistry&, const RemoteKey&, uint64_t, uint64_t, Access);
  std::shared_ptr<RegionUse> use_;
  std::byte* address_ = nullptr;
  size_t length_ = 0;
  RegionId region_{};
  uint64_t region_offset_ = 0;
  MemoryDomain* domain_ = nullptr;
};

/// The library's way into a MemoryRegistry's state (a friend of the public class).
struct RegistryInternals {
  static const RegistryState& state(const MemoryRegistry& registry) noexcept { return *registry.state_; }
  static std::shared_ptr<RegistryState> shared_state(const MemoryRegistry& registry) noexcept {
    return registry.state_;
  }
};

/// A live registration, found by address (what per-region resources are keyed on:
/// devmem TX bindings, datapath/devmem_tx_path.h). (id, generation) names it until it
/// is deregistered; a later registration of the same memory is another.
struct CoveringRegion {
  RegionId id{};
  uint32_t generation = 0;
  std::byte* base = nullptr;
  size_t length = 0;
};

/// The live region of `domain` that holds all of [ptr, ptr + len), if any (the first
/// such; a scan of the registry's slots, under its lock).
std::optional<CoveringRegion> find_covering_region(const RegistryState& state, const MemoryDomain& domain,
                                                   const void* ptr, size_t len);

/// Whether (id, generation) still names a live registration.
bool region_live(const RegistryState& state, RegionId id, uint32_t generation);

/// Called once per deregistration, with the region's (id, generation), on the thread
/// that deregisters, after every peer access to it ended and before the domain's
/// registration is undone (so before Region::deregister returns). Must not deregister
/// anything itself.
using ReleaseListener = std::function<void(RegionId id, uint32_t generation)>;
/// Adds `listener`; the number removes it. Both take the registry's lock.
uint64_t add_release_listener(RegistryState& state, ReleaseListener listener);
void remove_release_listener(RegistryState& state, uint64_t handle) noexcept;

/// Validates a peer's access to [offset, offset + length) of `key`'s window with the
/// `needed` rights. The key is authenticated first (region still registered,
/// generation, kind, and the tag over every field): any failure there is kInvalidKey
/// with the same message whatever the cause, so the answer reveals nothing about the
/// region. Then, for an authentic key: the range inside the key's window
/// (overflow-safe; length 0 is fine at any offset up to the window's end) else
/// kOutOfRange, and `needed` granted by the key else kAccessDenied. Nothing is touched.
/// Returns the access on success.
Result<RegionAccess> acquire_access(const MemoryRegistry& registry, const RemoteKey& key, uint64_t offset,
                                    uint64_t length, Access needed);

/// The memfd behind a shared region (share_region) and the region's size in bytes; the
/// state page follows the region's bytes in it.
struct RegionShare {
  int fd = -1;
  size_t region_bytes = 0;
};
/// Marks live region (id, generation) as held by memfd `fd` (the region's bytes from its
/// offset 0, then a state page). Takes the registry's lock; the mark ends with the region.
void share_region(RegistryState& state, RegionId id, uint32_t generation, int fd);
/// The memfd a same-host peer holding `key` may map: `key` is authenticated as by
/// acquire_access (no right needed, so any authentic key of the region). kUnsupported
/// when the region is not shared.
Result<RegionShare> region_share(const MemoryRegistry& registry, const RemoteKey& key);

/// Where a validated access lands.
struct ResolvedAccess {
  std::byte* address = nullptr;  ///< first byte to touch
  size_t length = 0;
};

/// Validates exactly as acquire_access and says where the bytes are, without an
/// access that tracks revocation (tests, diagnostics).
Result<ResolvedAccess> resolve(const MemoryRegistry& registry, const RemoteKey& key, uint64_t offset, uint64_t length,
                               Access needed);

}  // namespace remora::detail
