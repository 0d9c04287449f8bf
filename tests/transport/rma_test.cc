// In-process tests of one-sided RMA: two contexts in one process, real sockets on
// loopback. One side (the target) registers memory and hands its key over by value;
// the other (the initiator) puts, gets and runs atomics. Every test compares the
// target's memory byte for byte against a model of what it must hold, so a byte
// placed outside its range, placed twice, or placed after a refusal is caught.
// Multi-process and namespace RMA tests live in tests/integration/rma_test.cc.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/chunk_scheduler.h"
#include "engine/engine_of.h"
#include "engine/progress.h"
#include "huge_pages.h"
#include "remora/remora.h"

namespace remora {
/// gtest prints StatusCode by name ("invalid_key") instead of as a raw byte.
inline void PrintTo(StatusCode code, std::ostream* os) { *os << to_string(code); }
}  // namespace remora

namespace remora {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// The accepted endpoint is the target, the connected one the initiator.
struct RmaPair {
  std::unique_ptr<Context> target_ctx, init_ctx;
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Endpoint> target, init;
};

RmaPair connect_pair(std::unique_ptr<Context> target_ctx, std::unique_ptr<Context> init_ctx) {
  RmaPair p;
  p.target_ctx = std::move(target_ctx);
  p.init_ctx = std::move(init_ctx);
  p.listener = p.target_ctx->listen("127.0.0.1:0").value();
  auto c = p.init_ctx->connect("127.0.0.1:" + std::to_string(p.listener->port()), 10s);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  if (c.is_ok()) p.init = c.value();
  auto s = p.listener->accept(10s);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  if (s.is_ok()) p.target = s.value();
  return p;
}

RmaPair make_pair(ContextOptions opts = {}) {
  opts.ignore_env = true;
  return connect_pair(Context::create(opts).value(), Context::create(opts).value());
}

RmaPair make_pair_with(const Config& config) {
  return connect_pair(Context::create(config).value(), Context::create(config).value());
}

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

/// Registered memory on the target plus the model of what it must contain. The
/// region is declared after the bytes, so it is deregistered before they are freed.
struct TargetMemory {
  std::vector<std::byte> bytes;
  std::vector<std::byte> model;
  Region region;

  TargetMemory(Context& ctx, size_t size, Access access, uint64_t seed = 77)
      : bytes(pattern(size, seed)), model(bytes) {
    auto r = ctx.register_memory(bytes.data(), bytes.size(), access);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (r.is_ok()) region = std::move(r).value();
  }
  void apply_put(uint64_t region_offset, std::span<const std::byte> data) {
    std::copy(data.begin(), data.end(), model.begin() + static_cast<ptrdiff_t>(region_offset));
  }
  uint64_t word(size_t offset) const {
    uint64_t v;
    std::memcpy(&v, bytes.data() + offset, 8);
    return v;
  }
  void set_word(size_t offset, uint64_t v) {
    std::memcpy(bytes.data() + offset, &v, 8);
    std::memcpy(model.data() + offset, &v, 8);
  }
  void model_word(size_t offset, uint64_t v) { std::memcpy(model.data() + offset, &v, 8); }
  uint64_t model_value(size_t offset) const {
    uint64_t v;
    std::memcpy(&v, model.data() + offset, 8);
    return v;
  }
};

/// Empty when the target's memory equals the model; else where and how it differs.
std::string diff(const TargetMemory& t) {
  auto [a, b] = std::mismatch(t.bytes.begin(), t.bytes.end(), t.model.begin());
  if (a == t.bytes.end()) return "";
  const auto at = a - t.bytes.begin();
  auto last = t.bytes.size();
  while (last > 0 && t.bytes[last - 1] == t.model[last - 1]) --last;
  return "target memory differs from the model at bytes [" + std::to_string(at) + ", " + std::to_string(last) +
         ") of " + std::to_string(t.bytes.size()) + " (got 0x" + std::to_string(static_cast<int>(*a)) +
         ", want 0x" + std::to_string(static_cast<int>(*b)) + ")";
}

// --- put / get round trips -------------------------------------------------------

struct Geometry {
  uint32_t streams;
  size_t chunk_bytes;
  size_t eager_limit;
  const char* name;
};

class RmaRoundTrip : public ::testing::TestWithParam<Geometry> {};

// Sizes around every boundary: 0, 1, a word, the eager limit +-1, the chunk size +-1
// and non-multiples of it. Each put is checked against the whole region (nothing
// outside its range moved) and read back with a get into a buffer with guard bytes.
TEST_P(RmaRoundTrip, PutThenGetEverySize) {
  const Geometry g = GetParam();
  RmaPair p = make_pair({.streams_per_endpoint = g.streams, .chunk_bytes = g.chunk_bytes, .eager_limit = g.eager_limit});
  ASSERT_TRUE(p.init && p.target);
  const size_t e = g.eager_limit, c = g.chunk_bytes;
  const std::vector<size_t> sizes = {0, 1, 7, 8, e - 1, e, e + 1, c - 1, c, c + 1, 2 * c + 4093, 3 * c + 7, (1 << 20) + 3};
  TargetMemory t(*p.target_ctx, 4 * c + (1 << 20) + 4096, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  uint64_t bytes_put = 0, bytes_got = 0;

  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t n = sizes[i];
    const uint64_t off = 13 + i;  // odd offsets: nothing assumes alignment
    const auto data = pattern(n, 1000 + i);
    const Status ps = p.init->put(data, key, off).wait(10s);
    ASSERT_TRUE(ps.is_ok()) << "put of " << n << " bytes: " << ps.to_string();
    t.apply_put(off, data);
    ASSERT_EQ(diff(t), "") << "after a put of " << n << " bytes at " << off;
    bytes_put += n;

    std::vector<std::byte> back(n + 16, std::byte{0xEE});
    const Status gs = p.init->get(std::span<std::byte>(back).subspan(8, n), key, off).wait(10s);
    ASSERT_TRUE(gs.is_ok()) << "get of " << n << " bytes: " << gs.to_string();
    ASSERT_TRUE(std::equal(data.begin(), data.end(), back.begin() + 8)) << "get of " << n << " bytes";
    for (size_t k = 0; k < 8; ++k) {
      ASSERT_EQ(back[k], std::byte{0xEE}) << "get of " << n << " wrote before its buffer";
      ASSERT_EQ(back[n + 8 + k], std::byte{0xEE}) << "get of " << n << " wrote past its buffer";
    }
    bytes_got += n;
  }
  // Gets of bytes no put wrote return the registered contents.
  const size_t tail = 3 * c + 5;
  std::vector<std::byte> back(tail);
  ASSERT_TRUE(p.init->get(back, key, t.bytes.size() - tail).wait(10s).is_ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), t.model.end() - static_cast<ptrdiff_t>(tail)));
  bytes_got += tail;

  const EndpointStats is = p.init->stats(), ts = p.target->stats();
  EXPECT_EQ(is.puts, sizes.size());
  EXPECT_EQ(is.gets, sizes.size() + 1);
  EXPECT_EQ(is.rma_bytes_put, bytes_put);
  EXPECT_EQ(is.rma_bytes_got, bytes_got);
  EXPECT_EQ(ts.served_puts, sizes.size());
  EXPECT_EQ(ts.served_gets, sizes.size() + 1);
  EXPECT_EQ(ts.refused, 0u);
  EXPECT_FALSE(p.init->failed());
  EXPECT_FALSE(p.target->failed());
}

