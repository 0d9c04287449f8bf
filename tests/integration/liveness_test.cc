// Liveness (REMORA_PEER_TIMEOUT_MS, transport/liveness.h): a peer that stops answering
// while operations are outstanding is declared dead by the endpoint itself, on both
// sides, and a slow peer that keeps answering is not.
//   - a stopped target (SIGSTOP: its kernel still ACKs): every outstanding operation
//     of the initiator fails with peer_failed naming the silence, and so does a thread
//     waiting for a notification from it;
//   - a silent initiator (a raw peer that announced a large put and went quiet, never
//     answering the target's HEARTBEAT probes): the target probes, gives up, closes,
//     releases what it held, and goes on serving others;
//   - a connecting peer killed with bytes unread on its control connection (a reset,
//     not an end): the listening side gives up at the peer timeout, since the peer
//     ended every data stream too;
//   - a link set down between two namespaces mid-transfer: both sides fail;
//   - a link rate-limited (tc tbf) between two namespaces, so that every large put and
//     get takes several peer timeouts: everything completes, every byte checked.
// All with REMORA_PEER_TIMEOUT_MS=1000 so that a verdict comes within seconds. No
// assertion on time: a wait that outlives its bound fails as `timeout`, not as
// `peer_failed`.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/netns.h"
#include "support/raw_rma.h"
#include "support/rma_scenarios.h"
#include "support/rma_target.h"
#include "support/test_data.h"
#include "wire/handshake.h"

namespace remora::itest {
namespace {

constexpr uint32_t kPeerTimeoutMs = 1000;
const std::string kPeerTimeoutEnv = "REMORA_PEER_TIMEOUT_MS=" + std::to_string(kPeerTimeoutMs);
// Bound of every wait: many peer timeouts, so that only a missing verdict ends one.
constexpr std::chrono::seconds kVerdictBound{30};

std::unique_ptr<rma_target::Target> spawn_target() {
  std::string err;
  rma_target::Target::Options options;
  options.env = {kPeerTimeoutEnv};
  auto target = rma_target::Target::spawn(REMORA_RMA_TARGET_PATH, options, &err);
  EXPECT_TRUE(target) << err;
  return target;
}

std::unique_ptr<Context> context_with_peer_timeout() {
  ContextOptions options;
  options.peer_timeout_ms = kPeerTimeoutMs;
  auto r = Context::create(options);
  EXPECT_TRUE(r) << describe(r.status());
  return r ? std::move(r).value() : nullptr;
}

/// Stops child `pid` and returns once it is stopped (kill() only queues the signal: a
/// process still running could answer what is posted next) or has exited.
bool stop_child(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WEXITED | WNOWAIT) != 0) return false;
  return info.si_code == CLD_STOPPED;
}

void expect_peer_silent(const Status& s, const char* what) {
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << what << ": " << describe(s);
  EXPECT_NE(s.message().find("REMORA_PEER_TIMEOUT_MS"), std::string::npos) << what << ": " << describe(s);
}

TEST(Liveness, StoppedTargetFailsEveryOutstandingOperation) {
  auto target = spawn_target();
  ASSERT_TRUE(target);
  auto ctx = context_with_peer_timeout();
  ASSERT_TRUE(ctx);
  std::shared_ptr<Endpoint> ep = connect_to(*ctx, target->port());
  ASSERT_TRUE(ep);
  auto key = RemoteKey::deserialize(target->key());
  ASSERT_TRUE(key) << describe(key.status());

  // Alive: a large get (chunked) comes back with the target's bytes.
  const size_t size = target->size();
  std::vector<std::byte> got(size), want(size);
  fill_stream(rma_target::kInitialSeed, 0, want);
  ASSERT_TRUE(ep->get(got, *key, 0).wait(kVerdictBound).is_ok());
  ASSERT_EQ(std::memcmp(got.data(), want.data(), size), 0);
  // A target of this host: the heartbeats and the requests below go through shared
  // memory, which a stopped peer stops reading as it stops reading a socket.
  if (!sealed_by_environment()) {
    ASSERT_TRUE(wait_for_shm_channel(*ep)) << ep->stats().shm_reason;
  }

  ASSERT_TRUE(stop_child(target->process().pid()));
  // Operations of every kind, outstanding on the stopped peer.
  std::vector<std::byte> big(size), small(64), recv_buf(64);
  uint64_t previous = 0;
  Request get = ep->get(big, *key, 0);
  Request get_small = ep->get(small, *key, 0);
  Request atomic = ep->fetch_add(&previous, *key, 0, 1);
  Request recv = ep->recv(recv_buf, static_cast<Tag>(77));
  expect_peer_silent(get.wait(kVerdictBound), "large get");
  expect_peer_silent(get_small.wait(kVerdictBound), "small get");
  expect_peer_silent(atomic.wait(kVerdictBound), "fetch_add");
  expect_peer_silent(recv.wait(kVerdictBound), "recv");
  EXPECT_TRUE(ep->failed());
  expect_peer_silent(ep->failure(), "endpoint failure");
  // New operations fail at once.
  EXPECT_EQ(ep->get(small, *key, 0).wait(kVerdictBound).code(), StatusCode::kPeerFailed);

  // The target, resumed, finds its endpoint gone and goes on.
  target->process().signal(SIGCONT);
  ep.reset();
  EXPECT_TRUE(target->quit()) << target->last_error();
}

