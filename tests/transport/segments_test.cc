// Segmented requests (docs/protocol.md "Segments"): a batch's items of one key travel as
// one PUT or GET naming a list of pieces of the key's window. Two contexts in one
// process over real loopback sockets, same-host pulls off (between peers that pull,
// batches keep one request per item). Every test compares the target's memory byte
// for byte with what the batch must have placed, gaps included, and the stats say
// whether the items went segmented.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remora/remora.h"

namespace remora {
inline void PrintTo(StatusCode code, std::ostream* os) { *os << to_string(code); }
}  // namespace remora

namespace remora {
namespace {

using namespace std::chrono_literals;

struct Pair {
  std::unique_ptr<Context> target_ctx, init_ctx;
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Endpoint> target, init;
};

using Tweak = std::function<void(ContextOptions&)>;

Pair make_pair(const Tweak& tweak = {}, const Tweak& target_tweak = {}) {
  ContextOptions opts;
  opts.ignore_env = true;
  opts.same_host_pulls = false;
  if (tweak) tweak(opts);
  ContextOptions topts = opts;
  if (target_tweak) target_tweak(topts);
  Pair p;
  p.target_ctx = Context::create(topts).value();
  p.init_ctx = Context::create(opts).value();
  p.listener = p.target_ctx->listen("127.0.0.1:0").value();
  p.init = p.init_ctx->connect("127.0.0.1:" + std::to_string(p.listener->port()), 10s).value();
  p.target = p.listener->accept(10s).value();
  return p;
}

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

constexpr Access kTargetAccess = Access::kLocalWrite | Access::kRemoteRead | Access::kRemoteWrite;

/// A list of `sizes` blocks, apart on both sides and in reverse order at the target
/// (the layout of KV-cache blocks): the sources, the batch's items, and what the
/// target's memory must hold after the put.
struct BlockList {
  std::vector<std::vector<std::byte>> src;
  std::vector<TransferItem> items;
  std::vector<std::byte> want;
};

BlockList block_list(const std::vector<size_t>& sizes, const Region& region, std::span<const std::byte> mem,
                     uint64_t seed) {
  BlockList l;
  l.want.assign(mem.begin(), mem.end());
  uint64_t end = 0;
  for (size_t s : sizes) end += s + 11;
  for (size_t i = 0; i < sizes.size(); ++i) {
    end -= sizes[i] + 11;  // reversed: the first block lands last
    l.src.push_back(pattern(sizes[i], seed + i));
    std::memcpy(l.want.data() + end, l.src.back().data(), sizes[i]);
    l.items.push_back({l.src.back(), region.remote_key(), end});
  }
  return l;
}

struct Case {
  const char* name;
  Tweak tweak;
};

class SegmentedBatch : public ::testing::TestWithParam<Case> {};

// Blocks of every size class (one byte, under and at the inline bound, one chunk,
// several chunks), so that chunks start and end inside blocks and span several; put,
// then read back into other buffers with a get.
TEST_P(SegmentedBatch, PutAndGetListsOfBlocksByteForByte) {
  Pair p = make_pair(GetParam().tweak);
  std::vector<std::byte> mem(12 << 20, std::byte{0x5A});
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  std::vector<size_t> sizes;
  const size_t classes[] = {1, 100, 4096, 16384, 16385, 65536, 300000, 1 << 20};
  for (size_t round = 0; round < 6; ++round) {
    for (size_t s : classes) sizes.push_back(s + round);
  }
  BlockList l = block_list(sizes, reg, mem, 100);

  Request put = p.init->put_batch(l.items);
  ASSERT_EQ(put.wait(60s).code(), StatusCode::kOk);
  EXPECT_EQ(put.bytes(), [&] {
    size_t n = 0;
    for (size_t s : sizes) n += s;
    return n;
  }());
  ASSERT_TRUE(mem == l.want) << "the target's memory differs (gaps included)";
  EXPECT_EQ(p.init->stats().segmented, 1u);
  EXPECT_EQ(p.target->stats().served_segmented, 1u);

  std::vector<std::vector<std::byte>> back;
  std::vector<TransferItem> gets;
  for (const TransferItem& it : l.items) {
    back.emplace_back(it.local.size(), std::byte{0xEE});
    gets.push_back({back.back(), it.key, it.remote_offset});
  }
  Request get = p.init->get_batch(gets);
  ASSERT_EQ(get.wait(60s).code(), StatusCode::kOk);
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], l.src[i]) << "block " << i;
  EXPECT_EQ(p.init->stats().segmented, 2u);
  EXPECT_EQ(p.target->stats().served_segmented, 2u);
}

