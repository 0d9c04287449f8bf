// Tests for MemoryRegistry and Region: key issue, revocation, slot reuse and the
// overflow-safe validation of a peer's access in resolve().
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "mem/mem_test_util.h"
#include "mem/region_access.h"
#include "remora/memory.h"

namespace remora {
namespace {

constexpr Access kRw = Access::kLocalWrite | Access::kRemoteRead | Access::kRemoteWrite;
constexpr size_t kSize = 8192;

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() : memory_(kSize) {}
  Region register_all(Access access = kRw) {
    auto r = registry_.register_memory(memory_.data(), kSize, access);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return std::move(r).value();
  }
  StatusCode resolve_code(const RemoteKey& key, uint64_t offset, uint64_t len, Access needed) {
    return detail::resolve(registry_, key, offset, len, needed).status().code();
  }

  MemoryRegistry registry_{PinMode::kTry};
  testing::Mapping memory_;
};

TEST_F(RegistryTest, RegionDescribesTheRegisteredRange) {
  Region region = register_all();
  EXPECT_TRUE(region.valid());
  EXPECT_EQ(region.data(), memory_.data());
  EXPECT_EQ(region.size(), kSize);
  EXPECT_EQ(region.access(), kRw);
  EXPECT_EQ(region.kind(), MemoryKind::kHost);
  EXPECT_EQ(region.span().size(), kSize);

  RemoteKey key = region.remote_key();
  EXPECT_EQ(key.region, region.id());
  EXPECT_EQ(key.offset, 0u);
  EXPECT_EQ(key.length, kSize);
  EXPECT_EQ(key.access, Access::kRemoteRead | Access::kRemoteWrite);  // no local rights in a key
  EXPECT_EQ(key.kind, MemoryKind::kHost);
}

TEST_F(RegistryTest, ResolveReturnsTheAddressInsideTheWindow) {
  Region region = register_all();
  auto whole = detail::resolve(registry_, region.remote_key(), 100, 50, Access::kRemoteWrite);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(whole->address, memory_.data() + 100);
  EXPECT_EQ(whole->length, 50u);

  auto window = region.remote_key(1024, 512, Access::kRemoteRead);
  ASSERT_TRUE(window.is_ok()) << window.status().to_string();
  auto inside = detail::resolve(registry_, *window, 10, 20, Access::kRemoteRead);
  ASSERT_TRUE(inside.is_ok());
  EXPECT_EQ(inside->address, memory_.data() + 1034);
  // The window's last byte, and an empty access at its end, are fine.
  auto last = detail::resolve(registry_, *window, 511, 1, Access::kRemoteRead);
  ASSERT_TRUE(last.is_ok());
  EXPECT_EQ(last->address, memory_.data() + 1024 + 511);
  EXPECT_TRUE(detail::resolve(registry_, *window, 512, 0, Access::kRemoteRead).is_ok());
  // Write through the resolved address lands in the region.
  inside->address[0] = std::byte{0x5A};
  EXPECT_EQ(memory_.data()[1034], std::byte{0x5A});
}

TEST_F(RegistryTest, WindowNarrowerThanRegionBoundsAccess) {
  Region region = register_all();
  RemoteKey key = region.remote_key(1024, 512, Access::kRemoteRead).value();
  EXPECT_EQ(resolve_code(key, 500, 13, Access::kRemoteRead), StatusCode::kOutOfRange);
  EXPECT_EQ(resolve_code(key, 513, 0, Access::kRemoteRead), StatusCode::kOutOfRange);
  EXPECT_EQ(resolve_code(key, 0, 513, Access::kRemoteRead), StatusCode::kOutOfRange);
  // The region itself has room, but the key does not grant it.
  EXPECT_EQ(resolve_code(key, 600, 100, Access::kRemoteRead), StatusCode::kOutOfRange);
}

TEST_F(RegistryTest, OverflowingOffsetsAreOutOfRange) {
  Region region = register_all();
  RemoteKey key = region.remote_key();
  EXPECT_EQ(resolve_code(key, UINT64_MAX - 1, 4, Access::kRemoteRead), StatusCode::kOutOfRange);
  EXPECT_EQ(resolve_code(key, 1, UINT64_MAX, Access::kRemoteRead), StatusCode::kOutOfRange);
  EXPECT_EQ(resolve_code(key, UINT64_MAX, UINT64_MAX, Access::kRemoteRead), StatusCode::kOutOfRange);
  EXPECT_EQ(resolve_code(key, kSize, 1, Access::kRemoteRead), StatusCode::kOutOfRange);

  // A key whose window was widened past the region, or made to wrap, no longer
  // authenticates (its tag covers the window): invalid, not out of range, so the
  // refusal tells the forger nothing about the region's size.
  RemoteKey wide = key;
  wide.length = kSize + 1;
  EXPECT_EQ(resolve_code(wide, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
  RemoteKey wrapped = key;
  wrapped.offset = UINT64_MAX - 1;
  wrapped.length = 4;  // offset + length wraps to 2, which a naive check would accept
  EXPECT_EQ(resolve_code(wrapped, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
  RemoteKey shifted = key;
  shifted.offset = kSize;
  shifted.length = UINT64_MAX - kSize + 1;  // sum wraps to 0
  EXPECT_EQ(resolve_code(shifted, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
}

// Every field of a key is authenticated before any other check: tampering with any
// one of them gives kInvalidKey with the same message whatever the access asked for,
// so no refusal reveals the region's size, rights or state to a forger.
TEST_F(RegistryTest, TamperingWithAnyFieldIsInvalidAndRevealsNothing) {
  Region region = register_all();
  const RemoteKey key = region.remote_key(1024, 2048, Access::kRemoteRead).value();
  struct Tamper {
    const char* field;
    RemoteKey key;
  };
  std::vector<Tamper> cases;
  auto add = [&](const char* field, auto&& change) {
    RemoteKey k = key;
    change(k);
    cases.push_back({field, k});
  };
  add("offset -1", [](RemoteKey& k) { k.offset -= 1; });
  add("offset +1", [](RemoteKey& k) { k.offset += 1; });
  add("offset to 0, length to the region", [](RemoteKey& k) { k.offset = 0, k.length = kSize; });
  add("length +1", [](RemoteKey& k) { k.length += 1; });
  add("length -1", [](RemoteKey& k) { k.length -= 1; });
  add("length far beyond the region", [](RemoteKey& k) { k.length = uint64_t{1} << 40; });
  add("rights widened", [](RemoteKey& k) { k.access = Access::kRemoteRead | Access::kRemoteWrite; });
  add("rights changed", [](RemoteKey& k) { k.access = Access::kRemoteWrite; });
  add("generation", [](RemoteKey& k) { k.generation += 1; });
  add("kind", [](RemoteKey& k) { k.kind = MemoryKind::kCuda; });
  add("secret", [](RemoteKey& k) { k.secret ^= uint64_t{1} << 63; });
  std::string first_message;
  for (const Tamper& t : cases) {
    // Accesses that would be out of range or lack a right under the genuine key get
    // the same answer as one that would be fine.
    for (auto [offset, len, needed] : {std::tuple{uint64_t{0}, uint64_t{8}, Access::kRemoteRead},
                                       std::tuple{uint64_t{4096}, uint64_t{8}, Access::kRemoteRead},
                                       std::tuple{uint64_t{0}, uint64_t{8}, Access::kRemoteWrite}}) {
      const Status s = detail::resolve(registry_, t.key, offset, len, needed).status();
      EXPECT_EQ(s.code(), StatusCode::kInvalidKey) << t.field << ": " << s.to_string();
      if (first_message.empty()) first_message = s.message();
      EXPECT_EQ(s.message(), first_message) << t.field;
    }
  }
  EXPECT_EQ(first_message.find(std::to_string(kSize)), std::string::npos) << first_message;
  // A key for a region id that was never registered reads the same, but for the id.
  RemoteKey unknown = key;
  unknown.region = static_cast<RegionId>(static_cast<uint32_t>(key.region) + 1000);
  const Status u = detail::resolve(registry_, unknown, 0, 8, Access::kRemoteRead).status();
  EXPECT_EQ(u.code(), StatusCode::kInvalidKey);
  // The genuine key: its own window bounds and rights give their specific answers.
  EXPECT_TRUE(detail::resolve(registry_, key, 0, 8, Access::kRemoteRead).is_ok());
  EXPECT_EQ(resolve_code(key, 2048, 1, Access::kRemoteRead), StatusCode::kOutOfRange);
  EXPECT_EQ(resolve_code(key, 0, 8, Access::kRemoteWrite), StatusCode::kAccessDenied);
}

// The registry remembers the last key that authenticated per region, so that a peer's
// stream of puts and gets with one key costs one SipHash. Every other key is still
// checked in full: one that differs from the remembered key in any field, its tag
// included, is refused, and a second genuine key of the region works alongside.
TEST_F(RegistryTest, AKeyThatAuthenticatedBeforeLeavesEveryOtherKeyFullyChecked) {
  Region region = register_all();
  const RemoteKey key = region.remote_key(1024, 2048, Access::kRemoteRead).value();
  ASSERT_TRUE(detail::resolve(registry_, key, 0, 8, Access::kRemoteRead).is_ok());
  ASSERT_TRUE(detail::resolve(registry_, key, 8, 8, Access::kRemoteRead).is_ok());
  std::vector<std::pair<const char*, RemoteKey>> tampered;
  auto add = [&](const char* field, auto&& change) {
    RemoteKey k = key;
    change(k);
    tampered.emplace_back(field, k);
  };
  add("secret, low bit", [](RemoteKey& k) { k.secret ^= 1; });
  add("secret, high bit", [](RemoteKey& k) { k.secret ^= uint64_t{1} << 63; });
  add("offset", [](RemoteKey& k) { k.offset += 1; });
  add("length", [](RemoteKey& k) { k.length += 1; });
  add("rights", [](RemoteKey& k) { k.access = Access::kRemoteRead | Access::kRemoteWrite; });
  add("generation", [](RemoteKey& k) { k.generation += 1; });
  add("kind", [](RemoteKey& k) { k.kind = MemoryKind::kCuda; });
  for (const auto& [field, k] : tampered) {
    EXPECT_EQ(resolve_code(k, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey) << field;
    // Still refused after the genuine key authenticated again in between.
    ASSERT_TRUE(detail::resolve(registry_, key, 0, 8, Access::kRemoteRead).is_ok());
    EXPECT_EQ(resolve_code(k, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey) << field;
  }
  // A second key of the region (another window and rights) and the first, in turn.
  const RemoteKey other = region.remote_key(0, 512, Access::kRemoteWrite).value();
  for (int round = 0; round < 3; ++round) {
    EXPECT_TRUE(detail::resolve(registry_, other, 0, 512, Access::kRemoteWrite).is_ok()) << round;
    EXPECT_TRUE(detail::resolve(registry_, key, 2040, 8, Access::kRemoteRead).is_ok()) << round;
    EXPECT_EQ(resolve_code(other, 0, 8, Access::kRemoteRead), StatusCode::kAccessDenied) << round;
    EXPECT_EQ(resolve_code(key, 2041, 8, Access::kRemoteRead), StatusCode::kOutOfRange) << round;
  }
  // Deregistered: the remembered key dies with the registration.
  region.deregister();
  EXPECT_EQ(resolve_code(key, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey);
  EXPECT_EQ(resolve_code(other, 0, 8, Access::kRemoteWrite), StatusCode::kInvalidKey);
}

TEST_F(RegistryTest, ForgedUnknownAndMismatchedKeysAreInvalid) {
  Region region = register_all();
  RemoteKey key = region.remote_key();

  RemoteKey forged = key;
  forged.secret ^= 1;
  EXPECT_EQ(resolve_code(forged, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey);
  RemoteKey unknown = key;
  unknown.region = static_cast<RegionId>(static_cast<uint32_t>(key.region) + 1000);
  EXPECT_EQ(resolve_code(unknown, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey);
  RemoteKey future = key;
  future.generation += 1;
  EXPECT_EQ(resolve_code(future, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey);
  RemoteKey other_kind = key;
  other_kind.kind = MemoryKind::kCuda;
  EXPECT_EQ(resolve_code(other_kind, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey);
  EXPECT_EQ(resolve_code(RemoteKey{}, 0, 0, Access::kNone), StatusCode::kInvalidKey);
  // The genuine key still works.
  EXPECT_TRUE(detail::resolve(registry_, key, 0, 8, Access::kRemoteRead).is_ok());
}

TEST_F(RegistryTest, SecretsDifferPerRegistration) {
  Region a = register_all();
  Region b = register_all();
  EXPECT_NE(a.remote_key().secret, b.remote_key().secret);
  RemoteKey crossed = b.remote_key();
  crossed.secret = a.remote_key().secret;
  EXPECT_EQ(resolve_code(crossed, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
}

TEST_F(RegistryTest, DeregistrationRevokesKeysEvenAfterSlotReuse) {
  Region region = register_all();
  const RemoteKey old_key = region.remote_key();
  ASSERT_TRUE(detail::resolve(registry_, old_key, 0, 1, Access::kRemoteRead).is_ok());

  region.deregister();
  EXPECT_FALSE(region.valid());
  EXPECT_EQ(resolve_code(old_key, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
  region.deregister();  // idempotent

  Region reused = register_all();
  ASSERT_EQ(reused.id(), old_key.region) << "slot ids are reused after deregistration";
  const RemoteKey new_key = reused.remote_key();
  EXPECT_NE(new_key.generation, old_key.generation);
  EXPECT_EQ(resolve_code(old_key, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
  // Even an old key carrying the new secret fails on its generation.
  RemoteKey old_with_new_secret = old_key;
  old_with_new_secret.secret = new_key.secret;
  EXPECT_EQ(resolve_code(old_with_new_secret, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
  EXPECT_TRUE(detail::resolve(registry_, new_key, 0, 1, Access::kRemoteRead).is_ok());
}

TEST_F(RegistryTest, DestructorDeregisters) {
  RemoteKey key;
  {
    Region region = register_all();
    key = region.remote_key();
    EXPECT_EQ(registry_.stats().live_regions, 1u);
  }
  EXPECT_EQ(registry_.stats().live_regions, 0u);
  EXPECT_EQ(resolve_code(key, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
}

TEST_F(RegistryTest, MissingRightsAreDenied) {
  Region read_only = register_all(Access::kRemoteRead);
  RemoteKey key = read_only.remote_key();
  EXPECT_EQ(key.access, Access::kRemoteRead);
  EXPECT_TRUE(detail::resolve(registry_, key, 0, 8, Access::kRemoteRead).is_ok());
  EXPECT_EQ(resolve_code(key, 0, 8, Access::kRemoteWrite), StatusCode::kAccessDenied);
  EXPECT_EQ(resolve_code(key, 0, 8, Access::kRemoteAtomic), StatusCode::kAccessDenied);
  EXPECT_EQ(resolve_code(key, 0, 8, Access::kRemoteRead | Access::kRemoteWrite), StatusCode::kAccessDenied);

  // A key whose holder added rights is forged: the tag covers the rights.
  RemoteKey inflated = key;
  inflated.access = kRemoteAccessMask;
  EXPECT_EQ(resolve_code(inflated, 0, 8, Access::kRemoteWrite), StatusCode::kInvalidKey);
  EXPECT_EQ(resolve_code(inflated, 0, 8, Access::kRemoteRead), StatusCode::kInvalidKey);

  // A key narrower than the region is denied by the key.
  Region rw = register_all();
  RemoteKey read_key = rw.remote_key(0, kSize, Access::kRemoteRead).value();
  EXPECT_EQ(resolve_code(read_key, 0, 8, Access::kRemoteWrite), StatusCode::kAccessDenied);
  // Local rights never come from a key.
  EXPECT_EQ(resolve_code(rw.remote_key(), 0, 8, Access::kLocalWrite), StatusCode::kAccessDenied);
}

TEST_F(RegistryTest, RemoteKeyValidatesWindowAndRights) {
  Region region = register_all();
  EXPECT_EQ(region.remote_key(0, kSize, Access::kNone).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(region.remote_key(0, kSize, Access::kLocalWrite).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(region.remote_key(0, kSize, Access::kRemoteRead | Access::kLocalWrite).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(region.remote_key(0, kSize, Access::kRemoteAtomic).status().code(), StatusCode::kAccessDenied);
  EXPECT_EQ(region.remote_key(0, kSize + 1, Access::kRemoteRead).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(region.remote_key(kSize + 1, 0, Access::kRemoteRead).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(region.remote_key(UINT64_MAX - 1, 4, Access::kRemoteRead).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(region.remote_key(4, UINT64_MAX, Access::kRemoteRead).status().code(), StatusCode::kOutOfRange);

  auto key = region.remote_key(kSize - 16, 16, Access::kRemoteWrite);
  ASSERT_TRUE(key.is_ok());
  EXPECT_EQ(key->offset, kSize - 16);
  EXPECT_EQ(key->length, 16u);
  EXPECT_EQ(key->access, Access::kRemoteWrite);

  Region empty;
  EXPECT_EQ(empty.remote_key(0, 0, Access::kRemoteRead).status().code(), StatusCode::kInvalidArgument);
}

class NothingDomain final : public MemoryDomain {
 public:
  MemoryKind kind() const noexcept override { return MemoryKind::kCuda; }
  std::string_view name() const noexcept override { return "nothing"; }
  bool owns(const void*, size_t) const override { return false; }
  Result<DomainRegistration> register_range(void*, size_t, PinMode) override {
    ++registered;
    return DomainRegistration{};
  }
  void deregister_range(void*, size_t, const DomainRegistration&) noexcept override {}
  Result<std::unique_ptr<AsyncCopy>> copy_to_host(void*, const void*, size_t) override {
    return Status(StatusCode::kUnsupported, "");
  }
  Result<std::unique_ptr<AsyncCopy>> copy_from_host(void*, const void*, size_t) override {
    return Status(StatusCode::kUnsupported, "");
  }
  int registered = 0;
};

TEST_F(RegistryTest, MemoryTheDomainDoesNotOwnIsRejected) {
  NothingDomain domain;
  auto r = registry_.register_memory(memory_.data(), kSize, kRw, domain);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(domain.registered, 0);
  EXPECT_EQ(registry_.register_memory(memory_.data(), kSize, static_cast<Access>(0x10)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, StatsCountRegistrations) {
  {
    Region a = register_all();
    Region b = register_all();  // the same memory twice is two regions
    EXPECT_NE(a.id(), b.id());
    RegistryStats s = registry_.stats();
    EXPECT_EQ(s.registrations, 2u);
    EXPECT_EQ(s.live_regions, 2u);
    EXPECT_EQ(s.bytes_registered, 2 * kSize);
    EXPECT_EQ(s.deregistrations, 0u);
    EXPECT_EQ(s.bytes_pinned, a.pinned() ? 2 * kSize : 0u);
  }
  RegistryStats s = registry_.stats();
  EXPECT_EQ(s.registrations, 2u);
  EXPECT_EQ(s.deregistrations, 2u);
  EXPECT_EQ(s.live_regions, 0u);
  EXPECT_EQ(s.bytes_registered, 0u);
  EXPECT_EQ(s.bytes_pinned, 0u);
  EXPECT_EQ(registry_.pin_mode(), PinMode::kTry);
}

TEST_F(RegistryTest, MoveTransfersOwnership) {
  Region a = register_all();
  const RemoteKey key = a.remote_key();
  Region b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(b.valid());
  EXPECT_TRUE(detail::resolve(registry_, key, 0, 1, Access::kRemoteRead).is_ok());

  Region c = register_all();
  const RemoteKey c_key = c.remote_key();
  c = std::move(b);  // c's old registration goes away
  EXPECT_EQ(resolve_code(c_key, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
  EXPECT_TRUE(detail::resolve(registry_, key, 0, 1, Access::kRemoteRead).is_ok());
  EXPECT_EQ(registry_.stats().live_regions, 1u);
  c = Region();
  EXPECT_EQ(resolve_code(key, 0, 1, Access::kRemoteRead), StatusCode::kInvalidKey);
  EXPECT_EQ(registry_.stats().live_regions, 0u);
}

TEST(Registry, RegionsMayOutliveTheRegistryObject) {
  testing::Mapping memory(4096);
  Region region;
  {
    MemoryRegistry registry(PinMode::kRequire);
    region = registry.register_memory(memory.data(), 4096, kRw).value();
  }
  EXPECT_TRUE(region.valid());
  region.deregister();
  EXPECT_FALSE(region.valid());
}

TEST(Registry, ConcurrentRegistrationAndResolve) {
  MemoryRegistry registry(PinMode::kOff);
  testing::Mapping memory(1 << 16);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto r = registry.register_memory(memory.data() + t * 4096, 4096, kRw);
        if (!r.is_ok()) {
          ++failures;
          continue;
        }
        RemoteKey key = r->remote_key();
        auto hit = detail::resolve(registry, key, 8, 8, Access::kRemoteWrite);
        if (!hit.is_ok() || hit->address != memory.data() + t * 4096 + 8) ++failures;
        r->deregister();
        if (detail::resolve(registry, key, 8, 8, Access::kRemoteWrite).status().code() != StatusCode::kInvalidKey) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(registry.stats().registrations, 8000u);
  EXPECT_EQ(registry.stats().live_regions, 0u);
}

TEST_F(RegistryTest, HolderOfANarrowKeyCannotWidenItsWindowOrRights) {
  // A read-only key for [64, +64) of a read/write region: every field its holder could
  // rewrite is covered by the tag, so no rewrite reaches more of the region.
  Region rw = register_all();
  RemoteKey narrow = rw.remote_key(64, 64, Access::kRemoteRead).value();
  EXPECT_TRUE(detail::resolve(registry_, narrow, 0, 64, Access::kRemoteRead).is_ok());
  EXPECT_EQ(resolve_code(narrow, 0, 64, Access::kRemoteWrite), StatusCode::kAccessDenied);

  RemoteKey writable = narrow;
  writable.access = Access::kRemoteRead | Access::kRemoteWrite;
  EXPECT_EQ(resolve_code(writable, 0, 64, Access::kRemoteWrite), StatusCode::kInvalidKey);
  RemoteKey wider = narrow;
  wider.length = 128;
  EXPECT_EQ(resolve_code(wider, 0, 128, Access::kRemoteRead), StatusCode::kInvalidKey);
  RemoteKey moved = narrow;
  moved.offset = 0;
  EXPECT_EQ(resolve_code(moved, 0, 64, Access::kRemoteRead), StatusCode::kInvalidKey);
  RemoteKey whole = narrow;
  whole.offset = 0;
  whole.length = kSize;
  whole.access = kRemoteAccessMask;
  EXPECT_EQ(resolve_code(whole, 0, kSize, Access::kRemoteRead), StatusCode::kInvalidKey);
  // The key minted for the whole region by its owner still works, of course.
  EXPECT_TRUE(detail::resolve(registry_, rw.remote_key(), 0, kSize, Access::kRemoteWrite).is_ok());
}

TEST_F(RegistryTest, ARegionIsFoundByAddressOnlyWhileItHoldsTheWholeRangeAndIsRegistered) {
  const detail::RegistryState& state = detail::RegistryInternals::state(registry_);
  std::byte* base = memory_.data();
  EXPECT_FALSE(detail::find_covering_region(state, host_domain(), base, 1));  // nothing registered yet
  auto region = registry_.register_memory(base + 1024, 4096, kRw);
  ASSERT_TRUE(region.is_ok());
  auto found = detail::find_covering_region(state, host_domain(), base + 1024 + 100, 200);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, region->id());
  EXPECT_EQ(found->base, base + 1024);
  EXPECT_EQ(found->length, 4096u);
  EXPECT_TRUE(detail::find_covering_region(state, host_domain(), base + 1024, 4096));        // all of it
  EXPECT_TRUE(detail::find_covering_region(state, host_domain(), base + 1024 + 4096, 0));    // its end, empty
  EXPECT_FALSE(detail::find_covering_region(state, host_domain(), base + 1023, 2));          // starts before it
  EXPECT_FALSE(detail::find_covering_region(state, host_domain(), base + 1024 + 4000, 97));  // runs past its end
  EXPECT_FALSE(detail::find_covering_region(state, host_domain(), base + 1024 + 4097, 1));   // after it
  EXPECT_TRUE(detail::region_live(state, found->id, found->generation));
  region->deregister();
  EXPECT_FALSE(detail::region_live(state, found->id, found->generation));
  EXPECT_FALSE(detail::find_covering_region(state, host_domain(), base + 1024, 1));
  // Registered again: the same slot, another generation.
  auto again = registry_.register_memory(base + 1024, 4096, kRw);
  ASSERT_TRUE(again.is_ok());
  auto second = detail::find_covering_region(state, host_domain(), base + 1024, 1);
  ASSERT_TRUE(second);
  EXPECT_NE(second->generation, found->generation);
}

TEST_F(RegistryTest, ReleaseListenersHearEachDeregistrationOnceUntilRemoved) {
  detail::RegistryState& state = *detail::RegistryInternals::shared_state(registry_);
  std::vector<std::pair<RegionId, uint32_t>> heard;
  const uint64_t handle = detail::add_release_listener(
      state, [&](RegionId id, uint32_t generation) { heard.emplace_back(id, generation); });
  Region a = register_all();
  const auto found = detail::find_covering_region(state, host_domain(), memory_.data(), 1);
  ASSERT_TRUE(found);
  a.deregister();
  a.deregister();  // a second time: nothing to hear
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].first, found->id);
  EXPECT_EQ(heard[0].second, found->generation);
  detail::remove_release_listener(state, handle);
  Region b = register_all();
  b.deregister();
  EXPECT_EQ(heard.size(), 1u);  // removed: not told
}

}  // namespace
}  // namespace remora

