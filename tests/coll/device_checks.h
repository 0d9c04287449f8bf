// tests/coll/device_checks.h — what the collective tests on device memory share
// (device_coll_test.cc: the test device; cuda_coll_test.cc: CUDA): the reference
// values, and one pass over every collective family on buffers the test makes, each
// result read back and compared with an exact integer reference, bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "remora/remora.h"

namespace remora::test {

inline int32_t device_value(int rank, size_t i) {
  return static_cast<int32_t>(rank * 1000003 + static_cast<int>(i % 9973));
}

inline std::vector<int32_t> device_values(int rank, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = device_value(rank, i);
  return v;
}

/// On rank `r` of `ranks`: allreduce (then in place), broadcast from rank 1, allgather,
/// reduce_scatter and alltoall of `n` int32 per block, every buffer from
/// `make(contents)`, which returns a pointer to device memory holding `contents` with
/// `int32_t* data()` and `std::vector<int32_t> read()`.
template <typename Make>
void expect_every_collective_exact(int r, int ranks, Communicator& comm, size_t n, const Make& make) {
  auto send = make(device_values(r, n));
  auto recv = make(std::vector<int32_t>(n, -1));
  ASSERT_TRUE(comm.allreduce(send->data(), recv->data(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
  std::vector<int32_t> want(n, 0);
  for (int q = 0; q < ranks; ++q) {
    for (size_t i = 0; i < n; ++i) want[i] += device_value(q, i);
  }
  EXPECT_EQ(recv->read(), want);
  ASSERT_TRUE(comm.allreduce(kInPlace, recv->data(), n, DataType::kInt32, ReduceOp::kMax).is_ok());
  EXPECT_EQ(recv->read(), want);

  auto b = make(r == 1 ? device_values(1, n) : std::vector<int32_t>(n, 0));
  ASSERT_TRUE(comm.broadcast(b->data(), n, DataType::kInt32, 1).is_ok());
  EXPECT_EQ(b->read(), device_values(1, n));

  auto all = make(std::vector<int32_t>(n * static_cast<size_t>(ranks), 0));
  ASSERT_TRUE(comm.allgather(send->data(), all->data(), n, DataType::kInt32).is_ok());
  std::vector<int32_t> gathered;
  for (int q = 0; q < ranks; ++q) {
    auto v = device_values(q, n);
    gathered.insert(gathered.end(), v.begin(), v.end());
  }
  EXPECT_EQ(all->read(), gathered);

  // reduce_scatter of the gathered vector: every rank's block summed over the ranks
  auto block = make(std::vector<int32_t>(n, 0));
  ASSERT_TRUE(comm.reduce_scatter(all->data(), block->data(), n, DataType::kInt32, ReduceOp::kSum).is_ok());
  std::vector<int32_t> mine = device_values(r, n);
  for (auto& x : mine) x *= ranks;
  EXPECT_EQ(block->read(), mine);

  // alltoall: block q of rank r's send is device_value(r, ...) + q
  std::vector<int32_t> out, in;
  for (int q = 0; q < ranks; ++q) {
    for (size_t i = 0; i < n; ++i) {
      out.push_back(device_value(r, i) + q);
      in.push_back(device_value(q, i) + r);
    }
  }
  auto a_send = make(out);
  auto a_recv = make(std::vector<int32_t>(n * static_cast<size_t>(ranks), 0));
  ASSERT_TRUE(comm.alltoall(a_send->data(), a_recv->data(), n, DataType::kInt32).is_ok());
  EXPECT_EQ(a_recv->read(), in);
}

}  // namespace remora::test
