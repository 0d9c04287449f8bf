// The communicator's shared segment (coll/shm_segment.cc): ranks of one host (here,
// threads of one process with their own Contexts and real loopback endpoints) take small
// barriers, allreduces, reduces, broadcasts and allgathers through memory they all map,
// and larger ones by messages; a rank with REMORA_SAME_HOST=off is a group of its own,
// whose leader meets the other groups' by messages (the hierarchical path); one with
// REMORA_COLL_SHM=0 keeps the whole communicator on messages; ranks that disagree on the call fail at once; a rank that aborts, a segment
// scribbled over and a rank that never comes each end the others' wait with an error.
// Every type and operation through the segment is in allreduce_test.cc (the "auto (shm)"
// communicator).
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "mesh.h"
#include "reduction.h"
#include "reference.h"

namespace remora::test {
namespace {

using namespace std::chrono_literals;

/// Allreduce of `count` elements of `t` with `op` on rank r, checked against the reference.
void expect_allreduce(int r, Communicator& c, DataType t, ReduceOp op, size_t count) {
  const int n = c.size();
  auto in = rank_input(r, count, t, op, n);
  std::vector<std::byte> out(in.size(), std::byte{0x5A});
  Status s = c.allreduce(in.data(), out.data(), count, t, op);
  ASSERT_TRUE(s.is_ok()) << "rank " << r << " count " << count << ": " << s.to_string();
  auto want = reference(0, n - 1, 0, count, t, op, n);
  EXPECT_EQ(first_diff(want, out.data(), out.size(), size_of(t)), -1) << "rank " << r << " count " << count;
}

/// The byte at `i` of rank r's data in round `salt`.
std::byte pattern(int r, size_t i, int salt) {
  return static_cast<std::byte>((static_cast<size_t>(r) * 131 + i * 7 + static_cast<size_t>(salt) * 29) & 0xFF);
}

/// Float32 sums of `count` elements reduced to every root in turn, exact at the root.
void expect_reduce_to_every_root(int r, Communicator& c, size_t count) {
  const int n = c.size();
  for (int root = 0; root < n; ++root) {
    auto in = rank_input(r, count, DataType::kFloat32, ReduceOp::kSum, n);
    std::vector<std::byte> out(in.size(), std::byte{0x5A});
    ASSERT_TRUE(c.reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, root).is_ok());
    if (r == root) {
      EXPECT_EQ(
          first_diff(reference(0, n - 1, 0, count, DataType::kFloat32, ReduceOp::kSum, n), out.data(), out.size(), 4),
          -1)
          << "reduce of " << count << " to " << root;
    }
  }
}

/// An allgather of blocks of `block` bytes, rank r's the pattern of round `salt` (from
/// its place in the result when `in_place`), exact.
void expect_allgather(int r, Communicator& c, size_t block, int salt, bool in_place) {
  const auto n = static_cast<size_t>(c.size());
  std::vector<std::byte> mine(block), all(block * n, std::byte{0xEE});
  for (size_t i = 0; i < block; ++i) mine[i] = pattern(r, i, salt);
  if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(r) * block);
  ASSERT_TRUE(c.allgather(in_place ? kInPlace : mine.data(), all.data(), block, DataType::kUint8).is_ok());
  for (size_t from = 0; from < n; ++from) {
    for (size_t i = 0; i < block; ++i) {
      ASSERT_EQ(all[from * block + i], pattern(static_cast<int>(from), i, salt))
          << "rank " << r << ": allgather of " << block << ", rank " << from << "'s byte " << i;
    }
  }
}

/// An allgatherv whose rank i's block is counts[i] bytes, in reverse rank order with a
/// gap of 3 bytes before each, so blocks lie neither in order nor together: every block
/// exact, every gap untouched.
void expect_allgatherv(int r, Communicator& c, std::span<const size_t> counts, int salt, bool in_place) {
  const auto n = static_cast<size_t>(c.size()), me = static_cast<size_t>(r);
  std::vector<size_t> displs(n);
  size_t end = 0;
  for (size_t i = n; i-- > 0;) {
    displs[i] = end + 3;
    end = displs[i] + counts[i];
  }
  std::vector<std::byte> mine(counts[me]), all(end, std::byte{0xEE});
  for (size_t i = 0; i < counts[me]; ++i) mine[i] = pattern(r, i, salt);
  if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(displs[me]));
  ASSERT_TRUE(c.allgatherv(in_place ? kInPlace : mine.data(), counts[me], all.data(), counts, displs, DataType::kUint8)
                  .is_ok());
  for (size_t from = 0; from < n; ++from) {
    for (size_t i = 0; i < 3; ++i) ASSERT_EQ(all[displs[from] - 3 + i], std::byte{0xEE}) << "gap before " << from;
    for (size_t i = 0; i < counts[from]; ++i) {
      ASSERT_EQ(all[displs[from] + i], pattern(static_cast<int>(from), i, salt))
          << "rank " << r << ": allgatherv, rank " << from << "'s byte " << i << " of " << counts[from];
    }
  }
}

/// An alltoall of blocks of `block` bytes, each distinct per (sender, receiver) and
/// round `salt`, exact.
void expect_alltoall(int r, Communicator& c, size_t block, int salt) {
  const auto n = static_cast<size_t>(c.size()), me = static_cast<size_t>(r);
  auto byte_of = [salt](size_t from, size_t to, size_t i) {
    return static_cast<std::byte>((from * 37 + to * 11 + i * 5 + static_cast<size_t>(salt)) & 0xFF);
  };
  std::vector<std::byte> send(n * block), got(n * block, std::byte{0xEE});
  for (size_t to = 0; to < n; ++to) {
    for (size_t i = 0; i < block; ++i) send[to * block + i] = byte_of(me, to, i);
  }
  ASSERT_TRUE(c.alltoall(send.data(), got.data(), block, DataType::kUint8).is_ok()) << "block " << block;
  for (size_t from = 0; from < n; ++from) {
    for (size_t i = 0; i < block; ++i) {
      ASSERT_EQ(got[from * block + i], byte_of(from, me, i))
          << "rank " << r << ": alltoall of " << block << ", rank " << from << "'s byte " << i;
    }
  }
}

/// Messages this rank's communicator has sent to all its peers so far.
uint64_t messages_sent(Communicator& c) {
  coll::World& world = coll::CommAccess::core(c).world();
  uint64_t sent = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (Endpoint* ep = world.connected(r)) sent += ep->stats().messages_sent;
  }
  return sent;
}

/// An alltoallv in which rank `from` sends `count(from, to)` elements of `t` to rank
/// `to`, both sides laid out in reverse rank order with gaps (scattered_layout); every
/// byte distinct per (sender, receiver) and round `salt`, exact, and the gaps of the
/// receive buffer untouched. Returns the messages this rank sent for it.
uint64_t expect_alltoallv(int r, Communicator& c, DataType t, const std::function<size_t(size_t, size_t)>& count,
                          int salt, const CollectiveOptions& options = {}) {
  const auto n = static_cast<size_t>(c.size()), me = static_cast<size_t>(r), e = size_of(t);
  auto byte_of = [salt](size_t from, size_t to, size_t i) {
    return static_cast<std::byte>((from * 37 + to * 11 + i * 5 + static_cast<size_t>(salt)) & 0xFF);
  };
  std::vector<size_t> scounts(n), rcounts(n), sdispls, rdispls;
  for (size_t p = 0; p < n; ++p) {
    scounts[p] = count(me, p);
    rcounts[p] = count(p, me);
  }
  std::vector<std::byte> send(scattered_layout(scounts, &sdispls) * e, std::byte{0xEE});
  std::vector<std::byte> want(scattered_layout(rcounts, &rdispls) * e, std::byte{0xEE});
  std::vector<std::byte> got = want;
  for (size_t p = 0; p < n; ++p) {
    for (size_t i = 0; i < scounts[p] * e; ++i) send[sdispls[p] * e + i] = byte_of(me, p, i);
    for (size_t i = 0; i < rcounts[p] * e; ++i) want[rdispls[p] * e + i] = byte_of(p, me, i);
  }
  const uint64_t before = messages_sent(c);
  Status s = c.alltoallv(send.data(), scounts, sdispls, got.data(), rcounts, rdispls, t, options);
  EXPECT_TRUE(s.is_ok()) << "rank " << r << ": " << s.to_string();
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      ADD_FAILURE() << "rank " << r << ": alltoallv round " << salt << ", byte " << i << " of " << want.size();
      break;
    }
  }
  return messages_sent(c) - before;
}

