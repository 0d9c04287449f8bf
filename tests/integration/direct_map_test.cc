// direct_map_test.cc — puts and gets through a mapping of a same-host peer's pool memory
// (docs/protocol.md, "Direct mappings"), from the library's public API against another
// process: remora_rma_target with --pool=1 hands out a key for the middle of three
// adjacent pool buffers, so every byte written outside the key's window shows in the
// guard buffers' checksums.
#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "itest_util.h"
#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/memory.h"
#include "remora/pool.h"
#include "support/rma_target.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using rma_target::Target;

RemoteKey key_of(const raw::KeyBytes& bytes) {
  auto k = RemoteKey::deserialize(bytes);
  EXPECT_TRUE(k) << describe(k.status());
  return k ? *k : RemoteKey{};
}

/// The target's memory as it must be: the key's window and the guards around it.
class Expected {
 public:
  explicit Expected(size_t size) : region_(size) { fill_stream(rma_target::kInitialSeed, 0, region_); }
  void write(uint64_t offset, std::span<const std::byte> data) {
    std::ranges::copy(data, region_.begin() + static_cast<ptrdiff_t>(offset));
  }
  std::span<const std::byte> slice(uint64_t offset, uint64_t length) const { return {region_.data() + offset, length}; }
  rma_target::Sums sums(size_t guard) const {
    return {.region = XXH3_64bits(region_.data(), region_.size()),
            .before = stream_hash(rma_target::kGuardBeforeSeed, guard),
            .after = stream_hash(rma_target::kGuardAfterSeed, guard)};
  }

 private:
  std::vector<std::byte> region_;
};

/// Whether this run can map the peer's memory at all: sealed endpoints
/// (integration.with_encryption) keep their control stream on TCP.
bool can_map() { return !sealed_by_environment(); }

class DirectMap : public ::testing::Test {
 protected:
  void start(Target::Options options) {
    std::string err;
    target_ = Target::spawn(REMORA_RMA_TARGET_PATH, options, &err);
    ASSERT_TRUE(target_) << "remora_rma_target did not start: " << err;
    ctx_ = make_context();
    ASSERT_TRUE(ctx_);
    ep_ = connect_to(*ctx_, target_->port());
    ASSERT_TRUE(ep_);
    key_ = key_of(target_->key());
  }
  void TearDown() override {
    if (ep_) ep_->close();
    if (target_) {
      EXPECT_TRUE(target_->quit()) << target_->last_error();
    }
  }

  /// A target of three pool buffers of `size`, the channel up, and the key asked for by
  /// one get, which goes the usual way: the answer comes before its reply, so every
  /// later operation with the key can go through the mapping.
  void start_mapped(size_t size, std::vector<std::string> env = {}) {
    ASSERT_NO_FATAL_FAILURE(start({.size = size, .guard = size, .env = std::move(env), .pool = true}));
    if (can_map()) {
      ASSERT_TRUE(wait_for_shm_channel(*ep_)) << ep_->stats().shm_reason;
    }
    std::vector<std::byte> first(8);
    ASSERT_TRUE(get(first, key_, 0).is_ok());
    // `notes` reads the endpoints the target accepted: this one, from here on.
    ASSERT_TRUE(target_->await_endpoints(1)) << target_->last_error();
    EXPECT_EQ(0, std::memcmp(first.data(), Expected(size).slice(0, 8).data(), 8));
    EXPECT_EQ(ep_->stats().direct, 0u);
  }
  /// The target's own view: the window holds `expected`, the guards around it nothing new.
  void expect_target_holds(const Expected& expected, size_t guard) {
    auto sums = target_->sums();
    ASSERT_TRUE(sums) << target_->last_error();
    EXPECT_EQ(*sums, expected.sums(guard));
  }

  Status put(std::span<const std::byte> data, const RemoteKey& key, uint64_t offset) {
    return ep_->put(data, key, offset).wait(std::chrono::seconds(30));
  }
  Status get(std::span<std::byte> into, const RemoteKey& key, uint64_t offset) {
    return ep_->get(into, key, offset).wait(std::chrono::seconds(30));
  }

  std::unique_ptr<Target> target_;
  std::unique_ptr<Context> ctx_;
  std::shared_ptr<Endpoint> ep_;
  RemoteKey key_;
};

class DirectMapSizes : public DirectMap, public ::testing::WithParamInterface<size_t> {};

