// bench/reduce_benchmark.cc — throughput of the reduction kernels (coll/reduce.h), the
// inner loop of every reducing collective.
//
//   BM_ReduceInto/<type>/<bytes>/<isa>   reduce_into(kSum) over two buffers of <bytes>
//   BM_ReduceMany/<type>/<bytes>/<isa>   reduce_many(kSum) of 4 inputs of <bytes>
//
// bytes_per_second counts the bytes of one buffer per call (the size being reduced);
// the memory traffic is 3x that for reduce_into. 64 KiB stays in L2, 4 MiB does not on
// most machines. isa 0 = generic build, 1 = AVX2+F16C (skipped where the CPU lacks it).
//
// Run: ./build/release/bench/reduce_benchmark --benchmark_min_time=0.1
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "coll/reduce.h"
#include "coll/reduce_testing.h"

namespace remora::coll {
namespace {

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32};

// Values that stay finite and normal under repeated sums, whatever the type.
std::vector<std::byte> make_buffer(DataType type, size_t bytes) {
  std::vector<std::byte> buf(bytes);
  const size_t n = bytes / size_of(type);
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i % 17) * 0.25f;
    switch (type) {
      case DataType::kFloat32: std::memcpy(buf.data() + i * 4, &v, 4); break;
      case DataType::kFloat16: {
        const uint16_t h = float_to_half(v);
        std::memcpy(buf.data() + i * 2, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t b = float_to_bfloat(v);
        std::memcpy(buf.data() + i * 2, &b, 2);
        break;
      }
      default: {
        const auto x = static_cast<int32_t>(i % 17);
        std::memcpy(buf.data() + i * 4, &x, 4);
        break;
      }
    }
  }
  return buf;
}

bool select(benchmark::State& state, DataType type) {
  const auto isa = state.range(2) == 1 ? ReduceIsa::kAvx2 : ReduceIsa::kGeneric;
  if (!set_reduce_isa_for_testing(isa)) {
    state.SkipWithError("this CPU lacks AVX2+F16C");
    return false;
  }
  state.SetLabel(std::string(to_string(type)) + (isa == ReduceIsa::kAvx2 ? " avx2" : " generic"));
  return true;
}

void BM_ReduceInto(benchmark::State& state) {
  const DataType type = kTypes[state.range(0)];
  const auto bytes = static_cast<size_t>(state.range(1));
  if (!select(state, type)) return;
  std::vector<std::byte> inout = make_buffer(type, bytes);
  const std::vector<std::byte> in = make_buffer(type, bytes);
  const size_t count = bytes / size_of(type);
  for (auto _ : state) {
    // The sums grow to inf in the 16-bit formats after a while; inf costs the same as
    // any normal value (only subnormals are slow, and growing sums never are).
    reduce_into(type, ReduceOp::kSum, inout.data(), in.data(), count);
    benchmark::DoNotOptimize(inout.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_ReduceMany(benchmark::State& state) {
  const DataType type = kTypes[state.range(0)];
  const auto bytes = static_cast<size_t>(state.range(1));
  if (!select(state, type)) return;
  std::vector<std::vector<std::byte>> inputs;
  std::vector<const void*> ptrs;
  for (int k = 0; k < 4; ++k) inputs.push_back(make_buffer(type, bytes));
  for (const auto& in : inputs) ptrs.push_back(in.data());
  std::vector<std::byte> out(bytes);
  const size_t count = bytes / size_of(type);
  for (auto _ : state) {
    reduce_many(type, ReduceOp::kSum, out.data(), ptrs, count);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "bytes", "isa"});
  for (int64_t t = 0; t < 4; ++t) {
    for (const int64_t bytes : {int64_t{64} << 10, int64_t{4} << 20}) {
      for (const int64_t isa : {0, 1}) b->Args({t, bytes, isa});
    }
  }
}

BENCHMARK(BM_ReduceInto)->Apply(args);
BENCHMARK(BM_ReduceMany)->Apply(args);

}  // namespace
}  // namespace remora::coll

BENCHMARK_MAIN();
