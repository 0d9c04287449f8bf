// Collectives on device memory: three ranks in one process (real loopback endpoints,
// tests/coll/mesh.h), each context with a test device (memory only its asynchronous
// copies reach) added; every buffer of the collectives below is device memory, staged
// whole through host memory (coll/device_stage.h). Results are checked against exact
// integer references, bit for bit, and a v-form's gaps must come back untouched. A
// failed device copy fails that collective on its rank with device_failed and, as any
// collective error does, on every other rank, without a hang.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "device_checks.h"
#include "mesh.h"
#include "remora/testing/test_device.h"

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
    EXPECT_NE(results[static_cast<size_t>(r)].code(), StatusCode::kTimeout) << results[static_cast<size_t>(r)].to_string();
  }
}

}  // namespace
}  // namespace remora::test
