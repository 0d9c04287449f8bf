// Tests of the RmaTarget alone: a real MemoryRegistry and region, no endpoint and no
// engine. A recording owner keeps the RESPs and chunk transfers the target hands out
// (a RESP's "position" in the control queue is its count) and fails the target on a
// protocol error as the endpoint does; the tests play the peer's requests and the
// scheduler's progress. They pin the verdicts (and that a refusal touches no byte),
// admission (window, duplicate ids, unsent RESPs), notifications and their bound, and
// when a large put or get is answered.
#include "transport/rma_target.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/checksum.h"
#include "remora/testing/test_device.h"

namespace remora::detail {
namespace {

using wire::RmaStatus;

constexpr size_t kRegionBytes = 64 * 1024;
constexpr Access kAllRemote = Access::kRemoteRead | Access::kRemoteWrite | Access::kRemoteAtomic;

struct RecordingOwner : RmaTarget::Owner, Notifications::Owner {
  std::vector<wire::RespFrame> resps;
  std::vector<std::vector<std::byte>> payloads;  // each RESP's inline bytes, copied
  std::vector<TxTransfer*> chunks;
  std::vector<std::string> errors;
  RmaTarget* target = nullptr;
  int handler_runs = 0;

  size_t queue_resp(const wire::RespFrame& frame) override {
    resps.push_back(frame);
    payloads.emplace_back(frame.payload.begin(), frame.payload.end());
    return resps.size();
  }
  void send_chunks(TxTransfer* t) override { chunks.push_back(t); }
  void protocol_error(std::string message) override {
    errors.push_back(std::move(message));
    target->fail();  // as the endpoint's failure path does
  }
  // The harness's regions are host memory (the data paths have no device domain): the
  // device paths (staging, copies that end later) are exercised through real endpoints
  // in tests/integration/device_staging_test.cc.
  void replies_queued() override { ++replies_flushed; }
  int replies_flushed = 0;
  Status inactive() const override { return Status::ok(); }
  void run_handler_later() override { ++handler_runs; }
  void waiter_woken() override {}
};

struct Harness {
  explicit Harness(RmaTarget::Limits limits = {.window = 16, .notifications = 16})
      : notifications(owner, nullptr, "peer", stats),
        paths({.config = &config, .stats = &stats}),
        target(owner, notifications, paths, &registry, limits, "peer", stats) {
    owner.target = &target;
    for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<std::byte>(i * 7);
    auto r = registry.register_memory(memory.data(), memory.size(), Access::kLocalWrite | kAllRemote);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    region = std::move(r).value();
  }

  wire::KeyBytes key(Access rights = kAllRemote) const {
    return region.remote_key(0, kRegionBytes, rights).value().serialize();
  }
  /// Admits and serves, as the endpoint's dispatch does.
  void put(const wire::PutFrame& f) {
    if (target.admit(f.op_id)) target.serve_put(f);
  }
  void get(const wire::GetFrame& f, bool inline_class) {
    if (target.admit(f.op_id)) target.serve_get(f, inline_class ? TransferClass::kInline : TransferClass::kChunked);
  }
  void atomic(const wire::AtomicFrame& f) {
    if (target.admit(f.op_id)) target.serve_atomic(f);
  }
  wire::PutFrame inline_put(uint64_t id, uint64_t offset, std::span<const std::byte> bytes) const {
    return wire::PutFrame{
        .op_id = id, .key = key(), .offset = offset, .length = bytes.size(), .inline_data = true, .payload = bytes};
  }
  wire::PutFrame chunked_put(uint64_t id, uint64_t offset, uint64_t length) const {
    return wire::PutFrame{.op_id = id, .key = key(), .offset = offset, .length = length};
  }
  RmaStatus last_status() const { return resps.empty() ? RmaStatus::kOk : resps.back().status; }