// Many puts in flight at once (disjoint ranges, every size class), then many gets in
// flight at once reading them back.
TEST_P(RmaRoundTrip, ManyInFlightAtOnce) {
  const Geometry g = GetParam();
  RmaPair p = make_pair({.streams_per_endpoint = g.streams, .chunk_bytes = g.chunk_bytes, .eager_limit = g.eager_limit});
  ASSERT_TRUE(p.init && p.target);
  std::mt19937_64 rng(g.streams * 31 + g.chunk_bytes);
  struct Op {
    uint64_t off;
    std::vector<std::byte> data, back;
  };
  std::vector<Op> ops;
  uint64_t off = 5;
  for (int i = 0; i < 120; ++i) {
    size_t n = 0;
    switch (i % 4) {
      case 0: n = rng() % 64; break;
      case 1: n = g.eager_limit - 2 + rng() % 5; break;
      case 2: n = rng() % (3 * g.chunk_bytes); break;
      default: n = rng() % (64 * 1024); break;
    }
    ops.push_back({off, pattern(n, 5000 + static_cast<uint64_t>(i)), std::vector<std::byte>(n)});
    off += n + rng() % 16;
  }
  TargetMemory t(*p.target_ctx, off + 64, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  std::vector<Request> reqs;
  for (Op& op : ops) reqs.push_back(p.init->put(op.data, key, op.off));
  ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
  for (const Op& op : ops) t.apply_put(op.off, op.data);
  ASSERT_EQ(diff(t), "");
  reqs.clear();
  for (Op& op : ops) reqs.push_back(p.init->get(op.back, key, op.off));
  ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
  for (size_t i = 0; i < ops.size(); ++i) ASSERT_EQ(ops[i].back, ops[i].data) << "get #" << i;
}

INSTANTIATE_TEST_SUITE_P(Geometries, RmaRoundTrip,
                         ::testing::Values(Geometry{1, 4096, 1024, "K1_Chunk4K_Eager1K"},
                                           Geometry{3, 64 * 1024, 4096, "K3_Chunk64K_Eager4K"},
                                           Geometry{2, 512 * 1024, 16 * 1024, "K2_Chunk512K_Eager16K"}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// The two sides disagree on the eager limit: the smaller one decides the inline class,
// in both directions, so sizes between the two limits must work both ways.
TEST(Rma, MismatchedEagerLimitsBothDirections) {
  auto a = Context::create({.chunk_bytes = 8192, .eager_limit = 1024, .ignore_env = true}).value();
  auto b = Context::create({.chunk_bytes = 65536, .eager_limit = 32768, .ignore_env = true}).value();
  RmaPair p = connect_pair(std::move(a), std::move(b));
  ASSERT_TRUE(p.init && p.target);
  TargetMemory ta(*p.target_ctx, 200000, kAllAccess, 1), tb(*p.init_ctx, 200000, kAllAccess, 2);
  for (size_t n : {size_t{1023}, size_t{1024}, size_t{1025}, size_t{20000}, size_t{32768}, size_t{32769}, size_t{100000}}) {
    const auto data = pattern(n, n);
    std::vector<std::byte> back(n);
    // initiator (eager 32K) -> target (eager 1K)
    ASSERT_TRUE(p.init->put(data, ta.region.remote_key(), 3).wait(10s).is_ok()) << n;
    ta.apply_put(3, data);
    ASSERT_EQ(diff(ta), "") << n;
    ASSERT_TRUE(p.init->get(back, ta.region.remote_key(), 3).wait(10s).is_ok()) << n;
    ASSERT_EQ(back, data) << n;
    // and the other way
    ASSERT_TRUE(p.target->put(data, tb.region.remote_key(), 5).wait(10s).is_ok()) << n;
    tb.apply_put(5, data);
    ASSERT_EQ(diff(tb), "") << n;
    std::fill(back.begin(), back.end(), std::byte{0});
    ASSERT_TRUE(p.target->get(back, tb.region.remote_key(), 5).wait(10s).is_ok()) << n;
    ASSERT_EQ(back, data) << n;
  }
}

// REMORA_PROGRESS_THREADS=3: the chunks of puts, gets and messages of host memory are
// put on the data streams by send workers and taken off them by receive workers, and
// land intact; the endpoints say so.
TEST(Rma, WorkersMoveTheChunksOfPutsGetsAndMessagesIntact) {
  ContextOptions opts;
  opts.chunk_bytes = 128 * 1024;
  opts.progress_threads = 3;
  opts.same_host_pulls = false;  // chunks on the data streams, not pulled
  RmaPair p = make_pair(opts);
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 6 << 20, kAllAccess, 7);
  const RemoteKey key = t.region.remote_key();
  for (size_t n : {size_t{70000}, size_t{128 * 1024 + 1}, size_t{5 << 20}}) {
    const auto data = pattern(n, n + 1);
    ASSERT_TRUE(p.init->put(data, key, 17).wait(10s).is_ok()) << n;
    t.apply_put(17, data);
    ASSERT_EQ(diff(t), "") << n;
    std::vector<std::byte> back(n);
    ASSERT_TRUE(p.init->get(back, key, 17).wait(10s).is_ok()) << n;
    ASSERT_EQ(back, data) << n;
    std::vector<std::byte> got(n);
    Request r = p.init->recv(got, Tag{n});
    ASSERT_TRUE(p.target->send(data, Tag{n}).wait(10s).is_ok()) << n;
    ASSERT_TRUE(r.wait(10s).is_ok()) << n;
    ASSERT_EQ(got, data) << n;
  }
  const EndpointStats st = p.init->stats();
  EXPECT_GT(st.worker_jobs, 0u);
  EXPECT_GT(st.worker_bytes, 5u << 20) << "the workers took (almost) none of the bytes";
  // The puts' chunks, into the target's registered region (inside its bracket).
  EXPECT_GT(p.target->stats().worker_bytes, 5u << 20);
  // Sent by workers: the puts' chunks from the initiator; the served gets' (out of the
  // registered region, inside its bracket) and the messages' from the target.
  EXPECT_GT(st.worker_send_jobs, 0u);
  EXPECT_GT(st.worker_send_bytes, 4u << 20) << "the puts were written on the progress thread";
  EXPECT_GT(p.target->stats().worker_send_bytes, 8u << 20) << "the gets and messages were written on the progress thread";
}

// A target window of 2: hundreds of operations posted at once are queued by the
// initiator, not refused and not a protocol violation.
TEST(Rma, MoreOpsThanTheTargetWindowAreQueued) {
  RmaPair p = make_pair({.chunk_bytes = 4096, .eager_limit = 2048, .rma_window = 2});
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 400 * 5000 + 4096, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  std::vector<std::vector<std::byte>> data;
  std::vector<uint64_t> olds(400, kU64Max);
  std::vector<Request> reqs;
  for (size_t i = 0; i < 400; ++i) data.push_back(pattern(i % 2 ? 5000 : 100, i));
  t.set_word(0, 0);
  for (size_t i = 0; i < 400; ++i) {
    reqs.push_back(p.init->put(data[i], key, 8 + i * 5000));
    reqs.push_back(p.init->fetch_add(&olds[i], key, 0, 1));
  }
  ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
  for (size_t i = 0; i < 400; ++i) t.apply_put(8 + i * 5000, data[i]);
  t.model_word(0, 400);
  EXPECT_EQ(diff(t), "");
  for (size_t i = 0; i < 400; ++i) ASSERT_EQ(olds[i], i) << "atomics must execute in posting order";
  EXPECT_FALSE(p.init->failed());
  EXPECT_FALSE(p.target->failed());
}

// Both sides are initiator and target at once, several threads posting on each
// endpoint: every thread puts into its own slice of the peer's region, reads it back,
// and bumps a shared counter word with fetch_add.
TEST(Rma, ThreadsOnBothSidesPostConcurrently) {
  RmaPair p = make_pair({.streams_per_endpoint = 2, .chunk_bytes = 8192, .eager_limit = 2048});
  ASSERT_TRUE(p.init && p.target);
  constexpr size_t kThreads = 3, kSlice = 256 * 1024, kRounds = 60;
  TargetMemory mem_t(*p.target_ctx, 8 + kThreads * kSlice, kAllAccess, 1);
  TargetMemory mem_i(*p.init_ctx, 8 + kThreads * kSlice, kAllAccess, 2);
  mem_t.set_word(0, 0);
  mem_i.set_word(0, 0);
  std::mutex mu;
  std::vector<std::string> problems;
  auto worker = [&](Endpoint& ep, const RemoteKey& key, size_t slice, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t r = 0; r < kRounds; ++r) {
      const size_t n = rng() % 3 == 0 ? rng() % kSlice : rng() % 4096;
      const uint64_t off = 8 + slice * kSlice + rng() % (kSlice - n + 1);
      const auto data = pattern(n, seed * 1000 + r);
      std::vector<std::byte> back(n);
      Request add = ep.fetch_add(nullptr, key, 0, 1);
      Status s = ep.put(data, key, off).wait(10s);
      if (s.is_ok()) s = ep.get(back, key, off).wait(10s);
      if (s.is_ok()) s = add.wait(10s);
      std::lock_guard lock(mu);
      if (!s.is_ok()) {
        problems.push_back("thread " + std::to_string(seed) + " round " + std::to_string(r) + ": " + s.to_string());
        return;
      }
      if (back != data) {
        problems.push_back("thread " + std::to_string(seed) + " round " + std::to_string(r) + ": read back differs");
        return;
      }
    }
  };
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < kThreads; ++i) {
      threads.emplace_back(worker, std::ref(*p.init), mem_t.region.remote_key(), i, 10 + i);
      threads.emplace_back(worker, std::ref(*p.target), mem_i.region.remote_key(), i, 20 + i);
    }
  }
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(mem_t.word(0), kThreads * kRounds);
  EXPECT_EQ(mem_i.word(0), kThreads * kRounds);
  EXPECT_FALSE(p.init->failed());
  EXPECT_FALSE(p.target->failed());
}

// Two-sided messages and one-sided operations share the data streams: chunks of
// messages, puts and get responses interleave on every stream, in both directions.
TEST(Rma, InterleavesWithTwoSidedMessagesOnTheSameStreams) {
  RmaPair p = make_pair({.streams_per_endpoint = 2, .chunk_bytes = 8192, .eager_limit = 1024});
  ASSERT_TRUE(p.init && p.target);
  constexpr size_t kOps = 40, kLen = 100000;
  TargetMemory t(*p.target_ctx, kOps * kLen, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  std::vector<std::vector<std::byte>> msgs, puts, got_msgs(kOps, std::vector<std::byte>(kLen)),
      got_back(kOps, std::vector<std::byte>(kLen)), replies(kOps, std::vector<std::byte>(kLen));
  for (size_t i = 0; i < kOps; ++i) {
    msgs.push_back(pattern(kLen, 700 + i));
    puts.push_back(pattern(kLen, 800 + i));
  }
  std::vector<Request> reqs;
  for (size_t i = 0; i < kOps; ++i) {
    reqs.push_back(p.target->recv(got_msgs[i], Tag{i}));
    reqs.push_back(p.init->recv(replies[i], Tag{i}));
  }
  for (size_t i = 0; i < kOps; ++i) {
    reqs.push_back(p.init->put(puts[i], key, i * kLen));
    reqs.push_back(p.init->send(msgs[i], Tag{i}));
    reqs.push_back(p.target->send(msgs[kOps - 1 - i], Tag{i}));  // the other direction too
  }
  ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
  reqs.clear();
  for (size_t i = 0; i < kOps; ++i) {
    ASSERT_EQ(got_msgs[i], msgs[i]) << "message " << i;
    std::fill(got_msgs[i].begin(), got_msgs[i].end(), std::byte{0});
  }
  for (size_t i = 0; i < kOps; ++i) {
    reqs.push_back(p.init->get(got_back[i], key, i * kLen));
    reqs.push_back(p.init->send(msgs[i], Tag{kOps + i}));
    reqs.push_back(p.target->recv(got_msgs[i], Tag{kOps + i}));
  }
  ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
  for (size_t i = 0; i < kOps; ++i) {
    t.apply_put(i * kLen, puts[i]);
    ASSERT_EQ(got_msgs[i], msgs[i]) << "second message " << i;
    ASSERT_EQ(replies[i], msgs[kOps - 1 - i]) << "reply " << i;
    ASSERT_EQ(got_back[i], puts[i]) << "get " << i;
  }
  EXPECT_EQ(diff(t), "");
}

// --- notifications ---------------------------------------------------------------

TEST(RmaNotify, QueuedBeforeThePutCompletesAndDeliveredOnce) {
  RmaPair p = make_pair({.streams_per_endpoint = 2, .chunk_bytes = 16384, .eager_limit = 4096});
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 2 << 20, kAllAccess);
  const RemoteKey key = t.region.remote_key();

  EXPECT_FALSE(p.target->poll_notification().has_value());
  EXPECT_EQ(p.target->wait_notification(20ms).status().code(), StatusCode::kTimeout);

  struct Case {
    size_t n;
    uint64_t off, value;
  };
  const std::vector<Case> cases = {{0, 100, 0},           {1, 200, kU64Max},     {4096, 300, 42},
                                   {4097, 8000, 0xABCD},  {300001, 20000, 7},    {16384, 400000, 1ull << 63}};
  for (const Case& c : cases) {
    const auto data = pattern(c.n, c.value);
    const Status s = p.init->put(data, key, c.off, {.notify = c.value}).wait(10s);
    ASSERT_TRUE(s.is_ok()) << c.n << ": " << s.to_string();
    t.apply_put(c.off, data);
    // The target queued the notification before it acknowledged: it is there now.
    std::optional<Notification> got = p.target->poll_notification();
    ASSERT_TRUE(got.has_value()) << "no notification after a completed put of " << c.n << " bytes";
    EXPECT_EQ(got->value, c.value);
    EXPECT_EQ(got->region, t.region.id());
    EXPECT_EQ(got->offset, c.off);
    EXPECT_EQ(got->length, c.n);
    EXPECT_EQ(diff(t), "") << "data of a notified put of " << c.n << " bytes not in place";
    EXPECT_FALSE(p.target->poll_notification().has_value()) << "delivered twice: " << c.value;
  }

  // A put without notify delivers nothing; the initiator's queue stays empty too.
  const auto quiet = pattern(5000, 9);
  ASSERT_TRUE(p.init->put(quiet, key, 600000).wait(10s).is_ok());
  EXPECT_FALSE(p.target->poll_notification().has_value());
  EXPECT_FALSE(p.init->poll_notification().has_value());

  // Many at once: each value exactly once, each put's bytes there when it is seen.
  constexpr size_t kMany = 64;
  std::vector<std::vector<std::byte>> datas;
  std::vector<Request> reqs;
  for (size_t i = 0; i < kMany; ++i) datas.push_back(pattern(i * 97 % 9000, 100 + i));
  for (size_t i = 0; i < kMany; ++i) reqs.push_back(p.init->put(datas[i], key, 700000 + i * 9010 + (i % 3), {.notify = 100 + i}));
  std::set<uint64_t> seen;
  for (size_t i = 0; i < kMany; ++i) {
    Result<Notification> n = p.target->wait_notification(10s);
    ASSERT_TRUE(n.is_ok()) << "notification " << i << " of " << kMany << ": " << n.status().to_string();
    const uint64_t idx = n->value - 100;
    ASSERT_LT(idx, kMany) << "unknown notify value " << n->value;
    EXPECT_TRUE(seen.insert(n->value).second) << "value " << n->value << " delivered twice";
    EXPECT_EQ(n->offset, 700000 + idx * 9010 + (idx % 3));
    ASSERT_EQ(n->length, datas[idx].size());
    EXPECT_TRUE(std::equal(datas[idx].begin(), datas[idx].end(), t.bytes.begin() + static_cast<ptrdiff_t>(n->offset)))
        << "notification " << n->value << " seen before its data";
  }
  ASSERT_TRUE(wait_all(reqs, 10s).is_ok());
  EXPECT_FALSE(p.target->poll_notification().has_value());
  EXPECT_EQ(p.target->stats().notifications, cases.size() + kMany);
}

