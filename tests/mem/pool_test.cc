// Tests for Pool and Buffer: size classes, exact hit/miss/registration counters,
// reuse, non-overlap, shared ownership, the max_bytes cap, thread safety and keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "mem/region_access.h"
#include "remora/pool.h"

namespace remora {
namespace {

constexpr size_t kKiB = 1024;

PoolOptions small_pool() {
  PoolOptions o;
  o.arena_bytes = 64 * kKiB;
  o.min_buffer_bytes = 4 * kKiB;
  return o;
}

void fill(const Buffer& b, uint64_t seed) {
  auto* words = reinterpret_cast<uint64_t*>(b.data());
  for (size_t i = 0; i < b.capacity() / sizeof(uint64_t); ++i) words[i] = seed * 0x9E3779B97F4A7C15ull + i;
}

bool check(const Buffer& b, uint64_t seed) {
  const auto* words = reinterpret_cast<const uint64_t*>(b.data());
  for (size_t i = 0; i < b.capacity() / sizeof(uint64_t); ++i) {
    if (words[i] != seed * 0x9E3779B97F4A7C15ull + i) return false;
  }
  return true;
}

TEST(Pool, SizesRoundUpToPowerOfTwoClasses) {
  MemoryRegistry registry(PinMode::kOff);
  Pool pool(registry, {.arena_bytes = 1 << 20, .min_buffer_bytes = 4096});
  struct Case {
    size_t asked, capacity;
  } cases[] = {{0, 4096},         {1, 4096},          {4096, 4096},       {4097, 8192},
               {12000, 16384},    {1 << 20, 1 << 20}, {(1 << 20) + 1, 2 << 20}};
  for (const Case& c : cases) {
    auto b = pool.allocate(c.asked);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ(b->size(), c.asked);
    EXPECT_EQ(b->capacity(), c.capacity) << "asked " << c.asked;
    EXPECT_EQ(b->span().size(), c.asked);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
  }
  EXPECT_EQ(pool.allocate(SIZE_MAX).status().code(), StatusCode::kInvalidArgument);
}

TEST(Pool, OptionsAreNormalised) {
  MemoryRegistry registry(PinMode::kOff);
  Pool pool(registry, {.arena_bytes = 5000, .min_buffer_bytes = 1000});
  EXPECT_EQ(pool.options().min_buffer_bytes, 1024u);
  EXPECT_EQ(pool.options().arena_bytes % 4096, 0u);
  EXPECT_GE(pool.options().arena_bytes, 5000u);
  auto b = pool.allocate(1);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->capacity(), 1024u);
}

TEST(Pool, CountersAreExact) {
  MemoryRegistry registry(PinMode::kTry);
  Pool pool(registry, small_pool());
  std::vector<Buffer> held;
  for (int i = 0; i < 16; ++i) held.push_back(pool.allocate(4096).value());  // one arena: 16 buffers
  PoolStats s = pool.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 15u);
  EXPECT_EQ(s.registrations, 1u);
  EXPECT_EQ(s.bytes_registered, 64 * kKiB);
  EXPECT_EQ(s.buffers_in_use, 16u);
  EXPECT_EQ(s.bytes_in_use, 64 * kKiB);

  held.push_back(pool.allocate(100).value());  // class full: a second arena
  s = pool.stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.hits, 15u);
  EXPECT_EQ(s.registrations, 2u);
  EXPECT_EQ(s.bytes_registered, 128 * kKiB);
  EXPECT_EQ(registry.stats().live_regions, 2u);

  held.push_back(pool.allocate(8192).value());  // another class: its own arena
  s = pool.stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.registrations, 3u);
  EXPECT_EQ(s.bytes_in_use, 17 * 4 * kKiB + 8 * kKiB);

  held.clear();
  s = pool.stats();
  EXPECT_EQ(s.buffers_in_use, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_registered, 192 * kKiB) << "arenas are never given back while the pool lives";
  EXPECT_EQ(registry.stats().live_regions, 3u);

  for (int i = 0; i < 10; ++i) held.push_back(pool.allocate(4096).value());
  s = pool.stats();
  EXPECT_EQ(s.hits, 25u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.registrations, 3u);
}