  RecordingOwner owner;
  EndpointStats stats;
  MemoryRegistry registry{PinMode::kTry};
  std::vector<std::byte> memory = std::vector<std::byte>(kRegionBytes);
  Region region;
  Notifications notifications;
  Config config;
  DataPaths paths;
  RmaTarget target;
  const std::vector<wire::RespFrame>& resps = owner.resps;
};

std::vector<std::byte> bytes(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(seed + i);
  return v;
}

TEST(RmaTargetTest, InlinePutLandsThenNotifiesThenReplies) {
  Harness h;
  const auto data = bytes(32, 1);
  wire::PutFrame f = h.inline_put(1, 100, data);
  f.has_notify = true;
  f.notify = 77;
  h.put(f);
  EXPECT_EQ(std::memcmp(h.memory.data() + 100, data.data(), data.size()), 0);
  ASSERT_EQ(h.resps.size(), 1u);
  EXPECT_EQ(h.resps[0].op_id, 1u);
  EXPECT_EQ(h.resps[0].status, RmaStatus::kOk);
  EXPECT_FALSE(h.resps[0].inline_data);
  auto n = h.notifications.take();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->value, 77u);
  EXPECT_EQ(n->region, h.region.id());
  EXPECT_EQ(n->offset, 100u);
  EXPECT_EQ(n->length, 32u);
  EXPECT_EQ(h.stats.served_puts, 1u);
  EXPECT_EQ(h.stats.notifications, 1u);
}

TEST(RmaTargetTest, RefusalsTouchNoByteAndSayWhy) {
  const auto data = bytes(16, 9);
  struct Case {
    const char* what;
    RmaStatus verdict;
    void (*run)(Harness&, std::span<const std::byte>);
  };
  const Case cases[] = {
      {"a tampered key", RmaStatus::kInvalidKey,
       [](Harness& h, std::span<const std::byte> d) {
         wire::PutFrame f = h.inline_put(1, 0, d);
         f.key[20] ^= std::byte{1};
         h.put(f);
       }},
      {"a put past the end", RmaStatus::kOutOfRange,
       [](Harness& h, std::span<const std::byte> d) { h.put(h.inline_put(1, kRegionBytes - 8, d)); }},
      {"a put with a read-only key", RmaStatus::kAccessDenied,
       [](Harness& h, std::span<const std::byte> d) {
         wire::PutFrame f = h.inline_put(1, 0, d);
         f.key = h.key(Access::kRemoteRead);
         h.put(f);
       }},
      {"a get with a write-only key", RmaStatus::kAccessDenied,
       [](Harness& h, std::span<const std::byte>) {
         h.get({.op_id = 1, .key = h.key(Access::kRemoteWrite), .offset = 0, .length = 8}, true);
       }},
      {"a chunked get past the end", RmaStatus::kOutOfRange,
       [](Harness& h, std::span<const std::byte>) {
         h.get({.op_id = 1, .key = h.key(), .offset = 1, .length = kRegionBytes}, false);
       }},
      {"an atomic without the right", RmaStatus::kAccessDenied,
       [](Harness& h, std::span<const std::byte>) {
         h.atomic({.op_id = 1, .key = h.key(Access::kRemoteWrite), .offset = 8, .operand = 1});
       }},
      {"a misaligned atomic", RmaStatus::kMisaligned,
       [](Harness& h, std::span<const std::byte>) {
         h.atomic({.op_id = 1, .key = h.key(), .offset = 4, .operand = 1});
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Harness h;
    const std::vector<std::byte> before = h.memory;
    c.run(h, data);
    ASSERT_EQ(h.resps.size(), 1u);
    EXPECT_EQ(h.resps[0].status, c.verdict);
    EXPECT_EQ(h.resps[0].value, 0u);
    EXPECT_FALSE(h.resps[0].inline_data);
    EXPECT_TRUE(h.memory == before) << "a refused request touched the region";
    EXPECT_TRUE(h.owner.chunks.empty());
    EXPECT_EQ(h.stats.refused, 1u);
    EXPECT_TRUE(h.owner.errors.empty()) << "a refusal is not a protocol error";
  }
}

TEST(RmaTargetTest, AFullNotificationQueueRefusesNotifiedPutsOnly) {
  Harness h({.window = 16, .notifications = 2});
  const auto data = bytes(8, 3);
  auto notified = [&](uint64_t id) {
    wire::PutFrame f = h.inline_put(id, 0, data);
    f.has_notify = true;
    f.notify = id;
    h.put(f);
    h.target.control_cleared();  // the RESPs went out
  };
  notified(1);
  notified(2);
  EXPECT_EQ(h.last_status(), RmaStatus::kOk);
  std::fill(h.memory.begin(), h.memory.begin() + 8, std::byte{0});
  notified(3);
  EXPECT_EQ(h.last_status(), RmaStatus::kNoResource);
  EXPECT_EQ(h.memory[0], std::byte{0}) << "a refused put wrote";
  h.put(h.inline_put(4, 0, data));  // not notified: served
  EXPECT_EQ(h.last_status(), RmaStatus::kOk);
  ASSERT_TRUE(h.notifications.take().has_value());
  notified(5);  // room again
  EXPECT_EQ(h.last_status(), RmaStatus::kOk);
}

TEST(RmaTargetTest, ALargeNotifiedPutHoldsItsPlaceInTheQueueUntilItsDataIsIn) {
  Harness h({.window = 16, .notifications = 1});
  wire::PutFrame big = h.chunked_put(1, 0, 40000);
  big.has_notify = true;
  big.notify = 11;
  h.put(big);
  EXPECT_TRUE(h.resps.empty());
  wire::PutFrame small = h.inline_put(2, 0, bytes(8, 0));
  small.has_notify = true;
  h.put(small);
  EXPECT_EQ(h.last_status(), RmaStatus::kNoResource) << "the large put promised the queue's only place";
  EXPECT_FALSE(h.notifications.take().has_value());

  h.target.put_received(1);
  EXPECT_EQ(h.last_status(), RmaStatus::kOk);
  EXPECT_EQ(h.resps.back().op_id, 1u);
  auto n = h.notifications.take();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->value, 11u);
  EXPECT_EQ(n->length, 40000u);
  EXPECT_FALSE(h.notifications.full(1));
}

TEST(RmaTargetTest, ALargePutRepliesOnceItsDataIsIn) {
  Harness h;
  h.put(h.chunked_put(5, 1000, 40000));
  RxTransfer* t = h.target.put_transfer(5);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind, wire::ChunkKind::kPut);
  EXPECT_EQ(t->length, 40000u);
  EXPECT_NE(t->sink, &h.paths.discard_sink()) << "an accepted put lands in the region";
  EXPECT_TRUE(h.resps.empty());
  EXPECT_EQ(h.target.put_transfer(6), nullptr);

  h.target.put_received(5);
  ASSERT_EQ(h.resps.size(), 1u);
  EXPECT_EQ(h.resps[0].status, RmaStatus::kOk);
  EXPECT_EQ(h.target.put_transfer(5), nullptr);
  EXPECT_EQ(h.stats.served_puts, 1u);
  h.target.put_received(5);  // nothing in service by that id any more
  EXPECT_EQ(h.resps.size(), 1u);
}

TEST(RmaTargetTest, ARefusedLargePutDrainsItsBytesAndRepliesWithTheRefusal) {
  Harness h;
  wire::PutFrame f = h.chunked_put(5, 0, 40000);
  f.key = h.key(Access::kRemoteRead);
  h.put(f);
  RxTransfer* t = h.target.put_transfer(5);
  ASSERT_NE(t, nullptr) << "its bytes still come and must be read";
  EXPECT_EQ(t->sink, &h.paths.discard_sink());
  EXPECT_TRUE(h.resps.empty()) << "the reply waits for the bytes";
  h.target.put_received(5);
  EXPECT_EQ(h.last_status(), RmaStatus::kAccessDenied);
}

TEST(RmaTargetTest, ALargePutWhoseChunkFailedIsRefused) {
  Harness h;
  h.put(h.chunked_put(5, 0, 40000));
  h.target.put_transfer(5)->failure = Status(StatusCode::kInternal, "device copy failed");
  h.target.put_received(5);
  EXPECT_EQ(h.last_status(), RmaStatus::kDeviceFailed);
  EXPECT_EQ(h.stats.served_puts, 0u);
}

/// A socket pair whose ends close themselves.
struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd) ::close(f);
  }
  SocketPair(const SocketPair&) = delete;
  SocketPair& operator=(const SocketPair&) = delete;
};

