// mem/registry.cc — the region table behind MemoryRegistry and Region: slot ids,
// generations that revoke keys, per-registration random secrets, and the
// overflow-safe validation of a peer's access (resolve).
//
// Locking: one mutex per registry guards the slot table. Domain work (mlock/munlock)
// runs outside it, so resolve() — the passive-target hot path — never waits for a
// large registration to be pinned.
#include <sodium.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/log.h"
#include "mem/region_access.h"
#include "remora/memory.h"

namespace remora {
namespace detail {

using MacKey = std::array<unsigned char, 16>;
static_assert(crypto_shorthash_KEYBYTES == 16 && crypto_shorthash_BYTES == 8);

/// The revocation word of one registration, shared with every RegionAccess to it.
/// Bit 31: revoked. Bits 0..30: begin()/end() brackets open now.
struct RegionUse {
  static constexpr uint32_t kRevoked = 1u << 31;
  std::atomic<uint32_t> word{0};

  /// Marks the registration revoked, then waits until every open bracket closed.
  void revoke() noexcept {
    uint32_t v = word.fetch_or(kRevoked, std::memory_order_acq_rel) | kRevoked;
    while (v != kRevoked) {
      word.wait(v, std::memory_order_acquire);
      v = word.load(std::memory_order_acquire);
    }
  }
};

struct RegionSlot {
  bool live = false;
  uint32_t generation = 1;  // never 0, so a default-constructed key never matches
  MacKey mac_key{};
  std::byte* base = nullptr;
  size_t length = 0;
  Access access = Access::kNone;
  MemoryDomain* domain = nullptr;
  DomainRegistration registration;
  std::shared_ptr<RegionUse> use;
  /// A memfd of this process that holds the region's bytes and then a state page
  /// (mem/shared_arena.h), which a same-host peer may map (share_region; the pool's
  /// small arenas). -1: the region is not shared. Owned by whoever set it.
  int share_fd = -1;
  /// The last key whose tag authenticated against this registration (validate_locked,
  /// under the registry mutex): a peer sends the same key with every put and get, and
  /// a key equal to it in every field authenticates without SipHash again. Reset with
  /// the slot when the region is deregistered.
  struct AuthenticKey {
    bool valid = false;
    uint64_t offset = 0;
    uint64_t length = 0;
    Access access = Access::kNone;
    uint64_t secret = 0;
  };
  mutable AuthenticKey last_authentic;
};

struct RegistryState {
  explicit RegistryState(PinMode mode) : pin_mode(mode) {}

  const PinMode pin_mode;
  mutable std::mutex mu;
  std::vector<RegionSlot> slots;
  std::vector<uint32_t> free_slots;  // LIFO: the most recently freed id is reused first
  RegistryStats stats;
  std::vector<std::pair<uint64_t, std::shared_ptr<const ReleaseListener>>> listeners;
  uint64_t next_listener = 1;

