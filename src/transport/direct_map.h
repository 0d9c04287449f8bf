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
#include <vector>

#include "mem/shared_arena.h"
#include "remora/memory.h"
#include "remora/status.h"
#include "wire/frame.h"

namespace remora::detail {

class DirectMaps {
 public:
  /// Keys remembered at most (granted, asked or refused); later new keys go the usual way.
  static constexpr size_t kMaxKeys = 4096;
  struct KeyHash {
    size_t operator()(const RemoteKey& k) const noexcept;
  };

  DirectMaps() = default;
  DirectMaps(const DirectMaps&) = delete;
  DirectMaps& operator=(const DirectMaps&) = delete;
  ~DirectMaps();

  /// What find() knows of a key.
  struct Found {
    std::byte* at = nullptr;  ///< where the range is in this process; null: go the usual way
    bool unknown = false;     ///< never seen: ask() about it (the usual way meanwhile)
    const wire::KeyBytes* bytes = nullptr;  ///< with `at`: the key as the peer granted it (for PLACED)
    uint32_t grant = 0;  ///< with `at`: the number the peer's GRANT gave it (PLACED_SHORT); 0 if none
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
  /// descriptor is taken from process `pid`; with `numbered` (kCapPlacedShort both
  /// ways) it names the key's number, without it none. kProtocol when the answer is
  /// for a key this side did not ask about, its number is missing or not expected, or
  /// its memfd is not what GRANT promises; other errors (the kernel's refusal to hand
  /// over the descriptor) only keep the key off the mapping.
  Status answer(pid_t pid, const wire::MapFrame& f, bool numbered);

  /// Why the peer or the kernel last kept a key off the mapping ("" if neither did).
  const std::string& last_refusal() const noexcept { return last_refusal_; }

  /// Places in the peer's notification queue this side holds for PLACED frames (one
  /// per notified put through a mapping). The peer's MAP CREDIT adds them; kProtocol
  /// past kMaxPlacedCredits.
  Status add_credits(uint64_t n);
  bool has_credit() const noexcept { return credits_ > 0; }
  void spend_credit() noexcept { --credits_; }

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
    wire::KeyBytes bytes{};  // as asked about (and granted)
    uint32_t grant = 0;      // the GRANT's number (0: PLACED frames name the key whole)
  };
  Result<std::shared_ptr<Mapping>> map(pid_t pid, const wire::MapFrame& f, const RemoteKey& key);

  // By the whole key: the peer authenticated exactly that key, and only an equal one
  // (every field) is used through its mapping.
  std::unordered_map<RemoteKey, KeyEntry, KeyHash> keys_;
  std::unordered_map<uint64_t, std::weak_ptr<Mapping>> mappings_;  // by (region << 32 | generation)
  std::pair<const RemoteKey, KeyEntry>* last_ = nullptr;           // find()'s last key seen
  std::string last_refusal_;
  uint64_t credits_ = 0;
};

/// The target's side: the keys this side granted the peer (by value: a PLACED frame
/// names one, and is checked against it even after the region is deregistered, as the
/// put it reports was made while the region was registered), and the places in this
/// side's notification queue the peer holds for PLACED frames. Under the progress lock.
class DirectGrants {
 public:
  /// Places the peer is given at most, and the least worth a CREDIT frame (half).
  static constexpr uint64_t kCredits = 64;

  /// Remembers `key` as granted: its number (1 to kMaxKeys, the same for the same
  /// key), which PLACED_SHORT frames name it by; 0 when kMaxKeys keys are (refuse it then).
  uint32_t grant(const RemoteKey& key);
  bool any() const noexcept { return !keys_.empty(); }
  /// A PLACED frame spends one of the peer's places: the key it names (granted, its
  /// window holding the range, with the write right) on success; kProtocol otherwise,
  /// as an honest peer checks all of it first.
  Result<RemoteKey> placed(const wire::PlacedFrame& f);
  /// The same for the key numbered `f.grant`.
  Result<RemoteKey> placed(const wire::PlacedShortFrame& f);
  /// PLACED frames handled since the endpoint began (the count a MAP ACK carries).
  uint64_t handled() const noexcept { return handled_; }
  /// Handled frames the peer was not told of yet (by an ACK or a PLACED_SHORT).
  bool ack_owed() const noexcept { return handled_ != told_; }
  /// The count to tell the peer now; it is told from then on.
  uint64_t tell() noexcept { return told_ = handled_; }
  /// Places the peer holds now.
  uint64_t credits_out() const noexcept { return out_; }
  void credited(uint64_t n) noexcept { out_ += n; }

 private:
  /// `key` (granted) spends a place on `length` bytes at `offset` of its window.
  Result<RemoteKey> spend(const RemoteKey& key, uint64_t offset, uint64_t length);

  std::unordered_map<RemoteKey, uint32_t, DirectMaps::KeyHash> keys_;  // its number
  std::vector<RemoteKey> numbered_;                                    // by number - 1
  uint64_t out_ = 0;
  uint64_t handled_ = 0;
  uint64_t told_ = 0;
};

}  // namespace remora::detail
