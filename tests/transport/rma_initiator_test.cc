// Tests of the RmaInitiator alone: no endpoint, no sockets, no engine. A recording
// owner keeps the request frames and chunk transfers the initiator hands out, and
// fails the initiator on a protocol error as the endpoint does; the tests play the
// peer by feeding RESP frames (and, for chunked gets, the scheduler's progress) back.
// They pin the peer's window (issue order included), flush order and its errors, the
// completion of chunked gets, and the checks of a RESP against its operation.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "transport/rma_initiator.h"

namespace remora::detail {
namespace {

using wire::RmaStatus;

struct RecordingOwner : RmaInitiator::Owner {
  std::vector<wire::Frame> frames;
  std::vector<TxTransfer*> chunks;
  std::vector<std::string> errors;
  RmaInitiator* initiator = nullptr;

  void queue_request(const wire::Frame& frame) override { frames.push_back(frame); }
  void send_chunks(TxTransfer* t) override { chunks.push_back(t); }
  void protocol_error(std::string message) override {
    errors.push_back(message);
    initiator->fail(Status(StatusCode::kProtocol, std::move(message)));  // as the endpoint's failure path does
  }
};

/// The op id a request frame carries.
uint64_t op_id_of(const wire::Frame& frame) {
  return std::visit(
      [](const auto& f) -> uint64_t {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, wire::PutFrame> || std::is_same_v<T, wire::GetFrame> ||
                      std::is_same_v<T, wire::AtomicFrame>) {
          return f.op_id;
        } else {
          ADD_FAILURE() << "not a request frame";
          return 0;
        }
      },
      frame);
}

/// The final status, or kInProgress (no engine: test() only looks).
StatusCode code(const Request& r) { return r.test().code(); }

struct Harness {
  explicit Harness(uint64_t window = 8) : initiator(owner, nullptr, window, "peer", stats) {
    owner.initiator = &initiator;
  }

  // Host memory's ends, as DataPaths::choose makes them for host memory.
  RmaInitiator::Posted put(size_t length = 8, bool inline_class = true, PutOptions options = {}) {
    return initiator.put(PathEnd::host_source(source.data(), length, class_of(inline_class)), key, 0, options);
  }
  RmaInitiator::Posted get(size_t length = 8, bool inline_class = true) {
    return initiator.get(PathEnd::host_sink(dest.data(), length, class_of(inline_class)), key, 0);
  }
  static TransferClass class_of(bool inline_class) {
    return inline_class ? TransferClass::kInline : TransferClass::kChunked;
  }
  RmaInitiator::Posted fetch_add(uint64_t* result = nullptr) {
    return initiator.atomic(result, key, 0, wire::AtomicOp::kFetchAdd, 1, 0);
  }
  /// The peer's RESP to the request in frames[index].
  void resp(size_t index, RmaStatus status = RmaStatus::kOk, uint64_t value = 0) {
    ASSERT_LT(index, owner.frames.size());
    initiator.handle_resp(wire::RespFrame{.op_id = op_id_of(owner.frames[index]), .status = status, .value = value});
  }