// A notification handed to a waiting thread lets that put's RESP wait for the thread's
// answer (they share a segment). The RESP must still go when no answer comes: the
// waiter's thread here never calls remora again, and the put must complete anyway.
TEST(RmaNotify, PutCompletesWhenTheNotifiedWaiterNeverAnswers) {
  // A long spin keeps the waiter polling itself (the coalescing case); the default one
  // lets it block, so the progress thread delivers (the other case).
  for (uint32_t spin_us : {uint32_t{2'000'000}, uint32_t{200}}) {
    RmaPair p = make_pair({.spin_us = spin_us});
    ASSERT_TRUE(p.init && p.target);
    TargetMemory t(*p.target_ctx, 65536, kAllAccess);
    const RemoteKey key = t.region.remote_key();
    for (uint64_t i = 0; i < 20; ++i) {
      Result<Notification> got = Status(StatusCode::kInternal, "never ran");
      std::thread waiter([&] { got = p.target->wait_notification(20s); });
      const auto data = pattern(64, i);
      const Status s = p.init->put(data, key, 64 * i, {.notify = i}).wait(20s);
      waiter.join();
      ASSERT_TRUE(s.is_ok()) << "spin " << spin_us << " put " << i << ": " << s.to_string();
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      EXPECT_EQ(got->value, i);
      t.apply_put(64 * i, data);
      ASSERT_EQ(diff(t), "");
    }
  }
}

// Ping-pong of notified puts, each answer carrying the RESP of the put it answers:
// every put completes, every notification arrives once, the data is right both ways.
TEST(RmaNotify, PingPongOfNotifiedPutsCarriesTheAcknowledgements) {
  RmaPair p = make_pair({.spin_us = 2'000'000});
  ASSERT_TRUE(p.init && p.target);
  TargetMemory at_target(*p.target_ctx, 65536, kAllAccess, 1);
  TargetMemory at_init(*p.init_ctx, 65536, kAllAccess, 2);
  const RemoteKey to_target = at_target.region.remote_key(), to_init = at_init.region.remote_key();
  constexpr uint64_t kRounds = 500;
  Status answerer_failed;
  std::thread answerer([&] {
    Request back;
    for (uint64_t i = 0; i < kRounds; ++i) {
      Result<Notification> n = p.target->wait_notification(20s);
      if (!n.is_ok() || n->value != i) {
        answerer_failed = n.is_ok() ? Status(StatusCode::kInternal, "got " + std::to_string(n->value)) : n.status();
        return;
      }
      if (back.valid() && !(answerer_failed = back.wait(20s)).is_ok()) return;
      const auto data = pattern(32, 1000 + i);
      back = p.target->put(data, to_init, 32 * (i % 2000), {.notify = i});
    }
    answerer_failed = back.wait(20s);
  });
  for (uint64_t i = 0; i < kRounds; ++i) {
    const auto data = pattern(32, i);
    Request put = p.init->put(data, to_target, 32 * (i % 2000), {.notify = i});
    Result<Notification> n = p.init->wait_notification(20s);
    ASSERT_TRUE(n.is_ok()) << "round " << i << ": " << n.status().to_string();
    ASSERT_EQ(n->value, i);
    ASSERT_TRUE(put.wait(20s).is_ok()) << "round " << i;
    at_target.apply_put(32 * (i % 2000), data);
    const auto back = pattern(32, 1000 + i);
    ASSERT_TRUE(std::equal(back.begin(), back.end(), at_init.bytes.begin() + static_cast<ptrdiff_t>(32 * (i % 2000))))
        << "round " << i << ": the answer's data is not there with its notification";
  }
  answerer.join();
  EXPECT_TRUE(answerer_failed.is_ok()) << answerer_failed.to_string();
  EXPECT_EQ(diff(at_target), "");
  EXPECT_FALSE(p.target->poll_notification().has_value());
  EXPECT_FALSE(p.init->poll_notification().has_value());
}

// A key for a window: the notification's offset counts from the region's start.
TEST(RmaNotify, WindowKeyReportsRegionOffsets) {
  RmaPair p = make_pair();
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 65536, kAllAccess);
  auto key = t.region.remote_key(8192, 4096, Access::kRemoteWrite);
  ASSERT_TRUE(key.is_ok()) << key.status().to_string();
  const auto data = pattern(100, 3);
  ASSERT_TRUE(p.init->put(data, *key, 40, {.notify = 5}).wait(10s).is_ok());
  t.apply_put(8192 + 40, data);
  EXPECT_EQ(diff(t), "");
  auto n = p.target->poll_notification();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->offset, 8192u + 40);
  EXPECT_EQ(n->length, 100u);
  EXPECT_EQ(n->region, t.region.id());
}

TEST(RmaNotify, HandlerGetsQueuedOnesFirstThenNewOnesThenQueueingResumes) {
  RmaPair p = make_pair({.eager_limit = 2048});
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 1 << 20, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  auto data_for = [](uint64_t v) { return pattern(v % 2 ? 100 : 50000, v); };
  auto off_for = [](uint64_t v) { return v * 60000; };
  auto put_notified = [&](uint64_t v) {
    const auto d = data_for(v);
    const Status s = p.init->put(d, key, off_for(v), {.notify = v}).wait(10s);
    EXPECT_TRUE(s.is_ok()) << v << ": " << s.to_string();
  };
  put_notified(1);
  put_notified(2);

  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> delivered;
  std::vector<std::string> problems;
  p.target->set_notification_handler([&](const Notification& n) {
    // Runs without remora's locks: calling back into remora must be fine.
    (void)p.target->stats();
    std::string problem;
    const auto want = data_for(n.value);
    if (n.offset != off_for(n.value) || n.length != want.size()) {
      problem = "notification " + std::to_string(n.value) + " has offset/length " + std::to_string(n.offset) + "/" +
                std::to_string(n.length);
    } else if (std::memcmp(t.bytes.data() + n.offset, want.data(), want.size()) != 0) {
      problem = "notification " + std::to_string(n.value) + " delivered before its data";
    }
    std::lock_guard lock(mu);
    delivered.push_back(n.value);
    if (!problem.empty()) problems.push_back(problem);
    cv.notify_all();
  });
  put_notified(3);
  put_notified(4);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return delivered.size() >= 4; }))
        << "handler saw " << delivered.size() << " of 4 notifications";
    EXPECT_EQ(delivered, (std::vector<uint64_t>{1, 2, 3, 4})) << "queued notifications must come first, once each";
    EXPECT_TRUE(problems.empty()) << problems.front();
  }
  EXPECT_FALSE(p.target->poll_notification().has_value()) << "a notification went to the queue while a handler was set";

  p.target->set_notification_handler({});
  put_notified(5);
  auto n = p.target->poll_notification();
  ASSERT_TRUE(n.has_value()) << "queueing did not resume after the handler was cleared";
  EXPECT_EQ(n->value, 5u);
  std::lock_guard lock(mu);
  EXPECT_EQ(delivered.size(), 4u);
}

// The queue is bounded by max_unexpected: a notified put beyond it is refused with
// kNoResource and writes nothing; puts without notify still work; draining one
// notification makes room again.
TEST(RmaNotify, FullQueueRefusesNotifiedPutsAndWritesNothing) {
  Config config;
  config.max_unexpected = 4;
  config.eager_limit = 1024;
  config.chunk_bytes = 4096;
  RmaPair p = make_pair_with(config);
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 1 << 20, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  std::vector<std::vector<std::byte>> datas;
  for (uint64_t v = 0; v < 8; ++v) datas.push_back(pattern(v % 2 ? 64 : 10000, v));
  for (uint64_t v = 0; v < 4; ++v) {
    ASSERT_TRUE(p.init->put(datas[v], key, v * 16384, {.notify = v}).wait(10s).is_ok()) << v;
    t.apply_put(v * 16384, datas[v]);
  }
  // Full: an inline and a chunked notified put are refused, nothing written.
  for (uint64_t v : {4u, 5u}) {
    EXPECT_EQ(p.init->put(datas[v], key, v * 16384, {.notify = v}).wait(10s).code(), StatusCode::kNoResource) << v;
    ASSERT_EQ(diff(t), "") << "a put refused for a full notification queue wrote bytes";
  }
  // Not an endpoint failure; puts without a notification go through.
  EXPECT_FALSE(p.init->failed());
  ASSERT_TRUE(p.init->put(datas[6], key, 6 * 16384).wait(10s).is_ok());
  t.apply_put(6 * 16384, datas[6]);
  EXPECT_EQ(diff(t), "");
  // Drain one: room for exactly one more.
  auto first = p.target->poll_notification();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->value, 0u);
  ASSERT_TRUE(p.init->put(datas[7], key, 7 * 16384, {.notify = 7}).wait(10s).is_ok());
  t.apply_put(7 * 16384, datas[7]);
  EXPECT_EQ(p.init->put(datas[5], key, 5 * 16384, {.notify = 5}).wait(10s).code(), StatusCode::kNoResource);
  EXPECT_EQ(diff(t), "");
  std::vector<uint64_t> rest;
  while (auto n = p.target->poll_notification()) rest.push_back(n->value);
  EXPECT_EQ(rest, (std::vector<uint64_t>{1, 2, 3, 7}));
  EXPECT_GE(p.target->stats().refused, 3u);
}

