// Scripted two-sided edge cases against remora_test_peer over loopback: truncation,
// 0-byte messages, receives posted after arrival, out-of-order completion across tags,
// hundreds of outstanding operations, and large messages both ways at once. Each
// scenario runs in both directions (this process runs the sender half then the
// receiver half; the peer the reverse).
#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/exchange.h"
#include "support/scripts.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

using Half = std::string (*)(Endpoint&, uint64_t);

// Runs `scenario` with the peer listening; this side does `first` then `second`
// (seeds: the peer's receiver half checks `seed`, its sender half sends `seed + 100`).
void run_script(const char* scenario, Half first, Half second, uint32_t streams = 2) {
  auto ctx = make_context(streams);
  ASSERT_TRUE(ctx);
  const uint64_t seed = 77;
  PeerSession s = start_listening_peer(*ctx, {std::string("--scenario=") + scenario, "--seed=" + std::to_string(seed),
                                              "--close=follow"});
  ASSERT_TRUE(s.ep);
  const std::string e1 = first(*s.ep, seed);
  EXPECT_EQ(e1, "");
  if (e1.empty()) {
    EXPECT_EQ(second(*s.ep, seed + 100), "");
    EXPECT_FALSE(s.ep->failed()) << describe(s.ep->failure());
    EXPECT_EQ(close_handshake(*s.ep, /*initiator=*/true, std::chrono::seconds(30)), "");
  } else {
    s.ep->close();
  }
  s.ep.reset();
  expect_peer_success(*s.peer);
}

TEST(EdgeCases, TruncationFailsBothSidesAndEndpointKeepsWorking) {
  run_script("truncation", truncation_sender, truncation_receiver);
}

TEST(EdgeCases, ZeroByteMessages) { run_script("zero", zero_sender, zero_receiver); }

TEST(EdgeCases, ReceivesPostedAfterArrival) { run_script("unexpected", unexpected_sender, unexpected_receiver); }

TEST(EdgeCases, OutOfOrderCompletionAcrossTags) {
  run_script("out-of-order", out_of_order_sender, out_of_order_receiver);
}

TEST(EdgeCases, FiveHundredOutstandingEachWay) {
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  PeerSession s = start_listening_peer(*ctx, {"--scenario=outstanding", "--seed=5", "--side=1", "--count=500",
                                              "--close=follow"});
  ASSERT_TRUE(s.ep);
  EXPECT_EQ(many_outstanding(*s.ep, 5, /*side=*/0, 500), "");
  EXPECT_EQ(close_handshake(*s.ep, /*initiator=*/true, std::chrono::seconds(30)), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
}

TEST(EdgeCases, LargeMessagesBothDirectionsAtOnce) {
  // 16 MiB messages each way, all in flight together.
  const size_t count = scaled<size_t>(12, 4);
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  PeerSession s = start_listening_peer(
      *ctx, {"--scenario=exchange", "--side=1", "--seed=16", "--count=" + std::to_string(count), "--fixed-size=16777216",
             "--tags=2", "--send-window=6", "--recv-window=6", "--close=follow"});
  ASSERT_TRUE(s.ep);
  PlanOptions po{.seed = 16, .direction = 0, .count = count, .max_size = 0, .fixed_size = 16 << 20, .tags = 2};
  const Plan out = make_plan(po);
  po.direction = 1;
  const Plan in = make_plan(po);
  const ExchangeReport rep = run_exchange(*s.ep, out, in, {.send_window = 6, .recv_window = 6});
  EXPECT_EQ(rep.error, "");
  EXPECT_EQ(rep.received, count);
  std::printf("[          ] %zu x 16 MiB each way in %.2f s\n", count, rep.seconds);
  if (rep.error.empty()) {
    EXPECT_EQ(close_handshake(*s.ep, /*initiator=*/true, std::chrono::seconds(30)), "");
  }
  s.ep.reset();
  expect_peer_success(*s.peer);
}

}  // namespace
}  // namespace remora::itest
