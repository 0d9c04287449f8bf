// STUB: the movement collectives arrive in their own commit.
#include "coll/algorithms.h"

namespace remora::coll {
namespace {
Status todo() { return Status(StatusCode::kUnsupported, "not implemented yet"); }
}  // namespace
Status barrier(Op&) { return todo(); }
Status broadcast(Op&, void*, size_t, DataType, int) { return todo(); }
Status gather(Op&, const void*, void*, size_t, DataType, int) { return todo(); }
Status gatherv(Op&, const void*, size_t, void*, std::span<const size_t>, std::span<const size_t>, DataType, int) { return todo(); }
Status scatter(Op&, const void*, void*, size_t, DataType, int) { return todo(); }
Status scatterv(Op&, const void*, std::span<const size_t>, std::span<const size_t>, void*, size_t, DataType, int) { return todo(); }
Status allgather(Op&, const void*, void*, size_t, DataType) { return todo(); }
Status allgatherv(Op&, const void*, size_t, void*, std::span<const size_t>, std::span<const size_t>, DataType) { return todo(); }
Status alltoall(Op&, const void*, void*, size_t, DataType) { return todo(); }
Status alltoallv(Op&, const void*, std::span<const size_t>, std::span<const size_t>, void*, std::span<const size_t>,
                 std::span<const size_t>, DataType) { return todo(); }
}  // namespace remora::coll