TEST_P(DirectMapSizes, PutsAndGetsOfEveryLengthGoThroughTheMappingByteForByte) {
  const size_t size = GetParam();
  ASSERT_NO_FATAL_FAILURE(start_mapped(size));
  Expected expected(size);

  uint64_t ops = 0;
  uint64_t seed = 100;
  for (const size_t length : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{64}, size_t{1000}, size - 1, size}) {
    for (const uint64_t offset : {uint64_t{0}, uint64_t{(size - length) / 2}, uint64_t{size - length}}) {
      SCOPED_TRACE(std::to_string(length) + " bytes at " + std::to_string(offset));
      const std::vector<std::byte> data = stream_bytes(length, ++seed);
      Request w = ep_->put(data, key_, offset);
      // Through the mapping a put is complete when the call returns.
      if (can_map()) {
        EXPECT_TRUE(w.done());
      }
      ASSERT_TRUE(w.wait(std::chrono::seconds(30)).is_ok());
      expected.write(offset, data);
      std::vector<std::byte> back(length, std::byte{0xEE});
      Request r = ep_->get(back, key_, offset);
      if (can_map()) {
        EXPECT_TRUE(r.done());
      }
      ASSERT_TRUE(r.wait(std::chrono::seconds(30)).is_ok());
      EXPECT_TRUE(std::ranges::equal(back, expected.slice(offset, length)));
      ops += 2;
    }
  }
  const EndpointStats st = ep_->stats();
  EXPECT_EQ(st.direct, can_map() ? ops : 0u) << st.direct_reason;
  EXPECT_EQ(st.puts + st.gets, ops + 1);
  expect_target_holds(expected, size);
}

INSTANTIATE_TEST_SUITE_P(BufferBytes, DirectMapSizes, ::testing::Values(size_t{4096}, size_t{16384}));

TEST_F(DirectMap, RefusalsAreTheTargetsAsBeforeAndWriteNothing) {
  const size_t size = 4096;
  ASSERT_NO_FATAL_FAILURE(start_mapped(size));
  Expected expected(size);
  std::vector<std::byte> eight(8);

  // Past the window's end: the usual way, the target's out_of_range.
  const std::vector<std::byte> data = stream_bytes(8, 7);
  EXPECT_EQ(put(data, key_, size - 4).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(get(eight, key_, size - 4).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(put(data, key_, ~uint64_t{0} - 2).code(), StatusCode::kOutOfRange);

  // A read-only window of the same buffer: granted for gets, refused for puts.
  auto ro = target_->window_key(0, size, "r");
  ASSERT_TRUE(ro) << target_->last_error();
  const RemoteKey read_only = key_of(*ro);
  ASSERT_TRUE(get(eight, read_only, 0).is_ok());  // asks for it
  ASSERT_TRUE(get(eight, read_only, 8).is_ok());
  EXPECT_EQ(0, std::memcmp(eight.data(), expected.slice(8, 8).data(), 8));
  EXPECT_EQ(put(data, read_only, 0).code(), StatusCode::kAccessDenied);

  const EndpointStats st = ep_->stats();
  EXPECT_EQ(st.direct, can_map() ? 1u : 0u) << st.direct_reason;  // the second read-only get
  expect_target_holds(expected, size);
  EXPECT_FALSE(ep_->failed());
}

TEST_F(DirectMap, APoolDestroyedByItsOwnerFailsLaterPutsAndGetsWithInvalidKey) {
  ASSERT_NO_FATAL_FAILURE(start_mapped(4096));
  std::vector<std::byte> eight(8);
  ASSERT_TRUE(get(eight, key_, 0).is_ok());
  EXPECT_EQ(ep_->stats().direct, can_map() ? 1u : 0u);

  ASSERT_TRUE(target_->dereg()) << target_->last_error();  // the pool and its arena are gone
  EXPECT_EQ(get(eight, key_, 0).code(), StatusCode::kInvalidKey);
  EXPECT_EQ(put(stream_bytes(8, 3), key_, 0).code(), StatusCode::kInvalidKey);
  EXPECT_EQ(ep_->stats().direct, can_map() ? 1u : 0u);
  EXPECT_FALSE(ep_->failed());
  auto eps = target_->endpoints();
  ASSERT_TRUE(eps) << target_->last_error();
  EXPECT_EQ(eps->second, 0u) << "the target failed an endpoint";
}

TEST_F(DirectMap, RegisteredMemoryThePeerDoesNotShareGoesTheUsualWay) {
  const size_t size = 64 << 10;
  ASSERT_NO_FATAL_FAILURE(start({.size = size, .guard = 4096}));
  if (can_map()) {
    ASSERT_TRUE(wait_for_shm_channel(*ep_)) << ep_->stats().shm_reason;
  }
  Expected expected(size);
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::byte> data = stream_bytes(512, 50 + static_cast<uint64_t>(i));
    ASSERT_TRUE(put(data, key_, 1024 * static_cast<uint64_t>(i)).is_ok());
    expected.write(1024 * static_cast<uint64_t>(i), data);
  }
  const EndpointStats st = ep_->stats();
  EXPECT_EQ(st.direct, 0u);
  if (can_map()) {
    EXPECT_NE(st.direct_reason.find("does not share"), std::string::npos) << st.direct_reason;
  }
  expect_target_holds(expected, 4096);
}

TEST_F(DirectMap, SameHostOffOnThePeerKeepsEveryByteOnTcp) {
  const size_t size = 4096;
  ASSERT_NO_FATAL_FAILURE(start({.size = size, .guard = size, .env = {"REMORA_SAME_HOST=off"}, .pool = true}));
  Expected expected(size);
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::byte> data = stream_bytes(100, 70 + static_cast<uint64_t>(i));
    ASSERT_TRUE(put(data, key_, 200).is_ok());
    expected.write(200, data);
    std::vector<std::byte> back(100);
    ASSERT_TRUE(get(back, key_, 200).is_ok());
    EXPECT_EQ(back, data);
  }
  const EndpointStats st = ep_->stats();
  EXPECT_EQ(st.direct, 0u);
  EXPECT_FALSE(st.shm_tx);
  expect_target_holds(expected, size);
}

