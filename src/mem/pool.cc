// mem/pool.cc — arenas of registered memory carved into power-of-two size classes.
//
// Shape: class k holds buffers of min_buffer_bytes << k. A class no larger than
// arena_bytes is carved from arenas of arena_bytes; a larger class gets a dedicated
// arena holding one buffer. An arena is mmap'd memory registered once with the pool's
// registry; it is never unmapped or deregistered while the PoolCore lives (the Pool
// object and every Buffer share it). Arenas of buffers up to 16 KiB are a memfd with a
// state page after them (mem/shared_arena.h), which a same-host peer may map to put and
// get without a round trip; larger ones are anonymous memory, which same-host pulls
// collapse into huge pages (memfds do not take them while shmem THP is off).
//
// Threading: one mutex per pool guards the free lists and the arena list; it is held
// for a few pointer operations, never across mmap or registration (so a miss that
// pins a large arena does not stall allocations of other classes). Reference counts
// are atomics in the slot; stats are atomics read without the lock.
//
// Options are normalised once: min_buffer_bytes is rounded up to a power of two
// (at least 64), arena_bytes up to a whole number of pages and at least one
// min_buffer_bytes buffer. options() returns the normalised values.
#include "remora/pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "mem/region_access.h"
#include "mem/shared_arena.h"