/// Elements of `e` bytes to each other rank of `n` that fill a slot of `slot` bytes after
/// an alltoallv's header of counts (16 bytes per rank, in steps of 64); and how many
/// more to one of them put a rank's blocks one element over the slot.
std::pair<size_t, size_t> filling_the_slot(size_t n, size_t slot, size_t e) {
  const size_t room = slot - (16 * n + 63) / 64 * 64;
  const size_t most = room / (n - 1) / e;
  return {most, (room - (n - 1) * most * e) / e + 1};
}
/// Alltoallv counts from rank a to rank b: zeros where (a + 2b) % 4 == 0, otherwise
/// `base` and a few more that differ per pair.
std::function<size_t(size_t, size_t)> uneven_counts(size_t base) {
  return [base](size_t a, size_t b) { return (a + 2 * b) % 4 == 0 ? 0 : base + a * 2 + b; };
}
/// `most` to every other rank (3 to itself); with `more`, that many more from rank 1 to
/// rank 0 (and none to itself).
std::function<size_t(size_t, size_t)> full_counts(size_t most, size_t more = 0) {
  return [most, more](size_t a, size_t b) {
    if (a == b) return more > 0 ? size_t{0} : size_t{3};
    return most + (a == 1 && b == 0 ? more : 0);
  };
}

/// A communicator of `n` ranks of which those in `alone`/// A communicator of `n` ranks of which those in `alone` (a bit per rank) have
/// REMORA_SAME_HOST=off: each is a group of its own, and the others share a segment.
/// With none alone, every call through the segment is one round ("shm"); otherwise the
/// groups' leaders exchange by messages in between ("hier").
struct Layout {
  int n;
  unsigned alone = 0;
  const char* path() const { return alone == 0 ? "shm" : "hier"; }
};

std::vector<Rank> make_layout(const Layout& l) {
  return make_ranks(l.n, 30s, [&](int r) {
    ContextOptions o{.ignore_env = true};
    if ((l.alone >> r) & 1u) o.same_host_pulls = false;
    return o;
  });
}

/// Runs `body(r, c)` on every rank r of `layout`, c its communicator taking small calls
/// through the segments (shm_config).
void run_layout(const Layout& layout, const std::function<void(int, Communicator&)>& body) {
  auto ranks = make_layout(layout);
  auto comms = with_config(ranks, shm_config(), 7);
  run_ranks(ranks, [&](int r, Communicator&) { body(r, *comms[static_cast<size_t>(r)]); });
}

class ShmSegmentRanks : public ::testing::TestWithParam<Layout> {};

TEST_P(ShmSegmentRanks, SmallCallsGoThroughTheSegmentAndLargerOnesByMessagesAllExact) {
  const Layout layout = GetParam();
  const int n = layout.n;
  const size_t slot = shm_config().shm_bytes;
  const std::string path = layout.path();
  run_layout(layout, [&](int r, Communicator& c) {
    // Before the first barrier or allreduce the segment is not set up yet.
    EXPECT_NE(c.algorithm(CollectiveKind::kBarrier, 0).name, path);
    EXPECT_EQ(c.connections().segment_ranks, 0);
    EXPECT_EQ(c.connections().no_segment, "not set up yet");
    ASSERT_TRUE(c.barrier().is_ok());
    EXPECT_EQ(c.algorithm(CollectiveKind::kBarrier, 0).name, path);
    // connections() says how many map this rank's segment, or why it has none.
    const ConnectionStats held = c.connections();
    const bool alone = ((layout.alone >> r) & 1u) != 0;
    EXPECT_EQ(held.segment_ranks, alone ? 0 : n - std::popcount(layout.alone)) << "rank " << r;
    EXPECT_EQ(held.no_segment, alone ? "REMORA_SAME_HOST=off" : "") << "rank " << r;
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, 8).name, path);
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, slot).name, path);
    EXPECT_NE(c.algorithm(CollectiveKind::kAllreduce, slot + 4).name, path);
    EXPECT_NE(c.algorithm(CollectiveKind::kAllreduce, 8, {.algorithm = CollAlgorithm::kRecursiveDoubling}).name, path);
    // Sizes on both sides of the slot, alternating paths, so that buffers of both
    // parities are written while other ranks may still be a round behind.
    for (int round = 0; round < 3; ++round) {
      for (size_t count : {size_t{1}, size_t{2}, slot / 4 - 1, slot / 4, slot / 4 + 1, size_t{3}, 5 * slot / 4}) {
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, count);
        if (::testing::Test::HasFatalFailure()) return;
        ASSERT_TRUE(c.barrier().is_ok());
      }
      expect_allreduce(r, c, DataType::kInt64, ReduceOp::kMax, slot / 8);
      expect_allreduce(r, c, DataType::kFloat64, ReduceOp::kAvg, 33);
    }
    // Reduce_scatters whose whole input fits a slot go through it as an allreduce, each
    // rank keeping its block; one element more per block goes by messages. In place every
    // other call, back to back with allreduces.
    const auto nn = static_cast<size_t>(n);
    EXPECT_EQ(c.algorithm(CollectiveKind::kReduceScatter, slot / nn).name, path);
    EXPECT_NE(c.algorithm(CollectiveKind::kReduceScatter, slot / nn + 4).name, path);
    EXPECT_NE(c.algorithm(CollectiveKind::kReduceScatter, 4, {.algorithm = CollAlgorithm::kRecursiveDoubling}).name,
              path);
    int k = 0;
    for (const auto& [type, rop] :
         {std::pair{DataType::kFloat32, ReduceOp::kSum}, std::pair{DataType::kFloat64, ReduceOp::kAvg},
          std::pair{DataType::kInt64, ReduceOp::kMax}, std::pair{DataType::kBFloat16, ReduceOp::kMin}}) {
      const size_t es = size_of(type);
      for (size_t block : {size_t{1}, size_t{3}, slot / nn / es, slot / nn / es + 1}) {
        auto input = rank_input(r, block * nn, type, rop, n);
        const bool in_place = ++k % 2 == 0;
        std::vector<std::byte> got = in_place ? input : std::vector<std::byte>(block * es, std::byte{0x5A});
        Status s = c.reduce_scatter(in_place ? kInPlace : input.data(), got.data(), block, type, rop);
        ASSERT_TRUE(s.is_ok()) << "rank " << r << " block " << block << ": " << s.to_string();
        EXPECT_EQ(first_diff(reference(0, n - 1, block * static_cast<size_t>(r), block, type, rop, n), got.data(),
                             block * es, es),
                  -1)
            << "rank " << r << " reduce_scatter of " << block << (in_place ? " in place" : "");
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 2);
      }
    }
    // A named algorithm goes by messages even when small; every rank names it.
    auto in = rank_input(r, 4, DataType::kInt32, ReduceOp::kSum, n);
    std::vector<std::byte> out(in.size());
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), 4, DataType::kInt32, ReduceOp::kSum,
                            {.algorithm = CollAlgorithm::kRecursiveDoubling})
                    .is_ok());
    EXPECT_EQ(first_diff(reference(0, n - 1, 0, 4, DataType::kInt32, ReduceOp::kSum, n), out.data(), out.size(), 4),
              -1);
  });
}

