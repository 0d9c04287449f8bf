// Gather and scatter, and their v-forms (coll/gather_linear.cc, coll/scatter_linear.cc),
// over real loopback meshes of 1..8 ranks: from every root, in place or not, against a
// sequential reference, byte for byte, for edge counts and for uneven/zero counts with
// scattered displacements; and ranks that disagree on counts fail with a size error at
// the root instead of writing outside their slot. The byte patterns and v-form layouts
// are in reference.h, the cases in movement.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "mesh.h"
#include "movement.h"
#include "reference.h"

namespace remora::test {
namespace {

class GatherScatterTest : public MovementTest {};

TEST_P(GatherScatterTest, GatherAndScatterFromEveryRootIncludingInPlace) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  const auto un = static_cast<size_t>(n());
  run_ranks(ranks, [&](int r, Communicator& c) {
    for (const Case& k : kCases) {
      const size_t block = k.count * size_of(k.type);
      for (int root = 0; root < n(); ++root) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(fmt::format("{} root {} rank {}{}", describe(k), root, r, in_place ? " in place" : ""));
          // gather: block p of the root's result is rank p's pattern.
          Bytes want(un * block);
          for (size_t p = 0; p < un; ++p) {
            Bytes b = pattern(static_cast<int>(p), block);
            std::copy(b.begin(), b.end(), want.begin() + static_cast<ptrdiff_t>(p * block));
          }
          Bytes mine = pattern(r, block);
          Bytes all(r == root ? un * block : 0, kSentinel);
          const bool ip = in_place && r == root;
          if (ip) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r) * block));
          Status s = c.gather(ip ? kInPlace : mine.data(), all.data(), k.count, k.type, root);
          ASSERT_TRUE(s.is_ok()) << "gather: " << s.to_string();
          if (r == root) {
            ASSERT_TRUE(same(all, want)) << "gather";
          }

          // scatter: rank p gets block p of the root's buffer (the gather's result).
          Bytes src = r == root ? want : Bytes{};
          Bytes got(block, kSentinel);
          s = c.scatter(src.data(), ip ? const_cast<void*>(kInPlace) : got.data(), k.count, k.type, root);
          ASSERT_TRUE(s.is_ok()) << "scatter: " << s.to_string();
          if (ip) {
            ASSERT_TRUE(same(src, want)) << "scatter in place must leave the root's send buffer alone";
          } else {
            ASSERT_TRUE(same(got, pattern(r, block))) << "scatter";
          }
        }
      }
    }
  });
}

TEST_P(GatherScatterTest, GathervAndScattervWithUnevenCountsAndScatteredDisplacements) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  const auto un = static_cast<size_t>(n());
  run_ranks(ranks, [&](int r, Communicator& c) {
    for (const Case& k : kCases) {
      const size_t elem = size_of(k.type);
      std::vector<size_t> counts(un), displs;
      for (size_t p = 0; p < un; ++p) counts[p] = uneven(k.count, static_cast<int>(p));
      const size_t total = scattered_layout(counts, &displs);
      Bytes want(total * elem, kSentinel);
      for (size_t p = 0; p < un; ++p) {
        Bytes b = pattern(static_cast<int>(p), counts[p] * elem);
        std::copy(b.begin(), b.end(), want.begin() + static_cast<ptrdiff_t>(displs[p] * elem));
      }
      const size_t my_count = counts[static_cast<size_t>(r)];
      const size_t my_displ = displs[static_cast<size_t>(r)];
      for (int root = 0; root < n(); ++root) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(fmt::format("{} root {} rank {}{}", describe(k), root, r, in_place ? " in place" : ""));
          const bool ip = in_place && r == root;
          Bytes mine = pattern(r, my_count * elem);
          Bytes all(r == root ? total * elem : 0, kSentinel);
          if (ip) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(my_displ * elem));
          // Only the root's count arrays matter: others pass empty spans.
          std::span<const size_t> rc = r == root ? std::span<const size_t>(counts) : std::span<const size_t>();
          std::span<const size_t> rd = r == root ? std::span<const size_t>(displs) : std::span<const size_t>();
          Status s = c.gatherv(ip ? kInPlace : mine.data(), my_count, all.data(), rc, rd, k.type, root);
          ASSERT_TRUE(s.is_ok()) << "gatherv: " << s.to_string();
          if (r == root) {
            ASSERT_TRUE(same(all, want)) << "gatherv";
          }

          Bytes src = r == root ? want : Bytes{};
          Bytes got(my_count * elem, kSentinel);
          s = c.scatterv(src.data(), rc, rd, ip ? const_cast<void*>(kInPlace) : got.data(), my_count, k.type, root);
          ASSERT_TRUE(s.is_ok()) << "scatterv: " << s.to_string();
          if (ip) {
            ASSERT_TRUE(same(src, want)) << "scatterv in place must leave the root's send buffer alone";
          } else {
            ASSERT_TRUE(same(got, mine)) << "scatterv";
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GatherScatterTest, ::testing::ValuesIn(kRankCounts), rank_count_name);

// --- ranks that disagree ----------------------------------------------------------

TEST(GatherMismatch, GatherWithWrongCountsIsASizeErrorAtTheRootNotCorruption) {
  auto ranks = make_ranks(3, std::chrono::seconds(5));
  constexpr size_t kCount = 1009, kGuard = 64;
  std::vector<Status> results(3);
  Bytes root_buf(3 * kCount + kGuard, kSentinel);
  run_ranks(ranks, [&](int r, Communicator& c) {
    // Rank 1 sends one element short, rank 2 one too many.
    const size_t mine = r == 1 ? kCount - 1 : r == 2 ? kCount + 1 : kCount;
    Bytes send = pattern(r, mine);
    results[static_cast<size_t>(r)] = c.gather(send.data(), r == 0 ? root_buf.data() : nullptr, r == 0 ? kCount : mine,
                                               DataType::kUint8, 0);
  });
  EXPECT_TRUE(size_error(results[0])) << results[0].to_string();
  for (size_t i = 3 * kCount; i < root_buf.size(); ++i) ASSERT_EQ(root_buf[i], kSentinel) << "byte " << i;
  // Rank 2's block would overflow into the guard: nothing of it may land there.
  Bytes block2(root_buf.begin() + 2 * kCount, root_buf.begin() + 3 * kCount);
  EXPECT_TRUE(same(block2, Bytes(kCount, kSentinel)));
}

TEST(GatherMismatch, GathervWithALongerContributionThanItsSlotIsTruncatedAtTheRoot) {
  auto ranks = make_ranks(3, std::chrono::seconds(5));
  std::vector<Status> results(3);
  const std::vector<size_t> counts{3, 5, 4}, displs{20, 0, 10};  // rank 1's slot ends where rank 2's begins
  Bytes root_buf(30, kSentinel);
  run_ranks(ranks, [&](int r, Communicator& c) {
    const size_t mine = r == 1 ? 7 : counts[static_cast<size_t>(r)];
    Bytes send = pattern(r, mine);
    results[static_cast<size_t>(r)] =
        c.gatherv(send.data(), mine, r == 0 ? root_buf.data() : nullptr, counts, displs, DataType::kUint8, 0);
  });
  EXPECT_TRUE(size_error(results[0])) << results[0].to_string();
  // Rank 1's message did not spill into rank 2's slot (nor anywhere else).
  EXPECT_TRUE(same(Bytes(root_buf.begin(), root_buf.begin() + 10), Bytes(10, kSentinel)));
}

}  // namespace
}  // namespace remora::test