  RecordingOwner owner;
  EndpointStats stats;
  RmaInitiator initiator;
  RemoteKey key{.region = RegionId{3}, .length = 1 << 20, .access = Access::kRemoteWrite | Access::kRemoteRead};
  std::vector<std::byte> source = std::vector<std::byte>(1 << 20, std::byte{0x5A});
  std::vector<std::byte> dest = std::vector<std::byte>(1 << 20);
};

TEST(RmaInitiatorTest, IssuesUpToThePeersWindowAndTheRestInPostingOrder) {
  Harness h(/*window=*/2);
  auto a = h.put();
  auto b = h.put();
  auto c = h.get();
  auto d = h.fetch_add();
  EXPECT_TRUE(a.issued);
  EXPECT_TRUE(b.issued);
  EXPECT_FALSE(c.issued);
  EXPECT_FALSE(d.issued);
  ASSERT_EQ(h.owner.frames.size(), 2u);
  EXPECT_EQ(h.initiator.outstanding(), 4u);

  h.resp(0);  // one slot frees: the oldest waiting one goes, only it
  EXPECT_EQ(code(a.request), StatusCode::kOk);
  ASSERT_EQ(h.owner.frames.size(), 3u);
  EXPECT_TRUE(std::holds_alternative<wire::GetFrame>(h.owner.frames[2]));

  h.resp(1, RmaStatus::kAccessDenied);  // a refusal frees its slot too
  EXPECT_EQ(code(b.request), StatusCode::kAccessDenied);
  ASSERT_EQ(h.owner.frames.size(), 4u);
  EXPECT_TRUE(std::holds_alternative<wire::AtomicFrame>(h.owner.frames[3]));
  EXPECT_EQ(h.initiator.outstanding(), 2u);
  EXPECT_TRUE(h.owner.errors.empty());
}

TEST(RmaInitiatorTest, EachRespIssuesTheOldestWaitingRequestOnly) {
  Harness h(/*window=*/1);
  for (int i = 0; i < 4; ++i) h.put();
  for (size_t answered = 0; answered < 4; ++answered) {
    ASSERT_EQ(h.owner.frames.size(), answered + 1);
    EXPECT_EQ(op_id_of(h.owner.frames[answered]), answered + 1) << "issued in posting order";
    h.resp(answered);
  }
  EXPECT_EQ(h.initiator.outstanding(), 0u);
}

TEST(RmaInitiatorTest, FlushWaitsForEveryEarlierPutAndAtomicWhateverTheReplyOrder) {
  Harness h;
  h.put();
  h.put();
  h.fetch_add();
  Request first = h.initiator.flush();
  h.put();  // after the flush: not covered by it
  Request second = h.initiator.flush();

  h.resp(1);
  h.resp(2);
  EXPECT_EQ(code(first), StatusCode::kInProgress) << "the oldest put is still pending";
  h.resp(3);
  EXPECT_EQ(code(first), StatusCode::kInProgress);
  EXPECT_EQ(code(second), StatusCode::kInProgress);
  h.resp(0);
  EXPECT_EQ(code(first), StatusCode::kOk);
  EXPECT_EQ(code(second), StatusCode::kOk);
}

TEST(RmaInitiatorTest, AFlushCompletesWhenItsOwnOperationsAreDoneNotLaterOnes) {
  Harness h;
  h.put();
  Request first = h.initiator.flush();
  h.put();
  Request second = h.initiator.flush();
  h.resp(0);
  EXPECT_EQ(code(first), StatusCode::kOk);
  EXPECT_EQ(code(second), StatusCode::kInProgress);
  h.resp(1);
  EXPECT_EQ(code(second), StatusCode::kOk);
}

TEST(RmaInitiatorTest, FlushReportsTheFirstErrorItCoversAndOnlyOnce) {
  Harness h;
  h.put();
  h.put();
  Request first = h.initiator.flush();
  h.resp(1, RmaStatus::kOutOfRange);
  h.resp(0, RmaStatus::kAccessDenied);
  EXPECT_EQ(code(first), StatusCode::kOutOfRange) << "the first failure to complete";
  EXPECT_EQ(code(h.initiator.flush()), StatusCode::kOk) << "a later flush does not report it again";
}

TEST(RmaInitiatorTest, AFailureNoFlushCoveredGoesToTheNextFlush) {
  Harness h;
  h.fetch_add();
  h.resp(0, RmaStatus::kInvalidKey);
  Request next = h.initiator.flush();  // nothing pending: done at once, with the failure
  EXPECT_EQ(code(next), StatusCode::kInvalidKey);
  EXPECT_EQ(code(h.initiator.flush()), StatusCode::kOk);
}

TEST(RmaInitiatorTest, GetsAreNotCoveredByAFlush) {
  Harness h;
  auto g = h.get();
  EXPECT_EQ(code(h.initiator.flush()), StatusCode::kOk);
  EXPECT_EQ(code(g.request), StatusCode::kInProgress);
}

TEST(RmaInitiatorTest, ChunkedPutHandsItsDataToTheStreamsAndCompletesAtItsResp) {
  Harness h;
  auto p = h.put(100000, /*inline_class=*/false, {.notify = 9});
  EXPECT_TRUE(p.pushes_data);
  ASSERT_EQ(h.owner.frames.size(), 1u);
  const auto& frame = std::get<wire::PutFrame>(h.owner.frames[0]);
  EXPECT_FALSE(frame.inline_data);
  EXPECT_TRUE(frame.payload.empty());
  EXPECT_EQ(frame.length, 100000u);
  EXPECT_TRUE(frame.has_notify);
  EXPECT_EQ(frame.notify, 9u);
  ASSERT_EQ(h.owner.chunks.size(), 1u);
  TxTransfer* t = h.owner.chunks[0];
  EXPECT_EQ(t->kind, wire::ChunkKind::kPut);
  EXPECT_EQ(t->chunk_id, frame.op_id);
  EXPECT_EQ(t->length, 100000u);

  t->written = t->length;  // the scheduler wrote it all
  h.resp(0);
  EXPECT_EQ(code(p.request), StatusCode::kOk);
  EXPECT_EQ(p.request.bytes(), 100000u);
  EXPECT_EQ(h.stats.rma_bytes_put, 100000u);
  EXPECT_EQ(h.stats.puts, 1u);
}

TEST(RmaInitiatorTest, InlinePutCarriesItsBytesAndNoChunks) {
  Harness h;
  auto p = h.put(64);
  EXPECT_FALSE(p.pushes_data);
  const auto& frame = std::get<wire::PutFrame>(h.owner.frames.at(0));
  EXPECT_TRUE(frame.inline_data);
  EXPECT_EQ(frame.payload.size(), 64u);
  EXPECT_EQ(frame.payload.data(), h.source.data());
  EXPECT_TRUE(h.owner.chunks.empty());
}

TEST(RmaInitiatorTest, InlineGetCopiesTheReplyIntoItsBuffer) {
  Harness h;
  auto g = h.get(16);
  std::array<std::byte, 16> reply;
  for (size_t i = 0; i < reply.size(); ++i) reply[i] = static_cast<std::byte>(i + 1);
  h.initiator.handle_resp(wire::RespFrame{
      .op_id = op_id_of(h.owner.frames.at(0)), .status = RmaStatus::kOk, .inline_data = true, .payload = reply});
  EXPECT_EQ(code(g.request), StatusCode::kOk);
  EXPECT_EQ(std::memcmp(h.dest.data(), reply.data(), reply.size()), 0);
  EXPECT_EQ(h.stats.rma_bytes_got, 16u);
}

TEST(RmaInitiatorTest, ChunkedGetCompletesWhenBothItsRespAndItsLastChunkAreIn) {
  for (bool resp_first : {true, false}) {
    SCOPED_TRACE(resp_first ? "RESP first" : "chunks first");
    Harness h;
    auto g = h.get(100000, /*inline_class=*/false);
    const uint64_t id = op_id_of(h.owner.frames.at(0));
    RxTransfer* t = h.initiator.get_transfer(id);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->length, 100000u);
    t->announced = t->length;
    if (resp_first) {
      h.resp(0);
      EXPECT_EQ(code(g.request), StatusCode::kInProgress) << "bytes still on the way";
      EXPECT_EQ(h.initiator.get_transfer(id), nullptr) << "no chunk may be announced after the RESP";
      t->placed = t->length;
      h.initiator.get_received(id);
    } else {
      t->placed = t->length;
      h.initiator.get_received(id);
      EXPECT_EQ(code(g.request), StatusCode::kInProgress) << "no RESP yet";
      h.resp(0);
    }
    EXPECT_EQ(code(g.request), StatusCode::kOk);
    EXPECT_EQ(h.initiator.outstanding(), 0u);
  }
}

