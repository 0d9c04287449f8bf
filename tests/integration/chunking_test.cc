// Rendezvous messages cut into many chunks, one message at a time with no other
// traffic (nothing else wakes the sender up): every chunk must go out. Small chunk
// sizes make a message need far more chunks than the sender schedules per progress
// pass, which is where a missing re-arm shows up as a silent stall.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <ostream>

#include "itest_util.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;

struct ChunkCase {
  uint32_t streams;
  size_t chunk_bytes;
  size_t message;
  const char* name;
};

void PrintTo(const ChunkCase& c, std::ostream* os) { *os << c.name; }

class Chunking : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(Chunking, OneMessageManyChunksArrivesWhole) {
  const ChunkCase c = GetParam();
  auto ctx = [&] {
    ContextOptions o;
    o.streams_per_endpoint = c.streams;
    o.chunk_bytes = c.chunk_bytes;
    auto r = Context::create(o);
    EXPECT_TRUE(r) << describe(r.status());
    return r ? std::move(r).value() : nullptr;
  };
  Pair p = make_pair_in_process(ctx(), ctx());
  ASSERT_TRUE(p.ea && p.eb);
  std::vector<std::byte> out(c.message), in(c.message);
  fill_stream(c.message, 0, out);
  Request r = p.ea->recv(in, Tag{1});
  Request s = p.eb->send(out, Tag{1});
  // One deadline for both: a stalled transfer costs 10 s, not 2 x 10 s.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  const Status ss = s.wait(10s);
  const Status rs = r.wait(std::max(std::chrono::steady_clock::duration::zero(), deadline - std::chrono::steady_clock::now()));
  const EndpointStats st = p.eb->stats();
  EXPECT_TRUE(ss.is_ok()) << "send: " << describe(ss) << "; chunks sent " << st.chunks_sent << " of "
                          << (c.message + c.chunk_bytes - 1) / c.chunk_bytes;
  EXPECT_TRUE(rs.is_ok()) << "recv: " << describe(rs);
  if (rs.is_ok()) {
    EXPECT_EQ(std::memcmp(in.data(), out.data(), c.message), 0);
  }
  p.ea->close();
  p.eb->close();
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, Chunking,
    ::testing::Values(ChunkCase{1, 4096, 1 << 20, "K1_4KiBChunks_256Chunks"},
                      ChunkCase{1, 16384, 65 * 16384, "K1_16KiBChunks_65Chunks"},
                      ChunkCase{2, 8192, 4 << 20, "K2_8KiBChunks_512Chunks"},
                      ChunkCase{4, 65536, 32 << 20, "K4_64KiBChunks_512Chunks"},
                      ChunkCase{2, 512 * 1024, 64 << 20, "K2_DefaultChunks_128Chunks"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace remora::itest
