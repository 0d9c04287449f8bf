// STUB (replaced by the reduction kernels): scalar placeholders so the tree builds.
#include "coll/reduce.h"

namespace remora::coll {
bool supported(DataType type, ReduceOp op) noexcept { return op != ReduceOp::kAvg || is_floating(type); }
void reduce_into(DataType, ReduceOp, void*, const void*, size_t) noexcept {}
void reduce_to(DataType, ReduceOp, void*, const void*, const void*, size_t) noexcept {}
void reduce_many(DataType, ReduceOp, void*, std::span<const void* const>, size_t) noexcept {}
void finish_avg(DataType, void*, size_t, int) noexcept {}
float half_to_float(uint16_t) noexcept { return 0; }
uint16_t float_to_half(float) noexcept { return 0; }
float bfloat_to_float(uint16_t) noexcept { return 0; }
uint16_t float_to_bfloat(float) noexcept { return 0; }
}  // namespace remora::coll
