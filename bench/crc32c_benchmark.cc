// bench/crc32c_benchmark.cc — the CRC-32C REMORA_CHECKSUM=crc32c computes per chunk
// (core/crc32c.h, ISA-L): bytes per second at the sizes the transport checks (an eager
// payload, a chunk, several chunks), warm in cache and cold (a buffer larger than the
// last-level cache, walked chunk by chunk, as a large transfer's chunks are).
//
// Run: ./build/release/bench/crc32c_benchmark --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <vector>

#include "core/crc32c.h"

namespace remora {
namespace {

void BM_Crc32cWarm(benchmark::State& state) {
  if (!core::crc32c_available()) {
    state.SkipWithError("built without ISA-L (libisal-dev)");
    return;
  }
  std::vector<std::byte> data(static_cast<size_t>(state.range(0)), std::byte{0x5A});
  for (auto _ : state) benchmark::DoNotOptimize(core::crc32c(data));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32cWarm)->Arg(4 << 10)->Arg(16 << 10)->Arg(512 << 10);

void BM_Crc32cCold(benchmark::State& state) {
  if (!core::crc32c_available()) {
    state.SkipWithError("built without ISA-L (libisal-dev)");
    return;
  }
  const size_t chunk = static_cast<size_t>(state.range(0));
  std::vector<std::byte> data(size_t{256} << 20, std::byte{0x5A});  // beyond any LLC here
  size_t at = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(core::crc32c(std::span(data).subspan(at, chunk)));
    at = (at + chunk) % (data.size() - chunk + 1);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32cCold)->Arg(512 << 10);

}  // namespace
}  // namespace remora

BENCHMARK_MAIN();
