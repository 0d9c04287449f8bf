// One-sided RMA between real processes over real sockets: this process and one or
// more remora_rma_peer processes (support/rma_scenarios.h has both halves of each
// scenario and what they check).
//   - random puts and gets of random sizes and offsets, many in flight, checked
//     against a model of the target's memory (read back and hashed by the target),
//     with both sides configured alike and differently;
//   - three initiator processes running fetch_add and compare_swap loops on the same
//     words of this process: the totals and the old values add up exactly;
//   - every notification arrives exactly once, after its data;
//   - flush as a fence: a message sent after it finds every byte in place;
//   - a target killed with operations outstanding fails them all, bounded;
//   - the random exchange between two namespaces over a veth pair.
#include <signal.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/exchange.h"
#include "support/netns.h"
#include "support/rma_scenarios.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Process> spawn_rma_peer(std::vector<std::string> args, std::vector<std::string> env = {},
                                        std::vector<std::string> prefix = {}) {
  std::vector<std::string> argv = std::move(prefix);
  argv.push_back(REMORA_TEST_RMA_PEER_PATH);
  for (auto& a : args) argv.push_back(std::move(a));
  argv.push_back("--parent-pid=" + std::to_string(getpid()));
  auto p = std::make_unique<Process>(Process::Options{.argv = argv, .env = std::move(env), .capture_stderr = false});
  EXPECT_TRUE(p->ok()) << p->error();
  return p;
}

/// A listening peer running `args`, and our endpoint to it (null on failure).
PeerSession start_rma_peer(Context& ctx, std::vector<std::string> args, std::vector<std::string> env = {}) {
  PeerSession s;
  args.push_back("--role=listen");
  args.push_back("--address=127.0.0.1:0");
  s.peer = spawn_rma_peer(std::move(args), std::move(env));
  if (!s.peer->ok()) return s;
  const uint16_t port = read_port(*s.peer);
  if (port == 0) return s;
  s.ep = connect_to(ctx, port);
  return s;
}

std::unique_ptr<Context> context_with(const ContextOptions& options) {
  auto r = Context::create(options);
  if (!r) {
    ADD_FAILURE() << "Context::create: " << describe(r.status());
    return nullptr;
  }
  return std::move(r).value();
}

// --- (a) random puts and gets --------------------------------------------------------

struct RandomCase {
  const char* name;
  ContextOptions local;
  std::vector<std::string> peer_env;
};

void PrintTo(const RandomCase& c, std::ostream* os) { *os << c.name; }

class RmaRandom : public ::testing::TestWithParam<RandomCase> {};