// A thread waiting for a notification, with nothing else outstanding, awaits the peer as
// a posted receive does: a stopped peer fails it at the peer timeout, not at its own
// (here 30 s). Found by the fault matrix (tests/faults, put-in × sigstop).
TEST(Liveness, NotificationWaiterOnAStoppedPeerFails) {
  auto target = spawn_target();
  ASSERT_TRUE(target);
  auto ctx = context_with_peer_timeout();
  ASSERT_TRUE(ctx);
  std::shared_ptr<Endpoint> ep = connect_to(*ctx, target->port());
  ASSERT_TRUE(ep);
  ASSERT_TRUE(stop_child(target->process().pid()));
  auto note = ep->wait_notification(kVerdictBound);
  ASSERT_FALSE(note) << "a notification from a stopped peer";
  expect_peer_silent(note.status(), "wait_notification");
  EXPECT_TRUE(ep->failed());
  target->process().signal(SIGCONT);
  ep.reset();
  EXPECT_TRUE(target->quit()) << target->last_error();
}

TEST(Liveness, TargetReleasesWhatASilentInitiatorHeld) {
  auto target = spawn_target();
  ASSERT_TRUE(target);
  const auto before = target->sums();
  ASSERT_TRUE(before);

  // A raw initiator that says it answers heartbeats, announces a large put, sends part
  // of it and goes quiet: the target holds a served put, its window slot and the
  // chunk it waits for.
  raw::RmaClient silent;
  raw::RmaClient::Options options;
  options.capabilities = wire::kCapHeartbeat;
  ASSERT_EQ(silent.connect(target->port(), options), "");
  ASSERT_TRUE(target->await_endpoints(1)) << target->last_error();
  const uint64_t op = silent.next_op_id();
  ASSERT_EQ(silent.send_put_announce(op, target->key(), 0, target->size()), "");
  std::vector<std::byte> part(raw::kRawChunkBytes / 2, std::byte{0x5A});
  ASSERT_EQ(silent.send_control(raw::chunk_frame(op, 0, raw::kRawChunkBytes, 0, wire::ChunkKind::kPut)), "");
  ASSERT_EQ(silent.send_data(0, part), "");

  // The target probes (a HEARTBEAT frame, type 12, no REPLY flag), then gives up and
  // closes the connection.
  std::string err;
  auto probe = silent.control().recv_exact(wire::kFrameHeaderSize + wire::kHeartbeatBodySize, kVerdictBound, &err);
  ASSERT_TRUE(probe) << err;
  EXPECT_EQ((*probe)[0], static_cast<uint8_t>(wire::FrameType::kHeartbeat));
  EXPECT_EQ((*probe)[1], 0);
  EXPECT_TRUE(silent.control().wait_closed(kVerdictBound)) << "the target never gave up on the silent initiator";
  auto eps = target->endpoints();
  ASSERT_TRUE(eps);
  EXPECT_EQ(eps->second, 1u) << "failed endpoints at the target";

  // Released: another initiator gets the whole window and every byte.
  auto ctx = context_with_peer_timeout();
  ASSERT_TRUE(ctx);
  std::shared_ptr<Endpoint> ep = connect_to(*ctx, target->port());
  ASSERT_TRUE(ep);
  auto key = RemoteKey::deserialize(target->key());
  ASSERT_TRUE(key);
  std::vector<std::byte> data(target->size());
  fill_stream(99, 0, data);
  ASSERT_TRUE(ep->put(data, *key, 0).wait(kVerdictBound).is_ok());
  std::vector<std::byte> back(target->size());
  ASSERT_TRUE(ep->get(back, *key, 0).wait(kVerdictBound).is_ok());
  EXPECT_EQ(std::memcmp(back.data(), data.data(), data.size()), 0);
  auto after = target->sums();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->before, before->before) << "guard zone before the region written";
  EXPECT_EQ(after->after, before->after) << "guard zone after the region written";
  ep->close();
  EXPECT_TRUE(target->quit()) << target->last_error();
}

