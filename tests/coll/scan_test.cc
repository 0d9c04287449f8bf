// scan and exscan (coll/scan_recursive_doubling.cc) against a sequential reference:
// inclusive and exclusive prefixes of every type × op at 1, 2, 3, 4, 5 and 8 ranks,
// counts 0, 1, 7 and 1031, in place or not; rank 0's exscan result untouched, and
// kAvg refused before anything is sent.
//
// The inputs and the reference are in reference.h.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "mesh.h"
#include "reference.h"

namespace remora::test {
namespace {

void check_scan(int r, Communicator& c, bool exclusive, DataType t, ReduceOp op, size_t count, bool in_place) {
  const int n = c.size();
  const size_t es = size_of(t);
  auto in = rank_input(r, count, t, op, n);
  std::vector<std::byte> out(count * es, std::byte{0x5A});
  if (in_place) out = in;
  const std::vector<std::byte> before = out;
  const void* send = in_place ? kInPlace : in.data();
  Status s = exclusive ? c.exscan(send, out.data(), count, t, op) : c.scan(send, out.data(), count, t, op);
  const std::string what = fmt::format("{} {} {} n={} count={} in_place={} rank {}", exclusive ? "exscan" : "scan",
                                       to_string(t), to_string(op), n, count, in_place, r);
  ASSERT_TRUE(s.is_ok()) << what << ": " << s.to_string();
  if (exclusive && r == 0) {
    ASSERT_EQ(first_diff(before, out.data(), out.size(), es), -1) << what << ": rank 0's recv was touched";
    return;
  }
  auto want = reference(0, exclusive ? r - 1 : r, 0, count, t, op, n);
  ASSERT_EQ(first_diff(want, out.data(), out.size(), es), -1) << what;
}

class ScanTest : public ::testing::TestWithParam<int> {};

TEST_P(ScanTest, InclusiveAndExclusivePrefixes) {
  const int n = GetParam();
  auto ranks = make_ranks(n);
  run_ranks(ranks, [](int r, Communicator& c) {
    int k = 0;
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        if (!valid(t, op)) continue;
        if (op == ReduceOp::kAvg) {
          // Refused before anything is sent: the communicator stays usable.
          std::vector<std::byte> buf(8 * size_of(t));
          EXPECT_EQ(c.scan(kInPlace, buf.data(), 8, t, op).code(), StatusCode::kInvalidArgument);
          EXPECT_EQ(c.exscan(kInPlace, buf.data(), 8, t, op).code(), StatusCode::kInvalidArgument);
          continue;
        }
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1031}}) {
          for (bool exclusive : {false, true}) {
            check_scan(r, c, exclusive, t, op, count, (k++ % 3) == 1);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ScanTest, ::testing::Values(1, 2, 3, 4, 5, 8));

}  // namespace
}  // namespace remora::test
