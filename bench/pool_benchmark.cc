// bench/pool_benchmark.cc — what explicit reuse buys: taking a registered buffer from
// a Pool versus registering memory per use (PinMode::kTry, so pinning cost is real).
//
//   BM_PoolAllocateRelease      Pool::allocate + release (warm: the arena exists)
//   BM_RegisterDeregister       register_memory + deregister of an existing, touched buffer
//   BM_MmapRegisterDeregister   mmap + register_memory + deregister + munmap of fresh memory
//
// Run: ./build/bench/pool_benchmark --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstring>

#include "remora/pool.h"

namespace remora {
namespace {

constexpr Access kAccess = Access::kLocalWrite | Access::kRemoteRead | Access::kRemoteWrite;

void report_registry(benchmark::State& state, const MemoryRegistry& registry) {
  const RegistryStats s = registry.stats();
  state.counters["pin_failures"] = static_cast<double>(s.pin_failures);
}

void BM_PoolAllocateRelease(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  MemoryRegistry registry(PinMode::kTry);
  Pool pool(registry, {.arena_bytes = size_t{64} << 20});
  if (!pool.allocate(size).is_ok()) {  // registers the class's arena outside the timed loop
    state.SkipWithError("pool allocation failed");
    return;
  }
  for (auto _ : state) {
    auto buffer = pool.allocate(size);
    benchmark::DoNotOptimize(buffer->data());
  }
  state.SetItemsProcessed(state.iterations());
  const PoolStats s = pool.stats();
  state.counters["registrations"] = static_cast<double>(s.registrations);
  state.counters["misses"] = static_cast<double>(s.misses);
  report_registry(state, registry);
}

void BM_RegisterDeregister(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    state.SkipWithError("mmap failed");
    return;
  }
  std::memset(memory, 1, size);  // already allocated and touched, as a user buffer would be
  MemoryRegistry registry(PinMode::kTry);
  for (auto _ : state) {
    auto region = registry.register_memory(memory, size, kAccess);
    if (!region.is_ok()) {
      state.SkipWithError(region.status().to_string().c_str());
      break;
    }
    region->deregister();
  }
  state.SetItemsProcessed(state.iterations());
  report_registry(state, registry);
  munmap(memory, size);
}

void BM_MmapRegisterDeregister(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  MemoryRegistry registry(PinMode::kTry);
  for (auto _ : state) {
    void* memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      break;
    }
    auto region = registry.register_memory(memory, size, kAccess);
    if (!region.is_ok()) {
      state.SkipWithError(region.status().to_string().c_str());
      munmap(memory, size);
      break;
    }
    region->deregister();
    munmap(memory, size);
  }
  state.SetItemsProcessed(state.iterations());
  report_registry(state, registry);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(int64_t{4} << 10)->Arg(int64_t{1} << 20)->Arg(int64_t{64} << 20);
}

BENCHMARK(BM_PoolAllocateRelease)->Apply(sizes);
BENCHMARK(BM_RegisterDeregister)->Apply(sizes);
BENCHMARK(BM_MmapRegisterDeregister)->Apply(sizes);

}  // namespace
}  // namespace remora

BENCHMARK_MAIN();