TEST(Liveness, AConnectingPeerKilledWithUnreadControlBytesIsFailedAtThePeerTimeout) {
  // A process that dies with bytes unread in its control connection resets it rather
  // than ending it, which looks like a middlebox's reset, after which the connecting
  // side connects the control stream again (docs/rails.md). The listening side waits for
  // that only while the peer keeps a data stream: a peer whose kernel ended every
  // connection is taken for ended once the peer timeout passes without an attempt, not
  // after the reconnect limit (10 s here). On TCP (REMORA_SAME_HOST=off): the
  // shared-memory channel does not resume.
  ContextOptions options;
  options.peer_timeout_ms = kPeerTimeoutMs;
  options.same_host_pulls = false;
  auto created = Context::create(options);
  ASSERT_TRUE(created) << describe(created.status());
  auto ctx = std::move(created).value();
  auto lr = ctx->listen("127.0.0.1:0");
  ASSERT_TRUE(lr) << describe(lr.status());
  auto listener = std::move(lr).value();
  // The peer connects and waits for a message of 64 MiB that never completes.
  auto peer = spawn_peer({"--role=connect", "--address=127.0.0.1:" + std::to_string(listener->port()),
                          "--scenario=big-recv", "--size=67108864", "--seed=5"},
                         {kPeerTimeoutEnv, "REMORA_SAME_HOST=off"});
  ASSERT_TRUE(peer->ok());
  auto ar = listener->accept(kVerdictBound);
  ASSERT_TRUE(ar) << describe(ar.status());
  std::shared_ptr<Endpoint> ep = std::move(ar).value();
  ASSERT_TRUE(stop_child(peer->pid()));
  // What the stopped peer's kernel takes and its process never reads: eager messages
  // and the big message's announcement, all on the control connection.
  std::vector<std::byte> big(64 << 20, std::byte{7}), small(512, std::byte{3});
  std::vector<Request> sends;
  for (int i = 0; i < 16; ++i) sends.push_back(ep->send(small, Tag{123}));
  sends.push_back(ep->send(big, Tag{9}));
  // Eager sends complete once their bytes are the kernel's: over loopback, in the
  // stopped peer's receive queue by then.
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(sends[i].wait(kVerdictBound).is_ok()) << describe(sends[i].test());
  peer->signal(SIGKILL);
  peer->kill_and_reap();
  for (Request& r : sends) {
    const Status s = r.wait(kVerdictBound);
    if (!s.is_ok()) {
      EXPECT_EQ(s.code(), StatusCode::kPeerFailed) << describe(s);
    }
  }
  EXPECT_EQ(sends.back().test().code(), StatusCode::kPeerFailed) << describe(sends.back().test());
  ASSERT_TRUE(ep->failed());
  const Status why = ep->failure();
  EXPECT_EQ(why.code(), StatusCode::kPeerFailed) << describe(why);
  EXPECT_NE(why.message().find("Connection reset by peer"), std::string::npos) << describe(why);
  EXPECT_NE(why.message().find("the peer ended every data stream too"), std::string::npos) << describe(why);
  std::printf("[          ] the endpoint's failure: %s\n", why.message().c_str());
  ep.reset();
}

TEST(Liveness, LinkDownMidTransferFailsBothSides) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  // The target: a remora_rma_peer in namespace a, with waits far longer than the test
  // waits for it (so only the liveness verdict can end it in time).
  auto target = spawn_program({"ip", "netns", "exec", net.ns_a(), REMORA_TEST_RMA_PEER_PATH, "--scenario=random",
                               "--seed=77", "--region-size=8388608", "--count=1000000", "--max-size=1048576",
                               "--window=8", "--timeout-ms=300000", "--role=listen",
                               "--address=" + net.addr_a() + ":0", "--half=target"},
                              {kPeerTimeoutEnv});
  ASSERT_TRUE(target->ok()) << target->error();
  const uint16_t port = read_port(*target);
  ASSERT_NE(port, 0);

  // The initiator: this process, its endpoint's sockets in namespace b.
  auto ctx = context_with_peer_timeout();
  ASSERT_TRUE(ctx);
  std::shared_ptr<Endpoint> ep;
  std::string err;
  ASSERT_TRUE(in_netns(
      net.ns_b(),
      [&] {
        auto r = ctx->connect(net.addr_a() + ":" + std::to_string(port), std::chrono::seconds(30));
        if (r) ep = std::move(r).value();
        else err = describe(r.status());
      },
      &err))
      << err;
  ASSERT_TRUE(ep) << err;
  RandomRmaOptions options{.seed = 77, .region_size = 8 << 20, .count = 1000000, .max_size = 1 << 20, .window = 8,
                           .timeout = std::chrono::milliseconds(300000)};
  RandomRmaReport report;
  std::thread initiator([&] { report = random_rma_initiator(*ep, options); });
  // Mid-transfer: once chunks are moving (bounded; polling the counters, no sleep).
  const auto deadline = std::chrono::steady_clock::now() + kVerdictBound;
  while (ep->stats().chunks_sent < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  const CommandResult down = run_command({"ip", "-n", net.ns_a(), "link", "set", "rmr0", "down"}, std::chrono::seconds(10));
  EXPECT_TRUE(down.ok()) << down.output;
  initiator.join();

  // This side: the endpoint failed by itself (a wait that merely expired leaves it up),
  // through the heartbeat (peer_failed) or TCP_USER_TIMEOUT (timeout).
  EXPECT_NE(report.error, "") << "the random run completed although the link went down";
  EXPECT_TRUE(ep->failed()) << report.error;
  const StatusCode code = ep->failure().code();
  EXPECT_TRUE(code == StatusCode::kPeerFailed || code == StatusCode::kTimeout) << describe(ep->failure());
  // The other side: ends by itself too, long before its own waits would.
  auto [out, status] = finish(*target, std::chrono::seconds(60));
  // Its endpoint failed: by the heartbeat, TCP_USER_TIMEOUT, or (its own link being
  // down) the kernel's "network is unreachable".
  EXPECT_FALSE(Process::exited_ok(status)) << out;
  EXPECT_TRUE(out.find("REMORA_PEER_TIMEOUT_MS") != std::string::npos || out.find("timed out") != std::string::npos ||
              out.find("unreachable") != std::string::npos)
      << out;
}

