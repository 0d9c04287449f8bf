// coll/reduce.h — element-wise reduction kernels for every DataType × ReduceOp.
//
// Vectorised loops (the compiler's auto-vectoriser with per-ISA clones). fp16 and bf16
// are converted to fp32, combined, and rounded back to nearest-even; reduce_many
// accumulates all its inputs in fp32 before the single rounding. kAvg combines as a
// sum; the caller applies finish_avg once at the end (divide by the number of ranks;
// integer types do not support kAvg). Integer sum/prod wrap (two's complement), as
// MPI implementations do in practice. Float min/max propagate NaN from either side and
// order -0 below +0, so neither depends on operand order. When both operands are NaN
// the result is NaN, but whose payload survives is unspecified. Pointers must be aligned
// to the element type (as for any T*); no wider alignment is needed.
//
// Thread safety: the kernels are pure functions of their arguments; any number of
// threads may call them at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "remora/communicator.h"

namespace remora::coll {

/// inout[i] = op(inout[i], in[i]) for i < count. The buffers may not overlap partially
/// (identical pointers are fine).
void reduce_into(DataType type, ReduceOp op, void* inout, const void* in, size_t count) noexcept;
/// out[i] = op(a[i], b[i]). out may equal a or b.
void reduce_to(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) noexcept;
/// out[i] = op(inputs[0][i], ..., inputs[n-1][i]) (n >= 1), fp16/bf16 accumulated in fp32
/// and rounded once. out may equal inputs[0].
void reduce_many(DataType type, ReduceOp op, void* out, std::span<const void* const> inputs, size_t count) noexcept;
/// data[i] /= n for floating types (kAvg's last step). No-op for n == 1.
void finish_avg(DataType type, void* data, size_t count, int n) noexcept;
/// Whether `op` is defined for `type` (kAvg: floating types only).
bool supported(DataType type, ReduceOp op) noexcept;

/// fp16 / bf16 conversions (round to nearest even; NaN stays NaN; overflow → inf).
float half_to_float(uint16_t h) noexcept;
uint16_t float_to_half(float f) noexcept;
float bfloat_to_float(uint16_t b) noexcept;
uint16_t float_to_bfloat(float f) noexcept;

}  // namespace remora::coll