INSTANTIATE_TEST_SUITE_P(Configs, SegmentedBatch,
                         ::testing::Values(Case{"Defaults", {}},
                                           Case{"OneStreamTinyChunks",
                                                [](ContextOptions& o) {
                                                  o.streams_per_endpoint = 1;
                                                  o.chunk_bytes = 4096;
                                                }},
                                           Case{"FourStreams", [](ContextOptions& o) { o.streams_per_endpoint = 4; }},
                                           Case{"Checksums",
                                                [](ContextOptions& o) { o.checksum = ChecksumMode::kCrc32c; }},
                                           Case{"Encrypted",
                                                [](ContextOptions& o) {
                                                  o.auth_key = AuthKey::from_secret("segments").value();
                                                  o.encrypt = EncryptMode::kOn;
                                                }}),
                         [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

// More items of one key than one request names: several segmented requests, every
// byte in place; two keys in one batch go as a request each.
TEST(Segments, LongListsAndTwoKeys) {
  Pair p = make_pair();
  std::vector<std::byte> a(8 << 20, std::byte{0}), b(1 << 20, std::byte{0});
  Region ra = p.target_ctx->register_memory(a.data(), a.size(), kTargetAccess).value();
  Region rb = p.target_ctx->register_memory(b.data(), b.size(), kTargetAccess).value();
  BlockList la = block_list(std::vector<size_t>(2500, 3000), ra, a, 1);  // 1024 + 1024 + 452
  BlockList lb = block_list(std::vector<size_t>(40, 5000), rb, b, 9000);
  std::vector<TransferItem> items;
  for (size_t i = 0; i < std::max(la.items.size(), lb.items.size()); ++i) {  // interleaved
    if (i < la.items.size()) items.push_back(la.items[i]);
    if (i < lb.items.size()) items.push_back(lb.items[i]);
  }
  ASSERT_EQ(p.init->put_batch(items).wait(60s).code(), StatusCode::kOk);
  EXPECT_TRUE(a == la.want);
  EXPECT_TRUE(b == lb.want);
  EXPECT_EQ(p.init->stats().segmented, 4u);
  EXPECT_EQ(p.target->stats().served_segmented, 4u);
}

// A key's items are checked against its window before they are grouped, so an item
// out of range still fails alone and the others land; a tampered key is another key:
// its items fail together with invalid_key and write nothing.
TEST(Segments, RefusedItemsFailAloneAndWriteNothing) {
  Pair p = make_pair();
  std::vector<std::byte> mem(2 << 20, std::byte{0});
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  BlockList l = block_list(std::vector<size_t>(16, 40000), reg, mem, 3);
  const std::vector<std::byte> before = mem;
  auto extra = pattern(5000, 77);
  std::vector<TransferItem> items = l.items;
  items.insert(items.begin() + 3, TransferItem{extra, reg.remote_key(), mem.size() - 100});  // past the end
  Request r = p.init->put_batch(items);
  EXPECT_EQ(r.wait(60s).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(mem == l.want) << "the items in range must land";
  EXPECT_EQ(p.init->stats().segmented, 1u);

  std::fill(mem.begin(), mem.end(), std::byte{0});
  RemoteKey forged = reg.remote_key();
  forged.secret ^= 0x10;
  std::vector<TransferItem> bad = l.items;
  for (TransferItem& it : bad) it.key = forged;
  EXPECT_EQ(p.init->put_batch(bad).wait(60s).code(), StatusCode::kInvalidKey);
  EXPECT_TRUE(std::all_of(mem.begin(), mem.end(), [](std::byte x) { return x == std::byte{0}; }))
      << "a refused segmented put wrote";
  std::vector<std::byte> sink(40000 * 16, std::byte{0xEE});
  std::vector<TransferItem> gets;
  for (size_t i = 0; i < 16; ++i) gets.push_back({std::span(sink).subspan(i * 40000, 40000), forged, i * 50000});
  EXPECT_EQ(p.init->get_batch(gets).wait(60s).code(), StatusCode::kInvalidKey);
  EXPECT_TRUE(std::all_of(sink.begin(), sink.end(), [](std::byte x) { return x == std::byte{0xEE}; }))
      << "a refused segmented get delivered bytes";
  EXPECT_EQ(p.target->stats().served_segmented, 1u);
  // The endpoint is still usable, segmented.
  ASSERT_EQ(p.init->put_batch(l.items).wait(60s).code(), StatusCode::kOk);
  EXPECT_TRUE(mem == l.want);
}

// REMORA_SEGMENTS=off on either side: every item is a request of its own, and lands.
TEST(Segments, OffOnEitherSideSendsOneRequestPerItem) {
  for (int side = 0; side < 2; ++side) {
    const Tweak off = [](ContextOptions& o) { o.segments = false; };
    Pair p = side == 0 ? make_pair(off) : make_pair({}, off);
    std::vector<std::byte> mem(2 << 20, std::byte{0});
    Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
    BlockList l = block_list(std::vector<size_t>(20, 30000), reg, mem, 5);
    ASSERT_EQ(p.init->put_batch(l.items).wait(60s).code(), StatusCode::kOk);
    EXPECT_TRUE(mem == l.want);
    EXPECT_EQ(p.init->stats().segmented, 0u) << "side " << side;
    EXPECT_EQ(p.init->stats().puts, 20u) << "side " << side;
  }
}

// Blocks whose total travels inline go one request each (a segmented request is
// always chunked); a batch of one item is a put of its own.
TEST(Segments, SmallListsAndSingleItemsAreNotSegmented) {
  Pair p = make_pair();
  std::vector<std::byte> mem(1 << 20, std::byte{0});
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  BlockList small = block_list(std::vector<size_t>(4, 4096), reg, mem, 8);  // 16 KiB in all
  ASSERT_EQ(p.init->put_batch(small.items).wait(60s).code(), StatusCode::kOk);
  EXPECT_TRUE(mem == small.want);
  BlockList one = block_list({500000}, reg, mem, 9);
  ASSERT_EQ(p.init->put_batch(one.items).wait(60s).code(), StatusCode::kOk);
  EXPECT_TRUE(mem == one.want);
  EXPECT_EQ(p.init->stats().segmented, 0u);
  EXPECT_EQ(p.init->stats().puts, 5u);
}

// The region is deregistered while a long segmented put and get are in flight: each
// completes with invalid_key or ok (it may have finished first), never touches the
// memory after deregistration returned, and the endpoint serves the next request.
TEST(Segments, DeregisteredMidTransferEndsCleanly) {
  Pair p = make_pair([](ContextOptions& o) { o.chunk_bytes = 16384; });
  std::vector<std::byte> mem(32 << 20, std::byte{0});
  auto reg = std::make_unique<Region>(p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value());
  BlockList l = block_list(std::vector<size_t>(500, 60000), *reg, mem, 21);
  Request put = p.init->put_batch(l.items);
  std::vector<std::byte> sink(500 * 60000, std::byte{0xEE});
  std::vector<TransferItem> gets;
  for (size_t i = 0; i < l.items.size(); ++i) {
    gets.push_back({std::span(sink).subspan(i * 60000, 60000), l.items[i].key, l.items[i].remote_offset});
  }
  Request get = p.init->get_batch(gets);
  reg->deregister();
  const std::vector<std::byte> after = mem;  // nothing may change from here on
  const Status ps = put.wait(60s), gs = get.wait(60s);
  EXPECT_TRUE(ps.code() == StatusCode::kOk || ps.code() == StatusCode::kInvalidKey) << ps.to_string();
  EXPECT_TRUE(gs.code() == StatusCode::kOk || gs.code() == StatusCode::kInvalidKey) << gs.to_string();
  EXPECT_TRUE(mem == after) << "the target's memory changed after its deregistration returned";
  Region again = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  BlockList l2 = block_list(std::vector<size_t>(50, 20000), again, mem, 31);
  ASSERT_EQ(p.init->put_batch(l2.items).wait(60s).code(), StatusCode::kOk);
  EXPECT_TRUE(mem == l2.want);
}

}  // namespace
}  // namespace remora