TEST(Liveness, SlowPeersOverARateLimitedLinkAreAlive) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  // 8 Mbit/s both ways: a 3 MiB put or get takes about 3 s, three peer timeouts, during
  // which the receiver of the data keeps reading and the target keeps serving.
  for (const auto& [ns, dev] : {std::pair{net.ns_a(), "rmr0"}, std::pair{net.ns_b(), "rmr1"}}) {
    const CommandResult tc = run_command(
        {"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", "8mbit", "burst", "32kb", "latency", "100ms"},
        std::chrono::seconds(10));
    if (!tc.ok()) GTEST_SKIP() << "tc tbf unavailable: " << tc.output;
  }
  const std::vector<std::string> common = {"--scenario=random", "--seed=2111", "--region-size=4194304", "--count=6",
                                           "--max-size=3145728", "--window=2", "--timeout-ms=120000"};
  const std::vector<std::string> env = {kPeerTimeoutEnv, "REMORA_STREAMS=2"};
  std::vector<std::string> target_args = common;
  target_args.insert(target_args.end(), {"--role=listen", "--address=" + net.addr_a() + ":0", "--half=target"});
  auto target = spawn_program(
      [&] {
        std::vector<std::string> argv = net.exec_prefix(net.ns_a());
        argv.push_back(REMORA_TEST_RMA_PEER_PATH);
        argv.insert(argv.end(), target_args.begin(), target_args.end());
        return argv;
      }(),
      env);
  ASSERT_TRUE(target->ok()) << target->error();
  const uint16_t port = read_port(*target);
  ASSERT_NE(port, 0);
  std::vector<std::string> initiator_argv = net.exec_prefix(net.ns_b());
  initiator_argv.push_back(REMORA_TEST_RMA_PEER_PATH);
  initiator_argv.insert(initiator_argv.end(), common.begin(), common.end());
  initiator_argv.insert(initiator_argv.end(), {"--role=connect", "--address=" + net.addr_a() + ":" + std::to_string(port),
                                               "--half=initiator"});
  auto initiator = spawn_program(initiator_argv, env);
  ASSERT_TRUE(initiator->ok()) << initiator->error();
  expect_peer_success(*initiator);
  expect_peer_success(*target);

  // Two-sided: a 3 MiB message each way, about three peer timeouts on the wire, every
  // byte checked by the receiving peer.
  const std::vector<std::string> exchange = {"--scenario=exchange", "--seed=2112",        "--count=1",
                                             "--peer-count=1",      "--fixed-size=3145728", "--tags=1",
                                             "--expect-streams=2"};
  std::vector<std::string> a_args = exchange;
  a_args.insert(a_args.end(), {"--role=listen", "--address=" + net.addr_a() + ":0", "--side=0", "--close=follow"});
  auto a = spawn_peer(a_args, env, net.exec_prefix(net.ns_a()));
  ASSERT_TRUE(a->ok());
  const uint16_t exchange_port = read_port(*a);
  ASSERT_NE(exchange_port, 0);
  std::vector<std::string> b_args = exchange;
  b_args.insert(b_args.end(), {"--role=connect", "--address=" + net.addr_a() + ":" + std::to_string(exchange_port),
                               "--side=1", "--close=initiate"});
  auto b = spawn_peer(b_args, env, net.exec_prefix(net.ns_b()));
  ASSERT_TRUE(b->ok());
  expect_peer_success(*b);
  expect_peer_success(*a);
}

}  // namespace
}  // namespace remora::itest