TEST_P(ShmSegmentRanks, BroadcastsReducesAndAllgathersGoThroughTheSegmentAllExact) {
  const Layout layout = GetParam();
  const int n = layout.n;
  const size_t slot = shm_config().shm_bytes;
  const std::string path = layout.path();
  run_layout(layout, [&](int r, Communicator& c) {
    // Set up by the first of them, a broadcast.
    int salt = 0;
    // Above the slot by messages: the tree, and from 64 KiB the chain (host by host
    // where the groups are not in rank order).
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{40}, size_t{41}, slot, slot + 1, size_t{200'003}}) {
      for (int root = 0; root < n; ++root, ++salt) {
        std::vector<std::byte> buf(bytes);
        for (size_t i = 0; i < bytes; ++i) buf[i] = r == root ? pattern(root, i, salt) : std::byte{0xEE};
        ASSERT_TRUE(c.broadcast(buf.data(), bytes, DataType::kUint8, root).is_ok());
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(buf[i], pattern(root, i, salt)) << "broadcast of " << bytes << " from " << root << ", byte " << i;
        }
      }
    }
    EXPECT_EQ(c.algorithm(CollectiveKind::kBroadcast, slot).name, path);
    EXPECT_NE(c.algorithm(CollectiveKind::kBroadcast, slot + 1).name, path);
    EXPECT_EQ(c.algorithm(CollectiveKind::kReduce, 8).name, path);
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllgather, slot).name, path);
    EXPECT_NE(c.algorithm(CollectiveKind::kAllgather, slot + 1).name, path);
    for (size_t count : {size_t{1}, size_t{10}, size_t{11}, slot / 4, slot / 4 + 1}) {
      expect_reduce_to_every_root(r, c, count);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // A hierarchical allgather's result reaches the groups in rounds of a slot: one, or
    // several with the last one full or not; in place every other call.
    for (size_t block : {size_t{0}, size_t{1}, size_t{40}, size_t{41}, slot / 2 + 1, slot, slot + 1, 3 * slot + 7}) {
      ++salt;
      expect_allgather(r, c, block, salt, salt % 2 == 0);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

// Alltoalls whose send buffer fits a slot go through the segments: where one group
// holds every rank each rank publishes its buffer and takes its block out of each
// other's; over several groups the leaders exchange their groups' blocks by messages
// and hand them back. Larger ones, or pairwise named, by messages. Blocks distinct per
// (sender, receiver), exact, back to back with allreduces.
TEST_P(ShmSegmentRanks, SmallAlltoallsGoThroughTheSegmentsAllExact) {
  const Layout layout = GetParam();
  const auto n = static_cast<size_t>(layout.n);
  const size_t slot = shm_config().shm_bytes;
  run_layout(layout, [&](int r, Communicator& c) {
    ASSERT_TRUE(c.barrier().is_ok());  // sets the segment up: an alltoall does not
    EXPECT_EQ(c.algorithm(CollectiveKind::kAlltoall, slot / n).name, layout.path());
    EXPECT_EQ(c.algorithm(CollectiveKind::kAlltoall, slot / n + 1).name, "pairwise");
    EXPECT_EQ(c.algorithm(CollectiveKind::kAlltoall, 8, {.algorithm = CollAlgorithm::kPairwise}).name, "pairwise");
    int salt = 0;
    for (int round = 0; round < 2; ++round) {
      for (size_t block : {size_t{0}, size_t{1}, 40 / n, 40 / n + 1, size_t{1000}, slot / n, slot / n + 1}) {
        expect_alltoall(r, c, block, ++salt);
        if (::testing::Test::HasFatalFailure()) return;
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 3);
      }
    }
  });
}

// Alltoallvs go through the segments where every rank's blocks for the others fit a
// slot after a header of its counts (64 bytes per 4 ranks): in one group no rank sends
// a message; over several only the leaders do (the ranks apart and the shared group's
// lowest). Where one rank's do not fit (even the others' all do), or pairwise is named,
// every rank runs them by messages. Counts with zeros, scattered displacements, 1-, 4-
// and 8-byte types, exact, back to back with allreduces.
TEST_P(ShmSegmentRanks, SmallAlltoallvsGoThroughTheSegmentsAllExact) {
  const Layout layout = GetParam();
  const auto n = static_cast<size_t>(layout.n);
  const size_t slot = shm_config().shm_bytes;
  const int leader = std::countr_one(layout.alone);  // the shared group's lowest rank
  run_layout(layout, [&](int r, Communicator& c) {
    // Through the segments, this rank sends no message.
    const bool quiet = layout.alone == 0 || (((layout.alone >> r) & 1u) == 0 && r != leader);
    ASSERT_TRUE(c.barrier().is_ok());  // sets the segment up: an alltoallv does not
    int salt = 0;
    for (const DataType t : {DataType::kUint8, DataType::kInt32, DataType::kFloat64}) {
      const size_t e = size_of(t);
      const auto [most, over] = filling_the_slot(n, slot, e);
      for (int round = 0; round < 2; ++round) {
        const uint64_t few = expect_alltoallv(r, c, t, uneven_counts(0), ++salt);
        if (quiet) {
          EXPECT_EQ(few, 0u) << "counts of 0 to a few elements";
        }
        const uint64_t some = expect_alltoallv(r, c, t, uneven_counts(1000 / e / n), ++salt);
        if (quiet) {
          EXPECT_EQ(some, 0u) << "about 1000 bytes";
        }
        if (::testing::Test::HasFatalFailure()) return;
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 3);
        const uint64_t full = expect_alltoallv(r, c, t, full_counts(most), ++salt);
        if (quiet) {
          EXPECT_EQ(full, 0u) << "a slot's worth to every other rank";
        }
        EXPECT_GT(expect_alltoallv(r, c, t, full_counts(most, over), ++salt), 0u) << "rank 1's one over the slot";
        EXPECT_GT(expect_alltoallv(r, c, t, full_counts(most), ++salt, {.algorithm = CollAlgorithm::kPairwise}), 0u);
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 3);
      }
    }
  });
}

