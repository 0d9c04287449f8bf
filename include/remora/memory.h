// remora/memory.h — memory domains, registered regions and remote keys.
//
// Registration is explicit and does real work (for host memory: validate the range
// and lock its pages), so register once and reuse — or take buffers from a Pool.
// A Region's RemoteKey is what a peer needs to access it; deregistering the region
// revokes every key ever handed out for it (the generation changes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "remora/config.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora {

// ---------------------------------------------------------------------------
// Memory domains
// ---------------------------------------------------------------------------

/// An asynchronous copy between a domain's memory and host memory.
class AsyncCopy {
 public:
  virtual ~AsyncCopy() = default;
  /// ok when done, kInProgress while running, or the copy's error.
  virtual Status test() = 0;
  /// Blocks up to `timeout`; kTimeout if still running then.
  virtual Status wait(Duration timeout) = 0;
  /// Calls `fn` exactly once when the copy has ended (test() no longer answers
  /// kInProgress): at once, on the calling thread, if it already has; otherwise later,
  /// on a thread of the domain's. `fn` must be quick, must not block and must not call
  /// into the domain; the library uses it to wake its progress engine.
  virtual void on_done(std::function<void()> fn) = 0;
};

/// A dmabuf file descriptor exported for a range of a domain's memory (devmem TCP
/// binds it to a NIC's queues). The caller owns `fd` and closes it.
struct DmabufExport {
  int fd = -1;
  uint64_t offset = 0;  ///< where the range starts within the dmabuf
  uint64_t length = 0;
};

/// One piece of a scatter within a domain's memory (MemoryDomain::scatter): `length`
/// bytes from source base + `src_offset` to destination base + `dst_offset`.
struct ScatterEntry {
  uint64_t src_offset = 0;
  uint64_t length = 0;
  uint64_t dst_offset = 0;
};

/// What a domain did to register a range; handed back on deregistration.
struct DomainRegistration {
  bool pinned = false;       ///< pages were locked (mlock) or the device equivalent
  uint64_t cookie = 0;       ///< domain-private handle
};

/// A kind of memory remora can register and move: host now; CUDA and dmabuf later
/// implement the same interface. Implementations are thread-safe.
class MemoryDomain {
 public:
  virtual ~MemoryDomain() = default;
  virtual MemoryKind kind() const noexcept = 0;
  virtual std::string_view name() const noexcept = 0;

  /// Pointer ownership query: does [ptr, ptr+len) lie entirely in this domain's memory?
  virtual bool owns(const void* ptr, size_t len) const = 0;

  /// Registration hook: make the range usable for I/O (host: validate it is mapped and
  /// lock its pages according to `mode`). kInvalidArgument for a bad range;
  /// kNoResource naming RLIMIT_MEMLOCK when pinning is required and refused.
  virtual Result<DomainRegistration> register_range(void* ptr, size_t len, PinMode mode) = 0;
  /// Undo register_range. Never fails; logs if the OS complains.
  virtual void deregister_range(void* ptr, size_t len, const DomainRegistration& reg) noexcept = 0;

  /// Copy `len` bytes from domain memory `src` into host memory `host_dst`.
  virtual Result<std::unique_ptr<AsyncCopy>> copy_to_host(void* host_dst, const void* src, size_t len) = 0;
  /// Copy `len` bytes from host memory `host_src` into domain memory `dst`.
  virtual Result<std::unique_ptr<AsyncCopy>> copy_from_host(void* dst, const void* host_src, size_t len) = 0;

  /// Makes host memory [host, host+len) fast to copy to and from this domain (CUDA:
  /// page-locks it with the driver). Staging buffers are prepared once, when their
  /// pool is made, and reused (the explicit-reuse rule). Default: nothing to do.
  virtual Status prepare_staging(void* /*host*/, size_t /*len*/) { return Status::ok(); }
  /// Undoes prepare_staging. Never fails.
  virtual void release_staging(void* /*host*/, size_t /*len*/) noexcept {}
  /// A dmabuf for [ptr, ptr+len) of this domain's memory, where the driver can export
  /// one. Default: kUnsupported, saying which domain cannot.
  virtual Result<DmabufExport> export_dmabuf(const void* ptr, size_t len);
  /// Copies each entry from `src_base` to `dst_base`, both this domain's memory, as one
  /// asynchronous copy: devmem TCP receive scatters the fragments the NIC left in a
  /// dmabuf of this domain's memory to where they belong (CUDA: the unpack kernel).
  /// Destination ranges must not overlap each other or a source range. `entries` may
  /// be reused when this returns. Default: kUnsupported, saying which domain cannot.
  virtual Result<std::unique_ptr<AsyncCopy>> scatter(void* dst_base, const void* src_base,
                                                     std::span<const ScatterEntry> entries);
  /// `len` bytes of this domain's memory for remora's own use (an endpoint's devmem
  /// receive area, REMORA_RXQ_DEVICE_AREA), freed with free_area. Default:
  /// kUnsupported, saying which domain cannot.
  virtual Result<void*> allocate_area(size_t len);
  /// Frees what allocate_area returned. Default: nothing.
  virtual void free_area(void* /*ptr*/) noexcept {}
};