TEST(RmaTargetTest, APutWhoseRegionWentAwayMidwayIsRevoked) {
  Harness h;
  h.put(h.chunked_put(5, 0, 4096));
  RxTransfer* t = h.target.put_transfer(5);
  SocketPair link;
  const auto data = bytes(4096, 5);
  ASSERT_EQ(::write(link.fd[0], data.data(), data.size()), 4096);
  h.region.deregister();
  uint64_t asked = 0;
  StreamIn in(link.fd[1]);
  net::IoResult r = t->sink->read(in, 0, 4096, &asked);
  EXPECT_TRUE(r.moved());
  h.target.put_received(5);
  EXPECT_EQ(h.last_status(), RmaStatus::kRevoked);
}

TEST(RmaTargetTest, ALargeGetRepliesAfterItsLastByteIsSent) {
  Harness h;
  h.get({.op_id = 8, .key = h.key(), .offset = 512, .length = 40000}, /*inline_class=*/false);
  EXPECT_TRUE(h.resps.empty());
  ASSERT_EQ(h.owner.chunks.size(), 1u);
  TxTransfer* t = h.owner.chunks[0];
  EXPECT_EQ(t->kind, wire::ChunkKind::kGet);
  EXPECT_EQ(t->chunk_id, 8u);
  EXPECT_EQ(t->owner, 8u);
  EXPECT_EQ(t->length, 40000u);

  SocketPair link;
  ASSERT_TRUE(t->source->write(link.fd[0], 0, 100).moved());
  std::vector<std::byte> got(100);
  ASSERT_EQ(::read(link.fd[1], got.data(), got.size()), 100);
  EXPECT_EQ(std::memcmp(got.data(), h.memory.data() + 512, 100), 0) << "the source reads the region at the offset";

  h.target.get_sent(8);
  ASSERT_EQ(h.resps.size(), 1u);
  EXPECT_EQ(h.resps[0].status, RmaStatus::kOk);
  EXPECT_FALSE(h.resps[0].inline_data);
  EXPECT_EQ(h.stats.served_gets, 1u);
}