TEST(RmaInitiatorTest, OnlyIssuedChunkedGetsTakeChunks) {
  Harness h(/*window=*/1);
  h.get(8);                               // inline: its data comes in the RESP
  h.get(100000, /*inline_class=*/false);  // waits for the window
  EXPECT_EQ(h.initiator.get_transfer(op_id_of(h.owner.frames.at(0))), nullptr);
  EXPECT_EQ(h.initiator.get_transfer(2), nullptr) << "not issued yet";
  EXPECT_EQ(h.initiator.get_transfer(77), nullptr);
  h.initiator.handle_resp(wire::RespFrame{
      .op_id = 1, .status = RmaStatus::kOk, .inline_data = true, .payload = std::span(h.source.data(), 8)});
  EXPECT_NE(h.initiator.get_transfer(2), nullptr);
}

TEST(RmaInitiatorTest, AtomicsReturnThePreviousValueAndCarryTheirOperands) {
  Harness h;
  uint64_t previous = 0;
  auto a = h.fetch_add(&previous);
  uint64_t old = 0;
  auto c = h.initiator.atomic(&old, h.key, 16, wire::AtomicOp::kCompareSwap, /*operand=*/7, /*compare=*/5);
  const auto& add = std::get<wire::AtomicFrame>(h.owner.frames.at(0));
  EXPECT_EQ(add.operand, 1u);
  EXPECT_EQ(add.compare, 0u);
  const auto& cas = std::get<wire::AtomicFrame>(h.owner.frames.at(1));
  EXPECT_EQ(cas.op, wire::AtomicOp::kCompareSwap);
  EXPECT_EQ(cas.operand, 7u);
  EXPECT_EQ(cas.compare, 5u);
  EXPECT_EQ(cas.offset, 16u);
  h.resp(0, RmaStatus::kOk, 41);
  h.resp(1, RmaStatus::kOk, 5);
  EXPECT_EQ(code(a.request), StatusCode::kOk);
  EXPECT_EQ(previous, 41u);
  EXPECT_EQ(old, 5u);
}