namespace remora {
namespace detail {

struct PoolArena;

/// A memfd of `bytes` and a state page, sealed against shrinking and growing; -1 when
/// the kernel will not make one (the arena is then anonymous memory, not shared).
int make_shared_arena(size_t bytes) {
  const int fd = memfd_create("remora-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(bytes + SharedArenaState::kPageBytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    REMORA_LOG(kDebug, "pool: a shared arena could not be made ({}): anonymous memory instead", std::strerror(errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

struct PoolSlot {
  std::byte* data = nullptr;
  size_t capacity = 0;
  size_t size = 0;  // bytes requested by the current holder
  uint64_t region_offset = 0;
  uint32_t size_class = 0;
  const PoolArena* arena = nullptr;
  std::atomic<uint32_t> refs{0};
  PoolSlot* next_free = nullptr;
};

struct PoolArena {
  PoolArena() = default;
  PoolArena(const PoolArena&) = delete;
  PoolArena& operator=(const PoolArena&) = delete;
  ~PoolArena() {
    // A peer that mapped the arena sees it gone before the keys stop validating; what it
    // writes after that lands in pages this process no longer maps.
    if (state != nullptr) state->live.store(0, std::memory_order_release);
    region.deregister();  // revoke keys and unpin before the memory goes away
    if (base != nullptr && munmap(base, mapped_bytes()) != 0) {
      REMORA_LOG(kWarn, "pool: munmap of a {}-byte arena failed: {}", bytes, std::strerror(errno));
    }
    if (fd >= 0) ::close(fd);
  }
  size_t mapped_bytes() const noexcept { return bytes + (fd >= 0 ? SharedArenaState::kPageBytes : 0); }

  void* base = nullptr;
  size_t bytes = 0;
  int fd = -1;                        // shared arenas: the memfd (region, then state page)
  SharedArenaState* state = nullptr;  // shared arenas: the state page
  Region region;
  std::unique_ptr<PoolSlot[]> slots;
  size_t slot_count = 0;
};

struct PoolCore {
  static constexpr uint32_t kClassCount = 64;

  PoolCore(MemoryRegistry& reg, const PoolOptions& opts) : registry(&reg), options(normalise(opts)) {}

  static PoolOptions normalise(PoolOptions o) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    o.min_buffer_bytes = std::bit_ceil(std::max<size_t>(o.min_buffer_bytes, 64));
    o.arena_bytes = std::max(o.arena_bytes, o.min_buffer_bytes);
    o.arena_bytes = (o.arena_bytes + page - 1) / page * page;
    return o;
  }

  Result<Buffer> allocate(size_t bytes);
  void release(PoolSlot* slot) noexcept;
  Buffer make_buffer(std::shared_ptr<PoolCore> self, PoolSlot* slot, size_t bytes);

  MemoryRegistry* registry;  // valid while the Pool object lives; only allocate() uses it
  const PoolOptions options;

  std::mutex mu;
  std::vector<std::unique_ptr<PoolArena>> arenas;  // guarded by mu
  PoolSlot* free_lists[kClassCount] = {};           // guarded by mu
  size_t bytes_reserved = 0;                        // guarded by mu: registered + being registered

  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> bytes_registered{0};
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> buffers_in_use{0};
  std::atomic<uint64_t> bytes_in_use{0};
};

void PoolCore::release(PoolSlot* slot) noexcept {
  buffers_in_use.fetch_sub(1, std::memory_order_relaxed);
  bytes_in_use.fetch_sub(slot->capacity, std::memory_order_relaxed);
  std::lock_guard lock(mu);
  slot->size = 0;
  slot->next_free = free_lists[slot->size_class];
  free_lists[slot->size_class] = slot;
}

}  // namespace detail

namespace {

const Region& empty_region() {
  static const Region region;
  return region;
}

}  // namespace

// ---------------------------------------------------------------------------
// Buffer
// ---------------------------------------------------------------------------

Buffer::Buffer(const Buffer& other) noexcept : core_(other.core_), slot_(other.slot_) {
  if (slot_ != nullptr) slot_->refs.fetch_add(1, std::memory_order_relaxed);
}

Buffer& Buffer::operator=(const Buffer& other) noexcept {
  if (this != &other) {
    Buffer copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Buffer::Buffer(Buffer&& other) noexcept : core_(std::move(other.core_)), slot_(std::exchange(other.slot_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    core_ = std::move(other.core_);
    slot_ = std::exchange(other.slot_, nullptr);
  }
  return *this;
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() noexcept {
  if (slot_ == nullptr) return;
  detail::PoolSlot* slot = std::exchange(slot_, nullptr);
  if (slot->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) core_->release(slot);
  core_.reset();
}

std::byte* Buffer::data() const noexcept { return slot_ != nullptr ? slot_->data : nullptr; }
size_t Buffer::size() const noexcept { return slot_ != nullptr ? slot_->size : 0; }
size_t Buffer::capacity() const noexcept { return slot_ != nullptr ? slot_->capacity : 0; }
const Region& Buffer::region() const noexcept { return slot_ != nullptr ? slot_->arena->region : empty_region(); }
uint64_t Buffer::region_offset() const noexcept { return slot_ != nullptr ? slot_->region_offset : 0; }
uint32_t Buffer::use_count() const noexcept {
  return slot_ != nullptr ? slot_->refs.load(std::memory_order_relaxed) : 0;
}

RemoteKey Buffer::remote_key() const {
  if (slot_ == nullptr) return RemoteKey{};
  const Region& region = slot_->arena->region;
  const Access rights = core_->options.access & kRemoteAccessMask;
  if (rights != Access::kNone) {
    auto key = region.remote_key(slot_->region_offset, slot_->capacity, rights);
    if (key) return key.value();
  }
  // A pool without remote rights: a key for this buffer that grants nothing.
  RemoteKey key = region.remote_key();
  key.offset = slot_->region_offset;
  key.length = slot_->capacity;
  key.access = Access::kNone;
  return key;
}

// ---------------------------------------------------------------------------
// Pool
// ---------------------------------------------------------------------------

Buffer detail::PoolCore::make_buffer(std::shared_ptr<PoolCore> self, PoolSlot* slot, size_t bytes) {
  slot->size = bytes;
  slot->refs.store(1, std::memory_order_relaxed);
  buffers_in_use.fetch_add(1, std::memory_order_relaxed);
  bytes_in_use.fetch_add(slot->capacity, std::memory_order_relaxed);
  Buffer buffer;
  buffer.core_ = std::move(self);
  buffer.slot_ = slot;
  return buffer;
}

Pool::Pool(MemoryRegistry& registry, PoolOptions options)
    : core_(std::make_shared<detail::PoolCore>(registry, options)) {}

Pool::~Pool() = default;

const PoolOptions& Pool::options() const noexcept { return core_->options; }

PoolStats Pool::stats() const {
  PoolStats s;
  s.registrations = core_->registrations.load(std::memory_order_relaxed);
  s.bytes_registered = core_->bytes_registered.load(std::memory_order_relaxed);
  s.hits = core_->hits.load(std::memory_order_relaxed);
  s.misses = core_->misses.load(std::memory_order_relaxed);
  s.buffers_in_use = core_->buffers_in_use.load(std::memory_order_relaxed);
  s.bytes_in_use = core_->bytes_in_use.load(std::memory_order_relaxed);
  return s;
}

Result<Buffer> Pool::allocate(size_t bytes) {
  detail::PoolCore& core = *core_;
  const size_t min = core.options.min_buffer_bytes;
  constexpr size_t kLargest = size_t{1} << 62;
  if (bytes > kLargest) {
    return Status(StatusCode::kInvalidArgument, fmt::format("pool: {} bytes is larger than any size class", bytes));
  }
  const size_t capacity = std::max(min, std::bit_ceil(std::max<size_t>(bytes, 1)));
  const auto size_class = static_cast<uint32_t>(std::countr_zero(capacity) - std::countr_zero(min));

  {
    std::lock_guard lock(core.mu);
    if (detail::PoolSlot* slot = core.free_lists[size_class]) {
      core.free_lists[size_class] = slot->next_free;
      slot->next_free = nullptr;
      core.hits.fetch_add(1, std::memory_order_relaxed);
      return core.make_buffer(core_, slot, bytes);
    }
  }

  // Miss: map and register a new arena for this class, outside the lock.
  const size_t arena_bytes = capacity <= core.options.arena_bytes ? core.options.arena_bytes : capacity;
  {
    std::lock_guard lock(core.mu);
    const size_t cap = core.options.max_bytes;
    if (cap != 0 && (core.bytes_reserved > cap || arena_bytes > cap - core.bytes_reserved)) {
      return Status(StatusCode::kNoResource,
                    fmt::format("pool max_bytes cap of {} bytes reached: {} bytes registered, a new {}-byte arena "
                                "is needed for a {}-byte buffer; raise PoolOptions::max_bytes or release buffers",
                                cap, core.bytes_reserved, arena_bytes, capacity));
    }
    core.bytes_reserved += arena_bytes;
  }
  auto unreserve = [&core, arena_bytes] {
    std::lock_guard lock(core.mu);
    core.bytes_reserved -= arena_bytes;
  };

  auto arena = std::make_unique<detail::PoolArena>();
  if (capacity <= detail::SharedArenaState::kMaxBuffer) arena->fd = detail::make_shared_arena(arena_bytes);
  arena->base = arena->fd >= 0 ? mmap(nullptr, arena_bytes + detail::SharedArenaState::kPageBytes,
                                      PROT_READ | PROT_WRITE, MAP_SHARED, arena->fd, 0)
                               : mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (arena->base == MAP_FAILED) {
    const int err = errno;
    arena->base = nullptr;
    arena.reset();
    unreserve();
    return Status(StatusCode::kNoResource,
                  fmt::format("pool: mmap of a {}-byte arena failed: {}", arena_bytes, std::strerror(err)));
  }
  arena->bytes = arena_bytes;
  auto region = core.registry->register_memory(arena->base, arena_bytes, core.options.access);
  if (!region) {
    arena.reset();
    unreserve();
    return region.status().with_context("pool: registering a new arena");
  }
  arena->region = std::move(region).value();
  if (arena->fd >= 0) {
    const RemoteKey key = arena->region.remote_key();
    arena->state = new (static_cast<std::byte*>(arena->base) + arena_bytes) detail::SharedArenaState{};
    arena->state->region = static_cast<uint32_t>(key.region);
    arena->state->generation = key.generation;
    arena->state->live.store(1, std::memory_order_release);
    detail::share_region(*detail::RegistryInternals::shared_state(*core.registry), key.region, key.generation,
                         arena->fd);
  }
  arena->slot_count = arena_bytes / capacity;
  arena->slots = std::make_unique<detail::PoolSlot[]>(arena->slot_count);
  for (size_t i = 0; i < arena->slot_count; ++i) {
    detail::PoolSlot& slot = arena->slots[i];
    slot.data = static_cast<std::byte*>(arena->base) + i * capacity;
    slot.capacity = capacity;
    slot.region_offset = i * capacity;
    slot.size_class = size_class;
    slot.arena = arena.get();
  }

  detail::PoolSlot* first = &arena->slots[0];
  {
    std::lock_guard lock(core.mu);
    // Push the rest in reverse so buffers are handed out in address order.
    for (size_t i = arena->slot_count; i-- > 1;) {
      detail::PoolSlot& slot = arena->slots[i];
      slot.next_free = core.free_lists[size_class];
      core.free_lists[size_class] = &slot;
    }
    core.arenas.push_back(std::move(arena));
  }
  core.registrations.fetch_add(1, std::memory_order_relaxed);
  core.bytes_registered.fetch_add(arena_bytes, std::memory_order_relaxed);
  core.misses.fetch_add(1, std::memory_order_relaxed);
  return core.make_buffer(core_, first, bytes);
}

}  // namespace remora
