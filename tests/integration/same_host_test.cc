// Same-host pulls between two real processes (docs/protocol.md, "Same-host pulls").
// The loopback exchange (exchange_test.cc) shows them used and turned off; here a peer
// the kernel's namespaces make another process's pid: remora_test_peer run as pid 1 of
// a pid namespace of its own (unshare --pid --fork), on this host's loopback. Neither
// side can find the other by pid, so each refuses the other's probe and every byte
// goes over TCP: the random exchange both ways still checks every message byte for
// byte, and both sides say why they did not pull.
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/exchange.h"

namespace remora::itest {
namespace {

TEST(SameHost, APeerInAnotherPidNamespaceIsReadOverTcp) {
  std::unique_ptr<Context> ctx = make_context(2);
  ASSERT_TRUE(ctx);
  const uint64_t seed = 77;
  const size_t count = scaled<size_t>(300, 100);
  const std::vector<std::string> argv = {"unshare",
                                         "--pid",
                                         "--fork",
                                         "--kill-child",
                                         REMORA_TEST_PEER_PATH,
                                         "--role=listen",
                                         "--address=127.0.0.1:0",
                                         "--scenario=exchange",
                                         "--side=1",
                                         "--seed=" + std::to_string(seed),
                                         "--count=" + std::to_string(count),
                                         "--max-size=2097152",
                                         "--expect-same-host=no",
                                         "--close=initiate",
                                         "--max-seconds=120"};
  // Not spawn_peer: its --parent-pid check cannot see this process from the namespace
  // (getppid() is 0 there); --kill-child ends the peer with unshare, which dies with us.
  auto peer = std::make_unique<Process>(Process::Options{.argv = argv, .env = {}, .capture_stderr = false});
  ASSERT_TRUE(peer->ok()) << peer->error();
  const uint16_t port = read_port(*peer);
  ASSERT_NE(port, 0);
  std::shared_ptr<Endpoint> ep = connect_to(*ctx, port);
  ASSERT_TRUE(ep);

  PlanOptions po{.seed = seed, .direction = 0, .count = count, .max_size = 2097152, .fixed_size = 0, .tags = 4};
  const Plan out = make_plan(po);
  po.direction = 1;
  const Plan in = make_plan(po);
  const ExchangeReport rep = run_exchange(*ep, out, in, {});
  EXPECT_EQ(rep.error, "");
  EXPECT_EQ(rep.received, count);
  const EndpointStats st = ep->stats();
  EXPECT_EQ(st.chunks_pulled, 0u);
  EXPECT_EQ(st.bytes_pulled, 0u);
  EXPECT_GT(st.chunks_sent, 0u);
  // Its pid names another process here, or none: the probe word is not the peer's.
  EXPECT_TRUE(st.same_host_reason.find("probe") != std::string::npos) << st.same_host_reason;
  EXPECT_EQ(close_handshake(*ep, /*initiator=*/false, std::chrono::seconds(30)), "");
  ep.reset();
  expect_peer_success(*peer);
}

// The shared-memory channel (docs/protocol.md, "Shared-memory channel") against a
// hostile peer of this host: once the control stream runs in shared memory, the peer
// writes a head far beyond the capacity into this side's ring. This side must fail the
// endpoint with a protocol error naming the ring (never read outside it, never hang),
// and the peer sees its endpoint fail in turn.
TEST(SameHost, APeerThatScribblesTheRingFailsTheEndpointWithAProtocolError) {
  std::unique_ptr<Context> ctx = make_context(1);
  ASSERT_TRUE(ctx);
  PeerSession s = start_listening_peer(*ctx, {"--scenario=shm-scribble", "--close=none"});
  ASSERT_TRUE(s.ep);
  uint64_t hello = 0;
  ASSERT_TRUE(s.ep->recv(std::as_writable_bytes(std::span(&hello, 1)), static_cast<Tag>(1))
                  .wait(std::chrono::seconds(30))
                  .is_ok());
  EXPECT_EQ(hello, 42u);
  const EndpointStats st = s.ep->stats();
  ASSERT_TRUE(st.shm_tx && st.shm_rx) << st.shm_reason;
  ASSERT_TRUE(
      s.ep->send(std::as_bytes(std::span(&hello, 1)), static_cast<Tag>(2)).wait(std::chrono::seconds(30)).is_ok());
  const auto line = s.peer->read_line(std::chrono::seconds(30));
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, "SCRIBBLED");
  uint64_t sink = 0;
  const Status r =
      s.ep->recv(std::as_writable_bytes(std::span(&sink, 1)), static_cast<Tag>(3)).wait(std::chrono::seconds(30));
  EXPECT_EQ(r.code(), StatusCode::kProtocol) << describe(r);
  EXPECT_NE(r.message().find("shared-memory ring corrupt"), std::string::npos) << describe(r);
  EXPECT_TRUE(s.ep->failed());
  EXPECT_EQ(s.ep->failure().code(), StatusCode::kProtocol) << describe(s.ep->failure());
  s.ep.reset();
  expect_peer_success(*s.peer);
}

// The channel's rings cost no wake-up while a thread polls them; the progress thread
// arms them before it sleeps. A waiting thread's poll may take the wake-up a peer's
// write sent to the sleeping progress thread; if the ring were left unarmed, the
// peer's next write would wake nobody once the waiter blocks, and both sides would
// wait for the heartbeat tick (here, with a 10-minute peer timeout, 150 s). Windows of
// 64 KiB messages each way, waiters that block after 20 us of polling: every message
// arrives byte for byte well within the exchange's bound of 120 s (about a second when
// healthy).
TEST(SameHost, TheChannelWakesASleepingSideAfterAWaiterTookItsWakeUp) {
  ContextOptions options;
  options.spin_us = 20;
  options.peer_timeout_ms = 600'000;
  auto created = Context::create(options);
  ASSERT_TRUE(created) << describe(created.status());
  std::unique_ptr<Context> ctx = std::move(created).value();
  const uint64_t seed = 91;
  const size_t count = scaled<size_t>(20'000, 2'000);
  PeerSession s = start_listening_peer(
      *ctx,
      {"--scenario=exchange", "--side=1", "--seed=" + std::to_string(seed), "--count=" + std::to_string(count),
       "--fixed-size=65536", "--send-window=16", "--recv-window=16", "--exchange-timeout-ms=120000",
       "--expect-same-host=yes", "--close=initiate", "--max-seconds=300"},
      {"REMORA_SPIN_US=20", "REMORA_PEER_TIMEOUT_MS=600000"});
  ASSERT_TRUE(s.ep);
  PlanOptions po{.seed = seed, .direction = 0, .count = count, .max_size = 65536, .fixed_size = 65536, .tags = 4};
  const Plan out = make_plan(po);
  po.direction = 1;
  const Plan in = make_plan(po);
  const ExchangeReport rep =
      run_exchange(*s.ep, out, in, {.send_window = 16, .recv_window = 16, .timeout = std::chrono::seconds(120)});
  EXPECT_EQ(rep.error, "");
  EXPECT_EQ(rep.received, count);
  const EndpointStats st = s.ep->stats();
  EXPECT_TRUE(st.shm_tx && st.shm_rx) << st.shm_reason;
  EXPECT_EQ(close_handshake(*s.ep, /*initiator=*/false, std::chrono::seconds(30)), "");
  s.ep.reset();
  expect_peer_success(*s.peer);
}

}  // namespace
}  // namespace remora::itest