TEST(RmaInitiatorTest, RefusalsBecomeTheirStatusCodes) {
  const std::pair<RmaStatus, StatusCode> cases[] = {
      {RmaStatus::kInvalidKey, StatusCode::kInvalidKey},     {RmaStatus::kOutOfRange, StatusCode::kOutOfRange},
      {RmaStatus::kAccessDenied, StatusCode::kAccessDenied}, {RmaStatus::kMisaligned, StatusCode::kInvalidArgument},
      {RmaStatus::kNoResource, StatusCode::kNoResource},     {RmaStatus::kRevoked, StatusCode::kInvalidKey},
  };
  for (const auto& [verdict, expected] : cases) {
    Harness h;
    uint64_t result = 99;
    auto a = h.fetch_add(&result);
    h.resp(0, verdict);
    EXPECT_EQ(code(a.request), expected) << static_cast<int>(verdict);
    EXPECT_EQ(result, 99u) << "a refused atomic leaves the result alone";
    EXPECT_NE(a.request.test().message().find("refused by peer peer"), std::string::npos);
  }
}

TEST(RmaInitiatorTest, RespsThatDoNotFitTheirOperationAreProtocolErrors) {
  struct Case {
    const char* what;
    void (*post)(Harness&);
    wire::RespFrame resp;  // op_id 1 is the posted operation
  };
  std::array<std::byte, 4> four{};
  const Case cases[] = {
      {"unknown id", [](Harness& h) { h.put(); }, {.op_id = 2}},
      {"a value for a put", [](Harness& h) { h.put(); }, {.op_id = 1, .value = 1}},
      {"'misaligned' for a get", [](Harness& h) { h.get(); }, {.op_id = 1, .status = RmaStatus::kMisaligned}},
      {"inline data for a put", [](Harness& h) { h.put(); }, {.op_id = 1, .inline_data = true, .payload = four}},
      {"inline data for a chunked get",
       [](Harness& h) { h.get(100000, false); },
       {.op_id = 1, .inline_data = true, .payload = four}},
      {"an inline get's reply of the wrong length",
       [](Harness& h) { h.get(8); },
       {.op_id = 1, .inline_data = true, .payload = four}},
      {"an inline get's ok without its data", [](Harness& h) { h.get(8); }, {.op_id = 1}},
      {"a chunked put's RESP before all of its data was sent", [](Harness& h) { h.put(100000, false); }, {.op_id = 1}},
      {"a chunked get's ok before all of its data was announced",
       [](Harness& h) { h.get(100000, false); },
       {.op_id = 1}},
      {"an operation still waiting for the window",
       [](Harness& h) {
         h.put();
         h.put();
       },
       {.op_id = 2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Harness h(/*window=*/1);
    c.post(h);
    h.initiator.handle_resp(c.resp);
    EXPECT_EQ(h.owner.errors.size(), 1u);
    EXPECT_EQ(h.initiator.outstanding(), 0u) << "the endpoint failed, and every operation with it";
  }
  Harness h;
  h.put();
  h.resp(0);
  h.resp(0);  // a second RESP for a completed operation
  EXPECT_EQ(h.owner.errors.size(), 1u);
}

TEST(RmaInitiatorTest, FailCompletesEveryOperationAndFlushWithTheReason) {
  Harness h(/*window=*/1);
  auto issued = h.put();
  auto waiting = h.put();
  Request flush = h.initiator.flush();
  h.initiator.fail(Status(StatusCode::kPeerFailed, "gone"));
  EXPECT_EQ(code(issued.request), StatusCode::kPeerFailed);
  EXPECT_EQ(code(waiting.request), StatusCode::kPeerFailed);
  EXPECT_EQ(code(flush), StatusCode::kPeerFailed);
  EXPECT_EQ(h.initiator.outstanding(), 0u);
  EXPECT_EQ(code(h.initiator.flush()), StatusCode::kOk) << "nothing pending after the failure";
  EXPECT_EQ(h.owner.frames.size(), 1u) << "the waiting put was never issued";
}

// Placed puts (a notified put through a mapping, reported in a PLACED frame): complete
// at the peer's ACK, oldest first, and in the flush order of every other put.
TEST(RmaInitiatorTest, PlacedPutsCompleteAtTheAckThatCountsThemAndFlushCoversThem) {
  Harness h;
  h.put();  // the usual way, before them
  Request a = h.initiator.placed(8);
  Request b = h.initiator.placed(16);
  Request flush = h.initiator.flush();
  EXPECT_EQ(h.initiator.placed_pending(), 2u);
  ASSERT_TRUE(h.initiator.placed_acked(1).is_ok());
  EXPECT_EQ(code(a), StatusCode::kOk);
  EXPECT_EQ(a.bytes(), 8u);
  EXPECT_EQ(code(b), StatusCode::kInProgress);
  ASSERT_TRUE(h.initiator.placed_acked(2).is_ok());
  EXPECT_EQ(code(b), StatusCode::kOk);
  EXPECT_EQ(code(flush), StatusCode::kInProgress) << "the usual put before them is still pending";
  h.resp(0);
  EXPECT_EQ(code(flush), StatusCode::kOk);
  EXPECT_EQ(h.stats.rma_bytes_put, 8u + 16u + 8u);
}

TEST(RmaInitiatorTest, AnAckThatGoesBackOrPastWhatWasSentIsAProtocolError) {
  Harness h;
  EXPECT_EQ(h.initiator.placed_acked(1).code(), StatusCode::kProtocol) << "nothing was sent";
  Request a = h.initiator.placed(8);
  Request b = h.initiator.placed(8);
  EXPECT_EQ(h.initiator.placed_acked(3).code(), StatusCode::kProtocol) << "past what was sent";
  ASSERT_TRUE(h.initiator.placed_acked(1).is_ok());
  EXPECT_EQ(h.initiator.placed_acked(1).code(), StatusCode::kProtocol) << "the same count again";
  EXPECT_EQ(code(b), StatusCode::kInProgress);
  h.initiator.fail(Status(StatusCode::kPeerFailed, "gone"));
  EXPECT_EQ(code(a), StatusCode::kOk);
  EXPECT_EQ(code(b), StatusCode::kPeerFailed) << "a failure completes the placed puts still waiting";
  EXPECT_EQ(h.initiator.placed_pending(), 0u);
}

}  // namespace
}  // namespace remora::detail