// Notifications promised to chunked puts still in flight count against the bound:
// of ten notified large puts posted at once with nobody draining the queue, exactly
// max_unexpected are accepted, whatever the timing, and the others write nothing.
TEST(RmaNotify, PutsInFlightCountAgainstTheQueueBound) {
  Config config;
  config.max_unexpected = 4;
  config.eager_limit = 1024;
  config.chunk_bytes = 4096;
  RmaPair p = make_pair_with(config);
  ASSERT_TRUE(p.init && p.target);
  constexpr size_t kPuts = 10, kLen = 50000;
  TargetMemory t(*p.target_ctx, kPuts * kLen, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  std::vector<std::vector<std::byte>> datas;
  std::vector<Request> reqs;
  for (size_t i = 0; i < kPuts; ++i) datas.push_back(pattern(kLen, 40 + i));
  for (size_t i = 0; i < kPuts; ++i) reqs.push_back(p.init->put(datas[i], key, i * kLen, {.notify = i}));
  std::set<uint64_t> accepted;
  for (size_t i = 0; i < kPuts; ++i) {
    const Status s = reqs[i].wait(10s);
    ASSERT_TRUE(s.is_ok() || s.code() == StatusCode::kNoResource) << i << ": " << s.to_string();
    if (s.is_ok()) {
      accepted.insert(i);
      t.apply_put(i * kLen, datas[i]);
    }
  }
  EXPECT_EQ(accepted.size(), 4u);
  EXPECT_EQ(diff(t), "") << "a refused put wrote bytes";
  std::set<uint64_t> notified;
  while (auto n = p.target->poll_notification()) notified.insert(n->value);
  EXPECT_EQ(notified, accepted);
}

// --- atomics ---------------------------------------------------------------------

TEST(RmaAtomics, FetchAddAndCompareSwapSemantics) {
  RmaPair p = make_pair();
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 4096, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  uint64_t old = 0;

  const uint64_t w0 = t.word(64);
  ASSERT_TRUE(p.init->fetch_add(&old, key, 64, 5).wait(10s).is_ok());
  EXPECT_EQ(old, w0);
  t.model_word(64, w0 + 5);
  EXPECT_EQ(diff(t), "");

  ASSERT_TRUE(p.init->fetch_add(nullptr, key, 64, 1).wait(10s).is_ok());
  t.model_word(64, w0 + 6);
  EXPECT_EQ(diff(t), "");

  // Wraps modulo 2^64.
  t.set_word(72, kU64Max - 1);
  ASSERT_TRUE(p.init->fetch_add(&old, key, 72, 3).wait(10s).is_ok());
  EXPECT_EQ(old, kU64Max - 1);
  t.model_word(72, 1);
  EXPECT_EQ(diff(t), "");

  // compare_swap: swaps on a match, reports the previous value either way.
  t.set_word(80, 1234);
  ASSERT_TRUE(p.init->compare_swap(&old, key, 80, {.expected = 1234, .desired = 99}).wait(10s).is_ok());
  EXPECT_EQ(old, 1234u);
  t.model_word(80, 99);
  EXPECT_EQ(diff(t), "");
  old = 0;
  ASSERT_TRUE(p.init->compare_swap(&old, key, 80, {.expected = 1234, .desired = 555}).wait(10s).is_ok());
  EXPECT_EQ(old, 99u) << "a failed compare_swap reports the current value";
  EXPECT_EQ(diff(t), "") << "a failed compare_swap changed memory";
  ASSERT_TRUE(p.init->compare_swap(nullptr, key, 80, {.expected = 99, .desired = 0}).wait(10s).is_ok());
  t.model_word(80, 0);
  EXPECT_EQ(diff(t), "");
  // First and last word of the region.
  t.set_word(0, 10);
  t.set_word(4088, 20);
  ASSERT_TRUE(p.init->fetch_add(&old, key, 0, 1).wait(10s).is_ok());
  EXPECT_EQ(old, 10u);
  ASSERT_TRUE(p.init->compare_swap(&old, key, 4088, {.expected = 20, .desired = 21}).wait(10s).is_ok());
  EXPECT_EQ(old, 20u);
  t.model_word(0, 11);
  t.model_word(4088, 21);
  EXPECT_EQ(diff(t), "");
  EXPECT_EQ(p.init->stats().atomics, 8u);
  EXPECT_EQ(p.target->stats().served_atomics, 8u);
}

// Atomics posted on one endpoint execute in posting order: a chain of compare_swaps
// each expecting the previous one's result all succeed, and fetch_adds see 0, 1, 2...
TEST(RmaAtomics, PostedWithoutWaitingExecuteInPostingOrder) {
  RmaPair p = make_pair();
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 4096, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  t.set_word(0, 0);
  t.set_word(8, 0);
  constexpr size_t kOps = 1000;  // several times the default window of 256
  std::vector<uint64_t> adds(kOps, kU64Max), cas(kOps, kU64Max);
  std::vector<Request> reqs;
  for (size_t i = 0; i < kOps; ++i) {
    reqs.push_back(p.init->fetch_add(&adds[i], key, 0, 1));
    reqs.push_back(p.init->compare_swap(&cas[i], key, 8, {.expected = i, .desired = i + 1}));
  }
  ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
  for (size_t i = 0; i < kOps; ++i) {
    ASSERT_EQ(adds[i], i) << "fetch_add #" << i;
    ASSERT_EQ(cas[i], i) << "compare_swap #" << i << " ran out of order";
  }
  t.model_word(0, kOps);
  t.model_word(8, kOps);
  EXPECT_EQ(diff(t), "");
}

// Remote atomics and the target's own std::atomic_ref on the same word, at once.
TEST(RmaAtomics, AtomicWithRespectToTheTargetsOwnAtomicRef) {
  RmaPair p = make_pair();
  ASSERT_TRUE(p.init && p.target);
  TargetMemory t(*p.target_ctx, 64, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  t.set_word(16, 0);
  auto* word = reinterpret_cast<uint64_t*>(t.bytes.data() + 16);  // vector storage is 16-aligned
  constexpr uint64_t kLocal = 200000, kRemote = 3000;
  std::jthread local([&] {  // joins on every exit path
    std::atomic_ref<uint64_t> ref(*word);
    for (uint64_t i = 0; i < kLocal; ++i) ref.fetch_add(1, std::memory_order_relaxed);
  });
  std::vector<Request> reqs;
  for (uint64_t i = 0; i < kRemote; ++i) {
    reqs.push_back(p.init->fetch_add(nullptr, key, 16, 1));
    if (reqs.size() == 200) {
      ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
      reqs.clear();
    }
  }
  ASSERT_TRUE(wait_all(reqs, 30s).is_ok());
  local.join();
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), kLocal + kRemote) << "an increment was lost";
}

// --- flush -----------------------------------------------------------------------

TEST(RmaFlush, CompletesAfterEveryEarlierPutAndAtomicLanded) {
  RmaPair p = make_pair({.streams_per_endpoint = 3, .chunk_bytes = 16384, .eager_limit = 2048});
  ASSERT_TRUE(p.init && p.target);
  ASSERT_TRUE(p.init->flush().wait(10s).is_ok()) << "flush with nothing outstanding";
  TargetMemory t(*p.target_ctx, 2 << 20, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  t.set_word(0, 0);
  std::mt19937_64 rng(17);
  uint64_t adds = 0;
  for (uint64_t round = 1; round <= 6; ++round) {
    std::vector<std::vector<std::byte>> datas;
    std::vector<uint64_t> offs;
    uint64_t off = 8;
    while (true) {
      const size_t n = (rng() % 3 == 0) ? rng() % 200000 : rng() % 3000;
      if (off + n > t.bytes.size()) break;
      datas.push_back(pattern(n, round * 1000 + datas.size()));
      offs.push_back(off);
      off += n + rng() % 64;
    }
    // Fire and forget: the flush is the only thing waited for.
    for (size_t i = 0; i < datas.size(); ++i) {
      (void)p.init->put(datas[i], key, offs[i]);
      if (i % 10 == 0) (void)p.init->fetch_add(nullptr, key, 0, 1);
    }
    const Status fs = p.init->flush().wait(30s);
    ASSERT_TRUE(fs.is_ok()) << "round " << round << ": " << fs.to_string();
    for (size_t i = 0; i < datas.size(); ++i) t.apply_put(offs[i], datas[i]);
    t.model_word(0, t.word(0));
    ASSERT_EQ(diff(t), "") << "round " << round << ": flush completed before every put landed";
    adds += (datas.size() + 9) / 10;
    ASSERT_EQ(t.word(0), adds) << "round " << round << ": flush completed before every atomic ran";
  }
}

// flush reports the first failure among the puts/atomics it covers; a failed get is
// not one of them.
TEST(RmaFlush, ReportsAFailedPutOrAtomic) {
  const std::vector<std::pair<int, StatusCode>> cases = {{0, StatusCode::kOutOfRange},
                                                          {1, StatusCode::kInvalidArgument},
                                                          {2, StatusCode::kOk}};
  for (auto [which, want] : cases) {
    RmaPair p = make_pair({.eager_limit = 1024});
    ASSERT_TRUE(p.init && p.target);
    TargetMemory t(*p.target_ctx, 100000, kAllAccess);
    const RemoteKey key = t.region.remote_key();
    const auto a = pattern(5000, 1), b = pattern(50, 2);
    std::vector<std::byte> sink(10);
    Request good1 = p.init->put(a, key, 0);
    Request bad;
    if (which == 0) bad = p.init->put(b, key, 100000 - 49);
    if (which == 1) bad = p.init->fetch_add(nullptr, key, 12, 1);
    if (which == 2) bad = p.init->get(sink, key, 100000 - 9);
    Request good2 = p.init->put(b, key, 90000);
    const Status fs = p.init->flush().wait(10s);
    EXPECT_EQ(fs.code(), want) << "case " << which << ": " << fs.to_string();
    // Every good put landed by the time flush completed; the bad op wrote nothing.
    t.apply_put(0, a);
    t.apply_put(90000, b);
    EXPECT_EQ(diff(t), "") << "case " << which;
    EXPECT_TRUE(good1.wait(10s).is_ok());
    EXPECT_TRUE(good2.wait(10s).is_ok());
    EXPECT_FALSE(bad.wait(10s).is_ok());
    EXPECT_FALSE(p.init->failed());
  }
}

// --- the passive target after its own threads stop waiting -------------------------

// While a thread of the target's process spins in wait(), that process's progress
// thread parks and the spinner serves every socket; it parks until a timer fires a
// linger period after the last waiter's activity, and waiters keep pushing the timer
// out. Here the target's only application thread spins through a ping-pong, then
// blocks outside remora. A get against its memory must still be served: by the
// progress thread, once that timer fires.
TEST(RmaPassiveTarget, ServedAfterTheTargetsThreadsStopSpinning) {
  ContextOptions opts{.spin_us = 60'000'000};  // the waits below spin, never block
  RmaPair p = make_pair(opts);
  TargetMemory t(*p.target_ctx, 4096, Access::kRemoteRead);
  const RemoteKey key = t.region.remote_key();

  std::promise<void> got_it;
  std::thread target_app;
  struct Finish {  // however this test ends, the target's thread is let go and joined
    std::promise<void>& go;
    std::thread& t;
    bool set = false;
    void now() {
      if (!set) go.set_value();
      set = true;
      if (t.joinable()) t.join();
    }
    ~Finish() { now(); }
  } finish{got_it, target_app};
  target_app = std::thread([&] {
    std::vector<std::byte> ping(16), pong(16);
    for (uint64_t i = 0; i < 300; ++i) {
      Request r = p.target->recv(pong, Tag{i});
      ASSERT_TRUE(p.target->send(ping, Tag{i}).wait(10s).is_ok());
      ASSERT_TRUE(r.wait(10s).is_ok()) << "round " << i;
    }
    got_it.get_future().wait();  // blocked outside remora until the get came back
  });
  std::vector<std::byte> ping(16), pong(16);
  for (uint64_t i = 0; i < 300; ++i) {
    Request r = p.init->recv(pong, Tag{i});
    ASSERT_TRUE(r.wait(10s).is_ok()) << "round " << i;
    ASSERT_TRUE(p.init->send(ping, Tag{i}).wait(10s).is_ok());
  }

  std::vector<std::byte> back(4096);
  Status st = p.init->get(back, key, 0).wait(10s);
  finish.now();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(back, t.model);
}

// --- refusals: the target checks everything before it touches a byte --------------

/// The refusal the test expects, the target untouched, then a valid op works.
class RefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_ = make_pair({.chunk_bytes = 8192, .eager_limit = 1024});
    ASSERT_TRUE(p_.init && p_.target);
    mem_ = std::make_unique<TargetMemory>(*p_.target_ctx, kSize, kAllAccess);
    key_ = mem_->region.remote_key();
    small_ = pattern(16, 1);
    large_ = pattern(30000, 2);  // chunked: the refused chunks must be drained
  }

  /// The op failed with `want`, no byte of the target changed, and the endpoint
  /// still serves a valid put and get.
  void expect_refused(const Request& r, StatusCode want, const std::string& what, const TargetMemory* also = nullptr) {
    const Status s = r.wait(10s);
    EXPECT_EQ(s.code(), want) << what << ": " << s.to_string();
    EXPECT_EQ(diff(*mem_), "") << what;
    if (also != nullptr) {
      EXPECT_EQ(diff(*also), "") << what;
    }
    ++refusals_;
    EXPECT_FALSE(p_.init->failed()) << what;
    EXPECT_FALSE(p_.target->failed()) << what;
    const auto ok = pattern(24, refusals_);
    const uint64_t off = 1000 + refusals_ * 32;
    ASSERT_TRUE(p_.init->put(ok, key_, off).wait(10s).is_ok()) << "valid put after " << what;
    mem_->apply_put(off, ok);
    std::vector<std::byte> back(24);
    ASSERT_TRUE(p_.init->get(back, key_, off).wait(10s).is_ok()) << "valid get after " << what;
    EXPECT_EQ(back, ok) << what;
    EXPECT_EQ(diff(*mem_), "") << what;
  }

  /// put (inline and chunked), get (inline and chunked) with `key` at `off`,
  /// fetch_add and compare_swap at the aligned `atomic_off`, each expected to fail
  /// with `want`.
  void expect_all_refused(const RemoteKey& key, uint64_t off, uint64_t atomic_off, StatusCode want,
                          const std::string& what, const TargetMemory* also = nullptr) {
    std::vector<std::byte> sink(30000, std::byte{0x5A});
    const auto untouched = sink;
    uint64_t result = 0xDEADBEEF;
    expect_refused(p_.init->put(small_, key, off), want, what + " (small put)", also);
    expect_refused(p_.init->put(large_, key, off), want, what + " (large put)", also);
    expect_refused(p_.init->put(small_, key, off, {.notify = 1}), want, what + " (notified put)", also);
    expect_refused(p_.init->get(std::span<std::byte>(sink).first(16), key, off), want, what + " (small get)", also);
    expect_refused(p_.init->get(sink, key, off), want, what + " (large get)", also);
    EXPECT_EQ(sink, untouched) << what << ": a refused get wrote into the local buffer";
    expect_refused(p_.init->fetch_add(&result, key, atomic_off, 1), want, what + " (fetch_add)", also);
    expect_refused(p_.init->compare_swap(&result, key, atomic_off, {.expected = 0, .desired = 1}), want, what + " (compare_swap)", also);
    EXPECT_EQ(result, 0xDEADBEEFu) << what << ": a refused atomic wrote *result";
    EXPECT_FALSE(p_.target->poll_notification().has_value()) << what << ": a refused put notified";
  }

  static constexpr size_t kSize = 65536;
  RmaPair p_;
  std::unique_ptr<TargetMemory> mem_;
  RemoteKey key_;
  std::vector<std::byte> small_, large_;
  uint64_t refusals_ = 0;
};

