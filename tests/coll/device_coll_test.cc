// Collectives on device memory: three ranks in one process (real loopback endpoints,
// tests/coll/mesh.h), each context with a test device (memory only its asynchronous
// copies reach) added; every buffer of the collectives below is device memory, staged
// whole through host memory (coll/device_stage.h). Results are checked against exact
// integer references, bit for bit, and a v-form's gaps must come back untouched. A
// failed device copy fails that collective on its rank with device_failed and, as any
// collective error does, on every other rank, without a hang.
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "device_checks.h"
#include "mesh.h"
#include "remora/testing/test_device.h"
#include "scoped_env.h"

namespace remora::test {
namespace {

using testing::TestDeviceDomain;

constexpr int kRanks = 3;

struct Devices {
  std::vector<std::unique_ptr<TestDeviceDomain>> devs;  // before the ranks: they outlive the contexts
  std::vector<Rank> ranks;
};

Devices make_device_ranks() {
  Devices d;
  for (int r = 0; r < kRanks; ++r) d.devs.push_back(TestDeviceDomain::create({.newest_first = true}).value());
  d.ranks = make_ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(d.ranks[static_cast<size_t>(r)].ctx->add_memory_domain(*d.devs[static_cast<size_t>(r)]).is_ok());
  }
  return d;
}

/// Device memory holding `v`, and a way to read it back.
struct DevVec {
  TestDeviceDomain* dev;
  int32_t* p;
  size_t n;
  DevVec(TestDeviceDomain& d, const std::vector<int32_t>& v) : dev(&d), n(v.size()) {
    p = reinterpret_cast<int32_t*>(d.allocate(std::max<size_t>(n, 1) * sizeof(int32_t)).value());
    if (n > 0) {
      EXPECT_TRUE(d.write(p, v.data(), n * sizeof(int32_t)).is_ok());
    }
  }
  int32_t* data() const { return p; }
  std::vector<int32_t> read() const {
    std::vector<int32_t> out(n);
    if (n > 0) {
      EXPECT_TRUE(dev->read(out.data(), p, n * sizeof(int32_t)).is_ok());
    }
    return out;
  }
};

std::vector<int32_t> values(int rank, size_t n) { return device_values(rank, n); }

TEST(DeviceCollectives, EveryResultIsExactOnDeviceMemory) {
  Devices d = make_device_ranks();
  // Around the eager limit and above the ring threshold, so every algorithm family runs.
  for (size_t n : {size_t{1}, size_t{1000}, size_t{300000}}) {
    SCOPED_TRACE("count " + std::to_string(n));
    run_ranks(d.ranks, [&](int r, Communicator& comm) {
      TestDeviceDomain& dev = *d.devs[static_cast<size_t>(r)];
      expect_every_collective_exact(r, kRanks, comm, n,
                                    [&](const std::vector<int32_t>& v) { return std::make_unique<DevVec>(dev, v); });
      DevVec send(dev, values(r, n));
      // allgatherv with a gap before each block: the gaps keep their bytes
      const std::vector<size_t> counts(kRanks, n);
      std::vector<size_t> displs;
      for (int q = 0; q < kRanks; ++q) displs.push_back(static_cast<size_t>(q) * (n + 2) + 2);
      DevVec v(dev, std::vector<int32_t>(kRanks * (n + 2), 77));
      ASSERT_TRUE(comm.allgatherv(send.p, n, v.p, counts, displs, DataType::kInt32).is_ok());
      const std::vector<int32_t> got = v.read();
      for (int q = 0; q < kRanks; ++q) {
        const size_t at = static_cast<size_t>(q) * (n + 2);
        EXPECT_EQ(got[at], 77);
        EXPECT_EQ(got[at + 1], 77);
        EXPECT_TRUE(std::equal(got.begin() + static_cast<ptrdiff_t>(at + 2),
                               got.begin() + static_cast<ptrdiff_t>(at + 2 + n), values(q, n).begin()));
      }
    });
  }
}

TEST(DeviceCollectives, AFailedCopyFailsTheCollectiveOnEveryRank) {
  Devices d = make_device_ranks();
  const size_t n = 5000;
  std::vector<Status> results(kRanks);
  run_ranks(d.ranks, [&](int r, Communicator& comm) {
    TestDeviceDomain& dev = *d.devs[static_cast<size_t>(r)];
    DevVec send(dev, values(r, n)), recv(dev, std::vector<int32_t>(n, -1));
    if (r == 0) dev.fail_copies(send.p, n * sizeof(int32_t));
    results[static_cast<size_t>(r)] = comm.allreduce(send.p, recv.p, n, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(recv.read(), std::vector<int32_t>(n, -1)) << "rank " << r << ": a failed collective wrote its output";
  });
  EXPECT_EQ(results[0].code(), StatusCode::kDeviceFailed) << results[0].to_string();
  for (int r = 1; r < kRanks; ++r) {
    EXPECT_FALSE(results[static_cast<size_t>(r)].is_ok()) << "rank " << r;
    EXPECT_NE(results[static_cast<size_t>(r)].code(), StatusCode::kTimeout)
        << results[static_cast<size_t>(r)].to_string();
  }
}

// Segmented staging (coll/device_stage.h) with 4 KiB segments (1024 int32): below 4
// segments the collective is staged whole, from 4 on it runs segment by segment, and a
// last segment may be one element. Every rank's result is exact, also with rank 0's
// buffers in host memory (it segments too: the ranks agree first), and the test
// devices' copy counts show the segments were copied one by one.
TEST(DeviceCollectives, SegmentedStagingIsExactAtEveryBoundary) {
  testing::ScopedEnv segment("REMORA_COLL_DEVICE_SEGMENT", "4K");  // read when the communicators are made
  Devices d = make_device_ranks();
  for (bool host_rank0 : {false, true}) {
    for (size_t n : {size_t{4095}, size_t{4096}, size_t{4097}, size_t{10000}}) {
      SCOPED_TRACE("count " + std::to_string(n) + (host_rank0 ? ", rank 0 on host memory" : ""));
      const bool segmented = n >= 4 * 1024;  // at least 4 whole segments
      const size_t passes = segmented ? (n + 1023) / 1024 : 1;
      std::vector<uint64_t> copies_before(kRanks);
      for (int r = 0; r < kRanks; ++r) copies_before[static_cast<size_t>(r)] = d.devs[static_cast<size_t>(r)]->copies();
      run_ranks(d.ranks, [&](int r, Communicator& comm) {
        TestDeviceDomain& dev = *d.devs[static_cast<size_t>(r)];
        const bool host = host_rank0 && r == 0;
        std::vector<int32_t> want(n, 0);
        for (int q = 0; q < kRanks; ++q) {
          for (size_t i = 0; i < n; ++i) want[i] += device_value(q, i);
        }
        // allreduce, then in place; reduce to rank 2; broadcast from rank 1
        std::vector<int32_t> h_send = values(r, n), h_recv(n, -1), h_red(n, -1), h_b(r == 1 ? values(1, n) : want);
        DevVec send(dev, h_send), recv(dev, h_recv), red(dev, h_red), b(dev, h_b);
        int32_t* sp = host ? h_send.data() : send.p;
        int32_t* rp = host ? h_recv.data() : recv.p;
        int32_t* redp = host ? h_red.data() : red.p;
        int32_t* bp = host ? h_b.data() : b.p;
        const auto read = [&](const DevVec& v, const std::vector<int32_t>& h) { return host ? h : v.read(); };
        ASSERT_TRUE(comm.allreduce(sp, rp, n, DataType::kInt32, ReduceOp::kSum).is_ok());
        EXPECT_EQ(read(recv, h_recv), want);
        ASSERT_TRUE(comm.allreduce(kInPlace, rp, n, DataType::kInt32, ReduceOp::kMax).is_ok());
        EXPECT_EQ(read(recv, h_recv), want);
        ASSERT_TRUE(comm.reduce(sp, redp, n, DataType::kInt32, ReduceOp::kSum, 2).is_ok());
        EXPECT_EQ(read(red, h_red), r == 2 ? want : std::vector<int32_t>(n, -1)) << "rank " << r;
        ASSERT_TRUE(comm.broadcast(bp, n, DataType::kInt32, 1).is_ok());
        EXPECT_EQ(read(b, h_b), values(1, n));
        // scan and exscan (rank 0's exscan output is left alone)
        std::vector<int32_t> h_scan(n, -1), h_ex(n, -1), prefix(n, 0), before(n, 0);
        for (int q = 0; q <= r; ++q) {
          for (size_t i = 0; i < n; ++i) (q < r ? before : prefix)[i] += device_value(q, i);
        }
        for (size_t i = 0; i < n; ++i) prefix[i] += before[i];
        DevVec scan(dev, h_scan), ex(dev, h_ex);
        int32_t* scanp = host ? h_scan.data() : scan.p;
        int32_t* exp = host ? h_ex.data() : ex.p;
        ASSERT_TRUE(comm.scan(sp, scanp, n, DataType::kInt32, ReduceOp::kSum).is_ok());
        EXPECT_EQ(read(scan, h_scan), prefix);
        ASSERT_TRUE(comm.exscan(sp, exp, n, DataType::kInt32, ReduceOp::kSum).is_ok());
        EXPECT_EQ(read(ex, h_ex), r == 0 ? std::vector<int32_t>(n, -1) : before) << "rank " << r;
      });
      for (int r = host_rank0 ? 1 : 0; r < kRanks; ++r) {
        // The test's own: 6 buffers written, 6 reads. Each pass (the whole buffer, or one
        // segment) copies every device buffer in and every written one out: allreduce 2
        // in 1 out, in place 1 and 1, reduce 1 in (the root: 2 in 1 out), broadcast 1
        // and 1, scan and exscan 2 in 1 out each.
        const uint64_t copies = d.devs[static_cast<size_t>(r)]->copies() - copies_before[static_cast<size_t>(r)];
        const uint64_t per_pass = r == 2 ? 16 : 14;
        EXPECT_EQ(copies, 12 + per_pass * passes)
            << "rank " << r << (segmented ? ": not segmented as it should be" : ": segmented below 4 segments");
      }
    }
  }
}

// Segmented staging of the collectives made of a block per rank (allgather, gather,
// scatter, alltoall, reduce_scatter and its in-place form), with 4 KiB segments: 341
// int32 of each of the 3 blocks. Below 4 segments (count 1363) the collective is staged
// whole; from 4 (1364) it runs segment by segment, with a last segment of 1 element at
// 1365. Every rank's result is exact, also with rank 0 on host memory (which keeps its
// own layout: the v-forms' displacements, and a packed copy for reduce_scatter), and
// the copy counts show one copy per block and segment.
TEST(DeviceCollectives, SegmentedBlockCollectivesAreExactAtEveryBoundary) {
  testing::ScopedEnv segment("REMORA_COLL_DEVICE_SEGMENT", "4K");
  Devices d = make_device_ranks();
  constexpr size_t kSeg = 4096 / (sizeof(int32_t) * kRanks);  // 341 elements of each block
  const auto concat = [](size_t n, int add) {
    std::vector<int32_t> v;
    for (int q = 0; q < kRanks; ++q) {
      for (size_t i = 0; i < n; ++i) v.push_back(device_value(q, i) + add);
    }
    return v;
  };
  for (bool host_rank0 : {false, true}) {
    for (size_t n : {kSeg * 4 - 1, kSeg * 4, kSeg * 4 + 1, size_t{3000}}) {
      SCOPED_TRACE("count " + std::to_string(n) + (host_rank0 ? ", rank 0 on host memory" : ""));
      const bool segmented = n >= 4 * kSeg;
      const size_t passes = segmented ? (n + kSeg - 1) / kSeg : 1;
      std::vector<uint64_t> copies_before(kRanks);
      for (int r = 0; r < kRanks; ++r) copies_before[static_cast<size_t>(r)] = d.devs[static_cast<size_t>(r)]->copies();
      run_ranks(d.ranks, [&](int r, Communicator& comm) {
        TestDeviceDomain& dev = *d.devs[static_cast<size_t>(r)];
        const bool host = host_rank0 && r == 0;
        struct Buf {  // device memory, or host memory on rank 0 in the second round
          std::vector<int32_t> h;
          std::unique_ptr<DevVec> dv;
          int32_t* p = nullptr;
          std::vector<int32_t> read() const { return dv ? dv->read() : h; }
        };
        const auto make = [&](std::vector<int32_t> v) {
          auto b = std::make_unique<Buf>();
          b->h = std::move(v);
          if (!host) b->dv = std::make_unique<DevVec>(dev, b->h);
          b->p = host ? b->h.data() : b->dv->p;
          return b;
        };
        const std::vector<int32_t> none(n * kRanks, -1);
        auto send = make(values(r, n));
        auto all = make(none);
        ASSERT_TRUE(comm.allgather(send->p, all->p, n, DataType::kInt32).is_ok());
        EXPECT_EQ(all->read(), concat(n, 0));

        auto g = make(none);  // gathered at rank 2 only
        ASSERT_TRUE(comm.gather(send->p, g->p, n, DataType::kInt32, 2).is_ok());
        EXPECT_EQ(g->read(), r == 2 ? concat(n, 0) : none) << "rank " << r;

        auto sc_send = make(concat(n, 5));  // rank 1 scatters block q to rank q
        auto sc_recv = make(std::vector<int32_t>(n, -1));
        ASSERT_TRUE(comm.scatter(sc_send->p, sc_recv->p, n, DataType::kInt32, 1).is_ok());
        std::vector<int32_t> want = values(r, n);
        for (auto& x : want) x += 5;
        EXPECT_EQ(sc_recv->read(), want);

        std::vector<int32_t> out, in;  // alltoall: block q of rank r's send is device_value(r, ...) + q
        for (int q = 0; q < kRanks; ++q) {
          for (size_t i = 0; i < n; ++i) {
            out.push_back(device_value(r, i) + q);
            in.push_back(device_value(q, i) + r);
          }
        }
        auto a_send = make(out);
        auto a_recv = make(none);
        ASSERT_TRUE(comm.alltoall(a_send->p, a_recv->p, n, DataType::kInt32).is_ok());
        EXPECT_EQ(a_recv->read(), in);

        // reduce_scatter of the gathered vector, then in place: rank r's block times 3
        want = values(r, n);
        for (auto& x : want) x *= kRanks;
        auto block = make(std::vector<int32_t>(n, -1));
        ASSERT_TRUE(comm.reduce_scatter(all->p, block->p, n, DataType::kInt32, ReduceOp::kSum).is_ok());
        EXPECT_EQ(block->read(), want);
        auto whole = make(concat(n, 0));
        ASSERT_TRUE(comm.reduce_scatter(kInPlace, whole->p, n, DataType::kInt32, ReduceOp::kSum).is_ok());
        const std::vector<int32_t> got = whole->read();
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin())) << "in place, rank " << r;
      });
      for (int r = host_rank0 ? 1 : 0; r < kRanks; ++r) {
        // The test's own: 9 buffers written, 6 read. Per pass (the whole buffers, or one
        // segment: then one copy per block of a buffer of blocks): allgather 2 in 1 out
        // (segmented 1 + 3 in, 3 out); gather 1 in (the root 2 in 1 out; segmented 1 + 3
        // in, 3 out); scatter 1 in 1 out (the root 2 in 1 out; segmented 3 + 1 in, 1
        // out); alltoall 2 in 1 out (segmented 3 + 3 in, 3 out); reduce_scatter 2 in 1
        // out (segmented 3 + 1 in, 1 out); in place 1 in 1 out (segmented 3 in, 1 out).
        const uint64_t copies = d.devs[static_cast<size_t>(r)]->copies() - copies_before[static_cast<size_t>(r)];
        const uint64_t whole[kRanks] = {14, 15, 16}, split[kRanks] = {28, 31, 34};
        const uint64_t per_pass = (segmented ? split : whole)[r];
        EXPECT_EQ(copies, 15 + per_pass * passes)
            << "rank " << r << (segmented ? ": not segmented as it should be" : ": segmented below 4 segments");
      }
    }
  }
}

