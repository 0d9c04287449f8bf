// direct_map_test.cc — the initiator's side of direct mappings (transport/direct_map.h):
// what it accepts from a peer's MAP answer and what it then maps. The "peer" is this
// process (pidfd_getfd of one's own descriptors is allowed), so each GRANT names a
// descriptor made here: a good shared arena, and each way a hostile one can be wrong.
#include "transport/direct_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "mem/shared_arena.h"
#include "net/socket.h"

namespace remora::detail {
namespace {

constexpr size_t kRegion = 64 << 10;

/// A memfd laid out as a pool's shared arena: `region` bytes, then the state page.
struct Arena {
  net::Fd fd;
  std::byte* base = nullptr;
  size_t bytes = 0;
  SharedArenaState* state = nullptr;

  Arena(size_t region, size_t file_bytes, bool sealed, RemoteKey key) : bytes(file_bytes) {
    fd.reset(memfd_create("remora-test-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(file_bytes)), 0);
    if (sealed) {
      EXPECT_EQ(fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    }
    if (file_bytes == 0) return;  // nothing to map
    base = static_cast<std::byte*>(mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
    EXPECT_NE(base, MAP_FAILED);
    if (file_bytes >= region + SharedArenaState::kPageBytes) {
      state = new (base + region) SharedArenaState{};
      state->region = static_cast<uint32_t>(key.region);
      state->generation = key.generation;
      state->live.store(1);
    }
  }
  ~Arena() {
    if (base != nullptr) munmap(base, bytes);
  }
};

RemoteKey window(uint64_t offset, uint64_t length, Access access) {
  return RemoteKey{.region = static_cast<RegionId>(3),
                   .generation = 5,
                   .secret = 0x1234,
                   .offset = offset,
                   .length = length,
                   .access = access,
                   .kind = MemoryKind::kHost};
}

/// A GRANT of descriptor `fd` (of this process) for `key`, a region of `region` bytes.
wire::MapFrame grant(int fd, const RemoteKey& key, size_t region = kRegion) {
  return wire::MapFrame{
      .op = wire::MapOp::kGrant, .fd = static_cast<uint32_t>(fd), .region_bytes = region, .key = key.serialize()};
}
wire::MapFrame grant(const Arena& a, const RemoteKey& key, size_t region = kRegion) {
  return grant(a.fd.get(), key, region);
}

/// Asks for `key` (find() of a key never seen, then ask()) and checks the REQUEST's bytes.
void ask(DirectMaps& maps, const RemoteKey& key) {
  const DirectMaps::Found found = maps.find(key, 0, 0, Access::kNone);
  EXPECT_EQ(found.at, nullptr);
  EXPECT_TRUE(found.unknown);
  EXPECT_EQ(maps.ask(key), std::optional(key.serialize()));
  EXPECT_FALSE(maps.find(key, 0, 0, Access::kNone).unknown) << "asked about once";
}

/// Where find() puts [offset, offset + length) of `key`'s window (null: not mapped).
std::byte* at(DirectMaps& maps, const RemoteKey& key, uint64_t offset, uint64_t length, Access needed) {
  return maps.find(key, offset, length, needed).at;
}

TEST(DirectMaps, AGrantedKeyIsMappedWithinItsWindowAndRights) {
  const RemoteKey key = window(4096, 8192, Access::kRemoteRead | Access::kRemoteWrite);
  Arena arena(kRegion, kRegion + SharedArenaState::kPageBytes, true, key);
  DirectMaps maps;
  ask(maps, key);
  ASSERT_TRUE(maps.answer(getpid(), grant(arena, key), false).is_ok());

  const DirectMaps::Found found = maps.find(key, 100, 8, Access::kRemoteWrite);
  EXPECT_FALSE(found.unknown);
  ASSERT_NE(found.at, nullptr);
  // The mapping is of the same pages: a byte written through it is the arena's.
  found.at[0] = std::byte{0x5A};
  EXPECT_EQ(arena.base[4096 + 100], std::byte{0x5A});
  EXPECT_TRUE(maps.still_live());

  // Outside the window (overflow-safe) or without the right: not through the mapping.
  EXPECT_EQ(at(maps, key, 8192 - 7, 8, Access::kRemoteRead), nullptr);
  EXPECT_EQ(at(maps, key, ~uint64_t{0}, 2, Access::kRemoteRead), nullptr);
  EXPECT_EQ(at(maps, key, 0, 8, Access::kRemoteAtomic), nullptr);
  EXPECT_NE(at(maps, key, 8192 - 8, 8, Access::kRemoteRead), nullptr);
  EXPECT_NE(at(maps, key, 8192, 0, Access::kRemoteRead), nullptr);

  // The owner deregistered: nothing through the mapping any more.
  arena.state->live.store(0);
  EXPECT_EQ(at(maps, key, 0, 8, Access::kRemoteRead), nullptr);
  EXPECT_FALSE(maps.still_live());
}

TEST(DirectMaps, ANumberedGrantGivesTheKeysNumberAndOnlyWhereNegotiated) {
  const RemoteKey key = window(0, 4096, Access::kRemoteWrite);
  Arena arena(kRegion, kRegion + SharedArenaState::kPageBytes, true, key);
  wire::MapFrame numbered = grant(arena, key);
  numbered.grant = 7;
  {
    DirectMaps maps;
    ask(maps, key);
    ASSERT_TRUE(maps.answer(getpid(), numbered, true).is_ok());
    const DirectMaps::Found found = maps.find(key, 0, 8, Access::kRemoteWrite);
    ASSERT_NE(found.at, nullptr);
    EXPECT_EQ(found.grant, 7u) << "PLACED_SHORT frames name the key by it";
  }
  {
    DirectMaps maps;
    ask(maps, key);
    EXPECT_EQ(maps.answer(getpid(), grant(arena, key), true).code(), StatusCode::kProtocol) << "no number";
    EXPECT_EQ(maps.find(key, 0, 8, Access::kRemoteWrite).at, nullptr);
  }
  {
    DirectMaps maps;
    ask(maps, key);
    EXPECT_EQ(maps.answer(getpid(), numbered, false).code(), StatusCode::kProtocol) << "a number not negotiated";
  }
  DirectMaps maps;
  ask(maps, key);
  ASSERT_TRUE(maps.answer(getpid(), grant(arena, key), false).is_ok());
  EXPECT_EQ(maps.find(key, 0, 8, Access::kRemoteWrite).grant, 0u) << "PLACED frames name the key whole";
}

TEST(DirectMaps, AnotherKeyIsNotTheGrantedOne) {
  const RemoteKey key = window(0, 4096, Access::kRemoteRead);
  Arena arena(kRegion, kRegion + SharedArenaState::kPageBytes, true, key);
  DirectMaps maps;
  ask(maps, key);
  ASSERT_TRUE(maps.answer(getpid(), grant(arena, key), false).is_ok());
  RemoteKey wider = key;
  wider.length = kRegion;  // a window the peer never authenticated
  const DirectMaps::Found found = maps.find(wider, 8192, 8, Access::kRemoteRead);
  EXPECT_EQ(found.at, nullptr);
  EXPECT_TRUE(found.unknown) << "a different key is asked about on its own";
  RemoteKey other_secret = key;
  other_secret.secret ^= 1;  // every field counts, not only the window
  EXPECT_TRUE(maps.find(other_secret, 0, 8, Access::kRemoteRead).unknown);
}

TEST(DirectMaps, ARefusalKeepsTheKeyOffTheMappingAndSaysWhy) {
  const RemoteKey key = window(0, 4096, Access::kRemoteRead);
  DirectMaps maps;
  ask(maps, key);
  ASSERT_TRUE(
      maps.answer(getpid(),
                  wire::MapFrame{.op = wire::MapOp::kRefuse, .code = StatusCode::kUnsupported, .key = key.serialize()},
                  false)
          .is_ok());
  const DirectMaps::Found found = maps.find(key, 0, 8, Access::kRemoteRead);
  EXPECT_EQ(found.at, nullptr);
  EXPECT_FALSE(found.unknown) << "a refused key is not asked about again";
  EXPECT_NE(maps.last_refusal().find("does not share"), std::string::npos) << maps.last_refusal();
}

TEST(DirectMaps, AnswersNobodyAskedForAreProtocolErrors) {
  const RemoteKey key = window(0, 4096, Access::kRemoteRead);
  Arena arena(kRegion, kRegion + SharedArenaState::kPageBytes, true, key);
  DirectMaps maps;
  EXPECT_EQ(maps.answer(getpid(), grant(arena, key), false).code(), StatusCode::kProtocol);
  ask(maps, key);
  ASSERT_TRUE(maps.answer(getpid(), grant(arena, key), false).is_ok());
  EXPECT_EQ(maps.answer(getpid(), grant(arena, key), false).code(), StatusCode::kProtocol) << "a second answer";
  wire::MapFrame garbage{.op = wire::MapOp::kRefuse, .code = StatusCode::kUnsupported, .key = key.serialize()};
  garbage.key[0] = std::byte{0xEE};  // a version no key has
  EXPECT_EQ(maps.answer(getpid(), garbage, false).code(), StatusCode::kProtocol) << "bytes that are no key";
}

TEST(DirectMaps, AGrantOfTheWrongMemoryIsAProtocolError) {
  const RemoteKey key = window(0, 4096, Access::kRemoteRead);
  RemoteKey other = key;
  other.generation = 6;
  struct Case {
    const char* name;
    size_t file_bytes;
    bool sealed;
    RemoteKey state_of;
    size_t region_bytes;
  };
  const Case cases[] = {
      {"not sealed", kRegion + SharedArenaState::kPageBytes, false, key, kRegion},
      {"no room for the state page", kRegion, true, key, kRegion},
      {"bigger than promised", kRegion + 2 * SharedArenaState::kPageBytes, true, key, kRegion},
      {"state page of another registration", kRegion + SharedArenaState::kPageBytes, true, other, kRegion},
      {"a region smaller than the key's window", 4096 + SharedArenaState::kPageBytes, true, key, 2048},
      // region_bytes + 4096 wraps to the empty memfd's size.
      {"a size that wraps around", 0, true, key, ~size_t{0} - SharedArenaState::kPageBytes + 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Arena arena(c.region_bytes, c.file_bytes, c.sealed, c.state_of);
    DirectMaps maps;
    ask(maps, key);
    EXPECT_EQ(maps.answer(getpid(), grant(arena, key, c.region_bytes), false).code(), StatusCode::kProtocol);
    EXPECT_EQ(at(maps, key, 0, 8, Access::kRemoteRead), nullptr);
  }
  // Not a memfd at all: a pipe.
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  net::Fd r(p[0]), w(p[1]);
  DirectMaps maps;
  ask(maps, key);
  EXPECT_EQ(maps.answer(getpid(), grant(r.get(), key), false).code(), StatusCode::kProtocol);
}

TEST(DirectMaps, ADescriptorTheKernelWillNotHandOverOnlyKeepsTheKeyOff) {
  const RemoteKey key = window(0, 4096, Access::kRemoteRead);
  DirectMaps maps;
  ask(maps, key);
  // A descriptor number this process does not have: pidfd_getfd fails with EBADF.
  ASSERT_TRUE(maps.answer(getpid(), grant(0x7FFF0000, key), false).is_ok());
  EXPECT_NE(maps.last_refusal().find("could not map"), std::string::npos) << maps.last_refusal();
  EXPECT_EQ(at(maps, key, 0, 8, Access::kRemoteRead), nullptr);
}

TEST(DirectMaps, AKeyItsBytesDoNotDescribeIsNeverAskedAbout) {
  // Access bits no version knows: serialized as they are, but they do not parse, so the
  // peer could only refuse it, naming bytes that are not this key.
  RemoteKey key = window(0, 4096, Access::kRemoteRead);
  key.access = static_cast<Access>(0x80);
  DirectMaps maps;
  EXPECT_TRUE(maps.find(key, 0, 8, Access::kRemoteRead).unknown);
  EXPECT_EQ(maps.ask(key), std::nullopt);
  EXPECT_FALSE(maps.find(key, 0, 8, Access::kRemoteRead).unknown) << "remembered as refused";
}

TEST(DirectMaps, NoMoreThanMaxKeysAreRemembered) {
  DirectMaps maps;
  for (uint64_t i = 0; i < DirectMaps::kMaxKeys; ++i) {
    ASSERT_TRUE(maps.ask(window(i * 8, 8, Access::kRemoteRead)).has_value()) << i;
  }
  const RemoteKey one_more = window(DirectMaps::kMaxKeys * 8, 8, Access::kRemoteRead);
  EXPECT_EQ(maps.ask(one_more), std::nullopt);
  EXPECT_TRUE(maps.find(one_more, 0, 8, Access::kRemoteRead).unknown);
}

TEST(DirectMaps, CreditsAddUpToTheBoundAndNoFurther) {
  DirectMaps maps;
  EXPECT_FALSE(maps.has_credit());
  ASSERT_TRUE(maps.add_credits(64).is_ok());
  EXPECT_TRUE(maps.has_credit());
  for (int i = 0; i < 64; ++i) maps.spend_credit();
  EXPECT_FALSE(maps.has_credit());
  ASSERT_TRUE(maps.add_credits(wire::kMaxPlacedCredits).is_ok());
  EXPECT_EQ(maps.add_credits(1).code(), StatusCode::kProtocol);
}

/// A PLACED frame of `key` (as the initiator sends it).
wire::PlacedFrame placed(const RemoteKey& key, uint64_t offset, uint64_t length) {
  return wire::PlacedFrame{.key = key.serialize(), .offset = offset, .length = length, .notify = 9};
}

TEST(DirectGrants, APlacedFrameMustNameAGrantedKeyInsideItsWindowWithAPlaceLeft) {
  const RemoteKey key = window(4096, 8192, Access::kRemoteWrite);
  DirectGrants grants;
  EXPECT_FALSE(grants.any());
  ASSERT_EQ(grants.grant(key), 1u);
  EXPECT_TRUE(grants.any());
  EXPECT_EQ(grants.placed(placed(key, 0, 8)).status().code(), StatusCode::kProtocol) << "no place given yet";
  grants.credited(2);
  auto got = grants.placed(placed(key, 8192 - 8, 8));
  ASSERT_TRUE(got) << got.status().to_string();
  EXPECT_EQ(*got, key);
  EXPECT_EQ(grants.handled(), 1u);
  EXPECT_EQ(grants.credits_out(), 1u);

  RemoteKey other = key;
  other.secret ^= 1;
  EXPECT_EQ(grants.placed(placed(other, 0, 8)).status().code(), StatusCode::kProtocol) << "never granted";
  EXPECT_EQ(grants.placed(placed(key, 8192 - 7, 8)).status().code(), StatusCode::kProtocol) << "past the window";
  EXPECT_EQ(grants.placed(placed(key, 8193, 0)).status().code(), StatusCode::kProtocol) << "past the window";
  const RemoteKey read_only = window(0, 4096, Access::kRemoteRead);
  ASSERT_EQ(grants.grant(read_only), 2u);
  EXPECT_EQ(grants.placed(placed(read_only, 0, 8)).status().code(), StatusCode::kProtocol) << "no write right";
  wire::PlacedFrame garbage = placed(key, 0, 8);
  garbage.key[0] = std::byte{0xEE};
  EXPECT_EQ(grants.placed(garbage).status().code(), StatusCode::kProtocol) << "bytes that are no key";
  EXPECT_EQ(grants.credits_out(), 1u) << "a refused frame spends no place";
  ASSERT_TRUE(grants.placed(placed(key, 8192, 0)));  // empty, at the window's end
  EXPECT_EQ(grants.handled(), 2u);
}

TEST(DirectGrants, NoMoreThanMaxKeysAreGrantedEachWithItsOwnNumber) {
  DirectGrants grants;
  for (uint64_t i = 0; i < DirectMaps::kMaxKeys; ++i) {
    ASSERT_EQ(grants.grant(window(i * 8, 8, Access::kRemoteWrite)), i + 1);
  }
  EXPECT_EQ(grants.grant(window(0, 8, Access::kRemoteWrite)), 1u) << "one granted already keeps its number";
  EXPECT_EQ(grants.grant(window(DirectMaps::kMaxKeys * 8, 8, Access::kRemoteWrite)), 0u);
}

/// A PLACED_SHORT frame naming key number `grant`, telling of `handled` frames.
wire::PlacedShortFrame placed_short(uint32_t grant, uint64_t offset, uint32_t length, uint64_t handled = 0) {
  return wire::PlacedShortFrame{.grant = grant, .length = length, .offset = offset, .notify = 9, .handled = handled};
}

TEST(DirectGrants, APlacedShortFrameNamesAGrantedKeyByItsNumber) {
  const RemoteKey first = window(4096, 8192, Access::kRemoteWrite);
  const RemoteKey read_only = window(0, 4096, Access::kRemoteRead);
  DirectGrants grants;
  ASSERT_EQ(grants.grant(first), 1u);
  ASSERT_EQ(grants.grant(read_only), 2u);
  grants.credited(3);
  auto got = grants.placed(placed_short(1, 8192 - 8, 8));
  ASSERT_TRUE(got) << got.status().to_string();
  EXPECT_EQ(*got, first);
  EXPECT_EQ(grants.handled(), 1u);
  EXPECT_EQ(grants.placed(placed_short(3, 0, 8)).status().code(), StatusCode::kProtocol) << "never given";
  EXPECT_EQ(grants.placed(placed_short(1, 8192 - 7, 8)).status().code(), StatusCode::kProtocol) << "past the window";
  EXPECT_EQ(grants.placed(placed_short(2, 0, 8)).status().code(), StatusCode::kProtocol) << "no write right";
  EXPECT_EQ(grants.credits_out(), 2u) << "a refused frame spends no place";
  ASSERT_TRUE(grants.placed(placed_short(1, 0, 0)));
  ASSERT_TRUE(grants.placed(placed(first, 0, 8))) << "the long form names the same key whole";
  EXPECT_EQ(grants.placed(placed_short(1, 0, 8)).status().code(), StatusCode::kProtocol) << "no place left";
  EXPECT_EQ(grants.handled(), 3u);
}

TEST(DirectGrants, TheAckCountIsOwedUntilTold) {
  const RemoteKey key = window(0, 4096, Access::kRemoteWrite);
  DirectGrants grants;
  ASSERT_EQ(grants.grant(key), 1u);
  grants.credited(4);
  EXPECT_FALSE(grants.ack_owed());
  ASSERT_TRUE(grants.placed(placed_short(1, 0, 8)));
  ASSERT_TRUE(grants.placed(placed_short(1, 8, 8)));
  EXPECT_TRUE(grants.ack_owed());
  EXPECT_EQ(grants.tell(), 2u);
  EXPECT_FALSE(grants.ack_owed()) << "told, by an ACK or a PLACED_SHORT";
  ASSERT_TRUE(grants.placed(placed(key, 16, 8)));
  EXPECT_TRUE(grants.ack_owed());
  EXPECT_EQ(grants.tell(), 3u);
}

}  // namespace
}  // namespace remora::detail