TEST_F(DirectMap, AtomicsThroughTheMappingAreTheTargetsHardwareAtomics) {
  const size_t size = 4096;
  ASSERT_NO_FATAL_FAILURE(start_mapped(size));
  Expected expected(size);
  const auto word_at = [&](uint64_t offset) {
    uint64_t w;
    std::memcpy(&w, expected.slice(offset, 8).data(), 8);
    return w;
  };
  const auto set_word = [&](uint64_t offset, uint64_t w) { expected.write(offset, std::as_bytes(std::span(&w, 1))); };
  const auto wait = [](Request r) { return r.wait(std::chrono::seconds(30)); };

  // fetch_add: the previous value back, the sum in the target's memory; complete at once.
  uint64_t previous = 0;
  Request add = ep_->fetch_add(&previous, key_, 64, 5);
  if (can_map()) {
    EXPECT_TRUE(add.done());
  }
  ASSERT_TRUE(wait(std::move(add)).is_ok());
  EXPECT_EQ(previous, word_at(64));
  set_word(64, word_at(64) + 5);
  // compare_swap: a match swaps, a mismatch leaves the word and returns what is there.
  ASSERT_TRUE(wait(ep_->compare_swap(&previous, key_, 64, {.expected = word_at(64), .desired = 42})).is_ok());
  EXPECT_EQ(previous, word_at(64));
  set_word(64, 42);
  ASSERT_TRUE(wait(ep_->compare_swap(&previous, key_, 64, {.expected = 41, .desired = 7})).is_ok());
  EXPECT_EQ(previous, 42u);
  // A hundred more on one word, then read back through the mapping.
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(wait(ep_->fetch_add(nullptr, key_, size - 8, i)).is_ok());
  uint64_t sum = word_at(size - 8);
  for (uint64_t i = 0; i < 100; ++i) sum += i;
  set_word(size - 8, sum);
  std::vector<std::byte> back(8);
  ASSERT_TRUE(get(back, key_, size - 8).is_ok());
  EXPECT_TRUE(std::ranges::equal(back, expected.slice(size - 8, 8)));

  // The target's refusals, the usual way: a misaligned word, past the window, no right.
  EXPECT_EQ(wait(ep_->fetch_add(&previous, key_, 3, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wait(ep_->fetch_add(&previous, key_, size - 4, 1)).code(), StatusCode::kOutOfRange);
  auto rw = target_->window_key(0, size, "rw");
  ASSERT_TRUE(rw) << target_->last_error();
  const RemoteKey no_atomics = key_of(*rw);
  ASSERT_TRUE(get(back, no_atomics, 0).is_ok());  // asks for it: granted, for gets and puts
  EXPECT_EQ(wait(ep_->fetch_add(&previous, no_atomics, 0, 1)).code(), StatusCode::kAccessDenied);

  const EndpointStats st = ep_->stats();
  // 103 atomics and one get through the mapping; the refusals and the asking get not.
  EXPECT_EQ(st.direct, can_map() ? 104u : 0u) << st.direct_reason;
  EXPECT_EQ(st.atomics, 106u);
  expect_target_holds(expected, size);
  EXPECT_FALSE(ep_->failed());
}

TEST_F(DirectMap, AtomicsThroughTheMappingAndThroughTheTargetAtOnceLoseNoUpdate) {
  // Two threads add to one word at once: one through the mapping, one over TCP (a
  // context with same-host paths off), whose adds the target's progress thread does.
  const size_t size = 4096;
  ASSERT_NO_FATAL_FAILURE(start_mapped(size));
  ContextOptions tcp_only;
  tcp_only.same_host_pulls = false;
  auto tcp_ctx = Context::create(tcp_only);
  ASSERT_TRUE(tcp_ctx) << describe(tcp_ctx.status());
  std::shared_ptr<Endpoint> tcp_ep = connect_to(**tcp_ctx, target_->port());
  ASSERT_TRUE(tcp_ep);
  Expected expected(size);
  uint64_t start = 0;
  std::memcpy(&start, expected.slice(128, 8).data(), 8);

  constexpr uint64_t kAdds = 2000;
  const auto adder = [&](Endpoint& ep, uint64_t step, Status* failed) {
    for (uint64_t i = 0; i < kAdds && failed->is_ok(); ++i) {
      *failed = ep.fetch_add(nullptr, key_, 128, step).wait(std::chrono::seconds(30));
    }
  };
  Status mapped_failed, tcp_failed;
  std::thread tcp([&] { adder(*tcp_ep, 3, &tcp_failed); });
  adder(*ep_, 1, &mapped_failed);
  tcp.join();
  ASSERT_TRUE(mapped_failed.is_ok()) << describe(mapped_failed);
  ASSERT_TRUE(tcp_failed.is_ok()) << describe(tcp_failed);
  EXPECT_EQ(ep_->stats().direct, can_map() ? kAdds : 0u);
  EXPECT_EQ(tcp_ep->stats().direct, 0u);

  const uint64_t end = start + kAdds * 1 + kAdds * 3;
  expected.write(128, std::as_bytes(std::span(&end, 1)));
  expect_target_holds(expected, size);
  tcp_ep->close();
}

TEST_F(DirectMap, NotifiedPutsThroughTheMappingNotifyOnceEachInOrder) {
  const size_t size = 4096;
  ASSERT_NO_FATAL_FAILURE(start_mapped(size));
  Expected expected(size);
  constexpr uint64_t kPuts = 200;  // more than the places one CREDIT gives
  std::vector<rma_target::Note> want;
  for (uint64_t i = 0; i < kPuts; ++i) {
    const uint64_t offset = (i * 24) % (size - 16), length = 1 + i % 16;
    const std::vector<std::byte> data = stream_bytes(length, 500 + i);
    // Complete once the target queued the notification (its ACK), as the usual way.
    ASSERT_TRUE(ep_->put(data, key_, offset, PutOptions{.notify = 1000 + i}).wait(std::chrono::seconds(30)).is_ok());
    expected.write(offset, data);
    want.push_back({.value = 1000 + i,
                    .region = static_cast<uint32_t>(key_.region),
                    .offset = key_.offset + offset,
                    .length = length});
  }
  // The target gives 64 places before it answers the first get; more as it takes them.
  const EndpointStats st = ep_->stats();
  if (can_map()) {
    EXPECT_GE(st.direct, 64u) << st.direct_reason;
  } else {
    EXPECT_EQ(st.direct, 0u);
  }
  EXPECT_EQ(st.rma_bytes_put, [] {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < kPuts; ++i) sum += 1 + i % 16;
    return sum;
  }());
  auto notes = target_->notes();
  ASSERT_TRUE(notes) << target_->last_error();
  EXPECT_EQ(*notes, want);
  expect_target_holds(expected, size);
  ASSERT_TRUE(ep_->flush().wait(std::chrono::seconds(30)).is_ok());
}

TEST_F(DirectMap, AFullNotificationQueueRefusesTheNextPutAndNothingIsWritten) {
  // A queue of 8 on the target (2 places for puts through the mapping), never polled
  // while the puts go: exactly 8 succeed, the mapped and the usual ones together, and
  // every later one fails with no_resource and writes nothing.
  const size_t size = 4096;
  ASSERT_NO_FATAL_FAILURE(start_mapped(size, {"REMORA_MAX_UNEXPECTED=8"}));
  Expected expected(size);
  std::vector<rma_target::Note> want;
  const auto notified_put = [&](uint64_t i) {
    const std::vector<std::byte> data = stream_bytes(8, 700 + i);
    const Status s = ep_->put(data, key_, i * 8, PutOptions{.notify = i}).wait(std::chrono::seconds(30));
    if (s.is_ok()) {
      expected.write(i * 8, data);
      want.push_back(
          {.value = i, .region = static_cast<uint32_t>(key_.region), .offset = key_.offset + i * 8, .length = 8});
    } else {
      EXPECT_EQ(s.code(), StatusCode::kNoResource) << describe(s);
    }
    return s.is_ok();
  };
  uint64_t ok = 0;
  for (uint64_t i = 0; i < 20; ++i) ok += notified_put(i) ? 1 : 0;
  EXPECT_EQ(ok, 8u);
  EXPECT_EQ(ep_->stats().direct > 0, can_map());
  expect_target_holds(expected, size);
  auto notes = target_->notes();  // takes them all: the queue has room again
  ASSERT_TRUE(notes) << target_->last_error();
  EXPECT_EQ(*notes, want);

  for (uint64_t i = 20; i < 26; ++i) EXPECT_TRUE(notified_put(i)) << "put " << i << " after the queue was emptied";
  notes = target_->notes();
  ASSERT_TRUE(notes) << target_->last_error();
  EXPECT_EQ(*notes, want);
  expect_target_holds(expected, size);
}

// Two endpoints of one process, each exposing a pool buffer (memory the other maps).
class DirectMapBothWays : public ::testing::Test {
 protected:
  static constexpr size_t kSize = 4096;
  void SetUp() override {
    pair_ = make_pair_in_process(make_context(), make_context());
    ASSERT_TRUE(pair_.ea && pair_.eb);
    if (can_map()) {
      ASSERT_TRUE(wait_for_shm_channel(*pair_.ea)) << pair_.ea->stats().shm_reason;
      ASSERT_TRUE(wait_for_shm_channel(*pair_.eb)) << pair_.eb->stats().shm_reason;
    }
    pool_a_ = std::make_unique<Pool>(*pair_.a, PoolOptions{.arena_bytes = 1 << 20});
    pool_b_ = std::make_unique<Pool>(*pair_.b, PoolOptions{.arena_bytes = 1 << 20});
    for (auto [pool, buffer] : {std::pair{pool_a_.get(), &at_a_}, std::pair{pool_b_.get(), &at_b_}}) {
      auto b = pool->allocate(kSize);
      ASSERT_TRUE(b) << describe(b.status());
      *buffer = std::move(b).value();
      std::fill_n(buffer->data(), kSize, std::byte{0});
    }
  }
  void TearDown() override {
    at_a_.reset();
    at_b_.reset();
    pool_a_.reset();
    pool_b_.reset();
    reset(pair_);
  }
  /// Round `i`'s bytes from `side` (0: a, 1: b), and where they go in the other's buffer.
  static std::vector<std::byte> bytes_of(int side, uint64_t i) { return stream_bytes(1 + i % 16, 9000 + 2 * i + side); }
  static uint64_t offset_of(uint64_t i) { return (i * 24) % (kSize - 16); }

  Pair pair_;
  std::unique_ptr<Pool> pool_a_, pool_b_;
  Buffer at_a_, at_b_;
};

// A ping-pong of notified puts (bench rma put_lat): each notification wakes the other
// side's waiting thread, whose answer is a notified put of its own that also carries
// the ACK (PLACED_SHORT). Every put completes, every notification comes once and in
// order, and the last bytes of each round are in both buffers.
TEST_F(DirectMapBothWays, NotifiedPutsAnsweredByNotifiedPutsCompleteAndLandInOrder) {
  constexpr uint64_t kRounds = 300;
  const RemoteKey to_a = at_a_.remote_key(), to_b = at_b_.remote_key();
  std::string b_error;
  std::thread answerer([&] {
    for (uint64_t i = 0; i < kRounds && b_error.empty(); ++i) {
      auto n = pair_.eb->wait_notification(std::chrono::seconds(30));
      if (!n || n->value != i || n->length != 1 + i % 16 || n->offset != to_b.offset + offset_of(i)) {
        b_error =
            n ? "notification " + std::to_string(n->value) + " in round " + std::to_string(i) : describe(n.status());
        break;
      }
      const std::vector<std::byte> data = bytes_of(1, i);
      const Status s = pair_.eb->put(data, to_a, offset_of(i), PutOptions{.notify = i}).wait(std::chrono::seconds(30));
      if (!s.is_ok()) b_error = "put back " + std::to_string(i) + ": " + describe(s);
    }
  });
  for (uint64_t i = 0; i < kRounds; ++i) {
    const std::vector<std::byte> data = bytes_of(0, i);
    Request put = pair_.ea->put(data, to_b, offset_of(i), PutOptions{.notify = i});
    auto n = pair_.ea->wait_notification(std::chrono::seconds(30));
    const Status done = put.wait(std::chrono::seconds(30));
    if (!n || !done.is_ok()) {
      ADD_FAILURE() << "round " << i << ": " << describe(n.status()) << ", " << describe(done);
      pair_.ea->close();  // the answerer's wait ends
      break;
    }
    EXPECT_EQ(n->value, i);
    EXPECT_EQ(n->offset, to_a.offset + offset_of(i));
    // Both puts of round i are complete: each side's bytes are in the other's buffer.
    const std::vector<std::byte> back = bytes_of(1, i);
    EXPECT_EQ(0, std::memcmp(at_a_.data() + offset_of(i), back.data(), back.size())) << "round " << i;
    EXPECT_EQ(0, std::memcmp(at_b_.data() + offset_of(i), data.data(), data.size())) << "round " << i;
  }
  answerer.join();
  EXPECT_EQ(b_error, "");
  if (can_map()) {
    EXPECT_GE(pair_.ea->stats().direct, kRounds - 1) << pair_.ea->stats().direct_reason;
    EXPECT_GE(pair_.eb->stats().direct, kRounds - 1) << pair_.eb->stats().direct_reason;
  }
  ASSERT_TRUE(pair_.ea->flush().wait(std::chrono::seconds(30)).is_ok());
  ASSERT_TRUE(pair_.eb->flush().wait(std::chrono::seconds(30)).is_ok());
}

// A woken thread that does not answer, and then leaves the library alone until the put
// it was told of completed: the ACK it might have carried goes without it, so the put
// completes.
TEST_F(DirectMapBothWays, AWokenThreadThatDoesNotAnswerHoldsNoPutBack) {
  constexpr uint64_t kRounds = 100;
  const RemoteKey to_b = at_b_.remote_key();
  std::vector<std::promise<void>> waiting(kRounds), done(kRounds);
  std::string b_error;
  std::thread waiter([&] {
    for (uint64_t i = 0; i < kRounds; ++i) {
      waiting[i].set_value();
      auto n = pair_.eb->wait_notification(std::chrono::seconds(30));
      if (!n || n->value != i) {
        b_error =
            n ? "notification " + std::to_string(n->value) + " in round " + std::to_string(i) : describe(n.status());
        break;
      }
      done[i].get_future().wait();  // outside the library until the put completed
    }
  });
  for (uint64_t i = 0; i < kRounds; ++i) {
    waiting[i].get_future().wait();
    const std::vector<std::byte> data = bytes_of(0, i);
    const Status s = pair_.ea->put(data, to_b, offset_of(i), PutOptions{.notify = i}).wait(std::chrono::seconds(30));
    done[i].set_value();
    if (!s.is_ok()) {
      ADD_FAILURE() << "round " << i << ": " << describe(s);
      pair_.ea->close();  // the waiter's next wait ends
      break;
    }
    EXPECT_EQ(0, std::memcmp(at_b_.data() + offset_of(i), data.data(), data.size())) << "round " << i;
  }
  waiter.join();
  EXPECT_EQ(b_error, "");
  if (can_map()) {
    EXPECT_GE(pair_.ea->stats().direct, kRounds - 1) << pair_.ea->stats().direct_reason;
  }
}

}  // namespace
}  // namespace remora::itest
