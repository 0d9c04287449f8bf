// Collectives on CUDA device memory: three ranks in one process (real loopback
// endpoints, tests/coll/mesh.h), each context with the process's CUDA domain added;
// every buffer is memory from cuMemAlloc, staged through host memory by the
// communicator (coll/device_stage.h). Results are read back with the driver's own
// copies and compared with exact integer references, bit for bit.
//
// Needs a CUDA driver: on a GPU this is the real thing; in CI the ctest
// `coll.cuda_with_emulated_driver` runs it against the emulated driver
// (tests/device/emulated_cuda/, host memory behind the driver API, not a GPU) with
// REMORA_TEST_REQUIRE_CUDA=1, so it cannot skip there. Elsewhere it skips with the
// driver's reason.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/require_cuda.h"
#include "device_checks.h"
#include "mesh.h"
#include "remora/cuda.h"

namespace remora::test {
namespace {

constexpr int kRanks = 3;
constexpr auto kCopyTimeout = std::chrono::seconds(30);

/// CUDA device memory holding `v`, freed on destruction.
class CudaVec {
 public:
  CudaVec(MemoryDomain& domain, const std::vector<int32_t>& v) : domain_(domain), n_(v.size()) {
    auto p = cuda_allocate(std::max<size_t>(n_, 1) * sizeof(int32_t));
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    if (!p.is_ok()) return;
    p_ = static_cast<int32_t*>(*p);
    if (n_ == 0) return;
    auto copy = domain_.copy_from_host(p_, v.data(), n_ * sizeof(int32_t));
    EXPECT_TRUE(copy.is_ok()) << copy.status().to_string();
    if (copy.is_ok()) {
      EXPECT_TRUE((*copy)->wait(kCopyTimeout).is_ok());
    }
  }
  ~CudaVec() {
    if (p_ != nullptr) {
      EXPECT_TRUE(cuda_free(p_).is_ok());
    }
  }
  CudaVec(const CudaVec&) = delete;
  CudaVec& operator=(const CudaVec&) = delete;

  int32_t* data() const { return p_; }
  std::vector<int32_t> read() const {
    std::vector<int32_t> out(n_);
    if (n_ == 0 || p_ == nullptr) return out;
    auto copy = domain_.copy_to_host(out.data(), p_, n_ * sizeof(int32_t));
    EXPECT_TRUE(copy.is_ok()) << copy.status().to_string();
    if (copy.is_ok()) {
      EXPECT_TRUE((*copy)->wait(kCopyTimeout).is_ok());
    }
    return out;
  }

 private:
  MemoryDomain& domain_;
  size_t n_;
  int32_t* p_ = nullptr;
};

class CudaCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    REMORA_CUDA_DOMAIN_OR_SKIP(domain_);
    ranks_ = make_ranks(kRanks);
    for (auto& rank : ranks_) ASSERT_TRUE(rank.ctx->add_memory_domain(*domain_).is_ok());
  }

  MemoryDomain* domain_ = nullptr;
  std::vector<Rank> ranks_;
};

TEST_F(CudaCollectives, EveryResultIsExactOnDeviceMemory) {
  // Around the eager limit, above the ring threshold, and 16 MiB per rank.
  for (size_t n : {size_t{1}, size_t{1000}, size_t{300000}, size_t{4} << 20}) {
    SCOPED_TRACE("count " + std::to_string(n));
    run_ranks(ranks_, [&](int r, Communicator& comm) {
      expect_every_collective_exact(r, kRanks, comm, n, [&](const std::vector<int32_t>& v) {
        return std::make_unique<CudaVec>(*domain_, v);
      });
    });
  }
}

// Host and device buffers in one collective: rank 0's are host memory, the others'
// device memory; the host rank's buffers are used as they are.
TEST_F(CudaCollectives, HostAndDeviceRanksMix) {
  const size_t n = 100000;
  run_ranks(ranks_, [&](int r, Communicator& comm) {
    std::vector<int32_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = device_value(0, i) + device_value(1, i) + device_value(2, i);
    if (r == 0) {
      std::vector<int32_t> send = device_values(r, n), recv(n, -1);
      ASSERT_TRUE(comm.allreduce(send.data(), recv.data(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
      EXPECT_EQ(recv, want);
    } else {
      CudaVec send(*domain_, device_values(r, n)), recv(*domain_, std::vector<int32_t>(n, -1));
      ASSERT_TRUE(comm.allreduce(send.data(), recv.data(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
      EXPECT_EQ(recv.read(), want);
    }
  });
}

}  // namespace
}  // namespace remora::test
