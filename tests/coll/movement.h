// tests/coll/movement.h — what the tests of the data-movement collectives share
// (barrier_test.cc, bcast_test.cc, gather_scatter_test.cc, allgather_test.cc,
// alltoall_test.cc, and the asynchronous ordering in comm_core_test.cc): the counts
// and types every operation is run at, a byte-for-byte comparison that names the first
// difference, communicators over the same mesh with a chosen algorithm, and the
// fixture parameterised over 1, 2, 3, 4, 5 and 8 ranks. The byte patterns and v-form
// layouts are in reference.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "coll/comm_access.h"
#include "coll/comm_core.h"
#include "remora/remora.h"

namespace remora::test {

using Bytes = std::vector<uint8_t>;

/// 300 KiB + 13: with 4 KiB pieces a chain broadcast runs 76 pieces, the last short.
inline constexpr size_t kLarge = 300 * 1024 + 13;
inline constexpr size_t kPiece = 4096;
inline constexpr uint8_t kSentinel = 0xEE;

struct Case {
  size_t count;
  DataType type;
};
// 8-byte elements at a prime count check that counts are scaled by the element size.
inline constexpr Case kCases[] = {{0, DataType::kUint8},
                                  {1, DataType::kUint8},
                                  {1009, DataType::kUint8},
                                  {1009, DataType::kFloat64},
                                  {kLarge, DataType::kUint8}};

inline std::string describe(const Case& c) { return fmt::format("count {} of {}", c.count, to_string(c.type)); }

inline ::testing::AssertionResult same(const Bytes& got, const Bytes& want) {
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
inline std::unique_ptr<Communicator> with_config(Communicator& c, uint32_t id, coll::CollConfig config) {
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
inline void for_each_variant(Communicator& world, std::initializer_list<Variant> variants,
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

/// A movement test run at each of kRankCounts ranks; n() is the rank count.
class MovementTest : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};

inline constexpr int kRankCounts[] = {1, 2, 3, 4, 5, 8};

/// Names each instance after its rank count ("Ranks/BroadcastTest.X/5").
inline std::string rank_count_name(const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param); }

/// What a rank sees when the ranks disagree on sizes: an error about the size, never
/// corruption.
inline bool size_error(const Status& s) {
  return s.code() == StatusCode::kProtocol || s.code() == StatusCode::kTruncated;
}

}  // namespace remora::test