  /// Frees the slot if (id, generation) still names a live region, then undoes the
  /// domain registration outside the lock. Idempotent.
  void release(RegionId id, uint32_t generation) noexcept {
    MemoryDomain* domain = nullptr;
    std::byte* base = nullptr;
    size_t length = 0;
    DomainRegistration registration;
    std::shared_ptr<RegionUse> use;
    std::vector<std::shared_ptr<const ReleaseListener>> to_tell;
    {
      std::lock_guard lock(mu);
      const auto index = static_cast<uint32_t>(id);
      if (index >= slots.size()) return;
      RegionSlot& slot = slots[index];
      if (!slot.live || slot.generation != generation) return;
      domain = slot.domain;
      base = slot.base;
      length = slot.length;
      registration = slot.registration;
      use = std::move(slot.use);
      slot = RegionSlot{};
      slot.generation = generation + 1 == 0 ? 1 : generation + 1;
      free_slots.push_back(index);
      ++stats.deregistrations;
      --stats.live_regions;
      stats.bytes_registered -= length;
      if (registration.pinned) stats.bytes_pinned -= length;
      for (const auto& entry : listeners) to_tell.push_back(entry.second);
    }
    // New keys stopped validating above; now wait out any peer access touching the
    // memory this instant (a bracket is one non-blocking syscall or memcpy long).
    if (use) use->revoke();
    for (const auto& listener : to_tell) (*listener)(id, generation);
    domain->deregister_range(base, length, registration);
  }
};

}  // namespace detail

namespace {

bool only_remote_rights(Access rights) noexcept { return (rights & kRemoteAccessMask) == rights; }

/// Compares tags without an early exit on the first differing byte.
bool tags_equal(uint64_t a, uint64_t b) noexcept {
  volatile uint64_t diff = a ^ b;
  return diff == 0;
}

Result<detail::MacKey> random_mac_key() {
  detail::MacKey key{};
  size_t got = 0;
  while (got < key.size()) {
    const ssize_t n = getrandom(key.data() + got, key.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status(StatusCode::kInternal, fmt::format("getrandom failed: {}", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return key;
}

/// The tag a key carries in `secret`: SipHash-2-4 (libsodium's crypto_shorthash) over
/// every other field of the key, keyed with the region's MAC key.
uint64_t key_tag(const detail::MacKey& mac_key, const RemoteKey& key) noexcept {
  unsigned char in[4 + 4 + 8 + 8 + 4 + 1] = {};
  auto put = [&in](size_t at, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) in[at + i] = static_cast<unsigned char>(v >> (8 * i));
  };
  put(0, static_cast<uint32_t>(key.region), 4);
  put(4, key.generation, 4);
  put(8, key.offset, 8);
  put(16, key.length, 8);
  put(24, static_cast<uint32_t>(key.access), 4);
  put(28, static_cast<uint8_t>(key.kind), 1);
  unsigned char out[crypto_shorthash_BYTES];
  crypto_shorthash(out, in, sizeof in, mac_key.data());
  uint64_t tag = 0;
  for (size_t i = 0; i < sizeof out; ++i) tag |= uint64_t{out[i]} << (8 * i);
  return tag;
}

/// Is [offset, offset+length) inside [0, size)? Never overflows.
bool window_inside(uint64_t offset, uint64_t length, uint64_t size) noexcept {
  return offset <= size && length <= size - offset;
}

}  // namespace

// ---------------------------------------------------------------------------
// Region
// ---------------------------------------------------------------------------

Region::Region(Region&& other) noexcept
    : state_(std::move(other.state_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      id_(std::exchange(other.id_, RegionId{})),
      generation_(std::exchange(other.generation_, 0)),
      mac_key_(std::exchange(other.mac_key_, {})),
      access_(std::exchange(other.access_, Access::kNone)),
      kind_(std::exchange(other.kind_, MemoryKind::kHost)),
      pinned_(std::exchange(other.pinned_, false)) {}

Region& Region::operator=(Region&& other) noexcept {
  if (this != &other) {
    deregister();
    state_ = std::move(other.state_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    id_ = std::exchange(other.id_, RegionId{});
    generation_ = std::exchange(other.generation_, 0);
    mac_key_ = std::exchange(other.mac_key_, {});
    access_ = std::exchange(other.access_, Access::kNone);
    kind_ = std::exchange(other.kind_, MemoryKind::kHost);
    pinned_ = std::exchange(other.pinned_, false);
  }
  return *this;
}

Region::~Region() { deregister(); }

void Region::deregister() noexcept {
  if (!state_) return;
  state_->release(id_, generation_);
  state_.reset();
  data_ = nullptr;
  size_ = 0;
  id_ = RegionId{};
  generation_ = 0;
  mac_key_ = {};
  access_ = Access::kNone;
  pinned_ = false;
}

RemoteKey Region::remote_key() const {
  RemoteKey key;
  if (!valid()) return key;
  key.region = id_;
  key.generation = generation_;
  key.offset = 0;
  key.length = size_;
  key.access = access_ & kRemoteAccessMask;
  key.kind = kind_;
  key.secret = key_tag(mac_key_, key);
  return key;
}

Result<RemoteKey> Region::remote_key(uint64_t offset, uint64_t length, Access rights) const {
  if (!valid()) return Status(StatusCode::kInvalidArgument, "remote_key on a region that is not registered");
  if (rights == Access::kNone || !only_remote_rights(rights)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("remote_key rights {:#x} must be a non-empty set of remote rights (read, write, atomic)",
                              static_cast<uint32_t>(rights)));
  }
  if (!has_access(access_, rights)) {
    return Status(StatusCode::kAccessDenied,
                  fmt::format("remote_key asks for rights {:#x} but region {} was registered with {:#x}",
                              static_cast<uint32_t>(rights), static_cast<uint32_t>(id_),
                              static_cast<uint32_t>(access_)));
  }
  if (!window_inside(offset, length, size_)) {
    return Status(StatusCode::kOutOfRange,
                  fmt::format("remote_key window [{}, +{}) is outside region {} of {} bytes", offset, length,
                              static_cast<uint32_t>(id_), size_));
  }
  RemoteKey key = remote_key();
  key.offset = offset;
  key.length = length;
  key.access = rights;
  key.secret = key_tag(mac_key_, key);
  return key;
}

// ---------------------------------------------------------------------------
// MemoryRegistry
// ---------------------------------------------------------------------------

MemoryRegistry::MemoryRegistry(PinMode pin_mode) : state_(std::make_shared<detail::RegistryState>(pin_mode)) {}

MemoryRegistry::~MemoryRegistry() = default;

PinMode MemoryRegistry::pin_mode() const noexcept { return state_->pin_mode; }

Result<Region> MemoryRegistry::register_memory(void* ptr, size_t len, Access access, MemoryDomain& domain) {
  if (ptr == nullptr) return Status(StatusCode::kInvalidArgument, "register_memory: null pointer");
  if (len == 0) return Status(StatusCode::kInvalidArgument, "register_memory: empty range (length 0)");
  if (reinterpret_cast<uintptr_t>(ptr) > UINTPTR_MAX - len) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("register_memory: range {} + {} bytes wraps around the address space", ptr, len));
  }
  if ((access & kAllAccess) != access) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("register_memory: unknown access bits {:#x}", static_cast<uint32_t>(access)));
  }
  if (!domain.owns(ptr, len)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("register_memory: {} + {} bytes is not {} memory", ptr, len, domain.name()));
  }
  if (domain.kind() != MemoryKind::kHost && (access & Access::kRemoteAtomic) != Access::kNone) {
    // The target applies atomics with the CPU's atomic instructions on the region's
    // memory; a device's is reachable only through its copies (puts and gets of it are
    // staged through host memory instead).
    return Status(StatusCode::kUnsupported,
                  fmt::format("register_memory: remote atomics on {} memory are not supported (remote reads and "
                              "writes are: docs/device-memory.md); register it without Access::kRemoteAtomic",
                              domain.name()));
  }
  REMORA_ASSIGN_OR_RETURN(const detail::MacKey mac_key, random_mac_key());
  const PinMode mode = state_->pin_mode;
  auto registered = domain.register_range(ptr, len, mode);
  if (!registered) return registered.status().with_context("register_memory");
  const DomainRegistration registration = registered.value();

