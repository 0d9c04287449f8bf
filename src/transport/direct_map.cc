// transport/direct_map.cc — see direct_map.h.
#include "transport/direct_map.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "net/shm_ring.h"

namespace remora::detail {

namespace {

bool grants(Access have, Access needed) {
  return (static_cast<uint32_t>(have) & static_cast<uint32_t>(needed)) == static_cast<uint32_t>(needed);
}

}  // namespace

size_t DirectMaps::KeyHash::operator()(const RemoteKey& k) const noexcept {
  // The fields that tell keys apart in practice (a window of one registration); keys
  // equal in these and different elsewhere share a bucket and are told apart by ==.
  uint64_t h = 0xcbf29ce484222325;
  for (uint64_t w : {(static_cast<uint64_t>(k.region) << 32) | k.generation, k.secret, k.offset, k.length}) {
    h = (h ^ w) * 0x100000001b3;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}

DirectMaps::Mapping::~Mapping() {
  if (base != nullptr) ::munmap(base, bytes + SharedArenaState::kPageBytes);
}

DirectMaps::~DirectMaps() = default;

DirectMaps::Found DirectMaps::find(const RemoteKey& key, uint64_t offset, uint64_t length, Access needed) {
  std::pair<const RemoteKey, KeyEntry>* e = last_;
  if (e == nullptr || !(e->first == key)) {
    auto it = keys_.find(key);
    if (it == keys_.end()) return Found{.unknown = true};
    e = &*it;
    last_ = e;
  }
  KeyEntry& entry = e->second;
  if (entry.state != KeyState::kGranted) return {};
  // The peer's checks (mem/registry.cc, validate_locked): the range inside the window,
  // overflow-safe, and the right. A failing one goes the usual way for the peer's answer.
  if (offset > key.length || length > key.length - offset || !grants(key.access, needed)) return {};
  if (entry.mapping->state->live.load(std::memory_order_acquire) != 1) {
    // Deregistered for good: the key goes the usual way from now on, and the pages are
    // let go once no granted key holds them.
    entry.state = KeyState::kRefused;
    entry.mapping.reset();
    return {};
  }
  return Found{.at = entry.mapping->base + key.offset + offset, .bytes = &entry.bytes, .grant = entry.grant};
}

std::optional<wire::KeyBytes> DirectMaps::ask(const RemoteKey& key) {
  if (keys_.size() >= kMaxKeys) return std::nullopt;
  wire::KeyBytes bytes = key.serialize();
  const auto parsed = RemoteKey::deserialize(bytes);
  const bool exact = parsed && *parsed == key;
  // One that is not exact is remembered as refused, so find() answers it from now on.
  const KeyEntry entry{.state = exact ? KeyState::kAsked : KeyState::kRefused, .mapping = nullptr, .bytes = bytes};
  if (!keys_.emplace(key, entry).second || !exact) {
    return std::nullopt;
  }
  return bytes;
}

bool DirectMaps::still_live() const {
  return last_ != nullptr && last_->second.mapping != nullptr &&
         last_->second.mapping->state->live.load(std::memory_order_acquire) == 1;
}

Result<std::shared_ptr<DirectMaps::Mapping>> DirectMaps::map(pid_t pid, const wire::MapFrame& f, const RemoteKey& key) {
  const uint64_t id = (static_cast<uint64_t>(key.region) << 32) | key.generation;
  if (auto it = mappings_.find(id); it != mappings_.end()) {
    if (auto mapped = it->second.lock(); mapped != nullptr && mapped->bytes == f.region_bytes) return mapped;
  }
  REMORA_ASSIGN_OR_RETURN(net::Fd fd, net::take_peer_fd(pid, static_cast<int>(f.fd)));
  REMORA_ASSIGN_OR_RETURN(const uint64_t size, net::sealed_memfd_size(fd.get(), "mapped region"));
  if (size < SharedArenaState::kPageBytes || size - SharedArenaState::kPageBytes != f.region_bytes ||
      f.region_bytes % SharedArenaState::kPageBytes != 0) {
    return Status(StatusCode::kProtocol, fmt::format("MAP GRANT of a {}-byte region in a memfd of {} bytes (the "
                                                     "region and one page were promised)",
                                                     f.region_bytes, size));
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return net::errno_status(errno, "mmap of the peer's region");
  auto m = std::make_shared<Mapping>();
  m->base = static_cast<std::byte*>(base);
  m->bytes = static_cast<size_t>(f.region_bytes);
  m->state = reinterpret_cast<const SharedArenaState*>(m->base + m->bytes);
  if (m->state->magic != SharedArenaState::kMagic || m->state->region != static_cast<uint32_t>(key.region) ||
      m->state->generation != key.generation) {
    return Status(StatusCode::kProtocol, "MAP GRANT of a memfd whose state page names another region");
  }
  mappings_[id] = m;
  return m;
}

Status DirectMaps::answer(pid_t pid, const wire::MapFrame& f, bool numbered) {
  // Keys this side asked about parse (they were serialized here), so one that does not
  // was never asked about.
  auto key = RemoteKey::deserialize(f.key);
  auto it = key ? keys_.find(*key) : keys_.end();
  if (it == keys_.end() || it->second.state != KeyState::kAsked) {
    return Status(StatusCode::kProtocol, "MAP answer for a key this side did not ask about");
  }
  KeyEntry& entry = it->second;
  entry.state = KeyState::kRefused;
  if (f.op == wire::MapOp::kRefuse) {
    last_refusal_ = fmt::format("the peer does not share the memory ({})", to_string(f.code));
    return Status::ok();
  }
  if (key->offset > f.region_bytes || key->length > f.region_bytes - key->offset) {
    return Status(StatusCode::kProtocol, "MAP GRANT of a region smaller than the key's window");
  }
  if (numbered != (f.grant != 0)) {
    return Status(StatusCode::kProtocol, numbered ? "MAP GRANT without the key's number (PLACED_SHORT negotiated)"
                                                  : "MAP GRANT with a key number, PLACED_SHORT not negotiated");
  }
  auto mapping = map(pid, f, *key);
  if (!mapping) {
    if (mapping.status().code() == StatusCode::kProtocol) return mapping.status();
    last_refusal_ = "this side could not map the peer's memory: " + mapping.status().message();
    return Status::ok();
  }
  entry.mapping = std::move(*mapping);
  entry.state = KeyState::kGranted;
  entry.grant = f.grant;
  return Status::ok();
}

Status DirectMaps::add_credits(uint64_t n) {
  if (n > wire::kMaxPlacedCredits - credits_) {
    return Status(StatusCode::kProtocol, fmt::format("MAP CREDIT of {} places on top of {}: more than {} held", n,
                                                     credits_, wire::kMaxPlacedCredits));
  }
  credits_ += n;
  return Status::ok();
}

uint32_t DirectGrants::grant(const RemoteKey& key) {
  static_assert(DirectMaps::kMaxKeys == wire::kMaxGrantNumber, "every granted key has a number");
  if (auto it = keys_.find(key); it != keys_.end()) return it->second;
  if (numbered_.size() >= DirectMaps::kMaxKeys) return 0;
  numbered_.push_back(key);
  const auto number = static_cast<uint32_t>(numbered_.size());
  keys_.emplace(key, number);
  return number;
}

Result<RemoteKey> DirectGrants::placed(const wire::PlacedFrame& f) {
  auto key = RemoteKey::deserialize(f.key);
  if (!key || !keys_.contains(*key)) return Status(StatusCode::kProtocol, "PLACED with a key this side never granted");
  return spend(*key, f.offset, f.length);
}

Result<RemoteKey> DirectGrants::placed(const wire::PlacedShortFrame& f) {
  // The decoder checked 1 <= grant <= kMaxGrantNumber.
  if (f.grant > numbered_.size()) {
    return Status(StatusCode::kProtocol,
                  fmt::format("PLACED_SHORT with key number {}, of {} granted", f.grant, numbered_.size()));
  }
  return spend(numbered_[f.grant - 1], f.offset, f.length);
}

Result<RemoteKey> DirectGrants::spend(const RemoteKey& key, uint64_t offset, uint64_t length) {
  // The decoder checked that offset + length does not wrap.
  if (offset > key.length || length > key.length - offset || !grants(key.access, Access::kRemoteWrite)) {
    return Status(StatusCode::kProtocol, fmt::format("PLACED of {} bytes at {} outside the key's {}-byte window, or "
                                                     "without its write right",
                                                     length, offset, key.length));
  }
  if (out_ == 0) return Status(StatusCode::kProtocol, "PLACED without a notification place (MAP CREDIT) left");
  --out_;
  ++handled_;
  return key;
}

}  // namespace remora::detail
