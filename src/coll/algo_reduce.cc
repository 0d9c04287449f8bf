// STUB: the reduction collectives arrive in their own commit.
#include "coll/algorithms.h"

namespace remora::coll {
namespace {
Status todo() { return Status(StatusCode::kUnsupported, "not implemented yet"); }
}  // namespace
Status reduce(Op&, const void*, void*, size_t, DataType, ReduceOp, int) { return todo(); }
Status allreduce(Op&, const void*, void*, size_t, DataType, ReduceOp) { return todo(); }
Status reduce_scatter(Op&, const void*, void*, size_t, DataType, ReduceOp) { return todo(); }
Status scan(Op&, const void*, void*, size_t, DataType, ReduceOp) { return todo(); }
Status exscan(Op&, const void*, void*, size_t, DataType, ReduceOp) { return todo(); }
}  // namespace remora::coll
