// Batches of puts and gets (Endpoint::put_batch, get_batch) and Request::on_done, on
// two contexts in one process over real loopback sockets. Each test compares the
// target's memory byte for byte with what the batch must have placed, and checks that
// a notified batch delivers exactly one notification, only after all of its bytes;
// the segmented requests batches send (at the end) too.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remora/remora.h"
#include "remora/testing/test_device.h"

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

/// `target_tweak` changes the target's options only (after `tweak`).
Pair connect_pair(const Tweak& tweak = {}, const Tweak& target_tweak = {}) {
  ContextOptions opts;
  opts.ignore_env = true;
  opts.eager_limit = 4096;  // small items travel inline, larger ones in chunks
  opts.chunk_bytes = 64 * 1024;
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

TEST(Batch, PutBatchPlacesEveryItemThenNotifiesOnce) {
  Pair p = connect_pair();
  // Two target regions; items of inline, chunked and multi-chunk sizes into both.
  std::vector<std::byte> a(2 << 20, std::byte{0}), b(2 << 20, std::byte{0});
  Region ra = p.target_ctx->register_memory(a.data(), a.size(), kTargetAccess).value();
  Region rb = p.target_ctx->register_memory(b.data(), b.size(), kTargetAccess).value();
  const size_t sizes[] = {100, 4096, 70000, 1 << 20, 1, 300000};
  std::vector<std::vector<std::byte>> src;
  std::vector<TransferItem> items;
  std::vector<std::byte> want_a = a, want_b = b;
  uint64_t off_a = 0, off_b = 0;
  for (size_t i = 0; i < std::size(sizes); ++i) {
    src.push_back(pattern(sizes[i], i + 1));
    const bool to_a = i % 2 == 0;
    uint64_t& off = to_a ? off_a : off_b;
    std::memcpy((to_a ? want_a : want_b).data() + off, src.back().data(), sizes[i]);
    items.push_back({src.back(), to_a ? ra.remote_key() : rb.remote_key(), off});
    off += sizes[i] + 13;  // gaps stay untouched
  }
  size_t total = 0;
  for (size_t s : sizes) total += s;

  Request r = p.init->put_batch(items, {.notify = 0xC0FFEE});
  ASSERT_EQ(r.wait(30s).code(), StatusCode::kOk);
  EXPECT_EQ(r.bytes(), total);
  auto n = p.target->wait_notification(30s);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n->value, 0xC0FFEEu);
  EXPECT_EQ(n->region, rb.id());  // the last item's region and offset, length 0
  EXPECT_EQ(n->offset, items.back().remote_offset);
  EXPECT_EQ(n->length, 0u);
  // The notification came after the data: everything is in place now.
  EXPECT_TRUE(a == want_a);
  EXPECT_TRUE(b == want_b);
  EXPECT_FALSE(p.target->poll_notification().has_value()) << "one notification per batch";
}

TEST(Batch, GetBatchReadsEveryItem) {
  Pair p = connect_pair();
  std::vector<std::byte> remote = pattern(3 << 20, 7);
  Region reg = p.target_ctx->register_memory(remote.data(), remote.size(), kTargetAccess).value();
  const size_t sizes[] = {8, 5000, 1 << 20, 65536, 777};
  std::vector<std::vector<std::byte>> dst;
  std::vector<TransferItem> items;
  uint64_t off = 3;
  for (size_t s : sizes) {
    dst.emplace_back(s, std::byte{0xEE});
    items.push_back({dst.back(), reg.remote_key(), off});
    off += s * 2;
  }
  Request r = p.init->get_batch(items);
  ASSERT_EQ(r.wait(30s).code(), StatusCode::kOk);
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(dst[i].data(), remote.data() + items[i].remote_offset, sizes[i])) << "item " << i;
  }
}

TEST(Batch, AFailedItemFailsTheBatchWithoutNotificationAndOthersLand) {
  Pair p = connect_pair();
  std::vector<std::byte> mem(1 << 20, std::byte{0});
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  RemoteKey bad = reg.remote_key();
  bad.secret ^= 1;  // tampered
  auto good1 = pattern(200000, 1), good2 = pattern(300, 2), doomed = pattern(1000, 3);
  std::vector<TransferItem> items = {
      {good1, reg.remote_key(), 0}, {doomed, bad, 500000}, {good2, reg.remote_key(), 600000}};
  Request r = p.init->put_batch(items, {.notify = 1});
  EXPECT_EQ(r.wait(30s).code(), StatusCode::kInvalidKey);
  EXPECT_EQ(r.bytes(), 0u);
  EXPECT_EQ(0, std::memcmp(mem.data(), good1.data(), good1.size()));
  EXPECT_EQ(0, std::memcmp(mem.data() + 600000, good2.data(), good2.size()));
  for (size_t i = 500000; i < 501000; ++i) ASSERT_EQ(mem[i], std::byte{0}) << "refused item wrote at " << i;
  EXPECT_FALSE(p.target->poll_notification().has_value());
  // The lowest-numbered failure wins: an out-of-range item 0 and a bad key later.
  std::vector<TransferItem> two = {{good2, reg.remote_key(), mem.size()}, {doomed, bad, 0}};
  EXPECT_EQ(p.init->put_batch(two).wait(30s).code(), StatusCode::kOutOfRange);
  std::vector<std::byte> sink(100);
  std::vector<TransferItem> get_items = {{sink, reg.remote_key(), 0}, {sink, bad, 0}};
  EXPECT_EQ(p.init->get_batch(get_items).wait(30s).code(), StatusCode::kInvalidKey);
  // The endpoint is still usable.
  EXPECT_EQ(p.init->put(good2, reg.remote_key(), 0).wait(30s).code(), StatusCode::kOk);
}