TEST(Pool, ReleasedBufferIsReusedAtTheSameAddress) {
  MemoryRegistry registry(PinMode::kTry);
  Pool pool(registry, small_pool());
  Buffer b = pool.allocate(4096).value();
  std::byte* const address = b.data();
  const uint64_t offset = b.region_offset();
  b.reset();
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(b.data(), nullptr);
  Buffer again = pool.allocate(3000).value();
  EXPECT_EQ(again.data(), address);
  EXPECT_EQ(again.region_offset(), offset);
  EXPECT_EQ(again.size(), 3000u);
  EXPECT_EQ(pool.stats().hits, 1u);
  EXPECT_EQ(pool.stats().misses, 1u);
}

TEST(Pool, LargeClassesGetADedicatedArenaThatIsReused) {
  MemoryRegistry registry(PinMode::kTry);
  Pool pool(registry, small_pool());
  Buffer big = pool.allocate(100 * kKiB).value();
  EXPECT_EQ(big.capacity(), 128 * kKiB);
  EXPECT_EQ(big.region().size(), 128 * kKiB);
  EXPECT_EQ(big.region_offset(), 0u);
  EXPECT_EQ(pool.stats().bytes_registered, 128 * kKiB);
  std::byte* const address = big.data();
  big.reset();
  Buffer again = pool.allocate(128 * kKiB).value();
  EXPECT_EQ(again.data(), address);
  EXPECT_EQ(pool.stats().hits, 1u);
  EXPECT_EQ(pool.stats().registrations, 1u);
}

