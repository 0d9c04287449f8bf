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

size_t DirectMaps::KeyHash::operator()(const wire::KeyBytes& k) const noexcept {
  // A fold of all 40 bytes, eight at a time: keys that differ anywhere land apart.
  uint64_t h = 0xcbf29ce484222325;
  for (size_t i = 0; i < k.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, k.data() + i, 8);
    h = (h ^ w) * 0x100000001b3;
    h ^= h >> 29;
  }
  return static_cast<size_t>(h);
}

DirectMaps::Mapping::~Mapping() {
  if (base != nullptr) ::munmap(base, bytes + SharedArenaState::kPageBytes);
}

DirectMaps::~DirectMaps() = default;

std::byte* DirectMaps::find(const wire::KeyBytes& key, uint64_t offset, uint64_t length, Access needed, bool* ask) {
  *ask = false;
  std::pair<const wire::KeyBytes, KeyEntry>* e = last_;
  if (e == nullptr || e->first != key) {
    auto it = keys_.find(key);
    if (it == keys_.end()) {
      if (keys_.size() < kMaxKeys) {
        keys_.emplace(key, KeyEntry{});
        *ask = true;
      }
      return nullptr;
    }
    e = &*it;
  }
  KeyEntry& entry = e->second;
  if (entry.state != KeyState::kGranted) return nullptr;
  last_ = e;
  const RemoteKey& k = entry.key;
  // The peer's checks (mem/registry.cc, validate_locked): the range inside the window,
  // overflow-safe, and the right. A failing one goes the usual way for the peer's answer.
  if (offset > k.length || length > k.length - offset || !grants(k.access, needed)) return nullptr;
  if (entry.mapping->state->live.load(std::memory_order_acquire) != 1) {
    // Deregistered for good: the key goes the usual way from now on, and the pages are
    // let go once no granted key holds them.
    entry.state = KeyState::kRefused;
    entry.mapping.reset();
    last_ = nullptr;
    return nullptr;
  }
  return entry.mapping->base + k.offset + offset;
}

bool DirectMaps::still_live(const wire::KeyBytes& key) const {
  auto it = keys_.find(key);
  return it != keys_.end() && it->second.mapping != nullptr &&
         it->second.mapping->state->live.load(std::memory_order_acquire) == 1;
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

Status DirectMaps::answer(pid_t pid, const wire::MapFrame& f) {
  auto it = keys_.find(f.key);
  if (it == keys_.end() || it->second.state != KeyState::kAsked) {
    return Status(StatusCode::kProtocol, "MAP answer for a key this side did not ask about");
  }
  KeyEntry& entry = it->second;
  entry.state = KeyState::kRefused;
  if (f.op == wire::MapOp::kRefuse) {
    last_refusal_ = fmt::format("the peer does not share the memory ({})", to_string(f.code));
    return Status::ok();
  }
  auto key = RemoteKey::deserialize(f.key);
  if (!key) return Status(StatusCode::kProtocol, "MAP GRANT for a key that does not parse");
  if (key->offset > f.region_bytes || key->length > f.region_bytes - key->offset) {
    return Status(StatusCode::kProtocol, "MAP GRANT of a region smaller than the key's window");
  }
  auto mapping = map(pid, f, *key);
  if (!mapping) {
    if (mapping.status().code() == StatusCode::kProtocol) return mapping.status();
    last_refusal_ = "this side could not map the peer's memory: " + mapping.status().message();
    return Status::ok();
  }
  entry.key = *key;
  entry.mapping = std::move(*mapping);
  entry.state = KeyState::kGranted;
  return Status::ok();
}

}  // namespace remora::detail
