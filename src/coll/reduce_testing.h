// coll/reduce_testing.h — which instruction set the reduction kernels use, for tests
// and benchmarks that must exercise (and compare) every path on one machine.
//
// Not part of the kernels' interface: production code never calls this. The choice is
// made once from the CPU (AVX2 + F16C where available); forcing a path the CPU lacks is
// refused.
#pragma once

namespace remora::coll {

enum class ReduceIsa { kGeneric, kAvx2 };

/// The path the kernels take now.
ReduceIsa reduce_isa() noexcept;
/// Forces a path for every later call (process-wide; not for concurrent use with the
/// kernels). Returns false, changing nothing, where the CPU cannot run `isa`.
bool set_reduce_isa_for_testing(ReduceIsa isa) noexcept;

}  // namespace remora::coll