TEST(Batch, EmptyBatches) {
  Pair p = connect_pair();
  EXPECT_EQ(p.init->put_batch({}).wait(1s).code(), StatusCode::kOk);
  EXPECT_EQ(p.init->get_batch({}).wait(1s).code(), StatusCode::kOk);
  EXPECT_EQ(p.init->put_batch({}, {.notify = 5}).wait(1s).code(), StatusCode::kInvalidArgument);
}

TEST(Batch, PeerGoneFailsTheBatch) {
  Pair p = connect_pair();
  std::vector<std::byte> mem(1 << 20);
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  RemoteKey key = reg.remote_key();
  p.target->abort();
  p.target.reset();
  auto data = pattern(1 << 20, 9);
  std::vector<TransferItem> items = {{data, key, 0}};
  const Status s = p.init->put_batch(items, {.notify = 3}).wait(30s);
  EXPECT_TRUE(s.code() == StatusCode::kPeerFailed || s.code() == StatusCode::kAborted) << s.to_string();
}

// More items than the target serves at once (the RMA window) wait their turn, and every
// byte of every item still lands, both ways.
TEST(Batch, ManyItemsBeyondTheRmaWindowAllLandBothWays) {
  Pair p = connect_pair([](ContextOptions& o) { o.rma_window = 64; });
  constexpr size_t kItems = 700;
  const size_t sizes[] = {100, 4096, 5000, 70000};  // inline, at the eager limit, chunked, two chunks
  std::vector<std::byte> mem(16 << 20, std::byte{0});
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  std::vector<std::vector<std::byte>> src, back;
  std::vector<TransferItem> puts, gets;
  std::vector<std::byte> want = mem;
  uint64_t off = 0;
  for (size_t i = 0; i < kItems; ++i) {
    const size_t n = sizes[i % std::size(sizes)];
    src.push_back(pattern(n, 1000 + i));
    back.emplace_back(n, std::byte{0xEE});
    std::memcpy(want.data() + off, src.back().data(), n);
    puts.push_back({src.back(), reg.remote_key(), off});
    gets.push_back({back.back(), reg.remote_key(), off});
    off += n + 7;  // gaps stay untouched
  }
  ASSERT_LE(off, mem.size());
  Request put = p.init->put_batch(puts);
  ASSERT_EQ(put.wait(30s).code(), StatusCode::kOk);
  EXPECT_TRUE(mem == want);
  Request get = p.init->get_batch(gets);
  ASSERT_EQ(get.wait(30s).code(), StatusCode::kOk);
  for (size_t i = 0; i < kItems; ++i) ASSERT_EQ(back[i], src[i]) << "item " << i;
}

// A batch's items are posted under one hold of the lock, so admission counts them
// exactly: the first REMORA_MAX_OUTSTANDING are posted and land, the rest are refused
// with kNoResource (the batch's status, the lowest refused item's) and touch nothing.
constexpr uint32_t kAdmitted = 8;

TEST(Batch, AdmissionCountsTheItemsOfOneBatchExactly) {
  // One request per item (a segmented request would carry them all past admission).
  Pair p = connect_pair([](ContextOptions& o) {
    o.max_outstanding = kAdmitted;
    o.segments = false;
  });
  constexpr size_t kItems = 20, kSize = 70000;  // chunked: none can end while the batch is posted
  std::vector<std::byte> mem(kItems * kSize, std::byte{0});
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  std::vector<std::vector<std::byte>> src;
  std::vector<TransferItem> puts;
  for (size_t i = 0; i < kItems; ++i) {
    src.push_back(pattern(kSize, 40 + i));
    puts.push_back({src.back(), reg.remote_key(), i * kSize});
  }
  Request put = p.init->put_batch(puts);
  const Status s = put.wait(30s);
  EXPECT_EQ(s.code(), StatusCode::kNoResource) << s.to_string();
  for (size_t i = 0; i < kItems; ++i) {
    const bool landed = std::memcmp(mem.data() + i * kSize, src[i].data(), kSize) == 0;
    const bool untouched = std::all_of(mem.begin() + i * kSize, mem.begin() + (i + 1) * kSize,
                                       [](std::byte b) { return b == std::byte{0}; });
    if (i < kAdmitted) {
      EXPECT_TRUE(landed) << "item " << i;
    } else {
      EXPECT_TRUE(untouched) << "item " << i;
    }
  }
  // Refused items hold nothing: a batch of at most the window then passes.
  std::vector<TransferItem> again(puts.begin() + kAdmitted, puts.begin() + 2 * kAdmitted);
  ASSERT_EQ(p.init->put_batch(again).wait(30s).code(), StatusCode::kOk);
  for (size_t i = kAdmitted; i < 2 * kAdmitted; ++i) {
    EXPECT_EQ(std::memcmp(mem.data() + i * kSize, src[i].data(), kSize), 0) << "item " << i;
  }
}

