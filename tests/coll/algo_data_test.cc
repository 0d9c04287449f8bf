// The movement collectives (algo_data.cc) over real loopback meshes of 1..8 ranks:
// every operation against a sequential reference, byte for byte, for edge counts
// (0, 1, a prime, a size that needs many pipeline pieces), every root, in-place
// forms, uneven/zero counts with scattered displacements, each algorithm choice;
// and ranks that disagree on counts fail with a size error instead of corrupting.
// The byte patterns and v-form layouts are in reference.h.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "coll/comm_core.h"
#include "mesh.h"
#include "reference.h"

namespace remora {
namespace {

using test::make_ranks;
using test::pattern;
using test::run_ranks;
using test::scattered_layout;
using test::uneven;
using Bytes = std::vector<uint8_t>;

/// 300 KiB + 13: with 4 KiB pieces a chain broadcast runs 76 pieces, the last short.
constexpr size_t kLarge = 300 * 1024 + 13;
constexpr size_t kPiece = 4096;
constexpr uint8_t kSentinel = 0xEE;

struct Case {
  size_t count;
  DataType type;
};
// 8-byte elements at a prime count check that counts are scaled by the element size.
const Case kCases[] = {{0, DataType::kUint8},
                       {1, DataType::kUint8},
                       {1009, DataType::kUint8},
                       {1009, DataType::kFloat64},
                       {kLarge, DataType::kUint8}};

std::string describe(const Case& c) { return fmt::format("count {} of {}", c.count, to_string(c.type)); }

::testing::AssertionResult same(const Bytes& got, const Bytes& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " where " << want.size() << " was expected";
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << "first difference at byte " << i << " of " << got.size() << ": got "
                                           << int{got[i]} << ", want " << int{want[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

/// A communicator over the same mesh with its own configuration (a fresh id keeps
/// its traffic apart from the world communicator's).
std::unique_ptr<Communicator> with_config(Communicator& c, uint32_t id, coll::CollConfig config) {
  std::vector<int> members(static_cast<size_t>(c.size()));
  std::iota(members.begin(), members.end(), 0);
  return coll::CommAccess::make(std::make_shared<coll::CommCore>(coll::CommAccess::core(c).world_ptr(), id,
                                                                 std::move(members), c.rank(), config));
}

struct Variant {
  const char* name;
  coll::Algo broadcast = coll::Algo::kAuto;
  coll::Algo allgather = coll::Algo::kAuto;
};

/// Runs body(comm, variant name) once per configuration, each on its own communicator.
void for_each_variant(Communicator& world, std::initializer_list<Variant> variants,
                      const std::function<void(Communicator&, const char*)>& body) {
  uint32_t id = 100;
  for (const Variant& v : variants) {
    coll::CollConfig config = coll::CommAccess::core(world).config();
    config.pipeline_bytes = kPiece;
    config.broadcast = v.broadcast;
    config.allgather = v.allgather;
    auto comm = with_config(world, id++, config);
    body(*comm, v.name);
  }
}

class AlgoData : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

TEST_P(AlgoData, BarrierLetsNobodyThroughBeforeEveryoneArrived) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  std::atomic<int> arrived{0};
  run_ranks(ranks, [&](int r, Communicator& c) {
    for (int round = 1; round <= 5; ++round) {
      arrived.fetch_add(1);
      ASSERT_TRUE(c.barrier().is_ok()) << "rank " << r;
      EXPECT_GE(arrived.load(), round * n()) << "rank " << r << " left round " << round << " early";
    }
    ASSERT_TRUE(c.ibarrier().wait(std::chrono::seconds(10)).is_ok());
  });
}

TEST_P(AlgoData, BroadcastFromEveryRootWithTreeAndChain) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  run_ranks(ranks, [&](int r, Communicator& world) {
    for_each_variant(world, {{"auto"}, {"tree", coll::Algo::kTree}, {"chain", coll::Algo::kChain}},
                     [&](Communicator& c, const char* algo) {
      for (const Case& k : kCases) {
        const size_t bytes = k.count * size_of(k.type);
        for (int root = 0; root < n(); ++root) {
          Bytes buf = r == root ? pattern(root, bytes) : Bytes(bytes, kSentinel);
          Status s = c.broadcast(buf.data(), k.count, k.type, root);
          ASSERT_TRUE(s.is_ok()) << algo << " " << describe(k) << " root " << root << ": " << s.to_string();
          ASSERT_TRUE(same(buf, pattern(root, bytes))) << algo << " " << describe(k) << " root " << root << " rank " << r;
        }
      }
    });
  });
}

TEST_P(AlgoData, GatherAndScatterFromEveryRootIncludingInPlace) {
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

TEST_P(AlgoData, GathervAndScattervWithUnevenCountsAndScatteredDisplacements) {
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

TEST_P(AlgoData, AllgatherWithRingAndRecursiveDoublingIncludingInPlace) {
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

TEST_P(AlgoData, AllgathervWithUnevenCountsAndScatteredDisplacements) {
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

TEST_P(AlgoData, AlltoallAndAlltoallv) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  const auto un = static_cast<size_t>(n());
  // What rank `from` puts in its block for rank `to`: distinct per (from, to).
  auto block_of = [&](size_t from, size_t to, size_t bytes) { return pattern(static_cast<int>(from * un + to), bytes); };
  run_ranks(ranks, [&](int r, Communicator& c) {
    const auto me = static_cast<size_t>(r);
    for (const Case& k : kCases) {
      SCOPED_TRACE(fmt::format("{} rank {}", describe(k), r));
      const size_t elem = size_of(k.type);
      const size_t block = k.count * elem;
      Bytes send(un * block), want(un * block), got(un * block, kSentinel);
      for (size_t p = 0; p < un; ++p) {
        Bytes out = block_of(me, p, block), in = block_of(p, me, block);
        std::copy(out.begin(), out.end(), send.begin() + static_cast<ptrdiff_t>(p * block));
        std::copy(in.begin(), in.end(), want.begin() + static_cast<ptrdiff_t>(p * block));
      }
      Status s = c.alltoall(send.data(), got.data(), k.count, k.type);
      ASSERT_TRUE(s.is_ok()) << "alltoall: " << s.to_string();
      ASSERT_TRUE(same(got, want)) << "alltoall";

      // alltoallv: rank a sends count(a, b) elements to b, some of them zero.
      auto count = [&](size_t a, size_t b) -> size_t {
        return k.count == 0 || (a + 2 * b) % 4 == 0 ? 0 : k.count + a * 2 + b;
      };
      std::vector<size_t> scounts(un), rcounts(un), sdispls, rdispls;
      for (size_t p = 0; p < un; ++p) {
        scounts[p] = count(me, p);
        rcounts[p] = count(p, me);
      }
      const size_t stotal = scattered_layout(scounts, &sdispls);
      const size_t rtotal = scattered_layout(rcounts, &rdispls) + 7;
      Bytes vsend(stotal * elem, kSentinel), vwant(rtotal * elem, kSentinel), vgot(rtotal * elem, kSentinel);
      for (size_t p = 0; p < un; ++p) {
        Bytes out = block_of(me, p, scounts[p] * elem), in = block_of(p, me, rcounts[p] * elem);
        std::copy(out.begin(), out.end(), vsend.begin() + static_cast<ptrdiff_t>(sdispls[p] * elem));
        std::copy(in.begin(), in.end(), vwant.begin() + static_cast<ptrdiff_t>(rdispls[p] * elem));
      }
      s = c.alltoallv(vsend.data(), scounts, sdispls, vgot.data(), rcounts, rdispls, k.type);
      ASSERT_TRUE(s.is_ok()) << "alltoallv: " << s.to_string();
      ASSERT_TRUE(same(vgot, vwant)) << "alltoallv";
    }
  });
}

TEST_P(AlgoData, AsynchronousFormsRunInOrder) {
  auto ranks = make_ranks(n(), std::chrono::seconds(10));
  const auto un = static_cast<size_t>(n());
  run_ranks(ranks, [&](int r, Communicator& c) {
    const size_t count = 1009;
    Bytes b = r == n() - 1 ? pattern(n() - 1, count) : Bytes(count, kSentinel);
    Bytes mine = pattern(r, count), all(un * count, kSentinel), want;
    for (int p = 0; p < n(); ++p) {
      Bytes x = pattern(p, count);
      want.insert(want.end(), x.begin(), x.end());
    }
    std::vector<Request> reqs{c.ibroadcast(b.data(), count, DataType::kUint8, n() - 1), c.ibarrier(),
                              c.iallgather(mine.data(), all.data(), count, DataType::kUint8)};
    ASSERT_TRUE(wait_all(reqs, std::chrono::seconds(10)).is_ok());
    EXPECT_TRUE(same(b, pattern(n() - 1, count)));
    EXPECT_TRUE(same(all, want));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AlgoData, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param); });

// --- ranks that disagree ----------------------------------------------------------

bool size_error(const Status& s) {
  return s.code() == StatusCode::kProtocol || s.code() == StatusCode::kTruncated;
}

TEST(AlgoDataMismatch, GatherWithWrongCountsIsASizeErrorAtTheRootNotCorruption) {
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

TEST(AlgoDataMismatch, LargeBroadcastLongerThanTheReceiverIsTruncatedOnBothSides) {
  auto ranks = make_ranks(2, std::chrono::seconds(5));
  std::vector<Status> results(2);
  constexpr size_t kSent = 200 * 1024, kPosted = 150 * 1024, kGuard = 64;  // rendezvous sizes
  Bytes recv_buf(kPosted + kGuard, kSentinel);
  run_ranks(ranks, [&](int r, Communicator& c) {
    Bytes data = pattern(0, kSent);
    results[static_cast<size_t>(r)] =
        r == 0 ? c.broadcast(data.data(), kSent, DataType::kUint8, 0) : c.broadcast(recv_buf.data(), kPosted, DataType::kUint8, 0);
  });
  EXPECT_TRUE(size_error(results[1])) << results[1].to_string();
  EXPECT_FALSE(results[0].is_ok());
  for (size_t i = kPosted; i < recv_buf.size(); ++i) ASSERT_EQ(recv_buf[i], kSentinel) << "byte " << i;
}

TEST(AlgoDataMismatch, LargeChainBroadcastShorterThanExpectedIsAProtocolError) {
  auto ranks = make_ranks(3, std::chrono::seconds(5));
  std::vector<Status> results(3);
  run_ranks(ranks, [&](int r, Communicator& world) {
    coll::CollConfig config = coll::CommAccess::core(world).config();
    config.pipeline_bytes = kPiece;
    config.broadcast = coll::Algo::kChain;
    auto c = with_config(world, 7, config);
    // The root's message ends half a piece early: the last piece is short.
    const size_t count = r == 0 ? 10 * kPiece + kPiece / 2 : 11 * kPiece;
    Bytes buf = pattern(0, count);
    results[static_cast<size_t>(r)] = c->broadcast(buf.data(), count, DataType::kUint8, 0);
  });
  EXPECT_EQ(results[1].code(), StatusCode::kProtocol) << results[1].to_string();
  EXPECT_FALSE(results[2].is_ok());
}

TEST(AlgoDataMismatch, AlltoallWithOneRankOffByOneFailsWithSizeErrors) {
  auto ranks = make_ranks(4, std::chrono::seconds(5));
  std::vector<Status> results(4);
  run_ranks(ranks, [&](int r, Communicator& c) {
    const size_t count = r == 3 ? 1010 : 1009;
    Bytes send = pattern(r, 4 * count), recv(4 * count, kSentinel);
    results[static_cast<size_t>(r)] = c.alltoall(send.data(), recv.data(), count, DataType::kUint8);
  });
  // Everyone receives a block of the wrong size from rank 3 (too long) or, at rank 3,
  // from everyone else (too short); all of them see some failure.
  EXPECT_TRUE(size_error(results[3])) << results[3].to_string();
  for (const Status& s : results) EXPECT_FALSE(s.is_ok());
}

TEST(AlgoDataMismatch, GathervWithALongerContributionThanItsSlotIsTruncatedAtTheRoot) {
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

TEST(AlgoDataMismatch, ARootBroadcastingNothingToRanksThatExpectDataIsAProtocolError) {
  auto ranks = make_ranks(3, std::chrono::seconds(5));
  std::vector<Status> results(3);
  run_ranks(ranks, [&](int r, Communicator& c) {
    Bytes buf(10, kSentinel);
    results[static_cast<size_t>(r)] = c.broadcast(buf.data(), r == 0 ? 0 : 10, DataType::kUint8, 0);
  });
  EXPECT_EQ(results[1].code(), StatusCode::kProtocol) << results[1].to_string();
  EXPECT_FALSE(results[2].is_ok());
}

}  // namespace
}  // namespace remora