TEST(RmaTargetTest, AGetWhoseRegionWentAwayMidwayIsRevoked) {
  Harness h;
  h.get({.op_id = 8, .key = h.key(), .offset = 0, .length = 40000}, /*inline_class=*/false);
  TxTransfer* t = h.owner.chunks.at(0);
  h.region.deregister();
  SocketPair link;
  ASSERT_TRUE(t->source->write(link.fd[0], 0, 100).moved()) << "zeros keep the stream in step";
  h.target.get_sent(8);
  EXPECT_EQ(h.last_status(), RmaStatus::kRevoked);
}

TEST(RmaTargetTest, AnInlineGetRepliesWithTheBytes) {
  Harness h;
  h.get({.op_id = 3, .key = h.key(), .offset = 64, .length = 24}, /*inline_class=*/true);
  ASSERT_EQ(h.resps.size(), 1u);
  EXPECT_TRUE(h.resps[0].inline_data);
  ASSERT_EQ(h.owner.payloads[0].size(), 24u);
  EXPECT_EQ(std::memcmp(h.owner.payloads[0].data(), h.memory.data() + 64, 24), 0);
  EXPECT_TRUE(h.owner.chunks.empty());
}

TEST(RmaTargetTest, AtomicsReturnThePreviousValue) {
  Harness h;
  uint64_t word = 5;
  std::memcpy(h.memory.data() + 8, &word, sizeof word);
  h.atomic({.op_id = 1, .key = h.key(), .offset = 8, .op = wire::AtomicOp::kFetchAdd, .operand = 3});
  EXPECT_EQ(h.resps.back().value, 5u);
  h.atomic({.op_id = 2, .key = h.key(), .offset = 8, .op = wire::AtomicOp::kCompareSwap, .operand = 100, .compare = 7});
  EXPECT_EQ(h.resps.back().value, 8u) << "no swap: the current value";
  h.atomic({.op_id = 3, .key = h.key(), .offset = 8, .op = wire::AtomicOp::kCompareSwap, .operand = 100, .compare = 8});
  EXPECT_EQ(h.resps.back().value, 8u);
  std::memcpy(&word, h.memory.data() + 8, sizeof word);
  EXPECT_EQ(word, 100u);
  EXPECT_EQ(h.stats.served_atomics, 3u);
}

