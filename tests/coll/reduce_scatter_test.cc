// reduce_scatter (the ring reduce-scatter of coll/allreduce_ring.cc, and the
// recursive-doubling path of coll/allreduce_recursive_doubling.cc) against a sequential
// reference (and, where the whole input fits the communicator's shared segment, an
// allreduce through it): each rank gets its reduced block, at 1, 2, 3, 4, 5 and 8 ranks, every
// type × op at 3 and 5 ranks and a representative few elsewhere, counts 0, 1, a prime
// and around the pipeline piece, in place or not.
//
// The inputs and the reference are in reference.h; the communicators of each
// algorithm choice in reduction.h.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "mesh.h"
#include "reduction.h"
#include "reference.h"

namespace remora::test {
namespace {

void check_reduce_scatter(int r, Communicator& c, const char* algo, DataType t, ReduceOp op, size_t count,
                          bool in_place) {
  const int n = c.size();
  const size_t es = size_of(t);
  const size_t total = count * static_cast<size_t>(n);
  auto in = rank_input(r, total, t, op, n);
  std::vector<std::byte> out(count * es, std::byte{0x5A});
  Status s;
  if (in_place) {
    out = in;
    s = c.reduce_scatter(kInPlace, out.data(), count, t, op);
  } else {
    s = c.reduce_scatter(in.data(), out.data(), count, t, op);
  }
  const std::string what = fmt::format("reduce_scatter {} {} {} n={} count={} in_place={} rank {}", algo,
                                       to_string(t), to_string(op), n, count, in_place, r);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  auto want = reference(0, n - 1, count * static_cast<size_t>(r), count, t, op, n);
  ASSERT_EQ(first_diff(want, out.data(), count * es, es), -1) << what;
}

class ReduceScatterTest : public ::testing::TestWithParam<int> {};

TEST_P(ReduceScatterTest, RingAndRecursiveDoublingGiveEachRankItsBlock) {
  const int n = GetParam();
  BothAlgorithms f(n, /*with_shm=*/true);  // and small ones through the shared segment
  f.run([n](int r, Communicator& c, const char* algo) {
    const bool all_types = n == 3 || n == 5;
    int k = 0;
    for (DataType t : kAllTypes) {
      if (!all_types && t != DataType::kUint8 && t != DataType::kBFloat16 && t != DataType::kFloat32) continue;
      for (ReduceOp op : kAllOps) {
        if (!valid(t, op)) continue;
        const size_t piece = kPipeline / size_of(t);
        for (size_t count : {size_t{0}, size_t{1}, size_t{11}, piece, 5 * piece + 3}) {
          check_reduce_scatter(r, c, algo, t, op, count, (k++ % 2) == 1);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReduceScatterTest, ::testing::Values(1, 2, 3, 4, 5, 8));

}  // namespace
}  // namespace remora::test
