// tests/coll/reduction.h — what the tests of the reduction collectives share
// (allreduce_test.cc, reduce_algo_test.cc, reduce_scatter_test.cc): small pipeline
// pieces, communicators that force each algorithm choice at any size (ring/chain, or
// recursive doubling/tree), the counts around pieces and ring blocks, and a mesh with
// one communicator of each choice per rank. The inputs and the sequential reference
// are in reference.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "mesh.h"
#include "remora/remora.h"

namespace remora::test {

inline constexpr size_t kPipeline = 4096;  // small pieces, so few bytes cross piece and slot boundaries

/// A communicator per rank over the same mesh, rank r's with config_of(r).
inline std::vector<std::unique_ptr<Communicator>> with_configs(std::vector<Rank>& ranks,
                                                               const std::function<coll::CollConfig(int)>& config_of,
                                                               uint32_t id) {
  std::vector<std::unique_ptr<Communicator>> out;
  const int n = static_cast<int>(ranks.size());
  std::vector<int> members(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) members[static_cast<size_t>(i)] = i;
  for (int r = 0; r < n; ++r) {
    auto& core = coll::CommAccess::core(*ranks[static_cast<size_t>(r)].comm);
    out.push_back(
        coll::CommAccess::make(std::make_shared<coll::CommCore>(core.world_ptr(), id, members, r, config_of(r))));
  }
  return out;
}
/// A communicator per rank over the same mesh with `config` (algorithm choices).
inline std::vector<std::unique_ptr<Communicator>> with_config(std::vector<Rank>& ranks, coll::CollConfig config,
                                                              uint32_t id) {
  return with_configs(
      ranks, [&](int) { return config; }, id);
}

inline coll::CollConfig small_config() {
  coll::CollConfig c;
  c.timeout = std::chrono::seconds(10);
  c.pipeline_bytes = kPipeline;
  c.exchange_piece_bytes = kPipeline;  // recursive doubling's rounds go in several pieces too
  return c;
}
inline coll::CollConfig ring_config() {  // ring / chain at any size
  coll::CollConfig c = small_config();
  c.allreduce = coll::Algo::kRing;
  c.reduce = coll::Algo::kChain;
  c.ring_threshold = 0;
  return c;
}
inline coll::CollConfig rd_config() {  // recursive doubling / tree at any size
  coll::CollConfig c = small_config();
  c.allreduce = coll::Algo::kRecursiveDoubling;
  c.reduce = coll::Algo::kTree;
  c.ring_threshold = SIZE_MAX;
  return c;
}

inline coll::CollConfig shm_config() {  // auto: the communicator's shared segment for small vectors
  coll::CollConfig c = small_config();
  c.shm_bytes = 16 * 1024;
  return c;
}

/// Counts around pieces and ring blocks for type t at n ranks: the interesting edges
/// are a block of exactly one piece and more pieces per block than the ring's slots.
inline std::vector<size_t> boundary_counts(DataType t, int n) {
  const size_t piece = kPipeline / size_of(t);
  const size_t nn = static_cast<size_t>(n);
  return {piece - 1, piece * nn - 1, piece * nn, piece * nn + 1, piece * 5 * nn + 13};
}

/// `n` ranks, each with a ring/chain communicator and a recursive-doubling/tree one;
/// `with_shm`: and one that chooses by size, through its shared segment for small
/// vectors (coll/shm_segment.h; the ranks are threads of one process).
struct BothAlgorithms {
  std::vector<Rank> ranks;
  std::vector<std::unique_ptr<Communicator>> ring, rd, shm;
  explicit BothAlgorithms(int n, bool with_shm = false) : ranks(make_ranks(n)) {
    ring = with_config(ranks, ring_config(), 100);
    rd = with_config(ranks, rd_config(), 101);
    if (with_shm) shm = with_config(ranks, shm_config(), 102);
  }
  /// body(rank, communicator, algorithm name) for each algorithm choice.
  void run(const std::function<void(int, Communicator&, const char*)>& body) {
    run_ranks(ranks, [&](int r, Communicator&) {
      body(r, *ring[static_cast<size_t>(r)], "ring");
      if (::testing::Test::HasFatalFailure()) return;
      body(r, *rd[static_cast<size_t>(r)], "rd");
      if (::testing::Test::HasFatalFailure() || shm.empty()) return;
      body(r, *shm[static_cast<size_t>(r)], "auto (shm)");
    });
  }
};

}  // namespace remora::test