TEST(RmaTargetTest, RequestsInServiceAndUnsentRespsCountAgainstTheWindow) {
  Harness h({.window = 3, .notifications = 16});
  h.put(h.chunked_put(1, 0, 40000));                                         // in service
  h.get({.op_id = 2, .key = h.key(), .offset = 0, .length = 40000}, false);  // in service
  h.atomic({.op_id = 3, .key = h.key(), .offset = 8, .operand = 1});         // its RESP is unsent
  EXPECT_TRUE(h.owner.errors.empty());
  EXPECT_FALSE(h.target.admit(4));
  ASSERT_EQ(h.owner.errors.size(), 1u);
  EXPECT_NE(h.owner.errors[0].find("more than 3"), std::string::npos);
  EXPECT_EQ(h.target.put_transfer(1), nullptr) << "the endpoint failed: nothing in service";
}

TEST(RmaTargetTest, ARespTheKernelTookFreesItsPlace) {
  Harness h({.window = 2, .notifications = 16});
  const auto data = bytes(8, 1);
  h.put(h.inline_put(1, 0, data));  // RESP at position 1
  h.put(h.inline_put(2, 0, data));  // RESP at position 2
  h.target.control_sent(1);
  EXPECT_TRUE(h.target.admit(3)) << "one RESP left the queue";
  h.put(h.inline_put(3, 0, data));
  h.target.control_cleared();
  EXPECT_TRUE(h.target.admit(4));
  EXPECT_TRUE(h.owner.errors.empty());
}

TEST(RmaTargetTest, AnIdInServiceCannotBeReused) {
  Harness h;
  h.put(h.chunked_put(1, 0, 40000));
  EXPECT_FALSE(h.target.admit(1));
  ASSERT_EQ(h.owner.errors.size(), 1u);
  EXPECT_NE(h.owner.errors[0].find("reuses the id 1"), std::string::npos);

  Harness answered;
  answered.put(answered.inline_put(1, 0, bytes(8, 0)));
  EXPECT_TRUE(answered.target.admit(1)) << "an answered id may come again";
}

TEST(RmaTargetTest, FailForgetsWhatIsInService) {
  Harness h;
  h.put(h.chunked_put(1, 0, 40000));
  h.get({.op_id = 2, .key = h.key(), .offset = 0, .length = 40000}, false);
  h.target.fail();
  EXPECT_EQ(h.target.put_transfer(1), nullptr);
  h.target.put_received(1);
  h.target.get_sent(2);
  EXPECT_TRUE(h.resps.empty()) << "nothing answers for a failed endpoint";
}

// --- segmented requests (docs/protocol.md "Segments") ---------------------------

// Three pieces out of order, 501 bytes in all.
const std::vector<wire::Segment> kPieces = {
    {.offset = 1000, .length = 300}, {.offset = 100, .length = 200}, {.offset = 5000, .length = 1}};
constexpr uint64_t kPiecesBytes = 501;

wire::PutFrame segmented_put(const Harness& h, uint64_t id, const std::vector<std::byte>& list,
                             Access rights = kAllRemote) {
  return wire::PutFrame{
      .op_id = id, .key = h.key(rights), .offset = 0, .length = kPiecesBytes, .segments = wire::SegmentList(list)};
}

// The memory after the bytes `data` landed in kPieces, in order.
std::vector<std::byte> placed(std::vector<std::byte> memory, const std::vector<std::byte>& data) {
  size_t at = 0;
  for (const wire::Segment& p : kPieces) {
    std::memcpy(memory.data() + p.offset, data.data() + at, p.length);
    at += p.length;
  }
  return memory;
}