TEST_F(RefusalTest, ForgedSecretRegionOrGeneration) {
  RemoteKey k = key_;
  k.secret ^= 1;
  expect_all_refused(k, 64, 64, StatusCode::kInvalidKey, "secret off by one bit");
  k = key_;
  k.secret = 0;
  expect_all_refused(k, 64, 64, StatusCode::kInvalidKey, "secret 0");
  k = key_;
  k.generation += 1;
  expect_all_refused(k, 64, 64, StatusCode::kInvalidKey, "future generation");
  k = key_;
  k.region = RegionId{static_cast<uint32_t>(k.region) + 1000};
  expect_all_refused(k, 64, 64, StatusCode::kInvalidKey, "unknown region id");
  EXPECT_EQ(p_.target->stats().refused, refusals_);
}

// Fields RemoteKey::deserialize rejects but RemoteKey::serialize still writes: the
// target cannot parse the key at all and refuses with kInvalidKey.
TEST_F(RefusalTest, KeysTheTargetCannotDeserialize) {
  RemoteKey k = key_;
  k.access = static_cast<Access>(0x10) | kRemoteAccessMask;
  expect_all_refused(k, 64, 64, StatusCode::kInvalidKey, "unknown access bit 0x10");
  k = key_;
  k.kind = static_cast<MemoryKind>(7);
  expect_all_refused(k, 64, 64, StatusCode::kInvalidKey, "unknown memory kind 7");
  k = key_;
  k.offset = uint64_t{1} << 63;
  k.length = (uint64_t{1} << 63) + 1;  // window end wraps 2^64
  expect_all_refused(k, 64, 64, StatusCode::kInvalidKey, "window end overflows");
  EXPECT_EQ(p_.target->stats().refused, refusals_);
}

TEST_F(RefusalTest, StaleKeyAfterDeregistrationAndSlotReuse) {
  // A second region, keyed, then deregistered: its memory stays allocated (and
  // compared) but no byte of it may change.
  auto second = std::make_unique<TargetMemory>(*p_.target_ctx, 40000, kAllAccess, 5);
  const RemoteKey stale = second->region.remote_key();
  const RegionId old_id = second->region.id();
  second->region.deregister();
  expect_all_refused(stale, 64, 64, StatusCode::kInvalidKey, "deregistered region", second.get());
  // Re-register the same memory: the registry reuses the slot (same id) with a new
  // generation and secret, and the old key must not open it.
  auto again = p_.target_ctx->register_memory(second->bytes.data(), second->bytes.size(), kAllAccess);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  second->region = std::move(again).value();
  EXPECT_EQ(second->region.id(), old_id) << "the slot was not reused; this case tests less than it should";
  expect_all_refused(stale, 64, 64, StatusCode::kInvalidKey, "stale key, slot re-registered", second.get());
  // And the new key works.
  const auto d = pattern(100, 9);
  ASSERT_TRUE(p_.init->put(d, second->region.remote_key(), 8).wait(10s).is_ok());
  second->apply_put(8, d);
  EXPECT_EQ(diff(*second), "");
}

TEST_F(RefusalTest, OutOfRangeAndWrappingOffsets) {
  struct Case {
    uint64_t off, atomic_off;
    const char* what;
  };
  for (const Case& c : {Case{kSize, kSize, "offset == size"},
                        Case{kSize - 15, kSize, "last byte past the end (16 bytes at size-15)"},
                        Case{kSize + 8, kSize + 8, "offset past the end"},
                        Case{kU64Max - 7, kU64Max - 7, "offset + length wraps 2^64"},
                        Case{kU64Max, kU64Max - 7, "offset 2^64-1"},
                        Case{uint64_t{1} << 63, uint64_t{1} << 63, "offset 2^63"}}) {
    expect_all_refused(key_, c.off, c.atomic_off, StatusCode::kOutOfRange, c.what);
  }
  // The large ones straddle the end too.
  expect_refused(p_.init->put(large_, key_, kSize - 29999), StatusCode::kOutOfRange, "large put 1 byte too long");
  std::vector<std::byte> sink(30000);
  expect_refused(p_.init->get(sink, key_, kSize - 29999), StatusCode::kOutOfRange, "large get 1 byte too long");
  expect_refused(p_.init->fetch_add(nullptr, key_, kSize - 4, 1), StatusCode::kOutOfRange, "atomic straddling the end");
  // The exact fit works.
  ASSERT_TRUE(p_.init->put(large_, key_, kSize - 30000).wait(10s).is_ok());
  mem_->apply_put(kSize - 30000, large_);
  EXPECT_EQ(diff(*mem_), "");
}

TEST_F(RefusalTest, AccessOutsideAWindowKey) {
  auto wk = mem_->region.remote_key(16384, 8192, kRemoteAccessMask);
  ASSERT_TRUE(wk.is_ok()) << wk.status().to_string();
  const RemoteKey w = *wk;
  expect_all_refused(w, 8192, 8192, StatusCode::kOutOfRange, "window end");
  expect_all_refused(w, 8192 - 8, 8192, StatusCode::kOutOfRange, "window end - 8 (16 bytes)");
  expect_all_refused(w, kU64Max - 7, kU64Max - 7, StatusCode::kOutOfRange, "window, wrapping");
  // Below the window is unreachable too: offsets are unsigned, so -16384 wraps.
  expect_all_refused(w, kU64Max - 16383, kU64Max - 16383, StatusCode::kOutOfRange, "window, offset -16384");
  // 30000 bytes never fit an 8 KiB window, even at offset 0.
  expect_refused(p_.init->put(large_, w, 0), StatusCode::kOutOfRange, "large put into a small window");
  // Inside the window works, and lands relative to the window start.
  const auto d = pattern(8192, 3);
  ASSERT_TRUE(p_.init->put(d, w, 0).wait(10s).is_ok());
  mem_->apply_put(16384, d);
  EXPECT_EQ(diff(*mem_), "");
  std::vector<std::byte> back(100);
  ASSERT_TRUE(p_.init->get(back, w, 8092).wait(10s).is_ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), d.begin() + 8092));
  uint64_t old = 0;
  ASSERT_TRUE(p_.init->fetch_add(&old, w, 8, 1).wait(10s).is_ok());
  EXPECT_EQ(old, mem_->word(16384 + 8) - 1);
  mem_->model_word(16384 + 8, old + 1);
  EXPECT_EQ(diff(*mem_), "");
}