  Region region;
  {
    std::lock_guard lock(state_->mu);
    uint32_t index = 0;
    if (!state_->free_slots.empty()) {
      index = state_->free_slots.back();
      state_->free_slots.pop_back();
    } else if (state_->slots.size() < UINT32_MAX) {
      index = static_cast<uint32_t>(state_->slots.size());
      state_->slots.emplace_back();
    } else {
      domain.deregister_range(ptr, len, registration);
      return Status(StatusCode::kNoResource, "register_memory: all 2^32-1 region ids are in use");
    }
    detail::RegionSlot& slot = state_->slots[index];
    slot.live = true;
    slot.mac_key = mac_key;
    slot.base = static_cast<std::byte*>(ptr);
    slot.length = len;
    slot.access = access;
    slot.domain = &domain;
    slot.registration = registration;
    slot.use = std::make_shared<detail::RegionUse>();

    RegistryStats& stats = state_->stats;
    ++stats.registrations;
    ++stats.live_regions;
    stats.bytes_registered += len;
    if (registration.pinned) stats.bytes_pinned += len;
    if (mode == PinMode::kTry && !registration.pinned) ++stats.pin_failures;

    region.state_ = state_;
    region.data_ = slot.base;
    region.size_ = len;
    region.id_ = static_cast<RegionId>(index);
    region.generation_ = slot.generation;
    region.mac_key_ = mac_key;
    region.access_ = access;
    region.kind_ = domain.kind();
    region.pinned_ = registration.pinned;
  }
  return region;
}

namespace detail {
namespace {

/// resolve()'s checks; the registry mutex is held. Returns the slot on success.
///
/// The key is authenticated before anything else is looked at: every field of it
/// (region, generation, window, rights, kind) is covered by its tag, so a key that
/// fails any of these checks gets the same kInvalidKey and the same message, which
/// tells a forger nothing about the region (whether the id is live, its size, its
/// rights). Only an authentic key learns more: that an access falls outside the
/// window it grants (kOutOfRange) or needs a right it lacks (kAccessDenied).
Result<const RegionSlot*> validate_locked(const RegistryState& state, const RemoteKey& key, uint64_t offset,
                                          uint64_t len, Access needed) {
  const auto index = static_cast<uint32_t>(key.region);
  const RegionSlot* slot = index < state.slots.size() ? &state.slots[index] : nullptr;
  bool authentic =
      slot != nullptr && slot->live && slot->generation == key.generation && slot->domain->kind() == key.kind;
  if (authentic) {
    RegionSlot::AuthenticKey& last = slot->last_authentic;
    // The fields are the key's, which its holder knows; the tag is compared as before.
    if (last.valid && last.offset == key.offset && last.length == key.length && last.access == key.access) {
      authentic = tags_equal(last.secret, key.secret);
    } else {
      authentic = tags_equal(key_tag(slot->mac_key, key), key.secret);
      if (authentic)
        last = {.valid = true, .offset = key.offset, .length = key.length, .access = key.access, .secret = key.secret};
    }
  }
  if (!authentic) {
    return Status(StatusCode::kInvalidKey,
                  fmt::format("key for region {} does not authenticate: forged or altered, or its region was "
                              "deregistered (keys die with their registration)",
                              index));
  }
  // An authentic key's window lies inside its region (Region::remote_key checks it);
  // checked again so that a broken invariant cannot become an out-of-bounds access.
  if (!window_inside(key.offset, key.length, slot->length)) {
    return Status(StatusCode::kInternal, fmt::format("authentic key for region {} has a window outside it", index));
  }
  if (!window_inside(offset, len, key.length)) {
    return Status(StatusCode::kOutOfRange,
                  fmt::format("access [{}, +{}) is outside the key's {}-byte window", offset, len, key.length));
  }
  if (!has_access(key.access, needed) || !has_access(slot->access, needed)) {
    return Status(StatusCode::kAccessDenied,
                  fmt::format("access needs rights {:#x}; the key grants {:#x}", static_cast<uint32_t>(needed),
                              static_cast<uint32_t>(key.access)));
  }
  return slot;
}

}  // namespace

bool RegionAccess::begin() const noexcept {
  if (!use_) return false;
  const uint32_t v = use_->word.fetch_add(1, std::memory_order_acq_rel);
  if ((v & RegionUse::kRevoked) == 0) return true;
  end();
  return false;
}

void RegionAccess::end() const noexcept {
  const uint32_t before = use_->word.fetch_sub(1, std::memory_order_acq_rel);
  if (before == (RegionUse::kRevoked | 1)) use_->word.notify_all();
}

bool RegionAccess::revoked() const noexcept {
  return !use_ || (use_->word.load(std::memory_order_acquire) & RegionUse::kRevoked) != 0;
}

std::optional<CoveringRegion> find_covering_region(const RegistryState& state, const MemoryDomain& domain,
                                                   const void* ptr, size_t len) {
  const auto first = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(state.mu);
  for (size_t i = 0; i < state.slots.size(); ++i) {
    const RegionSlot& slot = state.slots[i];
    if (!slot.live || slot.domain != &domain) continue;
    const auto base = reinterpret_cast<uintptr_t>(slot.base);
    if (first >= base && first - base <= slot.length && len <= slot.length - (first - base)) {
      return CoveringRegion{
          .id = static_cast<RegionId>(i), .generation = slot.generation, .base = slot.base, .length = slot.length};
    }
  }
  return std::nullopt;
}

bool region_live(const RegistryState& state, RegionId id, uint32_t generation) {
  const auto index = static_cast<uint32_t>(id);
  std::lock_guard lock(state.mu);
  return index < state.slots.size() && state.slots[index].live && state.slots[index].generation == generation;
}

uint64_t add_release_listener(RegistryState& state, ReleaseListener listener) {
  std::lock_guard lock(state.mu);
  const uint64_t handle = state.next_listener++;
  state.listeners.emplace_back(handle, std::make_shared<const ReleaseListener>(std::move(listener)));
  return handle;
}

void remove_release_listener(RegistryState& state, uint64_t handle) noexcept {
  std::lock_guard lock(state.mu);
  std::erase_if(state.listeners, [handle](const auto& l) { return l.first == handle; });
}

Result<RegionAccess> acquire_access(const MemoryRegistry& registry, const RemoteKey& key, uint64_t offset,
                                    uint64_t length, Access needed) {
  const RegistryState& state = RegistryInternals::state(registry);
  std::lock_guard lock(state.mu);
  REMORA_ASSIGN_OR_RETURN(const RegionSlot* slot, validate_locked(state, key, offset, length, needed));
  RegionAccess access;
  access.use_ = slot->use;
  access.region_offset_ = key.offset + offset;
  access.address_ = slot->base + access.region_offset_;
  access.length_ = static_cast<size_t>(length);
  access.region_ = key.region;
  access.domain_ = slot->domain;
  return access;
}

}  // namespace detail

void detail::share_region(RegistryState& state, RegionId id, uint32_t generation, int fd) {
  const auto index = static_cast<uint32_t>(id);
  std::lock_guard lock(state.mu);
  if (index < state.slots.size() && state.slots[index].live && state.slots[index].generation == generation) {
    state.slots[index].share_fd = fd;
  }
}

Result<detail::RegionShare> detail::region_share(const MemoryRegistry& registry, const RemoteKey& key) {
  const RegistryState& state = RegistryInternals::state(registry);
  std::lock_guard lock(state.mu);
  REMORA_ASSIGN_OR_RETURN(const RegionSlot* slot, validate_locked(state, key, 0, 0, Access::kNone));
  if (slot->share_fd < 0) {
    return Status(StatusCode::kUnsupported,
                  "the region is not in memory a peer can map (only pool arenas of "
                  "buffers up to 16 KiB are)");
  }
  return RegionShare{.fd = slot->share_fd, .region_bytes = slot->length};
}

Result<detail::ResolvedAccess> detail::resolve(const MemoryRegistry& registry, const RemoteKey& key, uint64_t offset,
                                       uint64_t length, Access needed) {
  const RegistryState& state = RegistryInternals::state(registry);
  std::lock_guard lock(state.mu);
  REMORA_ASSIGN_OR_RETURN(const RegionSlot* slot, validate_locked(state, key, offset, length, needed));
  return ResolvedAccess{slot->base + key.offset + offset, static_cast<size_t>(length)};
}

RegistryStats MemoryRegistry::stats() const {
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

}  // namespace remora