TEST(RmaTargetTest, ASegmentedPutPlacesItsBytesPieceByPieceThenReplies) {
  Harness h;
  const std::vector<std::byte> list = wire::encode_segments(kPieces);
  h.put(segmented_put(h, 5, list));
  RxTransfer* t = h.target.put_transfer(5);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->length, kPiecesBytes);
  ASSERT_NE(t->sink, &h.paths.discard_sink());
  const std::vector<std::byte> data = bytes(kPiecesBytes, 40);
  const std::vector<std::byte> want = placed(h.memory, data);
  SocketPair link;
  ASSERT_EQ(::write(link.fd[0], data.data(), data.size()), static_cast<ssize_t>(data.size()));
  StreamIn in(link.fd[1]);
  // As the scheduler reads a chunk: each read stops at a piece's end.
  for (uint64_t done = 0; done < kPiecesBytes;) {
    uint64_t asked = 0;
    const net::IoResult r = t->sink->read(in, done, kPiecesBytes - done, &asked);
    ASSERT_TRUE(r.moved());
    EXPECT_LE(r.bytes, asked);
    done += r.bytes;
  }
  EXPECT_TRUE(h.memory == want) << "the pieces hold the bytes in order; nothing else changed";
  EXPECT_EQ(t->sink->checksum(250, 251), checksum_of(std::span(data).subspan(250, 251)))
      << "a chunk's CRC runs over its pieces";
  h.target.put_received(5);
  ASSERT_EQ(h.resps.size(), 1u);
  EXPECT_EQ(h.resps[0].status, RmaStatus::kOk);
  EXPECT_EQ(h.stats.served_segmented, 1u);
}

TEST(RmaTargetTest, ASegmentedRequestIsCheckedOverEveryPieceBeforeAByteMoves) {
  std::vector<wire::Segment> past_end = kPieces;
  past_end.back().offset = kRegionBytes;  // one byte past the window
  const std::vector<std::byte> good = wire::encode_segments(kPieces), bad = wire::encode_segments(past_end);
  struct Case {
    const char* what;
    RmaStatus verdict;
    bool tamper = false;
    Access rights = kAllRemote;
    const std::vector<std::byte>* list;
  };
  const Case cases[] = {{"a piece past the end", RmaStatus::kOutOfRange, false, kAllRemote, &bad},
                        {"a read-only key", RmaStatus::kAccessDenied, false, Access::kRemoteRead, &good},
                        {"a tampered key", RmaStatus::kInvalidKey, true, kAllRemote, &good}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Harness h;
    const std::vector<std::byte> before = h.memory;
    wire::PutFrame f = segmented_put(h, 5, *c.list, c.rights);
    if (c.tamper) f.key[20] ^= std::byte{1};
    h.put(f);
    RxTransfer* t = h.target.put_transfer(5);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->sink, &h.paths.discard_sink()) << "a refused put's bytes are drained";
    h.target.put_received(5);
    EXPECT_EQ(h.last_status(), c.verdict);
    // The same list read: refused at once, nothing announced.
    if (c.rights == kAllRemote) {
      wire::GetFrame g{.op_id = 6, .key = f.key, .offset = 0, .length = kPiecesBytes, .segments = f.segments};
      h.get(g, /*inline_class=*/false);
      EXPECT_EQ(h.last_status(), c.verdict);
      EXPECT_TRUE(h.owner.chunks.empty());
    }
    EXPECT_TRUE(h.memory == before);
    EXPECT_EQ(h.stats.served_segmented, 0u);
    EXPECT_TRUE(h.owner.errors.empty()) << "a refusal is not a protocol error";
  }
}