// Zero-length puts and gets are checked like any other: at every offset from 0 to the
// window's length (its end included) they succeed, touch nothing and (a notified put)
// notify once; one byte beyond, they are out of range. For the whole region's key
// and for a window key.
TEST_F(RefusalTest, ZeroLengthPutsAndGetsSucceedUpToTheWindowEndAndFailBeyond) {
  auto wk = mem_->region.remote_key(16384, 8192, kRemoteAccessMask);
  ASSERT_TRUE(wk.is_ok()) << wk.status().to_string();
  struct Window {
    RemoteKey key;
    uint64_t start, length;
    const char* what;
  };
  uint64_t notify = 100;
  for (const Window& w : {Window{key_, 0, kSize, "region key"}, Window{*wk, 16384, 8192, "window key"}}) {
    for (uint64_t off : {uint64_t{0}, w.length / 2, w.length}) {
      const std::string at = std::string(w.what) + ", offset " + std::to_string(off) + " of " + std::to_string(w.length);
      EXPECT_TRUE(p_.init->put({}, w.key, off).wait(10s).is_ok()) << "zero-length put, " << at;
      EXPECT_TRUE(p_.init->get({}, w.key, off).wait(10s).is_ok()) << "zero-length get, " << at;
      ++notify;
      ASSERT_TRUE(p_.init->put({}, w.key, off, {.notify = notify}).wait(10s).is_ok()) << "notified, " << at;
      auto note = p_.target->wait_notification(10s);
      ASSERT_TRUE(note.is_ok()) << at << ": " << note.status().to_string();
      EXPECT_EQ(note->value, notify) << at;
      EXPECT_EQ(note->offset, w.start + off) << at;
      EXPECT_EQ(note->length, 0u) << at;
      EXPECT_EQ(diff(*mem_), "") << at;
    }
    for (uint64_t off : {w.length + 1, kU64Max}) {
      const std::string at = std::string(w.what) + ", offset " + std::to_string(off) + " of " + std::to_string(w.length);
      expect_refused(p_.init->put({}, w.key, off), StatusCode::kOutOfRange, "zero-length put, " + at);
      expect_refused(p_.init->get({}, w.key, off), StatusCode::kOutOfRange, "zero-length get, " + at);
      expect_refused(p_.init->put({}, w.key, off, {.notify = 1}), StatusCode::kOutOfRange, "notified, " + at);
    }
  }
  EXPECT_FALSE(p_.target->poll_notification().has_value()) << "a refused zero-length put notified";
}

TEST_F(RefusalTest, MissingRights) {
  std::vector<std::byte> sink(16);
  // Keys narrowed to one right each.
  const RemoteKey ro = mem_->region.remote_key(0, kSize, Access::kRemoteRead).value();
  const RemoteKey wo = mem_->region.remote_key(0, kSize, Access::kRemoteWrite).value();
  const RemoteKey ao = mem_->region.remote_key(0, kSize, Access::kRemoteAtomic).value();
  expect_refused(p_.init->put(small_, ro, 64), StatusCode::kAccessDenied, "put with a read-only key");
  expect_refused(p_.init->put(large_, ro, 64), StatusCode::kAccessDenied, "large put with a read-only key");
  expect_refused(p_.init->put(small_, ao, 64), StatusCode::kAccessDenied, "put with an atomic-only key");
  expect_refused(p_.init->get(sink, wo, 64), StatusCode::kAccessDenied, "get with a write-only key");
  expect_refused(p_.init->get(sink, ao, 64), StatusCode::kAccessDenied, "get with an atomic-only key");
  expect_refused(p_.init->fetch_add(nullptr, ro, 64, 1), StatusCode::kAccessDenied, "fetch_add, read-only key");
  expect_refused(p_.init->fetch_add(nullptr, wo, 64, 1), StatusCode::kAccessDenied, "fetch_add, write-only key");
  expect_refused(p_.init->compare_swap(nullptr, wo, 64, {.expected = 0, .desired = 1}), StatusCode::kAccessDenied, "compare_swap, write-only");
  // Each narrowed key does its own op.
  ASSERT_TRUE(p_.init->get(sink, ro, 64).wait(10s).is_ok());
  ASSERT_TRUE(p_.init->put(small_, wo, 64).wait(10s).is_ok());
  mem_->apply_put(64, small_);
  uint64_t old = 0;
  ASSERT_TRUE(p_.init->fetch_add(&old, ao, 128, 1).wait(10s).is_ok());
  EXPECT_EQ(old, mem_->model_value(128));
  mem_->model_word(128, old + 1);
  EXPECT_EQ(diff(*mem_), "");

  // A region registered read-only: a key whose access bits were forged to grant
  // everything is refused as forged (the key's tag covers its rights), and nothing
  // is written; the genuine key is refused by the rights it carries.
  TargetMemory ro_region(*p_.target_ctx, 4096, Access::kRemoteRead, 8);
  RemoteKey genuine = ro_region.region.remote_key();
  RemoteKey forged = genuine;
  forged.access = kRemoteAccessMask;
  expect_refused(p_.init->put(small_, forged, 0), StatusCode::kInvalidKey, "put with forged rights", &ro_region);
  expect_refused(p_.init->fetch_add(nullptr, forged, 0, 1), StatusCode::kInvalidKey, "atomic with forged rights",
                 &ro_region);
  expect_refused(p_.init->put(small_, genuine, 0), StatusCode::kAccessDenied, "put into a read-only region",
                 &ro_region);
  ASSERT_TRUE(p_.init->get(sink, genuine, 0).wait(10s).is_ok());
  EXPECT_TRUE(std::equal(sink.begin(), sink.end(), ro_region.model.begin()));
}

TEST_F(RefusalTest, MisalignedAtomics) {
  uint64_t result = 0xDEADBEEF;
  for (uint64_t off : {uint64_t{1}, uint64_t{4}, uint64_t{7}, uint64_t{kSize - 12}}) {
    expect_refused(p_.init->fetch_add(&result, key_, off, 1), StatusCode::kInvalidArgument,
                   "fetch_add at " + std::to_string(off));
    expect_refused(p_.init->compare_swap(&result, key_, off, {.expected = 0, .desired = 1}), StatusCode::kInvalidArgument,
                   "compare_swap at " + std::to_string(off));
  }
  EXPECT_EQ(result, 0xDEADBEEFu);
  // Alignment is of the target's address, not of the offset in the key's window.
  const RemoteKey w = mem_->region.remote_key(4, 64, Access::kRemoteAtomic).value();
  expect_refused(p_.init->fetch_add(nullptr, w, 0, 1), StatusCode::kInvalidArgument, "window at 4, offset 0");
  ASSERT_TRUE(p_.init->fetch_add(&result, w, 4, 1).wait(10s).is_ok()) << "window at 4, offset 4 is aligned";
  EXPECT_EQ(result, mem_->word(8) - 1);
  mem_->model_word(8, result + 1);
  EXPECT_EQ(diff(*mem_), "");
}

// --- refused puts of every size: the refusal always comes back -----------------------