/// The process-wide host memory domain.
MemoryDomain& host_domain();

// ---------------------------------------------------------------------------
// Remote keys
// ---------------------------------------------------------------------------

/// A grant to access a window of a registered region: region id, the region's
/// generation (deregistration revokes), the window's bounds (relative to the region
/// start), the remote rights granted, and `secret`: a 64-bit tag (SipHash-2-4 keyed
/// with a random 128-bit key that never leaves the registering process) over all of
/// those fields. Changing any field (widening the window, adding a right) without the
/// process's key makes the key invalid; so does guessing (2^-64 per try).
/// Serialises to exactly kSerializedSize little-endian bytes (see docs/protocol.md).
struct RemoteKey {
  static constexpr uint8_t kVersion = 1;
  static constexpr size_t kSerializedSize = 40;

  RegionId region{};
  uint32_t generation = 0;
  uint64_t secret = 0;
  uint64_t offset = 0;  ///< start of the granted window within the region
  uint64_t length = 0;  ///< length of the granted window
  Access access = Access::kNone;
  MemoryKind kind = MemoryKind::kHost;

  std::array<std::byte, kSerializedSize> serialize() const noexcept;
  /// kInvalidArgument for a wrong size, unknown version, unknown access bits, nonzero
  /// reserved bytes or a window whose end overflows.
  static Result<RemoteKey> deserialize(std::span<const std::byte> bytes);

  friend bool operator==(const RemoteKey&, const RemoteKey&) = default;
};

// ---------------------------------------------------------------------------
// Regions and the registry
// ---------------------------------------------------------------------------

class MemoryRegistry;
namespace detail {
struct RegistryState;
struct RegistryInternals;  // the library's own access to a registry (src/mem/region_access.h)
}

/// A registered range of memory. Move-only; deregisters (revoking its keys) when
/// destroyed or on deregister(). Thread-compatible; the registry it belongs to is
/// thread-safe.
class Region {
 public:
  Region() noexcept = default;
  Region(Region&& other) noexcept;
  Region& operator=(Region&& other) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  std::span<std::byte> span() const noexcept { return {data_, size_}; }
  RegionId id() const noexcept { return id_; }
  Access access() const noexcept { return access_; }
  MemoryKind kind() const noexcept { return kind_; }
  bool pinned() const noexcept { return pinned_; }

  /// A key granting the region's remote rights over the whole region.
  RemoteKey remote_key() const;
  /// A key for the window [offset, offset+length) with a subset of the region's
  /// remote rights. kOutOfRange / kAccessDenied / kInvalidArgument otherwise.
  Result<RemoteKey> remote_key(uint64_t offset, uint64_t length, Access rights) const;

  /// Deregister now (idempotent). Keys for this region stop validating immediately,
  /// and operations in flight on it that had not finished end with kInvalidKey. A peer process on this host
  /// that reads a get's chunks out of the region itself (same-host pulls) is not waited
  /// for: its reads in flight (at most 8 chunks) may still read the memory after this
  /// returns, and that get fails.
  void deregister() noexcept;

 private:
  friend class MemoryRegistry;
  std::shared_ptr<detail::RegistryState> state_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  RegionId id_{};
  uint32_t generation_ = 0;
  std::array<unsigned char, 16> mac_key_{};  // never leaves this process; keys carry a tag made with it
  Access access_ = Access::kNone;
  MemoryKind kind_ = MemoryKind::kHost;
  bool pinned_ = false;
};

/// Counters a registry keeps (benchmarks and `remora doctor` report them).
struct RegistryStats {
  uint64_t registrations = 0;    ///< successful register_memory calls, ever
  uint64_t deregistrations = 0;
  uint64_t live_regions = 0;
  uint64_t bytes_registered = 0;  ///< currently registered
  uint64_t bytes_pinned = 0;      ///< currently locked in RAM
  uint64_t pin_failures = 0;      ///< registrations that could not pin (kTry degraded)
};

/// Owns the table of registered regions of one Context (or of a standalone user).
/// Thread-safe. Outlives its Regions internally (they share its state).
class MemoryRegistry {
 public:
  explicit MemoryRegistry(PinMode pin_mode = PinMode::kTry);
  ~MemoryRegistry();
  MemoryRegistry(const MemoryRegistry&) = delete;
  MemoryRegistry& operator=(const MemoryRegistry&) = delete;

  /// Registers [ptr, ptr+len) of `domain`'s memory with `access` rights.
  /// kInvalidArgument for null/empty/wrapping ranges or memory the domain does not own;
  /// kNoResource when pinning is required and refused (message names RLIMIT_MEMLOCK).
  Result<Region> register_memory(void* ptr, size_t len, Access access, MemoryDomain& domain = host_domain());

  RegistryStats stats() const;
  PinMode pin_mode() const noexcept;

 private:
  friend struct detail::RegistryInternals;
  std::shared_ptr<detail::RegistryState> state_;
};

}  // namespace remora