TEST(RmaTargetTest, ASegmentedRequestForDeviceMemoryIsRefusedAndMovesNothing) {
  // An initiator of this build never sends one (segments are for keys of host memory),
  // so a peer that does is played here: the refusal must be a clean one.
  Harness h;
  auto dev = testing::TestDeviceDomain::create({.capacity = size_t{1} << 20}).value();
  std::byte* mem = dev->allocate(kRegionBytes).value();
  const std::vector<std::byte> pattern = bytes(kRegionBytes, 9);
  ASSERT_TRUE(dev->write(mem, pattern.data(), pattern.size()).is_ok());
  constexpr Access kReadWrite = Access::kRemoteRead | Access::kRemoteWrite;
  auto r = h.registry.register_memory(mem, kRegionBytes, Access::kLocalWrite | kReadWrite, *dev);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Region region = std::move(r).value();
  const wire::KeyBytes key = region.remote_key(0, kRegionBytes, kReadWrite).value().serialize();
  const std::vector<std::byte> list = wire::encode_segments(kPieces);
  const uint64_t copies = dev->copies();

  h.put({.op_id = 5, .key = key, .offset = 0, .length = kPiecesBytes, .segments = wire::SegmentList(list)});
  RxTransfer* t = h.target.put_transfer(5);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->sink, &h.paths.discard_sink()) << "the refused put's bytes are drained, not placed";
  h.target.put_received(5);
  EXPECT_EQ(h.last_status(), RmaStatus::kDeviceFailed);

  h.get({.op_id = 6, .key = key, .offset = 0, .length = kPiecesBytes, .segments = wire::SegmentList(list)},
        /*inline_class=*/false);
  EXPECT_EQ(h.last_status(), RmaStatus::kDeviceFailed);
  EXPECT_TRUE(h.owner.chunks.empty()) << "a refused get announces nothing";

  std::vector<std::byte> now(kRegionBytes);
  ASSERT_TRUE(dev->read(now.data(), mem, now.size()).is_ok());
  EXPECT_TRUE(now == pattern) << "the device memory is as it was";
  EXPECT_EQ(dev->copies(), copies + 1) << "no copy but the check's own read";
  EXPECT_EQ(h.stats.served_segmented, 0u);
  EXPECT_EQ(h.stats.refused, 2u);
  EXPECT_TRUE(h.owner.errors.empty()) << "a refusal is not a protocol error";
}

TEST(RmaTargetTest, ASegmentedGetSendsItsPiecesInOrder) {
  Harness h;
  const std::vector<std::byte> list = wire::encode_segments(kPieces);
  h.get({.op_id = 8, .key = h.key(), .offset = 0, .length = kPiecesBytes, .segments = wire::SegmentList(list)},
        /*inline_class=*/false);
  ASSERT_EQ(h.owner.chunks.size(), 1u);
  TxTransfer* t = h.owner.chunks[0];
  EXPECT_EQ(t->length, kPiecesBytes);
  std::vector<std::byte> want;
  for (const wire::Segment& p : kPieces)
    want.insert(want.end(), h.memory.begin() + p.offset, h.memory.begin() + p.offset + p.length);
  SocketPair link;
  uint64_t sent = 0;
  while (sent < kPiecesBytes) {
    const net::IoResult r = t->source->write(link.fd[0], sent, kPiecesBytes - sent);
    ASSERT_TRUE(r.moved());
    sent += r.bytes;
  }
  std::vector<std::byte> got(kPiecesBytes);
  ASSERT_EQ(::read(link.fd[1], got.data(), got.size()), static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, want);
  EXPECT_EQ(t->source->checksum(0, kPiecesBytes), checksum_of(want));
  h.target.get_sent(8);
  EXPECT_EQ(h.last_status(), RmaStatus::kOk);
  EXPECT_EQ(h.stats.served_segmented, 1u);

  // Deregistered midway: zeros keep the stream in step, and the reply says revoked.
  h.get({.op_id = 9, .key = h.key(), .offset = 0, .length = kPiecesBytes, .segments = wire::SegmentList(list)}, false);
  TxTransfer* u = h.owner.chunks.at(1);
  h.region.deregister();
  ASSERT_TRUE(u->source->write(link.fd[0], 0, kPiecesBytes).moved());
  ASSERT_EQ(::read(link.fd[1], got.data(), got.size()), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](std::byte b) { return b == std::byte{0}; }));
  h.target.get_sent(9);
  EXPECT_EQ(h.last_status(), RmaStatus::kRevoked);
}

}  // namespace
}  // namespace remora::detail