// Reductions too large for the segment, by messages: the chain of a reduce to every
// root, the ring of a reduce-scatter (in place every other call) and an allreduce (the
// ring, or where some ranks are apart, two levels over one lane per group: the lane of
// the widest takes the blocks of one to four ranks past it), back to back without
// barriers. Where the groups are not in rank order they run host by host
// (their own ring state, the root's place in that order, each block still its rank's).
TEST_P(ShmSegmentRanks, LargeReducesReduceScattersAndAllreducesByMessagesAllExact) {
  const Layout layout = GetParam();
  const int n = layout.n;
  const auto nn = static_cast<size_t>(n);
  run_layout(layout, [&](int r, Communicator& c) {
    ASSERT_TRUE(c.barrier().is_ok());
    const size_t large = 64 * 1024;  // the ring and the chain from here above 2 ranks
    if (n > 2) {
      EXPECT_EQ(c.algorithm(CollectiveKind::kReduce, large).name, "chain");
      EXPECT_EQ(c.algorithm(CollectiveKind::kReduceScatter, (large + nn - 1) / nn).name, "ring");
      // Where some ranks are alone, the lanes: one per group.
      EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, large).name, layout.alone == 0 ? "ring" : "hier");
    }
    for (size_t count : {large / 4, large / 4 + 13}) {
      expect_reduce_to_every_root(r, c, count);
      if (::testing::Test::HasFatalFailure()) return;
    }
    int k = 0;
    for (size_t block : {large / 4 / nn + 1, large / 4 / nn + 1000, 3 * large / 4}) {
      for (int round = 0; round < 2; ++round, ++k) {
        auto in = rank_input(r, block * nn, DataType::kInt32, ReduceOp::kSum, n);
        const bool in_place = k % 2 == 1;
        std::vector<std::byte> out = in_place ? in : std::vector<std::byte>(block * 4, std::byte{0x5A});
        ASSERT_TRUE(c.reduce_scatter(in_place ? kInPlace : in.data(), out.data(), block, DataType::kInt32,
                                     ReduceOp::kSum)
                        .is_ok());
        EXPECT_EQ(first_diff(reference(0, n - 1, block * static_cast<size_t>(r), block, DataType::kInt32,
                                       ReduceOp::kSum, n),
                             out.data(), block * 4, 4),
                  -1)
            << "reduce_scatter of " << block << (in_place ? " in place" : "");
      }
    }
    expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, large / 4 + 1);
    expect_allreduce(r, c, DataType::kFloat64, ReduceOp::kAvg, 3 * large / 8 + 5);
    expect_allreduce(r, c, DataType::kInt64, ReduceOp::kMax, large);
    // Over one lane a group: 5.2 MB from each rank past it, in pieces of 1 MiB, more than
    // the lane's window of four.
    expect_allreduce(r, c, DataType::kInt32, ReduceOp::kSum, 1'300'001);
  });
}

// Groups of one host, some of them alone: {0..n-1}; {0,1}{2}; {0}{1,2,3}; {0,2,4}{1}{3};
// {0,1,2,3,5}{4}.
INSTANTIATE_TEST_SUITE_P(Layouts, ShmSegmentRanks,
                         ::testing::Values(Layout{2}, Layout{3}, Layout{4}, Layout{5}, Layout{3, 0b100},
                                           Layout{4, 0b1}, Layout{5, 0b1010}, Layout{6, 0b10000}),
                         [](const ::testing::TestParamInfo<Layout>& p) {
                           std::string name = std::to_string(p.param.n);
                           for (int r = 0; r < p.param.n; ++r) {
                             if ((p.param.alone >> r) & 1u) name += "_alone" + std::to_string(r);
                           }
                           return name;
                         });

/// `n` ranks of this host in groups of at most `group` (REMORA_COLL_SHM_GROUP): the
/// fewest groups that hold them, of sizes that differ by one at most, the larger first.
/// Large allreduces run in two levels over as many lanes as the narrowest group has
/// ranks, and where that is two or more, large reduce_scatters and allgathers do too.
struct Groups {
  int n;
  int group;
  int groups() const { return (n + group - 1) / group; }
  int widest() const { return (n + groups() - 1) / groups(); }
  int narrowest() const { return n / groups(); }
  bool two_level() const { return n % groups() == 0; }
  int lanes() const { return groups() > 1 && widest() >= 2 ? narrowest() : 0; }
  bool blocks_take_lanes() const { return lanes() >= 2 && widest() <= 2 * lanes(); }
  /// Whether rank r is its group's lowest.
  bool leads(int r) const {
    for (int k = 0, first = 0; first < n; ++k) {
      if (r == first) return true;
      first += n / groups() + (k < n % groups() ? 1 : 0);
    }
    return false;
  }
  /// How many ranks share rank r's segment (0: a group of one has none).
  int sharing(int r) const {
    for (int k = 0, first = 0;; ++k) {
      const int size = n / groups() + (k < n % groups() ? 1 : 0);
      if (r < first + size) return size > 1 ? size : 0;
      first += size;
    }
  }
};

class TwoLevelRanks : public ::testing::TestWithParam<Groups> {};

/// Runs `body(r, c)` on every rank r of a communicator of g.n ranks in groups of at most
/// g.group, small calls through the segments (shm_config), after a barrier set them up.
void run_groups(const Groups& g, const std::function<void(int, Communicator&)>& body) {
  auto ranks = make_ranks(g.n);
  coll::CollConfig config = shm_config();
  config.shm_group = static_cast<size_t>(g.group);
  auto comms = with_config(ranks, config, 7);
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    ASSERT_TRUE(c.barrier().is_ok());
    body(r, c);
  });
}

