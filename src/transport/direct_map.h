// transport/direct_map.h — puts and gets through a mapping of a same-host peer's memory
// (docs/protocol.md, "Direct mappings"). The first time this side uses a key of the
// peer, the endpoint asks the peer for the memory behind it (MAP REQUEST); the peer
// answers with a memfd of its process when the region is one it shares (a pool arena of
// small buffers, mem/shared_arena.h) and the key authenticates. This side takes that
// memfd (pidfd_getfd, the permission same-host pulls and the channel already need),
// checks it, maps it, and from then on puts and gets with that key are a memcpy here,
// complete when they return, while the region's state page says it is registered.
//
// The key's tag is checked by the peer once per key: a key the peer granted is kept
// whole (all 40 bytes), and only an identical key is used directly. Windows, rights and
// ranges are checked here as the peer would; anything that does not pass goes the
// usual way and gets the peer's answer. Under the progress lock.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "mem/shared_arena.h"
#include "remora/memory.h"
#include "remora/status.h"
#include "wire/frame.h"

namespace remora::detail {

class DirectMaps {
 public:
  /// Keys remembered at most (granted, asked or refused); later new keys go the usual way.
  static constexpr size_t kMaxKeys = 4096;

  DirectMaps() = default;
  DirectMaps(const DirectMaps&) = delete;
  DirectMaps& operator=(const DirectMaps&) = delete;
  ~DirectMaps();

  /// What find() knows of a key.
  struct Found {
    std::byte* at = nullptr;  ///< where the range is in this process; null: go the usual way
    bool unknown = false;     ///< never seen: ask() about it (the usual way meanwhile)
  };
  /// Where [offset, offset + length) of `key`'s window is in this process, when the key
  /// was granted, the range lies in its window, the key grants `needed` and the region
  /// is still registered. A key seen before and not granted (asked, refused) costs one
  /// lookup by its fields, nothing more.
  Found find(const RemoteKey& key, uint64_t offset, uint64_t length, Access needed);
  /// Notes `key` as asked about, and returns the bytes for its MAP REQUEST; nothing when
  /// kMaxKeys keys are remembered, or for a key its bytes do not describe exactly (one
  /// the peer could only refuse, and whose answer would name a different key).
  std::optional<wire::KeyBytes> ask(const RemoteKey& key);
  /// The region of the key find() last returned memory for is still registered (read
  /// after a get's copy: a get that raced a deregistration goes the usual way instead).
  bool still_live() const;

  /// The peer's answer to a REQUEST this side sent (op GRANT or REFUSE). A GRANT's
  /// descriptor is taken from process `pid`. kProtocol when the answer is for a key
  /// this side did not ask about or its memfd is not what GRANT promises; other errors
  /// (the kernel's refusal to hand over the descriptor) only keep the key off the
  /// mapping.
  Status answer(pid_t pid, const wire::MapFrame& f);

  /// Why the peer or the kernel last kept a key off the mapping ("" if neither did).
  const std::string& last_refusal() const noexcept { return last_refusal_; }

 private:
  struct Mapping {
    std::byte* base = nullptr;
    size_t bytes = 0;  ///< the region's (the state page follows)
    const SharedArenaState* state = nullptr;
    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping();
  };
  enum class KeyState : uint8_t { kAsked, kRefused, kGranted };
  struct KeyEntry {
    KeyState state = KeyState::kAsked;
    std::shared_ptr<Mapping> mapping;
  };
  struct KeyHash {
    size_t operator()(const RemoteKey& k) const noexcept;
  };
  Result<std::shared_ptr<Mapping>> map(pid_t pid, const wire::MapFrame& f, const RemoteKey& key);

  // By the whole key: the peer authenticated exactly that key, and only an equal one
  // (every field) is used through its mapping.
  std::unordered_map<RemoteKey, KeyEntry, KeyHash> keys_;
  std::unordered_map<uint64_t, std::weak_ptr<Mapping>> mappings_;  // by (region << 32 | generation)
  std::pair<const RemoteKey, KeyEntry>* last_ = nullptr;           // find()'s last key seen
  std::string last_refusal_;
};

}  // namespace remora::detail
