// Allgather and allgatherv (coll/allgather_ring.h, coll/allgather_recursive_doubling.cc,
// coll/allgather_bruck.cc) over real loopback meshes of 1..8 ranks: the ring and
// recursive doubling (Bruck off powers of two), in place or not, against a sequential
// reference, byte for byte, for edge counts and for uneven/zero counts with scattered
// displacements. The byte patterns and v-form layouts are in reference.h, the cases in
// movement.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "mesh.h"
#include "movement.h"
#include "reference.h"

namespace remora::test {
namespace {

class AllgatherTest : public MovementTest {};

TEST_P(AllgatherTest, AllgatherWithRingAndRecursiveDoublingIncludingInPlace) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  const auto un = static_cast<size_t>(n());
  run_ranks(ranks, [&](int r, Communicator& world) {
    // "rd" is recursive doubling on powers of two and Bruck on the others.
    for_each_variant(world, {{"auto"}, {"ring", coll::Algo::kAuto, coll::Algo::kRing},
                             {"rd", coll::Algo::kAuto, coll::Algo::kRecursiveDoubling}},
                     [&](Communicator& c, const char* algo) {
      for (const Case& k : kCases) {
        const size_t block = k.count * size_of(k.type);
        Bytes want(un * block);
        for (size_t p = 0; p < un; ++p) {
          Bytes b = pattern(static_cast<int>(p), block);
          std::copy(b.begin(), b.end(), want.begin() + static_cast<ptrdiff_t>(p * block));
        }
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} rank {}{}", algo, describe(k), r, in_place ? " in place" : ""));
          Bytes mine = pattern(r, block);
          Bytes all(un * block, kSentinel);
          if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r) * block));
          Status s = c.allgather(in_place ? kInPlace : mine.data(), all.data(), k.count, k.type);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          ASSERT_TRUE(same(all, want));
        }
      }
    });
  });
}

TEST_P(AllgatherTest, AllgathervWithUnevenCountsAndScatteredDisplacements) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  const auto un = static_cast<size_t>(n());
  run_ranks(ranks, [&](int r, Communicator& c) {
    for (const Case& k : kCases) {
      const size_t elem = size_of(k.type);
      std::vector<size_t> counts(un), displs;
      for (size_t p = 0; p < un; ++p) counts[p] = uneven(k.count, static_cast<int>(p) + 1);
      const size_t total = scattered_layout(counts, &displs);
      Bytes want(total * elem, kSentinel);
      for (size_t p = 0; p < un; ++p) {
        Bytes b = pattern(static_cast<int>(p), counts[p] * elem);
        std::copy(b.begin(), b.end(), want.begin() + static_cast<ptrdiff_t>(displs[p] * elem));
      }
      const auto me = static_cast<size_t>(r);
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(fmt::format("{} rank {}{}", describe(k), r, in_place ? " in place" : ""));
        Bytes mine = pattern(r, counts[me] * elem);
        Bytes all(total * elem, kSentinel);
        if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(displs[me] * elem));
        Status s = c.allgatherv(in_place ? kInPlace : mine.data(), counts[me], all.data(), counts, displs, k.type);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        ASSERT_TRUE(same(all, want));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllgatherTest, ::testing::ValuesIn(kRankCounts), rank_count_name);

}  // namespace
}  // namespace remora::test