// From 20 KiB (the ring threshold here) allreduces run the ring within each group's
// lanes (as many as the narrowest group has ranks; a rank past them folds into one
// first and takes the result back), an allreduce of the lanes' blocks across (recursive
// doubling below 20 KiB a block, the ring above), and the allgather ring within: exact at counts that split evenly and
// unevenly, one piece or many, in place every other call, back to back without
// barriers (so notifications of one level arrive while a rank is still at the other),
// and after a call that runs the ring over all ranks. Reduce_scatters from 20 KiB of
// input run the ring within each group and the ring across, between allreduces;
// allgathers of blocks above the slot the ring across and the ring within.
TEST_P(TwoLevelRanks, LargeAllreducesReduceScattersAndAllgathersRunInTwoLevelsAllExact) {
  const Groups g = GetParam();
  auto ranks = make_ranks(g.n);
  coll::CollConfig config = shm_config();
  config.shm_group = static_cast<size_t>(g.group);
  config.ring_threshold = 20 * 1024;
  auto comms = with_config(ranks, config, 7);
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    ASSERT_TRUE(c.barrier().is_ok());
    EXPECT_EQ(c.algorithm(CollectiveKind::kBarrier, 0).name, "hier");
    EXPECT_EQ(c.connections().segment_ranks, g.sharing(r)) << "rank " << r;
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, 20 * 1024).name, g.lanes() > 0 ? "hier" : "ring");
    if (g.lanes() > 0) {
      // The rings within the lanes, the ring across, and the fold there and back.
      const int steps = 2 * (g.lanes() - 1) + 2 * (g.groups() - 1) + (g.widest() > g.lanes() ? 2 : 0);
      EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, 1 << 20).steps, steps);
    }
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, 20 * 1024 - 4).name, "rd");
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, 1 << 20, {.algorithm = CollAlgorithm::kRing}).name, "ring");
    const auto per_group = static_cast<size_t>(g.widest());
    int k = 0;
    // 700001 elements: blocks past the lanes travel to them in pieces of 1 MiB, the last shorter.
    for (size_t count :
         {size_t{5120}, size_t{5121}, 5120 * per_group + 1, size_t{40000}, size_t{100003}, size_t{700001}}) {
      for (int round = 0; round < 2; ++round, ++k) {
        auto in = rank_input(r, count, DataType::kFloat32, ReduceOp::kSum, g.n);
        std::vector<std::byte> out(in.size(), std::byte{0x5A});
        if (k % 2 == 1) out = in;
        Status s = c.allreduce(k % 2 == 1 ? kInPlace : in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
        ASSERT_TRUE(s.is_ok()) << "rank " << r << " count " << count << ": " << s.to_string();
        EXPECT_EQ(first_diff(reference(0, g.n - 1, 0, count, DataType::kFloat32, ReduceOp::kSum, g.n), out.data(),
                             out.size(), 4),
                  -1)
            << "rank " << r << " count " << count << (k % 2 == 1 ? " in place" : "");
      }
    }
    expect_allreduce(r, c, DataType::kInt64, ReduceOp::kMax, 30001);
    expect_allreduce(r, c, DataType::kFloat64, ReduceOp::kAvg, 12289);
    // The ring over every rank, then two levels again: each keeps its own ring.
    auto in = rank_input(r, 30000, DataType::kInt32, ReduceOp::kSum, g.n);
    std::vector<std::byte> out(in.size());
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), 30000, DataType::kInt32, ReduceOp::kSum,
                            {.algorithm = CollAlgorithm::kRing})
                    .is_ok());
    EXPECT_EQ(first_diff(reference(0, g.n - 1, 0, 30000, DataType::kInt32, ReduceOp::kSum, g.n), out.data(),
                         out.size(), 4),
              -1);
    expect_allreduce(r, c, DataType::kBFloat16, ReduceOp::kMin, 50001);
    expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 5);
    // Reduce_scatters of the ring's size: the ring within the group's lanes over runs of
    // the blocks of the ranks at each index (and the index a lane count further, where
    // the groups differ: that rank sends the lanes its parts and takes its block back),
    // then the ring across; in place every other call, back to back with allreduces.
    const auto nn = static_cast<size_t>(g.n);
    EXPECT_EQ(c.algorithm(CollectiveKind::kReduceScatter, 20 * 1024 / nn + 4).name,
              g.blocks_take_lanes() ? "hier" : "ring");
    EXPECT_EQ(c.algorithm(CollectiveKind::kReduceScatter, 64).name, "hier");  // the whole input fits a slot
    EXPECT_EQ(c.algorithm(CollectiveKind::kReduceScatter, config.shm_bytes / nn + 4).name, "rd");
    struct Call {
      DataType type;
      ReduceOp op;
      size_t block;
    };
    k = 0;
    for (const Call& call : {Call{DataType::kFloat32, ReduceOp::kSum, 1300}, Call{DataType::kFloat32, ReduceOp::kSum, 1301},
                             Call{DataType::kInt64, ReduceOp::kMax, 5000}, Call{DataType::kFloat64, ReduceOp::kAvg, 2561},
                             Call{DataType::kBFloat16, ReduceOp::kMin, 25001}, Call{DataType::kInt32, ReduceOp::kSum, 30000}}) {
      for (int round = 0; round < 2; ++round, ++k) {
        const size_t es = size_of(call.type);
        auto input = rank_input(r, call.block * nn, call.type, call.op, g.n);
        const bool in_place = k % 2 == 1;
        std::vector<std::byte> got = in_place ? input : std::vector<std::byte>(call.block * es, std::byte{0x5A});
        Status s = c.reduce_scatter(in_place ? kInPlace : input.data(), got.data(), call.block, call.type, call.op);
        ASSERT_TRUE(s.is_ok()) << "rank " << r << " block " << call.block << ": " << s.to_string();
        EXPECT_EQ(first_diff(reference(0, g.n - 1, call.block * static_cast<size_t>(r), call.block, call.type, call.op,
                                       g.n),
                             got.data(), call.block * es, es),
                  -1)
            << "rank " << r << " reduce_scatter of " << call.block << (in_place ? " in place" : "");
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 6000);
      }
    }
    // Allgathers of blocks above the slot: the ring across straight into place, then the
    // ring within the group's lanes, a message per group at each step (two where the
    // groups differ: a rank past the lanes hands its block to one first and takes the
    // result back); in place every other call, back to back with reduce_scatters.
    const size_t slot = config.shm_bytes;
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllgather, slot + 1).name, g.blocks_take_lanes() ? "hier" : "ring");
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllgather, slot + 1, {.algorithm = CollAlgorithm::kRing}).name, "ring");
    if (g.blocks_take_lanes()) {
      // A ring across the groups and one within each group's lanes: (G-1) + (L-1)
      // steps, for both; over groups of different sizes two more, the data of the ranks
      // past the lanes in and their results back.
      const int steps = (g.groups() - 1) + (g.lanes() - 1);
      EXPECT_EQ(c.algorithm(CollectiveKind::kAllgather, slot + 1).steps, steps + (g.two_level() ? 0 : 2));
      EXPECT_EQ(c.algorithm(CollectiveKind::kReduceScatter, 20 * 1024 / nn + 4).steps, steps + (g.two_level() ? 0 : 2));
    }
    int salt = 0;
    for (size_t block : {slot + 1, 3 * slot + 7, size_t{100'003}}) {
      for (int round = 0; round < 2; ++round, ++salt) {
        expect_allgather(r, c, block, salt, salt % 2 == 1);
        if (::testing::Test::HasFatalFailure()) return;
        // Allgathervs: blocks of one size above the slot take the same two levels (each
        // block where its displacement puts it; a rank past the lanes takes the others'
        // blocks one by one), blocks of different sizes the ring host by host.
        const std::vector<size_t> same(nn, block);
        expect_allgatherv(r, c, same, salt, salt % 2 == 0);
        if (::testing::Test::HasFatalFailure()) return;
        std::vector<size_t> differ(nn);
        for (size_t i = 0; i < nn; ++i) differ[i] = block + i * 13;
        expect_allgatherv(r, c, differ, salt + 100, salt % 2 == 1);
        if (::testing::Test::HasFatalFailure()) return;
        auto input = rank_input(r, 1300 * nn, DataType::kInt32, ReduceOp::kSum, g.n);
        std::vector<std::byte> got(1300 * 4);
        ASSERT_TRUE(c.reduce_scatter(input.data(), got.data(), 1300, DataType::kInt32, ReduceOp::kSum).is_ok());
        EXPECT_EQ(first_diff(reference(0, g.n - 1, 1300 * static_cast<size_t>(r), 1300, DataType::kInt32,
                                       ReduceOp::kSum, g.n),
                             got.data(), got.size(), 4),
                  -1);
      }
    }
  });
}

enum class LaneCall { kAllreduce, kReduceScatter, kAllgather };
struct LaneFault {
  const char* what;
  LaneCall call;
  int odd;  // the rank that calls with one element more, or aborts
  bool aborts;
};

/// `fault` in a call over lanes among `n` ranks in groups of at most `group`: every other
/// rank fails, none by the timeout, and none crashes on its way out.
void expect_every_other_rank_fails(const LaneFault& fault, int n, size_t group) {
  SCOPED_TRACE(fault.what);
  const auto nn = static_cast<size_t>(n);
  auto ranks = make_ranks(n);
  coll::CollConfig config = shm_config();
  config.shm_group = group;
  config.ring_threshold = 20 * 1024;
  const size_t block = config.shm_bytes + 5;
  auto comms = with_config(ranks, config, 7);
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    ASSERT_TRUE(c.barrier().is_ok());
    ASSERT_EQ(c.algorithm(CollectiveKind::kAllreduce, 160000).name, "hier");
    if (fault.call == LaneCall::kAllgather) {
      ASSERT_EQ(c.algorithm(CollectiveKind::kAllgather, block).name, "hier");
    }
    if (fault.call == LaneCall::kReduceScatter) {
      ASSERT_EQ(c.algorithm(CollectiveKind::kReduceScatter, 8000).name, "hier");
    }
  });
  std::vector<Status> results(nn);
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    if (r == fault.odd && fault.aborts) {
      c.abort();
      return;
    }
    const size_t more = r == fault.odd ? 1 : 0;
    if (fault.call == LaneCall::kReduceScatter) {
      const size_t per = 2000 + more;
      auto in = rank_input(r, nn * per, DataType::kFloat32, ReduceOp::kSum, n);
      std::vector<std::byte> out(per * 4);
      results[static_cast<size_t>(r)] =
          c.reduce_scatter(in.data(), out.data(), per, DataType::kFloat32, ReduceOp::kSum);
      return;
    }
    if (fault.call == LaneCall::kAllgather) {
      std::vector<std::byte> mine(block + more, std::byte{7}), all(nn * (block + 1));
      results[static_cast<size_t>(r)] = c.allgather(mine.data(), all.data(), block + more, DataType::kUint8);
      return;
    }
    const size_t count = 40000 + more;
    auto in = rank_input(r, count, DataType::kFloat32, ReduceOp::kSum, n);
    std::vector<std::byte> out(in.size());
    results[static_cast<size_t>(r)] = c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < n; ++r) {
    if (r == fault.odd && fault.aborts) continue;
    const Status& s = results[static_cast<size_t>(r)];
    EXPECT_FALSE(s.is_ok()) << "rank " << r;
    EXPECT_NE(s.code(), StatusCode::kTimeout) << "rank " << r << ": " << s.to_string();
  }
}