/// Anonymous memory that is never written: reading it maps the shared zero page, so
/// a multi-GiB put source or target costs no resident memory.
class ZeroMapping {
 public:
  explicit ZeroMapping(size_t size) : size_(size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    EXPECT_NE(p, MAP_FAILED) << "mmap of " << size << " bytes";
    data_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  ~ZeroMapping() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  ZeroMapping(const ZeroMapping&) = delete;
  ZeroMapping& operator=(const ZeroMapping&) = delete;
  std::byte* data() const { return data_; }
  std::span<std::byte> span() const { return {data_, size_}; }
  /// True while every byte is still zero.
  bool all_zero() const {
    static const std::vector<std::byte> zeros(size_t{1} << 20);
    for (size_t at = 0; at < size_; at += zeros.size()) {
      if (std::memcmp(data_ + at, zeros.data(), std::min(zeros.size(), size_ - at)) != 0) return false;
    }
    return true;
  }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

enum class PutRefusal { kOutOfRange, kMissingRight, kForgedSecret, kStaleKey, kTamperedWindow };

struct RefusedPutCase {
  const char* size_class;
  size_t size;
  PutRefusal refusal;
};

void PrintTo(const RefusedPutCase& c, std::ostream* os) {
  static constexpr const char* kNames[] = {"OutOfRange", "MissingRight", "ForgedSecret", "StaleKey", "TamperedWindow"};
  *os << c.size_class << "_" << kNames[static_cast<int>(c.refusal)];
}

std::vector<RefusedPutCase> refused_put_cases() {
  // With the defaults (16 KiB eager limit, 512 KiB chunks, 2 streams): inline, one
  // chunk (above the 128 KiB default receive buffer), many chunks, more than every
  // socket buffer of both streams can hold (tcp_rmem/tcp_wmem maxima 32 + 4 MiB
  // each), and a multi-GiB put whose chunk count and length pass 2^31.
  const std::pair<const char*, size_t> sizes[] = {{"Inline", 100},
                                                  {"OneChunk", 300 * 1024 + 7},
                                                  {"ManyChunks", (3 << 20) + 17},
                                                  {"BeyondSocketBuffers", (size_t{96} << 20) + 5},
                                                  {"MultiGiB", (size_t{2} << 30) + 4097}};
  std::vector<RefusedPutCase> out;
  for (auto [name, size] : sizes) {
    for (PutRefusal r : {PutRefusal::kOutOfRange, PutRefusal::kMissingRight, PutRefusal::kForgedSecret,
                         PutRefusal::kStaleKey, PutRefusal::kTamperedWindow}) {
      out.push_back({name, size, r});
    }
  }
  return out;
}

class RefusedPut : public ::testing::TestWithParam<RefusedPutCase> {};

// A refused put completes with the target's verdict whatever its size: the target
// drains the bytes it will not place, and the initiator's request ends on the RESP.
// (Puts beyond a 64 KiB drain buffer once waited forever: the drain stopped after a
// full read as if the socket were empty.) The target's memory is untouched, and the
// endpoint still serves puts, gets and messages afterwards.
TEST_P(RefusedPut, CompletesWithItsCodeAndTheEndpointStaysUsable) {
  const RefusedPutCase c = GetParam();
  RmaPair p = make_pair({.pin_mode = PinMode::kOff});
  ASSERT_TRUE(p.init && p.target);
  const ZeroMapping source(c.size);  // what the put sends: zeros, never resident
  ASSERT_NE(source.data(), nullptr);

  // A missing right needs a key whose window holds the whole put (the window is
  // checked first), so that case targets a window over untouched memory as large
  // as the put; the others target a small patterned region.
  const bool big_target = c.refusal == PutRefusal::kMissingRight;
  std::unique_ptr<ZeroMapping> big;
  std::unique_ptr<TargetMemory> small;
  Region big_region;
  RemoteKey key;
  uint64_t offset = 0;
  StatusCode want = StatusCode::kInvalidKey;
  if (big_target) {
    big = std::make_unique<ZeroMapping>(c.size);
    auto r = p.target_ctx->register_memory(big->data(), c.size, Access::kRemoteRead | Access::kRemoteAtomic);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    big_region = std::move(r).value();
    key = big_region.remote_key();
    want = StatusCode::kAccessDenied;
  } else {
    small = std::make_unique<TargetMemory>(*p.target_ctx, 65536, kAllAccess);
    key = small->region.remote_key();
    switch (c.refusal) {
      case PutRefusal::kOutOfRange:
        offset = 65535;  // the first byte fits, the second does not
        want = StatusCode::kOutOfRange;
        break;
      case PutRefusal::kForgedSecret: key.secret ^= 0x10; break;
      case PutRefusal::kStaleKey: {
        // A key of a region deregistered since; the live region is what must not change.
        TargetMemory gone(*p.target_ctx, 65536, kAllAccess, 3);
        key = gone.region.remote_key();
        break;
      }
      case PutRefusal::kTamperedWindow: key.length = uint64_t{1} << 40; break;
      case PutRefusal::kMissingRight: break;
    }
  }
  const uint64_t refused_before = p.target->stats().refused;
  Request put = p.init->put(source.span(), key, offset);
  const Status s = put.wait(120s);
  ASSERT_EQ(s.code(), want) << s.to_string();
  EXPECT_EQ(p.target->stats().refused, refused_before + 1);
  if (small) {
    EXPECT_EQ(diff(*small), "");
  }
  if (big) {
    EXPECT_TRUE(big->all_zero()) << "a refused put wrote into the target";
  }
  ASSERT_FALSE(p.init->failed()) << p.init->failure().to_string();
  ASSERT_FALSE(p.target->failed()) << p.target->failure().to_string();

  // The endpoint is in step: a chunked put and get, an inline one, and messages.
  TargetMemory after(*p.target_ctx, 1 << 20, kAllAccess, 9);
  const auto data = pattern(700 * 1024, 4);
  ASSERT_TRUE(p.init->put(data, after.region.remote_key(), 100).wait(30s).is_ok());
  after.apply_put(100, data);
  ASSERT_TRUE(p.init->put(std::span(data).first(64), after.region.remote_key(), 8).wait(30s).is_ok());
  after.apply_put(8, std::span(data).first(64));
  EXPECT_EQ(diff(after), "");
  std::vector<std::byte> back(after.bytes.size());
  ASSERT_TRUE(p.init->get(back, after.region.remote_key(), 0).wait(30s).is_ok());
  EXPECT_TRUE(back == after.model);
  std::vector<std::byte> got(data.size());
  Request rx = p.target->recv(got, Tag{7});
  ASSERT_TRUE(p.init->send(data, Tag{7}).wait(30s).is_ok());
  ASSERT_TRUE(rx.wait(30s).is_ok());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(p.init->flush().wait(30s).code() == want) << "flush reports the refused put";
}

INSTANTIATE_TEST_SUITE_P(EverySizeAndReason, RefusedPut, ::testing::ValuesIn(refused_put_cases()),
                         [](const ::testing::TestParamInfo<RefusedPutCase>& param_info) {
                           std::ostringstream os;
                           PrintTo(param_info.param, &os);
                           return os.str();
                         });

/// After a revocation: a put of `bytes` into a fresh region of `size` bytes lands
/// exactly, and a get brings it back whole (the endpoint goes on working).
void expect_fresh_region_works(RmaPair& p, size_t size, size_t bytes, uint64_t seed) {
  TargetMemory fresh(*p.target_ctx, size, kAllAccess, seed);
  const auto d = pattern(bytes, seed + 3);
  ASSERT_TRUE(p.init->put(d, fresh.region.remote_key(), 0).wait(30s).is_ok());
  fresh.apply_put(0, d);
  EXPECT_EQ(diff(fresh), "");
  std::vector<std::byte> back(d.size());
  ASSERT_TRUE(p.init->get(back, fresh.region.remote_key(), 0).wait(30s).is_ok());
  EXPECT_TRUE(back == d);
}

// The target deregisters its region while a 1 GiB put is streaming into it. The put
// ends (ok if it had landed first, else kInvalidKey) instead of waiting forever for
// a reply, the region never changes once deregister() returned, and the endpoint
// goes on working.
TEST(RmaRevocation, DeregisterInTheMiddleOfALargePut) {
  RmaPair p = make_pair({.pin_mode = PinMode::kOff});
  ASSERT_TRUE(p.init && p.target);
  constexpr size_t kSize = size_t{1} << 30, kTail = size_t{64} << 20;
  ZeroMapping target(kSize);
  auto region = p.target_ctx->register_memory(target.data(), kSize, kAllAccess);
  ASSERT_TRUE(region.is_ok()) << region.status().to_string();
  // The source: zeros (never resident), then a pattern in its last 64 MiB, which
  // arrives long after the deregistration below.
  ZeroMapping source(kSize);
  const auto tail = pattern(kTail, 12);
  std::memcpy(source.data() + kSize - kTail, tail.data(), kTail);
  Request put = p.init->put(source.span(), region->remote_key(), 0);
  // Wait until far more than every socket buffer of both streams holds was handed to
  // the kernel: the target has accepted the put and is placing its bytes.
  const uint64_t chunk = p.init_ctx->config().chunk_bytes;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (p.init->stats().chunks_sent * chunk < (uint64_t{160} << 20) && !put.done() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  region->deregister();
  const Status s = put.wait(120s);
  ASSERT_TRUE(s.is_ok() || s.code() == StatusCode::kInvalidKey) << s.to_string();
  std::printf("[          ] the 1 GiB put ended with %s\n", s.to_string().c_str());
  if (s.is_ok()) {
    EXPECT_EQ(std::memcmp(target.data() + kSize - kTail, tail.data(), kTail), 0) << "an ok put did not place its tail";
  } else {
    EXPECT_TRUE(std::all_of(target.data() + kSize - kTail, target.data() + kSize,
                            [](std::byte b) { return b == std::byte{0}; }))
        << "bytes of a revoked put were placed after deregister() returned";
  }
  ASSERT_FALSE(p.init->failed()) << p.init->failure().to_string();
  expect_fresh_region_works(p, 1 << 20, 600 * 1024, 2);
}

// --- posting returns in bounded time -----------------------------------------------

// Posting a put writes one round at most (about a chunk per data stream) and returns;
// the rest moves on progress rounds. Here the initiator's progress thread is stopped
// while the 1 GiB put is posted, so nothing but the posting call can have written:
// at return at most one chunk per stream is scheduled. (It used to push until the
// sockets were full, and on loopback, with the target draining, often the whole
// transfer.) Then the progress thread alone, with no thread waiting, must carry the
// put to completion, and a small get posted behind it completes too. With same-host
// pulls (the two contexts are one process) posting announces at most the pull window
// and copies nothing; the target reads the rest out of the source as it goes.
class RmaPosting : public ::testing::TestWithParam<bool> {};

/// A message each way. With same-host pulls, the target's answer to the initiator's
/// HOST (it can read the initiator) is on the control stream before the second one, so
/// the initiator's chunks go as PULLs from then on.
void round_trip(RmaPair& p) {
  std::array<std::byte, 4> there{}, back_here{};
  Request r = p.target->recv(there, Tag{1});
  ASSERT_TRUE(p.init->send(there, Tag{1}).wait(30s).is_ok());
  ASSERT_TRUE(r.wait(30s).is_ok());
  r = p.init->recv(back_here, Tag{2});
  ASSERT_TRUE(p.target->send(back_here, Tag{2}).wait(30s).is_ok());
  ASSERT_TRUE(r.wait(30s).is_ok());
}

TEST_P(RmaPosting, ALargePutPostsOneRoundAndTheProgressThreadMovesTheRest) {
  const bool pulls = GetParam();
  RmaPair p = make_pair({.pin_mode = PinMode::kOff, .same_host_pulls = pulls});
  ASSERT_TRUE(p.init && p.target);
  if (pulls) round_trip(p);
  constexpr size_t kSize = size_t{1} << 30;
  ZeroMapping target(kSize), source(kSize);
  const auto head = pattern(1 << 20, 21);
  std::memcpy(source.data(), head.data(), head.size());
  std::memcpy(source.data() + kSize - head.size(), head.data(), head.size());
  auto region = p.target_ctx->register_memory(target.data(), kSize, kAllAccess);
  ASSERT_TRUE(region.is_ok()) << region.status().to_string();

  const auto& engine = detail::engine_of(*p.init_ctx);
  engine->stop();
  const uint64_t before = p.init->stats().chunks_sent;
  Request put = p.init->put(source.span(), region->remote_key(), 0);
  const uint64_t posted = p.init->stats().chunks_sent - before;
  EXPECT_FALSE(put.done());
  EXPECT_GE(posted, 1u) << "the posting thread sent nothing itself";
  if (pulls) {
    EXPECT_LE(posted, detail::ChunkScheduler::kPullWindow) << "posting announced more than the pull window";
    EXPECT_EQ(p.init->stats().chunks_pulled - before, posted);
  } else {
    EXPECT_LE(posted, p.init->data_streams()) << "posting wrote more than one round of chunks";
  }
  std::vector<std::byte> back(64);
  Request get = p.init->get(back, region->remote_key(), 0);
  engine->start();

  // No thread waits: only the progress thread moves the put (done() drives nothing).
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!(put.done() && get.done()) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE(put.done() && get.done()) << "the progress thread did not carry the put through";
  ASSERT_TRUE(put.wait(0s).is_ok()) << put.wait(0s).to_string();
  ASSERT_TRUE(get.wait(0s).is_ok()) << get.wait(0s).to_string();
  EXPECT_EQ(std::memcmp(target.data(), head.data(), head.size()), 0);
  EXPECT_EQ(std::memcmp(target.data() + kSize - head.size(), head.data(), head.size()), 0);
  EXPECT_EQ(p.target->stats().bytes_pulled, pulls ? kSize : 0);
}

INSTANTIATE_TEST_SUITE_P(SameHost, RmaPosting, ::testing::Values(false, true), [](const auto& param_info) {
  return param_info.param ? std::string("Pulled") : std::string("OverTcp");
});

// --- a get served by same-host pulls, its region deregistered and unmapped midway -----

// The initiator reads a get's chunks out of the target itself (same-host pulls), and
// the target's deregistration does not wait for those reads: the target deregisters the
// region and unmaps it while they run. The get ends with kInvalidKey (the RESP says
// revoked, or a read hit the unmapped memory), neither endpoint fails, and a get of a
// fresh region afterwards comes back whole.
TEST(RmaRevocation, AGetReadByPullsFailsWhenItsRegionIsDeregisteredAndUnmappedMidway) {
  RmaPair p = make_pair({.pin_mode = PinMode::kOff, .same_host_pulls = true});
  ASSERT_TRUE(p.init && p.target);
  round_trip(p);
  constexpr size_t kSize = size_t{1} << 30;
  auto source = std::make_unique<ZeroMapping>(kSize);
  auto region = p.target_ctx->register_memory(source->data(), kSize, kAllAccess);
  ASSERT_TRUE(region.is_ok()) << region.status().to_string();
  ZeroMapping dest(kSize);
  const uint64_t pulled_before = p.target->stats().chunks_pulled;
  Request get = p.init->get(dest.span(), region->remote_key(), 0);
  // Once the initiator is reading: some chunks pulled (bounded; polling, no sleep).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (p.target->stats().chunks_pulled < pulled_before + 16 && !get.done() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const bool done_first = get.done();
  region->deregister();
  source.reset();  // unmapped: a read of it now fails with EFAULT
  const Status s = get.wait(120s);
  std::printf("[          ] the 1 GiB get ended with %s%s\n", s.to_string().c_str(),
              done_first ? " (before the deregistration)" : "");
  if (done_first) {
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  } else {
    EXPECT_EQ(s.code(), StatusCode::kInvalidKey) << s.to_string();
  }
  EXPECT_GT(p.target->stats().chunks_pulled, pulled_before) << "the get's chunks did not go as pulls";
  ASSERT_FALSE(p.init->failed()) << p.init->failure().to_string();
  ASSERT_FALSE(p.target->failed()) << p.target->failure().to_string();
  expect_fresh_region_works(p, 4 << 20, 3 << 20, 3);
}

// --- huge-page promotion of pulled memory (Config::pull_huge_pages) -----------------

// The same 8 MiB source (four 2 MiB frames on small pages) put three times, its contents
// changed each time: every put lands intact, and the frames are collapsed into huge
// pages after the second put where promotion is on (and the kernel's THP mode allows),
// never where it is off.
class PulledHugePages : public ::testing::TestWithParam<bool> {};

TEST_P(PulledHugePages, APutSourcePulledAgainIsCollapsedOnlyWhereAsked) {
  const bool huge = GetParam();
  RmaPair p = make_pair({.pin_mode = PinMode::kOff, .same_host_pulls = true, .pull_huge_pages = huge});
  ASSERT_TRUE(p.init && p.target);
  round_trip(p);
  testing::AlignedFrames source(4);
  TargetMemory target(*p.target_ctx, source.size(), Access::kRemoteWrite);
  for (uint64_t round = 0; round < 3; ++round) {
    const auto d = pattern(source.size(), 90 + round);
    std::memcpy(source.data(), d.data(), d.size());
    ASSERT_TRUE(p.init->put({source.data(), source.size()}, target.region.remote_key(), 0).wait(30s).is_ok());
    target.apply_put(0, d);
    ASSERT_EQ(diff(target), "") << "round " << round;
  }
  EXPECT_EQ(p.target->stats().bytes_pulled, 3 * source.size());
  const std::string thp = testing::thp_mode();
  if (huge && thp != "never") {
    EXPECT_EQ(p.init->stats().huge_pages_promoted, 4u);
    EXPECT_EQ(testing::anon_huge_kib(source.data()), long{8192});
  } else {
    EXPECT_EQ(p.init->stats().huge_pages_promoted, 0u);
    if (thp != "always") {
      EXPECT_EQ(testing::anon_huge_kib(source.data()), 0);
    }
  }
  EXPECT_EQ(p.target->stats().huge_pages_promoted, 0u);  // nothing of the target's was pulled
}

INSTANTIATE_TEST_SUITE_P(SameHost, PulledHugePages, ::testing::Values(false, true), [](const auto& param_info) {
  return param_info.param ? std::string("PromotionOn") : std::string("PromotionOff");
});

// --- deregistration, close and peer failure with operations in flight ---------------

// The target deregisters while a stream of large puts (and gets) is in flight. Each
// op completes ok or kInvalidKey; once deregister() returned, the memory never
// changes again.
TEST(RmaRevocation, DeregisterDuringAStreamOfLargePuts) {
  RmaPair p = make_pair({.streams_per_endpoint = 2, .chunk_bytes = 16384, .eager_limit = 4096});
  ASSERT_TRUE(p.init && p.target);
  constexpr size_t kPut = 256 * 1024, kPuts = 48, kHalf = kPuts * kPut;
  TargetMemory t(*p.target_ctx, 2 * kHalf, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  std::vector<std::vector<std::byte>> datas;
  for (size_t i = 0; i < kPuts; ++i) datas.push_back(pattern(kPut, 300 + i));
  std::vector<std::vector<std::byte>> gets(kPuts, std::vector<std::byte>(kPut));
  std::vector<Request> puts, getr;
  for (size_t i = 0; i < kPuts; ++i) {
    puts.push_back(p.init->put(datas[i], key, i * kPut, {.notify = i}));
    getr.push_back(p.init->get(gets[i], key, kHalf + i * kPut));  // the half no put writes
  }
  ASSERT_TRUE(puts.front().wait(10s).is_ok());
  t.region.deregister();
  const std::vector<std::byte> snapshot = t.bytes;

  size_t put_ok = 0, get_ok = 0;
  for (size_t i = 0; i < kPuts; ++i) {
    const Status s = puts[i].wait(30s);
    ASSERT_TRUE(s.is_ok() || s.code() == StatusCode::kInvalidKey) << "put #" << i << ": " << s.to_string();
    if (s.is_ok()) {
      ++put_ok;
      // A put reported ok must have placed all of its bytes (before the revocation).
      EXPECT_EQ(std::memcmp(snapshot.data() + i * kPut, datas[i].data(), kPut), 0) << "put #" << i << " ok but not in place";
    }
    const Status g = getr[i].wait(30s);
    ASSERT_TRUE(g.is_ok() || g.code() == StatusCode::kInvalidKey) << "get #" << i << ": " << g.to_string();
    if (g.is_ok()) {
      ++get_ok;
      EXPECT_TRUE(std::equal(gets[i].begin(), gets[i].end(), t.model.begin() + static_cast<ptrdiff_t>(kHalf + i * kPut)))
          << "get #" << i << " ok but its bytes are wrong";
    }
  }
  EXPECT_TRUE(snapshot == t.bytes) << "the target's memory changed after deregister() returned";
  EXPECT_TRUE(std::equal(snapshot.begin() + kHalf, snapshot.end(), t.model.begin() + kHalf)) << "a get wrote the target";
  // Exactly the puts that completed ok were notified; a revoked put never is.
  std::set<uint64_t> ok_puts, notified;
  for (size_t i = 0; i < kPuts; ++i) {
    if (puts[i].wait(0s).is_ok()) ok_puts.insert(i);
  }
  while (auto n = p.target->poll_notification()) {
    EXPECT_TRUE(notified.insert(n->value).second) << "put #" << n->value << " notified twice";
  }
  EXPECT_EQ(notified, ok_puts);
  std::printf("[          ] after deregistration: %zu/%zu puts and %zu/%zu gets completed ok\n", put_ok, kPuts, get_ok,
              kPuts);
  // The endpoint is fine: a new region works.
  EXPECT_FALSE(p.init->failed());
  TargetMemory fresh(*p.target_ctx, 4096, kAllAccess);
  const auto d = pattern(3000, 1);
  ASSERT_TRUE(p.init->put(d, fresh.region.remote_key(), 10).wait(10s).is_ok());
  fresh.apply_put(10, d);
  EXPECT_EQ(diff(fresh), "");
  EXPECT_EQ(p.init->put(d, key, 10).wait(10s).code(), StatusCode::kInvalidKey);
}

// close() on the initiator: every outstanding put/get/atomic completes, ok or
// kAborted; one that reported ok placed its bytes; later calls fail at once. The
// target's wait_notification hands out what was queued, then the failure.
TEST(RmaFailure, CloseAbortsOutstandingOps) {
  RmaPair p = make_pair({.chunk_bytes = 8192, .eager_limit = 1024, .rma_window = 1});
  ASSERT_TRUE(p.init && p.target);
  constexpr size_t kOps = 600, kPut = 5000;
  TargetMemory t(*p.target_ctx, kOps * kPut + 8, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  const auto first = pattern(10, 1);
  ASSERT_TRUE(p.init->put(first, key, 0, {.notify = 77}).wait(10s).is_ok());
  t.apply_put(0, first);
  std::vector<std::vector<std::byte>> datas, gets;
  for (size_t i = 1; i < kOps; ++i) {
    datas.push_back(pattern(kPut, i));
    gets.push_back(std::vector<std::byte>(100));
  }
  std::vector<Request> puts, others;
  for (size_t i = 1; i < kOps; ++i) {
    puts.push_back(p.init->put(datas[i - 1], key, i * kPut));
    others.push_back(p.init->get(gets[i - 1], key, 0));
    others.push_back(p.init->fetch_add(nullptr, key, kOps * kPut, 1));
  }
  Request flush = p.init->flush();
  p.init->close();
  size_t aborted = 0;
  for (size_t i = 0; i < puts.size(); ++i) {
    const Status s = puts[i].wait(10s);
    ASSERT_TRUE(s.is_ok() || s.code() == StatusCode::kAborted) << "put #" << i << ": " << s.to_string();
    if (s.is_ok()) {
      EXPECT_EQ(std::memcmp(t.bytes.data() + (i + 1) * kPut, datas[i].data(), kPut), 0) << "put #" << i;
    } else {
      ++aborted;
    }
  }
  for (size_t i = 0; i < others.size(); ++i) {
    const Status s = others[i].wait(10s);
    ASSERT_TRUE(s.is_ok() || s.code() == StatusCode::kAborted) << "op #" << i << ": " << s.to_string();
    aborted += s.is_ok() ? 0 : 1;
  }
  const Status fs = flush.wait(10s);
  if (aborted > 0) {
    EXPECT_EQ(fs.code(), StatusCode::kAborted) << "flush over aborted ops: " << fs.to_string();
  } else {
    EXPECT_TRUE(fs.is_ok() || fs.code() == StatusCode::kAborted) << fs.to_string();
  }
  EXPECT_GT(aborted, 0u) << "all " << 3 * (kOps - 1) << " ops behind a window of 1 finished before close()";
  EXPECT_EQ(p.init->put(first, key, 0).wait(1s).code(), StatusCode::kAborted);
  EXPECT_EQ(p.init->fetch_add(nullptr, key, 8, 1).wait(1s).code(), StatusCode::kAborted);
  EXPECT_EQ(p.init->flush().wait(1s).code(), StatusCode::kAborted);

  // The target: the queued notification first, then the failure (not a timeout).
  Result<Notification> n = p.target->wait_notification(10s);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n->value, 77u);
  Result<Notification> after = p.target->wait_notification(10s);
  ASSERT_FALSE(after.is_ok());
  EXPECT_EQ(after.status().code(), StatusCode::kPeerFailed) << after.status().to_string();
}

// The target goes away: everything outstanding on the initiator fails kPeerFailed
// (or completed ok before), new ops fail at once.
TEST(RmaFailure, PeerGoneFailsOutstandingOps) {
  RmaPair p = make_pair({.chunk_bytes = 8192, .eager_limit = 1024, .rma_window = 1});
  ASSERT_TRUE(p.init && p.target);
  constexpr size_t kOps = 600, kPut = 5000;
  TargetMemory t(*p.target_ctx, kOps * kPut + 8, kAllAccess);
  const RemoteKey key = t.region.remote_key();
  std::vector<std::vector<std::byte>> datas, gets;
  for (size_t i = 0; i < kOps; ++i) {
    datas.push_back(pattern(kPut, i));
    gets.push_back(std::vector<std::byte>(20000));
  }
  std::vector<Request> reqs;
  for (size_t i = 0; i < kOps; ++i) {
    reqs.push_back(p.init->put(datas[i], key, i * kPut));
    reqs.push_back(p.init->get(gets[i], key, 0));
    reqs.push_back(p.init->compare_swap(nullptr, key, kOps * kPut, {.expected = 0, .desired = 1}));
  }
  p.target->close();
  size_t failed = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Status s = reqs[i].wait(10s);
    ASSERT_TRUE(s.is_ok() || s.code() == StatusCode::kPeerFailed) << "op #" << i << ": " << s.to_string();
    failed += s.is_ok() ? 0 : 1;
  }
  EXPECT_GT(failed, 0u);
  EXPECT_TRUE(p.init->failed());
  EXPECT_EQ(p.init->failure().code(), StatusCode::kPeerFailed);
  EXPECT_EQ(p.init->put(datas[0], key, 0).wait(1s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(p.init->get(gets[0], key, 0).wait(1s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(p.init->flush().wait(1s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(p.init->wait_notification(1s).status().code(), StatusCode::kPeerFailed);
}

}  // namespace
}  // namespace remora