// Items of device memory are staged (here through the test device), both ways.
TEST(Batch, DeviceMemoryItemsLandBothWays) {
  Pair p = connect_pair();
  auto dev = testing::TestDeviceDomain::create({.capacity = size_t{8} << 20}).value();
  ASSERT_TRUE(p.init_ctx->add_memory_domain(*dev).is_ok());
  std::vector<std::byte> mem(1 << 20, std::byte{0});
  Region reg = p.target_ctx->register_memory(mem.data(), mem.size(), kTargetAccess).value();
  const auto a = pattern(3000, 5), b = pattern(200000, 6);
  std::byte* da = dev->allocate(a.size()).value();
  std::byte* db = dev->allocate(b.size()).value();
  ASSERT_TRUE(dev->write(da, a.data(), a.size()).is_ok());
  ASSERT_TRUE(dev->write(db, b.data(), b.size()).is_ok());
  std::vector<TransferItem> items = {{{da, a.size()}, reg.remote_key(), 0}, {{db, b.size()}, reg.remote_key(), 4096}};
  ASSERT_EQ(p.init->put_batch(items).wait(30s).code(), StatusCode::kOk);
  EXPECT_EQ(std::memcmp(mem.data(), a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(mem.data() + 4096, b.data(), b.size()), 0);
  EXPECT_GE(p.init->stats().staged_transfers, 1u);
  // Back into device memory, swapped.
  std::vector<TransferItem> back = {{{db, a.size()}, reg.remote_key(), 0}, {{da, 3000}, reg.remote_key(), 4096}};
  ASSERT_EQ(p.init->get_batch(back).wait(30s).code(), StatusCode::kOk);
  std::vector<std::byte> got(3000);
  ASSERT_TRUE(dev->read(got.data(), db, got.size()).is_ok());
  EXPECT_EQ(got, a);
  ASSERT_TRUE(dev->read(got.data(), da, got.size()).is_ok());
  EXPECT_EQ(0, std::memcmp(got.data(), b.data(), got.size()));
  p.init.reset();  // the endpoint before the domain it stages through
  p.init_ctx.reset();
}

TEST(RequestOnDone, RunsOnceWhenDoneAndAtOnceWhenAlreadyDone) {
  Pair p = connect_pair();
  std::vector<std::byte> buf(100);
  std::atomic<int> calls{0};
  std::promise<void> ran;  // the functions run in the order added: the second one says when both did
  Request recv = p.target->recv(buf, Tag{4});
  ASSERT_TRUE(recv.on_done([&] { calls.fetch_add(1); }).is_ok());
  ASSERT_TRUE(recv.on_done([&] {
                    calls.fetch_add(10);
                    ran.set_value();
                  }).is_ok());
  EXPECT_EQ(calls.load(), 0);  // nothing was sent yet
  auto msg = pattern(100, 4);
  ASSERT_EQ(p.init->send(msg, Tag{4}).wait(10s).code(), StatusCode::kOk);
  ASSERT_EQ(recv.wait(10s).code(), StatusCode::kOk);
  // The completing thread wakes waiters first, then runs the functions.
  ASSERT_EQ(ran.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(calls.load(), 11);
  int late = 0;
  ASSERT_TRUE(recv.on_done([&] { ++late; }).is_ok());
  EXPECT_EQ(late, 1);  // already done: called at once, on this thread
  EXPECT_EQ(Request().on_done([] {}).code(), StatusCode::kInvalidArgument);
}


// --- segmented requests (docs/protocol.md "Segments") ---------------------------
// A batch's items of one key travel as one PUT or GET naming a list of pieces of the
// key's window. Same-host pulls off: between peers that pull, batches keep one
// request per item. The stats say whether the items went segmented.

/// Options for the segmented tests: the defaults (1 MiB items, not the small eager
/// limit above), same-host pulls off, then `tweak`.
Tweak segmented(const Tweak& tweak = {}) {
  return [tweak](ContextOptions& o) {
    o.eager_limit.reset();
    o.chunk_bytes.reset();
    o.same_host_pulls = false;
    if (tweak) tweak(o);
  };
}

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
  Pair p = connect_pair(segmented(GetParam().tweak));
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
  Pair p = connect_pair(segmented());
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
  Pair p = connect_pair(segmented());
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
    Pair p = side == 0 ? connect_pair(segmented(off)) : connect_pair(segmented(), off);
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
  Pair p = connect_pair(segmented());
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
  Pair p = connect_pair(segmented([](ContextOptions& o) { o.chunk_bytes = 16384; }));
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
