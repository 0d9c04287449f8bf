// Random two-way exchange over loopback between this process and remora_test_peer:
// thousands of messages each way (0 B .. a few MiB, skewed small, boundary sizes
// around the eager limit and the chunk size), both sides sending and receiving at
// once with many receives posted, tags from a small set so same-tag order matters.
// Every message is checked byte by byte against the sender's regenerated stream.
#include "support/exchange.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/test_data.h"

namespace remora::itest {
namespace {

struct ExchangeCase {
  uint32_t streams;
  bool test_listens;  // else the peer listens and this process connects
  const char* name;
  size_t count = 3000;  // messages each way (Release; ASan runs a fifth)
  uint32_t tags = 4;
  // Optional local overrides and the peer's environment, to run the two sides with
  // different chunk sizes, eager limits and credits.
  std::optional<size_t> chunk_bytes = {}, eager_limit = {}, eager_credit = {};
  std::vector<std::string> peer_env = {};
  // Same-host pulls (docs/protocol.md): on unless this side or the peer (peer_env
  // REMORA_SAME_HOST=off) turns them off; then every byte goes over the data streams.
  bool pulls_here = true;
};

void PrintTo(const ExchangeCase& c, std::ostream* os) { *os << c.name; }

class LoopbackExchange : public ::testing::TestWithParam<ExchangeCase> {};

TEST_P(LoopbackExchange, RandomMessagesBothWays) {
  const ExchangeCase c = GetParam();
  const uint64_t seed = 1000 + c.streams;
  const size_t count = scaled<size_t>(c.count, c.count / 5);
  const size_t max_size = scaled<size_t>(4 << 20, 1 << 20);
  // Side 0 = this process, side 1 = the peer; the peer initiates the close.
  ContextOptions options;
  options.streams_per_endpoint = c.streams;
  options.chunk_bytes = c.chunk_bytes;
  options.eager_limit = c.eager_limit;
  options.eager_credit = c.eager_credit;
  options.same_host_pulls = c.pulls_here;
  const bool pulls =
      c.pulls_here && std::find(c.peer_env.begin(), c.peer_env.end(), "REMORA_SAME_HOST=off") == c.peer_env.end();
  auto cr = Context::create(options);
  ASSERT_TRUE(cr) << describe(cr.status());
  std::unique_ptr<Context> ctx = std::move(cr).value();
  std::vector<std::string> env = c.peer_env;
  env.push_back("REMORA_STREAMS=" + std::to_string(c.streams));
  std::vector<std::string> args = {"--scenario=exchange",
                                   "--side=1",
                                   "--seed=" + std::to_string(seed),
                                   "--count=" + std::to_string(count),
                                   "--max-size=" + std::to_string(max_size),
                                   "--tags=" + std::to_string(c.tags),
                                   "--expect-streams=" + std::to_string(c.streams),
                                   std::string("--expect-same-host=") + (pulls ? "yes" : "no"),
                                   "--close=initiate"};
  std::unique_ptr<Process> peer;
  std::shared_ptr<Endpoint> ep;
  std::unique_ptr<Listener> listener;
  if (c.test_listens) {
    auto l = ctx->listen("127.0.0.1:0");
    ASSERT_TRUE(l) << describe(l.status());
    listener = std::move(l).value();
    args.push_back("--role=connect");
    args.push_back("--address=127.0.0.1:" + std::to_string(listener->port()));
    peer = spawn_peer(args, env);
    auto a = listener->accept(std::chrono::seconds(30));
    ASSERT_TRUE(a) << "accept: " << describe(a.status());
    ep = std::move(a).value();
  } else {
    PeerSession s = start_listening_peer(*ctx, args, env);
    peer = std::move(s.peer);
    ep = std::move(s.ep);
    ASSERT_TRUE(ep);
  }
  EXPECT_EQ(ep->data_streams(), c.streams);

  PlanOptions po{.seed = seed, .direction = 0, .count = count, .max_size = max_size, .fixed_size = 0, .tags = c.tags};
  const Plan out = make_plan(po);
  po.direction = 1;
  const Plan in = make_plan(po);
  const ExchangeReport rep = run_exchange(*ep, out, in, {});
  EXPECT_EQ(rep.error, "");
  EXPECT_EQ(rep.sent, count);
  EXPECT_EQ(rep.received, count);
  std::printf("[          ] K=%u: sent %zu msgs / %.1f MiB, received %zu msgs / %.1f MiB in %.2f s\n", c.streams,
              static_cast<size_t>(rep.sent), static_cast<double>(rep.bytes_sent) / (1 << 20),
              static_cast<size_t>(rep.received), static_cast<double>(rep.bytes_received) / (1 << 20), rep.seconds);

  if (rep.error.empty()) {
    const EndpointStats st = ep->stats();
    EXPECT_EQ(st.messages_sent, count);
    EXPECT_EQ(st.messages_received, count);
    EXPECT_EQ(st.bytes_sent, out.total_bytes);
    EXPECT_EQ(st.bytes_received, in.total_bytes);
    EXPECT_EQ(st.eager_sent + st.rendezvous_sent, st.messages_sent);
    EXPECT_GT(st.rendezvous_sent, 0u);
    EXPECT_GT(st.eager_sent, 0u);
    ASSERT_EQ(st.chunks_per_stream.size(), c.streams);
    // With pulls every chunk (host memory) is read by the peer itself, on no stream.
    const uint64_t on_streams = std::accumulate(st.chunks_per_stream.begin(), st.chunks_per_stream.end(), uint64_t{0});
    if (pulls) {
      EXPECT_EQ(st.same_host_reason, "");
      EXPECT_EQ(st.chunks_pulled, st.chunks_sent);
      EXPECT_EQ(on_streams, 0u);
      EXPECT_GT(st.bytes_pulled, 0u);
      // Every control frame (eager payloads, RTS/CTS, PULLs) went through shared memory,
      // unless the endpoint is sealed: then it stayed on TCP.
      if (sealed_by_environment()) {
        EXPECT_FALSE(st.shm_tx || st.shm_rx);
        EXPECT_EQ(st.shm_reason, "REMORA_ENCRYPT: the control stream stays sealed on TCP");
      } else {
        EXPECT_TRUE(st.shm_tx && st.shm_rx) << st.shm_reason;
        EXPECT_EQ(st.shm_reason, "");
      }
    } else {
      EXPECT_FALSE(st.shm_tx || st.shm_rx);
      EXPECT_NE(st.shm_reason, "");
      EXPECT_NE(st.same_host_reason, "");
      EXPECT_EQ(st.chunks_pulled, 0u);
      EXPECT_EQ(st.bytes_pulled, 0u);
      EXPECT_EQ(on_streams, st.chunks_sent);
    }
    std::printf("[          ] same host: %s\n", st.same_host_reason.empty() ? "pulls" : st.same_host_reason.c_str());
    std::string dist;
    for (uint64_t n : st.chunks_per_stream) dist += " " + std::to_string(n);
    std::printf("[          ] eager %llu, rendezvous %llu, chunks per stream:%s\n",
                static_cast<unsigned long long>(st.eager_sent), static_cast<unsigned long long>(st.rendezvous_sent),
                dist.c_str());
    EXPECT_EQ(close_handshake(*ep, /*initiator=*/false, std::chrono::seconds(30)), "");
  }
  ep.reset();
  expect_peer_success(*peer);
}

INSTANTIATE_TEST_SUITE_P(
    Streams, LoopbackExchange,
    ::testing::Values(
        ExchangeCase{1, false, "K1_TestConnects"},
        // Pulls off here: everything on the data streams.
        ExchangeCase{2, true, "K2_TestListensTcp", 3000, 4, {}, {}, {}, {}, false},
        ExchangeCase{4, false, "K4_TestConnects"},
        // Sides configured differently: 64 KiB vs 1 MiB chunks,
        // eager limit 1 KiB vs 64 KiB, tight credit here.
        ExchangeCase{3,
                     true,
                     "K3_MismatchedEagerAndChunks",
                     3000,
                     8,
                     64 * 1024,
                     1024,
                     4096,
                     {"REMORA_CHUNK_SIZE=1048576", "REMORA_EAGER_LIMIT=65536", "REMORA_EAGER_CREDIT=131072"}},
        // Many streams, the smallest chunks: ~100k chunks each way,
        // on the streams (the peer turns pulls off) and as pulls.
        ExchangeCase{
            8, false, "K8_TinyChunksTcp", 1500, 4, 4096, {}, {}, {"REMORA_CHUNK_SIZE=4096", "REMORA_SAME_HOST=off"}},
        ExchangeCase{8, true, "K8_TinyChunksPulled", 1500, 4, 4096, {}, {}, {"REMORA_CHUNK_SIZE=4096"}}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace remora::itest