TEST_P(RmaRandom, PutsAndGetsMatchAModelOfTheTarget) {
  const RandomCase& c = GetParam();
  auto ctx = context_with(c.local);
  ASSERT_TRUE(ctx);
  RandomRmaOptions o;
  o.seed = 4242;
  o.region_size = scaled<size_t>(16 << 20, 4 << 20);
  o.count = scaled<size_t>(1500, 300);
  o.max_size = scaled<size_t>(4 << 20, 1 << 20);
  PeerSession s = start_rma_peer(*ctx,
                                 {"--scenario=random", "--half=target", "--seed=" + std::to_string(o.seed),
                                  "--region-size=" + std::to_string(o.region_size)},
                                 c.peer_env);
  ASSERT_TRUE(s.ep);
  const RandomRmaReport rep = random_rma_initiator(*s.ep, o);
  EXPECT_EQ(rep.error, "");
  std::printf("[          ] %llu puts (%.1f MiB), %llu gets (%.1f MiB) in %.2f s\n",
              static_cast<unsigned long long>(rep.puts), static_cast<double>(rep.bytes_put) / (1 << 20),
              static_cast<unsigned long long>(rep.gets), static_cast<double>(rep.bytes_got) / (1 << 20), rep.seconds);
  if (rep.error.empty()) {
    const EndpointStats st = s.ep->stats();
    EXPECT_EQ(st.puts, rep.puts);
    EXPECT_EQ(st.gets, rep.gets + 1);  // + the whole-region read back
    EXPECT_EQ(st.rma_bytes_put, rep.bytes_put);
    EXPECT_EQ(st.rma_bytes_got, rep.bytes_got + o.region_size);
    EXPECT_EQ(st.refused, 0u);
    // Peers of one host move the control stream (the PUT, GET and RESP frames, inline
    // data with them) into shared memory unless either side turned same-host off.
    const bool shm = c.local.same_host_pulls.value_or(true) && !sealed_by_environment() &&
                     std::find(c.peer_env.begin(), c.peer_env.end(), "REMORA_SAME_HOST=off") == c.peer_env.end();
    EXPECT_EQ(st.shm_tx, shm) << st.shm_reason;
    EXPECT_EQ(st.shm_rx, shm) << st.shm_reason;
    EXPECT_EQ(st.shm_reason.empty(), shm) << st.shm_reason;
    EXPECT_EQ(close_handshake(*s.ep, /*initiator=*/true, 30s), "");
  }
  s.ep.reset();
  expect_peer_success(*s.peer);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, RmaRandom,
    ::testing::Values(RandomCase{"Defaults", {.streams_per_endpoint = 2}, {"REMORA_STREAMS=2"}},
                      // 64 KiB vs 1 MiB chunks, eager 4 KiB vs 64 KiB: the smaller limit decides.
                      RandomCase{"K3_MismatchedEagerAndChunks",
                                 {.streams_per_endpoint = 3, .chunk_bytes = 64 * 1024, .eager_limit = 4096},
                                 {"REMORA_STREAMS=3", "REMORA_CHUNK_SIZE=1048576", "REMORA_EAGER_LIMIT=65536"}},
                      // One stream, 4 KiB chunks, and a target window of 4 requests.
                      RandomCase{"K1_TinyChunksSmallWindow",
                                 {.streams_per_endpoint = 1, .chunk_bytes = 4096},
                                 {"REMORA_STREAMS=1", "REMORA_CHUNK_SIZE=4096", "REMORA_RMA_WINDOW=4"}},
                      // Every byte on TCP: the peer turns same-host off (no pulls, no channel).
                      RandomCase{
                          "K2_SameHostOff", {.streams_per_endpoint = 2}, {"REMORA_STREAMS=2", "REMORA_SAME_HOST=off"}}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// --- (b) concurrent atomics from three processes ---------------------------------------

/// Same-host peers (true): the control stream runs in shared memory; false: the peers
/// turn same-host off and every frame crosses TCP.
class RmaSameHost : public ::testing::TestWithParam<bool> {
 protected:
  std::vector<std::string> peer_env(std::vector<std::string> env = {}) const {
    if (!GetParam()) env.push_back("REMORA_SAME_HOST=off");
    return env;
  }
  void expect_channel(const EndpointStats& st) const {
    const bool shm = GetParam() && !sealed_by_environment();
    EXPECT_EQ(st.shm_tx, shm) << st.shm_reason;
    EXPECT_EQ(st.shm_rx, shm) << st.shm_reason;
  }
};

INSTANTIATE_TEST_SUITE_P(Channel, RmaSameHost, ::testing::Values(true, false),
                         [](const auto& param_info) { return param_info.param ? "SharedMemory" : "SameHostOff"; });

TEST_P(RmaSameHost, ThreeInitiatorsAtomicsOnTheSameWordsAddUp) {
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  auto lr = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  auto listener = std::move(lr).value();
  AtomicsOptions o;
  o.initiators = 3;
  o.count = scaled<size_t>(3000, 600);
  o.cas_count = scaled<size_t>(300, 100);
  std::vector<std::unique_ptr<Process>> peers;
  for (uint32_t rank = 0; rank < o.initiators; ++rank) {
    peers.push_back(spawn_rma_peer(
        {"--role=connect", "--address=127.0.0.1:" + std::to_string(listener->port()), "--scenario=atomics",
         "--half=initiator", "--rank=" + std::to_string(rank), "--initiators=" + std::to_string(o.initiators),
         "--count=" + std::to_string(o.count), "--cas-count=" + std::to_string(o.cas_count)},
        peer_env()));
  }
  std::vector<std::shared_ptr<Endpoint>> eps;
  for (size_t i = 0; i < o.initiators; ++i) {
    auto a = listener->accept(30s);
    ASSERT_TRUE(a) << "accept #" << i << ": " << describe(a.status());
    eps.push_back(std::move(a).value());
  }
  // Keys go out only once all three are connected, so their atomics overlap in time.
  EXPECT_EQ(atomics_target(*ctx, eps, o), "");
  uint64_t served = 0;
  for (auto& ep : eps) {
    served += ep->stats().served_atomics;
    expect_channel(ep->stats());
    EXPECT_EQ(close_handshake(*ep, /*initiator=*/false, 30s), "");
  }
  EXPECT_GE(served, o.initiators * (2 * o.count + o.cas_count));
  eps.clear();
  for (auto& p : peers) expect_peer_success(*p);
}

// --- (c) notifications -----------------------------------------------------------------

TEST_P(RmaSameHost, EveryNotificationArrivesOnceAfterItsData) {
  auto ctx = make_context(3);
  ASSERT_TRUE(ctx);
  auto lr = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  auto listener = std::move(lr).value();
  NotifyOptions o;
  o.seed = 99;
  o.count = scaled<size_t>(1500, 300);
  auto peer =
      spawn_rma_peer({"--role=connect", "--address=127.0.0.1:" + std::to_string(listener->port()), "--scenario=notify",
                      "--half=initiator", "--seed=" + std::to_string(o.seed), "--count=" + std::to_string(o.count)},
                     peer_env({"REMORA_STREAMS=3"}));
  auto a = listener->accept(30s);
  ASSERT_TRUE(a) << "accept: " << describe(a.status());
  std::shared_ptr<Endpoint> ep = std::move(a).value();
  const std::string error = notify_target(*ctx, *ep, o);
  EXPECT_EQ(error, "");
  if (error.empty()) {
    EXPECT_EQ(ep->stats().served_puts, o.count);
    expect_channel(ep->stats());
    EXPECT_EQ(close_handshake(*ep, /*initiator=*/false, 30s), "");
  }
  ep.reset();
  expect_peer_success(*peer);
}

// --- (d) flush before a message ----------------------------------------------------------

TEST(RmaMultiProcess, AMessageSentAfterFlushFindsEveryByteInPlace) {
  auto ctx = make_context(4);
  ASSERT_TRUE(ctx);
  auto lr = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  auto listener = std::move(lr).value();
  FlushOptions o;
  o.seed = 1234;
  o.region_size = scaled<size_t>(8 << 20, 2 << 20);
  o.rounds = scaled<size_t>(12, 4);
  auto peer = spawn_rma_peer({"--role=connect", "--address=127.0.0.1:" + std::to_string(listener->port()),
                              "--scenario=flush", "--half=initiator", "--seed=" + std::to_string(o.seed),
                              "--region-size=" + std::to_string(o.region_size), "--rounds=" + std::to_string(o.rounds)},
                             {"REMORA_STREAMS=4", "REMORA_CHUNK_SIZE=65536"});
  auto a = listener->accept(30s);
  ASSERT_TRUE(a) << "accept: " << describe(a.status());
  std::shared_ptr<Endpoint> ep = std::move(a).value();
  const std::string error = flush_target(*ctx, *ep, o);
  EXPECT_EQ(error, "");
  if (error.empty()) {
    EXPECT_EQ(close_handshake(*ep, /*initiator=*/false, 30s), "");
  }
  ep.reset();
  expect_peer_success(*peer);
}

// --- peer death ---------------------------------------------------------------------------

TEST(RmaMultiProcess, KilledTargetFailsEveryOutstandingOp) {
  auto ctx = make_context(2);
  ASSERT_TRUE(ctx);
  const size_t region = 8 << 20;
  PeerSession s = start_rma_peer(*ctx, {"--scenario=random", "--half=target", "--seed=5",
                                        "--region-size=" + std::to_string(region), "--close=none"});
  ASSERT_TRUE(s.ep);
  RemoteKey key;
  ASSERT_EQ(recv_key(*s.ep, &key, 30s), "");
  // One round trip first, so the target is known to serve.
  std::vector<std::byte> probe(64);
  ASSERT_TRUE(s.ep->get(probe, key, 0).wait(30s).is_ok());
  // The control stream runs in shared memory: the kill must be noticed all the same.
  if (!sealed_by_environment()) {
    ASSERT_TRUE(wait_for_shm_channel(*s.ep)) << s.ep->stats().shm_reason;
  }

  // Stopped first, so the ops below cannot all complete before the kill: the gets
  // need the target's answer and the puts far exceed what socket buffers absorb.
  s.peer->signal(SIGSTOP);
  auto burst = start_rma_burst(*s.ep, key, region, scaled<size_t>(300, 100), 77);
  const auto t_kill = Clock::now();
  s.peer->signal(SIGKILL);
  const int st = s.peer->kill_and_reap();
  EXPECT_TRUE(WIFSIGNALED(st)) << Process::describe(st);

  const auto deadline = t_kill + 30s;
  size_t ok = 0, failed = 0;
  for (size_t i = 0; i < burst->requests.size(); ++i) {
    const Status r = burst->requests[i].wait(std::max(Clock::duration::zero(), deadline - Clock::now()));
    ASSERT_NE(r.code(), StatusCode::kTimeout) << "op #" << i << " still pending 30 s after the kill";
    if (r.is_ok()) {
      ++ok;
    } else {
      EXPECT_EQ(r.code(), StatusCode::kPeerFailed) << "op #" << i << ": " << describe(r);
      ++failed;
    }
  }
  std::printf("[          ] after the kill: %zu ops completed ok, %zu failed\n", ok, failed);
  EXPECT_GT(failed, 0u) << "every op finished although the target was stopped";
  EXPECT_TRUE(s.ep->failed());
  EXPECT_EQ(s.ep->failure().code(), StatusCode::kPeerFailed) << describe(s.ep->failure());
  EXPECT_EQ(s.ep->put(probe, key, 0).wait(5s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s.ep->get(probe, key, 0).wait(5s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s.ep->flush().wait(5s).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s.ep->wait_notification(5s).status().code(), StatusCode::kPeerFailed);
}

// --- (e) between two namespaces -------------------------------------------------------------

TEST(RmaNetns, RandomPutsAndGetsOverVeth) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  const std::vector<std::string> common = {"--scenario=random", "--seed=31337",
                                           "--region-size=" + std::to_string(scaled<size_t>(8 << 20, 2 << 20)),
                                           "--count=" + std::to_string(scaled<size_t>(600, 150)),
                                           "--max-size=" + std::to_string(scaled<size_t>(2 << 20, 512 << 10))};
  const std::vector<std::string> env = {"REMORA_STREAMS=2"};
  std::vector<std::string> a_args = common;
  a_args.insert(a_args.end(), {"--role=listen", "--address=" + net.addr_a() + ":0", "--half=target"});
  auto a = spawn_rma_peer(a_args, env, net.exec_prefix(net.ns_a()));
  ASSERT_TRUE(a->ok());
  const uint16_t port = read_port(*a);
  ASSERT_NE(port, 0);
  std::vector<std::string> b_args = common;
  b_args.insert(b_args.end(), {"--role=connect", "--address=" + net.addr_a() + ":" + std::to_string(port),
                               "--half=initiator"});
  auto b = spawn_rma_peer(b_args, env, net.exec_prefix(net.ns_b()));
  ASSERT_TRUE(b->ok());
  expect_peer_success(*b);
  expect_peer_success(*a);
}

}  // namespace
}  // namespace remora::itest