// An allreduce, reduce_scatter or allgather over lanes (groups of 3 and 2: two lanes,
// rank 2 past them) in which one rank calls with an element more (the rank past the
// lanes, or the lane it sends to), or the rank past the lanes aborts.
TEST(TwoLevel, CallsOverLanesThatDisagreeOrLoseARankFailEveryRankNotByTheTimeout) {
  for (const LaneFault& k : {LaneFault{"allreduce, past the lanes, one more", LaneCall::kAllreduce, 2, false},
                             LaneFault{"allreduce, its lane, one more", LaneCall::kAllreduce, 0, false},
                             LaneFault{"allreduce, past the lanes, aborts", LaneCall::kAllreduce, 2, true},
                             LaneFault{"reduce_scatter, past the lanes, one more", LaneCall::kReduceScatter, 2, false},
                             LaneFault{"reduce_scatter, its lane, one more", LaneCall::kReduceScatter, 0, false},
                             LaneFault{"reduce_scatter, past the lanes, aborts", LaneCall::kReduceScatter, 2, true},
                             LaneFault{"allgather, past the lanes, one more", LaneCall::kAllgather, 2, false},
                             LaneFault{"allgather, its lane, one more", LaneCall::kAllgather, 0, false},
                             LaneFault{"allgather, past the lanes, aborts", LaneCall::kAllgather, 2, true}}) {
    expect_every_other_rank_fails(k, 5, 3);
  }
}

// The same for an allreduce over one lane per group (groups {0, 1}, {2, 3} and {4}: rank
// 4 alone, so one lane; ranks 1 and 3 past it): the rank past a lane, its lane, or the
// rank alone calls with an element more, or a rank past a lane aborts.
TEST(TwoLevel, AllreducesOverOneLaneThatDisagreeOrLoseARankFailEveryRankNotByTheTimeout) {
  for (const LaneFault& k : {LaneFault{"past the lane, one more", LaneCall::kAllreduce, 3, false},
                             LaneFault{"its lane, one more", LaneCall::kAllreduce, 2, false},
                             LaneFault{"the rank alone, one more", LaneCall::kAllreduce, 4, false},
                             LaneFault{"past the lane, aborts", LaneCall::kAllreduce, 1, true}}) {
    expect_every_other_rank_fails(k, 5, 2);
  }
}

// Broadcasts and reduces above the slot and below the chain's sizes run the binomial
// tree among the groups' representatives (the root for its own group), then within each
// group: from every root, exact, reduces of several types and operations, in place at
// the root every other call, back to back with small calls through the segments.
TEST_P(TwoLevelRanks, MiddleBroadcastsAndReducesRunTheTreeByGroupAllExact) {
  const Groups g = GetParam();
  auto ranks = make_ranks(g.n);
  coll::CollConfig config = shm_config();
  config.shm_group = static_cast<size_t>(g.group);
  config.pipeline_bytes = 64 * 1024;  // the broadcast's chain from 256 KiB, the tree below
  auto comms = with_config(ranks, config, 7);
  const size_t slot = config.shm_bytes;
  const int steps =
      std::bit_width(static_cast<unsigned>(g.groups() - 1)) + std::bit_width(static_cast<unsigned>(g.widest() - 1));
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    EXPECT_EQ(c.algorithm(CollectiveKind::kBroadcast, slot + 1).steps, std::bit_width(static_cast<unsigned>(g.n - 1)));
    ASSERT_TRUE(c.barrier().is_ok());
    for (CollectiveKind kind : {CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
      const AlgorithmChoice a = c.algorithm(kind, slot + 4);
      EXPECT_EQ(a.name, "tree");
      EXPECT_EQ(a.steps, steps) << "ceil(log2 G) + ceil(log2 L)";
    }
    EXPECT_EQ(c.algorithm(CollectiveKind::kBroadcast, 256 * 1024).name, "chain");
    EXPECT_EQ(c.algorithm(CollectiveKind::kReduce, 64 * 1024).name, "chain");
    int salt = 100;
    for (size_t bytes : {slot + 1, size_t{100'003}}) {
      for (int root = 0; root < g.n; ++root, ++salt) {
        std::vector<std::byte> buf(bytes);
        for (size_t i = 0; i < bytes; ++i) buf[i] = r == root ? pattern(root, i, salt) : std::byte{0xEE};
        ASSERT_TRUE(c.broadcast(buf.data(), bytes, DataType::kUint8, root).is_ok());
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(buf[i], pattern(root, i, salt)) << "broadcast of " << bytes << " from " << root << ", byte " << i;
        }
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 3);
      }
    }
    struct Call {
      DataType type;
      ReduceOp op;
      size_t count;
    };
    int k = 0;
    for (const Call& call : {Call{DataType::kFloat32, ReduceOp::kSum, slot / 4 + 1}, Call{DataType::kInt64, ReduceOp::kMax, 3001},
                             Call{DataType::kFloat64, ReduceOp::kAvg, slot / 8 + 3}, Call{DataType::kBFloat16, ReduceOp::kMin, 9001}}) {
      const size_t es = size_of(call.type);
      for (int root = 0; root < g.n; ++root, ++k) {
        auto in = rank_input(r, call.count, call.type, call.op, g.n);
        const bool in_place = r == root && k % 2 == 1;
        std::vector<std::byte> out = in_place ? in : std::vector<std::byte>(in.size(), std::byte{0x5A});
        Status s = c.reduce(in_place ? kInPlace : in.data(), out.data(), call.count, call.type, call.op, root);
        ASSERT_TRUE(s.is_ok()) << "rank " << r << " reduce to " << root << ": " << s.to_string();
        if (r == root) {
          EXPECT_EQ(first_diff(reference(0, g.n - 1, 0, call.count, call.type, call.op, g.n), out.data(), out.size(), es),
                    -1)
              << "reduce of " << call.count << " to " << root << (in_place ? " in place" : "");
        }
        ASSERT_TRUE(c.barrier().is_ok());
      }
    }
  });
}

