// The reduce collective (coll/reduce_binomial.cc, coll/reduce_chain.cc; the reduction
// kernels of coll/reduce.cc are reduce_test.cc's) against a sequential reference: the
// tree and the chain, to roots that rotate over every rank, at 1, 2, 3, 4, 5 and 8
// ranks, every type × op at 3 and 5 ranks and a representative few elsewhere, counts
// 0, 1, a prime and around the pipeline piece, in place or not.
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

void check_reduce(int r, Communicator& c, const char* algo, DataType t, ReduceOp op, size_t count, int root,
                  bool in_place) {
  const int n = c.size();
  const size_t es = size_of(t);
  auto in = rank_input(r, count, t, op, n);
  std::vector<std::byte> out(count * es, std::byte{0x5A});
  Status s;
  if (r == root && in_place) {
    out = in;
    s = c.reduce(kInPlace, out.data(), count, t, op, root);
  } else {
    s = c.reduce(in.data(), r == root ? out.data() : nullptr, count, t, op, root);
  }
  const std::string what = fmt::format("reduce {} {} {} n={} count={} root={} in_place={} rank {}", algo,
                                       to_string(t), to_string(op), n, count, root, in_place, r);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  if (r == root) {
    ASSERT_EQ(first_diff(reference(0, n - 1, 0, count, t, op, n), out.data(), out.size(), es), -1) << what;
  }
  if (!(r == root && in_place)) {
    EXPECT_EQ(first_diff(rank_input(r, count, t, op, n), in.data(), in.size(), es), -1) << what << ": send changed";
  }
}

class ReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(ReduceTest, TreeAndChainToEveryKindOfRoot) {
  const int n = GetParam();
  BothAlgorithms f(n);
  f.run([n](int r, Communicator& c, const char* algo) {
    const bool all_types = n == 3 || n == 5;
    int k = 0;
    for (DataType t : kAllTypes) {
      if (!all_types && t != DataType::kInt32 && t != DataType::kFloat16 && t != DataType::kFloat64) continue;
      for (ReduceOp op : kAllOps) {
        if (!valid(t, op)) continue;
        const size_t piece = kPipeline / size_of(t);
        for (size_t count : {size_t{0}, size_t{1}, size_t{13}, piece, 4 * piece + 1, 9 * piece + 7}) {
          const int root = (k++) % n;
          check_reduce(r, c, algo, t, op, count, root, (k % 3) == 0);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReduceTest, ::testing::Values(1, 2, 3, 4, 5, 8));

}  // namespace
}  // namespace remora::test