TEST(Pool, BuffersNeverOverlap) {
  MemoryRegistry registry(PinMode::kOff);
  Pool pool(registry, small_pool());
  std::vector<Buffer> buffers;
  const size_t sizes[] = {1, 4096, 5000, 8192, 20000, 65536, 70000, 300};
  for (int round = 0; round < 12; ++round) {
    for (size_t size : sizes) buffers.push_back(pool.allocate(size).value());
  }
  for (size_t i = 0; i < buffers.size(); ++i) fill(buffers[i], i + 1);
  for (size_t i = 0; i < buffers.size(); ++i) EXPECT_TRUE(check(buffers[i], i + 1)) << "buffer " << i;

  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (const Buffer& b : buffers) {
    const auto start = reinterpret_cast<uintptr_t>(b.data());
    ranges.emplace_back(start, start + b.capacity());
    // The buffer lies inside its arena's region at its offset.
    EXPECT_EQ(b.region().data() + b.region_offset(), b.data());
    EXPECT_LE(b.region_offset() + b.capacity(), b.region().size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST(Pool, CopiesShareAndTheLastReleaseReturnsTheBuffer) {
  MemoryRegistry registry(PinMode::kOff);
  Pool pool(registry, small_pool());
  Buffer a = pool.allocate(4096).value();
  std::byte* const address = a.data();
  Buffer b = a;
  EXPECT_EQ(a.use_count(), 2u);
  EXPECT_EQ(b.data(), address);
  Buffer c;
  c = b;
  EXPECT_EQ(a.use_count(), 3u);
  Buffer d = std::move(c);
  EXPECT_FALSE(c.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.use_count(), 3u);

  a.reset();
  b = Buffer();
  EXPECT_EQ(d.use_count(), 1u);
  EXPECT_EQ(pool.stats().buffers_in_use, 1u);
  // Still held: a new allocation must not get it.
  Buffer other = pool.allocate(4096).value();
  EXPECT_NE(other.data(), address);
  d = other;  // drops the last reference to the first buffer
  EXPECT_EQ(pool.stats().buffers_in_use, 1u);
  Buffer reused = pool.allocate(4096).value();
  EXPECT_EQ(reused.data(), address);

  Buffer self = reused;
  self = self;  // NOLINT(clang-diagnostic-self-assign-overloaded)
  EXPECT_EQ(reused.use_count(), 2u);
}

TEST(Pool, BuffersOutliveThePoolObject) {
  MemoryRegistry registry(PinMode::kTry);
  Buffer survivor;
  RemoteKey key;
  {
    Pool pool(registry, small_pool());
    survivor = pool.allocate(10000).value();
    key = survivor.remote_key();
    Buffer dropped = pool.allocate(10000).value();
  }
  fill(survivor, 42);
  EXPECT_TRUE(check(survivor, 42));
  EXPECT_TRUE(survivor.region().valid());
  auto where = detail::resolve(registry, key, 0, 8, Access::kRemoteWrite);
  ASSERT_TRUE(where.is_ok()) << where.status().to_string();
  EXPECT_EQ(where->address, survivor.data());
  EXPECT_EQ(registry.stats().live_regions, 1u);

  survivor.reset();  // last reference to the pool core: arenas go
  EXPECT_EQ(registry.stats().live_regions, 0u);
  EXPECT_EQ(detail::resolve(registry, key, 0, 8, Access::kRemoteWrite).status().code(), StatusCode::kInvalidKey);
}

TEST(Pool, MaxBytesCapIsNoResource) {
  MemoryRegistry registry(PinMode::kOff);
  PoolOptions options = small_pool();
  options.max_bytes = 128 * kKiB;
  Pool pool(registry, options);
  std::vector<Buffer> held;
  for (int i = 0; i < 32; ++i) held.push_back(pool.allocate(4096).value());
  auto refused = pool.allocate(4096);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kNoResource);
  EXPECT_NE(refused.status().message().find("max_bytes"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("131072"), std::string::npos) << refused.status().to_string();
  EXPECT_EQ(pool.allocate(256 * kKiB).status().code(), StatusCode::kNoResource);
  EXPECT_EQ(pool.stats().bytes_registered, 128 * kKiB);

  held.pop_back();
  EXPECT_TRUE(pool.allocate(4096).is_ok()) << "a released buffer is reusable under the cap";
}

TEST(Pool, RemoteKeyCoversExactlyTheBuffer) {
  MemoryRegistry registry(PinMode::kTry);
  Pool pool(registry, small_pool());
  Buffer first = pool.allocate(4096).value();
  Buffer b = pool.allocate(4096).value();
  ASSERT_EQ(b.region().id(), first.region().id());
  const RemoteKey key = b.remote_key();
  EXPECT_EQ(key.region, b.region().id());
  EXPECT_EQ(key.offset, b.region_offset());
  EXPECT_EQ(key.length, b.capacity());
  EXPECT_EQ(key.access, Access::kRemoteRead | Access::kRemoteWrite);

  auto whole = detail::resolve(registry, key, 0, b.capacity(), Access::kRemoteWrite);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(whole->address, b.data());
  EXPECT_EQ(whole->length, b.capacity());
  EXPECT_EQ(detail::resolve(registry, key, 1, b.capacity(), Access::kRemoteWrite).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(detail::resolve(registry, key, b.capacity(), 1, Access::kRemoteRead).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(detail::resolve(registry, key, 0, 8, Access::kRemoteAtomic).status().code(), StatusCode::kAccessDenied);

  // Survives the wire.
  auto decoded = RemoteKey::deserialize(key.serialize());
  ASSERT_TRUE(decoded.is_ok());
  EXPECT_EQ(detail::resolve(registry, *decoded, 100, 8, Access::kRemoteRead)->address, b.data() + 100);
}

TEST(Pool, ConcurrentAllocateReleaseKeepsContentsIntact) {
  MemoryRegistry registry(PinMode::kTry);
  Pool pool(registry, {.arena_bytes = 256 * kKiB, .min_buffer_bytes = 256});
  constexpr int kThreads = 4;
  constexpr int kOps = 10000;
  std::atomic<int> corrupt{0};
  std::atomic<int> failed{0};
  std::atomic<uint64_t> allocations{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      std::vector<std::pair<Buffer, uint64_t>> held;
      for (int op = 0; op < kOps; ++op) {
        const bool allocate = held.empty() || (held.size() < 64 && rng() % 2 == 0);
        if (allocate) {
          const size_t size = size_t{1} << (8 + rng() % 8);  // 256 B .. 32 KiB
          auto b = pool.allocate(size - rng() % 64);
          if (!b.is_ok()) {
            ++failed;
            continue;
          }
          ++allocations;
          const uint64_t seed = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(op);
          fill(*b, seed);
          held.emplace_back(std::move(b).value(), seed);
          if (rng() % 8 == 0) held.emplace_back(held.back());  // a shared copy
        } else {
          const size_t i = rng() % held.size();
          if (!check(held[i].first, held[i].second)) ++corrupt;
          std::swap(held[i], held.back());
          held.pop_back();
        }
      }
      for (auto& [b, seed] : held) {
        if (!check(b, seed)) ++corrupt;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(corrupt.load(), 0);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.hits + s.misses, allocations.load());
  EXPECT_EQ(s.buffers_in_use, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.registrations, registry.stats().live_regions);
}

}  // namespace
}  // namespace remora