// Alltoalls whose send buffer fits a slot, over groups of several ranks each (of one
// size or not): the leaders exchange their groups' blocks, one message per pair of
// groups, and hand each member its blocks back in as many rounds of a slot as the
// group's fill (at slot / n, one fewer than the group's ranks). Exact, back to back
// with small allreduces and after a larger alltoall by messages.
TEST_P(TwoLevelRanks, SmallAlltoallsGoThroughTheGroupsSegmentsAllExact) {
  const Groups g = GetParam();
  const auto n = static_cast<size_t>(g.n);
  const size_t slot = shm_config().shm_bytes;
  run_groups(g, [&](int r, Communicator& c) {
    const AlgorithmChoice a = c.algorithm(CollectiveKind::kAlltoall, slot / n);
    EXPECT_EQ(a.name, "hier");
    EXPECT_EQ(a.steps, 1 + (g.widest() - 1) + (g.groups() - 1)) << "rounds of a slot, then the leaders' exchange";
    EXPECT_EQ(c.algorithm(CollectiveKind::kAlltoall, slot / n + 1).name, "pairwise");
    int salt = 0;
    for (size_t block : {size_t{0}, size_t{1}, size_t{7}, slot / n / 3, slot / n, slot / n + 1, slot / n - 1}) {
      expect_alltoall(r, c, block, ++salt);
      if (::testing::Test::HasFatalFailure()) return;
      expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 3);
    }
  });
}

// Alltoallvs over groups of several ranks each (of one size or not): only the leaders
// send messages (to each other leader a table that says whether its group fits, then
// the blocks); each member's blocks come back in as many rounds of a slot as its
// group's fill. Where rank 1's blocks are one element over the slot, every rank runs it
// by messages. Exact, each followed by a small allreduce.
TEST_P(TwoLevelRanks, SmallAlltoallvsGoThroughTheGroupsSegmentsAllExact) {
  const Groups g = GetParam();
  const auto n = static_cast<size_t>(g.n);
  run_groups(g, [&](int r, Communicator& c) {
    int salt = 0;
    for (const DataType t : {DataType::kUint8, DataType::kFloat64}) {
      const size_t e = size_of(t);
      const auto [most, over] = filling_the_slot(n, shm_config().shm_bytes, e);
      for (const auto& count : {uneven_counts(0), uneven_counts(1000 / e / n), full_counts(most)}) {
        const uint64_t sent = expect_alltoallv(r, c, t, count, ++salt);
        if (!g.leads(r)) {
          EXPECT_EQ(sent, 0u) << "a member, round " << salt;
        }
        if (::testing::Test::HasFatalFailure()) return;
        expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 3);
      }
      EXPECT_GT(expect_alltoallv(r, c, t, full_counts(most, over), ++salt), 0u) << "rank 1's one over the slot";
      expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 3);
    }
  });
}

// Two groups of two; three of two (the ring across); two of three; two of four; two of
// three under a bound of four (6 ranks split evenly, not 4 and 2); groups of four and
// three, or three and two (lanes with a rank past some); and groups of two, two and one,
// whose allreduces take one lane per group and whose reduce_scatters and allgathers one
// ring.
INSTANTIATE_TEST_SUITE_P(Groups, TwoLevelRanks,
                         ::testing::Values(Groups{4, 2}, Groups{6, 2}, Groups{6, 3}, Groups{8, 4}, Groups{6, 4},
                                           Groups{5, 2}, Groups{7, 4}, Groups{5, 3}),
                         [](const ::testing::TestParamInfo<Groups>& p) {
                           return std::to_string(p.param.n) + "_by" + std::to_string(p.param.group);
                         });

TEST(ShmSegment, RanksWithSameHostOffOnlyMakeNoSegment) {
  run_layout(Layout{3, 0b111}, [&](int r, Communicator& c) {
    ASSERT_TRUE(c.barrier().is_ok());
    EXPECT_FALSE(coll::CommAccess::core(c).shm_on());
    EXPECT_EQ(c.connections().segment_ranks, 0);
    EXPECT_EQ(c.connections().no_segment, "REMORA_SAME_HOST=off");
    EXPECT_EQ(c.algorithm(CollectiveKind::kBarrier, 0).name, "dissemination") << "rank " << r;
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, 8).name, "rd") << "rank " << r;
    expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 5);
  });
}

TEST(ShmSegment, CollShmZeroMakesNoSegment) {
  auto ranks = make_ranks(2);
  coll::CollConfig config = shm_config();
  config.shm_bytes = 0;  // REMORA_COLL_SHM=0
  auto comms = with_config(ranks, config, 7);
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    ASSERT_TRUE(c.barrier().is_ok());
    EXPECT_EQ(c.algorithm(CollectiveKind::kAllreduce, 8).name, "rd");
    EXPECT_FALSE(coll::CommAccess::core(c).shm_on());
    EXPECT_EQ(c.connections().no_segment, "REMORA_COLL_SHM=0 on a rank");
    expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 5);
  });
}

// REMORA_COLL_SHM=0 on one rank only (it should be the same everywhere): that rank
// refuses in the set-up, so there is no segment, and nobody waits for the timeout.
TEST(ShmSegment, CollShmZeroOnOneRankAloneMakesNoSegmentAndNoHang) {
  for (int odd : {0, 2}) {
    auto ranks = make_ranks(3);
    auto comms = with_configs(
        ranks,
        [&](int r) {
          coll::CollConfig c = shm_config();
          if (r == odd) c.shm_bytes = 0;
          return c;
        },
        7);
    run_ranks(ranks, [&](int r, Communicator&) {
      Communicator& c = *comms[static_cast<size_t>(r)];
      ASSERT_TRUE(c.barrier().is_ok()) << "rank " << r << ", REMORA_COLL_SHM=0 on rank " << odd;
      EXPECT_FALSE(coll::CommAccess::core(c).shm_on());
      EXPECT_EQ(c.connections().no_segment, "REMORA_COLL_SHM=0 on a rank") << "rank " << r;
      expect_allreduce(r, c, DataType::kFloat32, ReduceOp::kSum, 5);
    });
  }
}

/// Rank 0 allreduces `count0` floats, the others `count1`: every rank must fail, none by
/// the timeout, and a rank whose call went through the segment with kProtocol.
void expect_disagreement_fails(size_t count0, size_t count1) {
  auto ranks = make_ranks(2);
  auto comms = with_config(ranks, shm_config(), 7);
  run_ranks(ranks, [&](int r, Communicator&) { ASSERT_TRUE(comms[static_cast<size_t>(r)]->barrier().is_ok()); });
  run_ranks(ranks, [&](int r, Communicator&) {
    const size_t count = r == 0 ? count0 : count1;
    std::vector<float> in(count, 1.0f), out(count);
    Status s =
        comms[static_cast<size_t>(r)]->allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_FALSE(s.is_ok()) << "rank " << r;
    EXPECT_NE(s.code(), StatusCode::kTimeout) << "rank " << r << ": " << s.to_string();
    if (count * 4 <= shm_config().shm_bytes) {
      EXPECT_EQ(s.code(), StatusCode::kProtocol) << s.to_string();
    }
  });
}

TEST(ShmSegment, RanksThatDisagreeOnTheSizeFailAtOnce) { expect_disagreement_fails(2, 3); }