// A device copy failing in the middle of a segmented collective fails it on its rank
// with device_failed and on every other rank, without a hang, and nothing is left
// running: every copy started was waited for before the error returned.
TEST(DeviceCollectives, AFailedSegmentCopyFailsTheSegmentedCollectiveOnEveryRank) {
  testing::ScopedEnv segment("REMORA_COLL_DEVICE_SEGMENT", "4K");
  Devices d = make_device_ranks();
  const size_t n = 10000;  // 10 segments
  std::vector<Status> results(kRanks);
  run_ranks(d.ranks, [&](int r, Communicator& comm) {
    TestDeviceDomain& dev = *d.devs[static_cast<size_t>(r)];
    DevVec send(dev, values(r, n)), recv(dev, std::vector<int32_t>(n, -1));
    if (r == 1) dev.fail_copies(send.p + 5 * 1024, 16);  // inside the sixth segment
    results[static_cast<size_t>(r)] = comm.allreduce(send.p, recv.p, n, DataType::kInt32, ReduceOp::kSum);
  });
  EXPECT_EQ(results[1].code(), StatusCode::kDeviceFailed) << results[1].to_string();
  for (int r : {0, 2}) {
    EXPECT_FALSE(results[static_cast<size_t>(r)].is_ok()) << "rank " << r;
    EXPECT_NE(results[static_cast<size_t>(r)].code(), StatusCode::kTimeout)
        << results[static_cast<size_t>(r)].to_string();
  }
  EXPECT_GE(d.devs[1]->failed_copies(), 1u);
}

}  // namespace
}  // namespace remora::test
