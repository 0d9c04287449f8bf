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
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

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

  int32_t* p() const { return p_; }
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

int32_t value(int rank, size_t i) { return static_cast<int32_t>(rank * 1000003 + static_cast<int>(i % 9973)); }

std::vector<int32_t> values(int rank, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

class CudaCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    auto domain = cuda_domain();
    if (!domain.is_ok()) {
      const char* required = std::getenv("REMORA_TEST_REQUIRE_CUDA");
      ASSERT_FALSE(required != nullptr && std::string(required) == "1")
          << "REMORA_TEST_REQUIRE_CUDA=1 but " << domain.status().to_string();
      GTEST_SKIP() << "needs a CUDA driver (a GPU, or REMORA_CUDA_DRIVER=the emulated driver): "
                   << domain.status().message();
    }
    domain_ = *domain;
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
      MemoryDomain& dev = *domain_;
      CudaVec send(dev, values(r, n)), recv(dev, std::vector<int32_t>(n, -1));
      ASSERT_TRUE(comm.allreduce(send.p(), recv.p(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
      std::vector<int32_t> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = value(0, i) + value(1, i) + value(2, i);
      EXPECT_EQ(recv.read(), want);
      ASSERT_TRUE(comm.allreduce(kInPlace, recv.p(), n, DataType::kInt32, ReduceOp::kMax).is_ok());
      EXPECT_EQ(recv.read(), want);

      CudaVec b(dev, r == 2 ? values(2, n) : std::vector<int32_t>(n, 0));
      ASSERT_TRUE(comm.broadcast(b.p(), n, DataType::kInt32, 2).is_ok());
      EXPECT_EQ(b.read(), values(2, n));

      CudaVec all(dev, std::vector<int32_t>(n * kRanks, 0));
      ASSERT_TRUE(comm.allgather(send.p(), all.p(), n, DataType::kInt32).is_ok());
      std::vector<int32_t> gathered;
      for (int q = 0; q < kRanks; ++q) {
        auto v = values(q, n);
        gathered.insert(gathered.end(), v.begin(), v.end());
      }
      EXPECT_EQ(all.read(), gathered);

      CudaVec block(dev, std::vector<int32_t>(n, 0));
      ASSERT_TRUE(comm.reduce_scatter(all.p(), block.p(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
      std::vector<int32_t> mine = values(r, n);
      for (auto& x : mine) x *= kRanks;
      EXPECT_EQ(block.read(), mine);

      std::vector<int32_t> out;
      for (int q = 0; q < kRanks; ++q) {
        for (size_t i = 0; i < n; ++i) out.push_back(value(r, i) + q);
      }
      CudaVec a_send(dev, out), a_recv(dev, std::vector<int32_t>(n * kRanks, 0));
      ASSERT_TRUE(comm.alltoall(a_send.p(), a_recv.p(), n, DataType::kInt32).is_ok());
      std::vector<int32_t> in;
      for (int q = 0; q < kRanks; ++q) {
        for (size_t i = 0; i < n; ++i) in.push_back(value(q, i) + r);
      }
      EXPECT_EQ(a_recv.read(), in);
    });
  }
}

// Host and device buffers in one collective: rank 0's are host memory, the others'
// device memory; the host rank's buffers are used as they are.
TEST_F(CudaCollectives, HostAndDeviceRanksMix) {
  const size_t n = 100000;
  run_ranks(ranks_, [&](int r, Communicator& comm) {
    std::vector<int32_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = value(0, i) + value(1, i) + value(2, i);
    if (r == 0) {
      std::vector<int32_t> send = values(r, n), recv(n, -1);
      ASSERT_TRUE(comm.allreduce(send.data(), recv.data(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
      EXPECT_EQ(recv, want);
    } else {
      CudaVec send(*domain_, values(r, n)), recv(*domain_, std::vector<int32_t>(n, -1));
      ASSERT_TRUE(comm.allreduce(send.p(), recv.p(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
      EXPECT_EQ(recv.read(), want);
    }
  });
}

}  // namespace
}  // namespace remora::test