// The same for an alltoall through the segment: one rank's block a byte longer fails
// both with `protocol` at once; a small one against a large one fails both at once too
// (`protocol` on the rank that sees the other's shape, the peer's failure on the other).
TEST(ShmSegment, AlltoallsThatDisagreeOnTheSizeFailAtOnce) {
  for (const auto& [block0, block1] : {std::pair<size_t, size_t>{4, 5}, std::pair<size_t, size_t>{4, 16 * 1024}}) {
    auto ranks = make_ranks(2);
    auto comms = with_config(ranks, shm_config(), 7);
    run_ranks(ranks, [&](int r, Communicator&) { ASSERT_TRUE(comms[static_cast<size_t>(r)]->barrier().is_ok()); });
    std::atomic<int> protocol{0};
    run_ranks(ranks, [&](int r, Communicator&) {
      const size_t block = r == 0 ? block0 : block1;
      std::vector<std::byte> send(2 * block), got(2 * block);
      Status s = comms[static_cast<size_t>(r)]->alltoall(send.data(), got.data(), block, DataType::kUint8);
      EXPECT_FALSE(s.is_ok()) << "rank " << r;
      EXPECT_NE(s.code(), StatusCode::kTimeout) << "rank " << r << ": " << s.to_string();
      if (s.code() == StatusCode::kProtocol) ++protocol;
      if (block1 == 5) {
        EXPECT_EQ(s.code(), StatusCode::kProtocol) << "rank " << r << ": " << s.to_string();
      }
    });
    EXPECT_GE(protocol.load(), 1) << block0 << " against " << block1;
  }
}

// Ranks that disagree on what an alltoallv moves between them, each rank's blocks
// fitting the segment: rank 1 expects one byte more from rank 0 than rank 0 sends it (or
// rank 0 also names another type of the same size). Both fail with `protocol` at once,
// whichever of them reads the other's counts first; with messages they would fail too.
TEST(ShmSegment, AlltoallvsThatDisagreeOnTheCountsFailBothAtOnce) {
  for (const bool other_type : {false, true}) {
    auto ranks = make_ranks(2);
    auto comms = with_config(ranks, shm_config(), 7);
    run_ranks(ranks, [&](int r, Communicator&) { ASSERT_TRUE(comms[static_cast<size_t>(r)]->barrier().is_ok()); });
    run_ranks(ranks, [&](int r, Communicator&) {
      const std::vector<size_t> scounts{4, 4}, rcounts{r == 1 && !other_type ? size_t{5} : 4, 4}, displs{0, 8};
      std::vector<std::byte> send(64), got(64);
      const DataType t = r == 0 && other_type ? DataType::kInt8 : DataType::kUint8;
      Status s = comms[static_cast<size_t>(r)]->alltoallv(send.data(), scounts, displs, got.data(), rcounts, displs, t);
      EXPECT_EQ(s.code(), StatusCode::kProtocol) << "rank " << r << ": " << s.to_string();
    });
  }
}

// The same over two groups of two ({0, 1} and {2, 3}), where only the leaders see the
// counts: rank 0 sends rank 1 one byte more than it expects (within a group: rank 0, its
// leader, fails with `protocol`); rank 0 sends rank 2 one byte more and rank 3 one less
// than they expect (the same total between the groups), or rank 2 one byte more: rank
// 2, their leader, fails with `protocol` on the sizes the table from rank 0 names. The
// other ranks of the failing leader's group fail too, and no rank waits for the timeout.
TEST(ShmSegment, AlltoallvsThatDisagreeOverGroupsFailAtTheLeaderAtOnce) {
  struct Case {
    const char* what;
    int sender_extra_to_1, sender_extra_to_2, sender_extra_to_3;
    int failing;  // the leader that finds it
  };
  for (const Case& k :
       {Case{"within a group", 1, 0, 0, 0}, Case{"same total across", 0, 1, -1, 2}, Case{"more across", 0, 1, 0, 2}}) {
    SCOPED_TRACE(k.what);
    auto ranks = make_ranks(4);
    coll::CollConfig config = shm_config();
    config.shm_group = 2;
    auto comms = with_config(ranks, config, 7);
    run_ranks(ranks, [&](int r, Communicator&) { ASSERT_TRUE(comms[static_cast<size_t>(r)]->barrier().is_ok()); });
    std::vector<Status> results(4);
    run_ranks(ranks, [&](int r, Communicator&) {
      std::vector<size_t> scounts(4, 4), rcounts(4, 4), displs{0, 8, 16, 24};
      if (r == 0) {
        scounts[1] += static_cast<size_t>(k.sender_extra_to_1);
        scounts[2] += static_cast<size_t>(k.sender_extra_to_2);
        scounts[3] += static_cast<size_t>(k.sender_extra_to_3);
      }
      std::vector<std::byte> send(64), got(64);
      results[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)]->alltoallv(
          send.data(), scounts, displs, got.data(), rcounts, displs, DataType::kUint8);
    });
    for (int r = 0; r < 4; ++r) {
      const Status& s = results[static_cast<size_t>(r)];
      EXPECT_NE(s.code(), StatusCode::kTimeout) << "rank " << r << ": " << s.to_string();
      if (r / 2 == k.failing / 2) {
        EXPECT_FALSE(s.is_ok()) << "rank " << r;
      }
    }
    const Status& found = results[static_cast<size_t>(k.failing)];
    EXPECT_EQ(found.code(), StatusCode::kProtocol) << found.to_string();
    EXPECT_NE(found.message().find("ranks disagree on the counts"), std::string::npos) << found.to_string();
  }
}

TEST(ShmSegment, ASmallCallAgainstALargeOneFailsBoth) { expect_disagreement_fails(2, 64 * 1024); }

TEST(ShmSegment, ARankThatAbortsFailsTheOthersWaitingInTheSegment) {
  auto ranks = make_ranks(3);
  auto comms = with_config(ranks, shm_config(), 7);
  run_ranks(ranks, [&](int r, Communicator&) { ASSERT_TRUE(comms[static_cast<size_t>(r)]->barrier().is_ok()); });
  run_ranks(ranks, [&](int r, Communicator&) {
    Communicator& c = *comms[static_cast<size_t>(r)];
    if (r == 0) {
      c.abort();
      return;
    }
    Status s = c.barrier();
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.code(), StatusCode::kTimeout) << s.to_string();
  });
}

TEST(ShmSegment, ARankThatNeverComesEndsTheWaitAtTheCallsTimeout) {
  auto ranks = make_ranks(2);
  auto comms = with_config(ranks, shm_config(), 7);
  run_ranks(ranks, [&](int r, Communicator&) { ASSERT_TRUE(comms[static_cast<size_t>(r)]->barrier().is_ok()); });
  Status s = comms[0]->barrier({.timeout = std::chrono::milliseconds(300)});
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
}

/// Where this process maps the first communicator segment (/proc/self/maps).
std::byte* mapped_segment() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("memfd:remora-coll-segment") == std::string::npos) continue;
    return reinterpret_cast<std::byte*>(std::stoull(line.substr(0, line.find('-')), nullptr, 16));
  }
  return nullptr;
}

TEST(ShmSegment, ASegmentScribbledOverIsAProtocolErrorOnEveryRank) {
  auto ranks = make_ranks(2);
  auto comms = with_config(ranks, shm_config(), 7);
  run_ranks(ranks, [&](int r, Communicator&) { ASSERT_TRUE(comms[static_cast<size_t>(r)]->barrier().is_ok()); });
  std::byte* seg = mapped_segment();
  ASSERT_NE(seg, nullptr);
  // A hostile rank's garbage over every rank's line (header's bytes 256 to 4096):
  // rounds far from any rank's own.
  for (size_t at = 256; at < 4096; at += 4) {
    reinterpret_cast<std::atomic<uint32_t>*>(seg + at)->store(0x40000000u + static_cast<uint32_t>(at));
  }
  run_ranks(ranks, [&](int r, Communicator&) {
    Status s = comms[static_cast<size_t>(r)]->barrier();
    EXPECT_EQ(s.code(), StatusCode::kProtocol) << "rank " << r << ": " << s.to_string();
  });
}

}  // namespace
}  // namespace remora::test
