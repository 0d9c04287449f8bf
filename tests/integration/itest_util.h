// itest_util.h — GoogleTest-side helpers: spawning and reaping the peer program,
// reading its "PORT n" line, connecting to it, running a program to its end with a
// deadline, a free loopback port, and build-dependent data sizes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "remora/context.h"
#include "remora/endpoint.h"
#include "remora/status.h"
#include "remora/testing/test_device.h"
#include "../net_util.h"
#include "support/process.h"

namespace remora {
/// gtest prints StatusCode by name ("peer_failed") instead of as raw bytes.
inline void PrintTo(StatusCode code, std::ostream* os) { *os << to_string(code); }
}  // namespace remora

namespace remora::itest {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

/// Release sizes, or the smaller ones for the sanitizer builds (ASan, TSan).
template <typename T>
constexpr T scaled(T release, T asan) {
  return kSanitized ? asan : release;
}

inline constexpr std::chrono::seconds kPeerExitDeadline{120};

inline std::string describe(const Status& s) { return std::string(to_string(s.code())) + " (" + s.message() + ")"; }

/// Spawns remora_test_peer with `args` (each "--name=value"), optionally behind a
/// command prefix (e.g. `ip netns exec NS`) and with extra environment entries.
inline std::unique_ptr<Process> spawn_peer(std::vector<std::string> args, std::vector<std::string> env = {},
                                           std::vector<std::string> prefix = {}) {
  std::vector<std::string> argv = std::move(prefix);
  argv.push_back(REMORA_TEST_PEER_PATH);
  for (auto& a : args) argv.push_back(std::move(a));
  argv.push_back("--parent-pid=" + std::to_string(getpid()));
  auto p = std::make_unique<Process>(Process::Options{.argv = argv, .env = std::move(env), .capture_stderr = false});
  EXPECT_TRUE(p->ok()) << p->error();
  return p;
}

/// Whether this process runs with REMORA_ENCRYPT set (ctest's integration.with_encryption
/// runs the suite so): sealed endpoints keep their control stream on TCP, never in the
/// same-host shared-memory channel.
inline bool sealed_by_environment() {
  const char* e = std::getenv("REMORA_ENCRYPT");
  return e != nullptr && *e != '\0' && std::string_view(e) != "off";
}

/// Whether `ep`'s control stream runs in shared memory both ways (EndpointStats::shm_tx
/// and shm_rx) by `timeout`. The set-up (SHM frames) follows the HOST exchange after
/// connect, without an event to wait for: the stats are read until then (the endpoint's
/// progress thread completes it), yielding in between.
inline bool wait_for_shm_channel(const Endpoint& ep, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const EndpointStats st = ep.stats();
    if (st.shm_tx && st.shm_rx) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
}

/// Reads "PORT <n>" from a listening peer (0 and a test failure if it does not come).
inline uint16_t read_port(Process& peer, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto line = peer.read_line(timeout);
  // The library's own log lines ("remora[pid] WARN ...", e.g. the warning for a listener
  // on a non-loopback address without REMORA_AUTH_KEY) may come first: they share the
  // peer's output, and are not its answer.
  while (line && line->rfind("remora[", 0) == 0) line = peer.read_line(timeout);
  if (!line || line->rfind("PORT ", 0) != 0) {
    ADD_FAILURE() << "peer did not print its port: " << (line ? "got '" + *line + "'" : peer.timed_out() ? "timed out" : "EOF");
    return 0;
  }
  return static_cast<uint16_t>(std::stoul(line->substr(5)));
}

/// Waits (bounded) for the peer to exit 0; kills it and fails the test otherwise.
inline void expect_peer_success(Process& peer, std::chrono::seconds deadline = kPeerExitDeadline) {
  auto st = peer.wait(deadline);
  if (!st) {
    peer.kill_and_reap();
    ADD_FAILURE() << "peer " << peer.pid() << " did not exit within " << deadline.count() << " s (killed)";
    return;
  }
  EXPECT_TRUE(Process::exited_ok(*st)) << "peer " << Process::describe(*st) << " (its stderr is above)";
}

/// Spawns a program with stdout and stderr in one pipe (for launchers and short jobs).
inline std::unique_ptr<Process> spawn_program(std::vector<std::string> argv, std::vector<std::string> env = {}) {
  auto p = std::make_unique<Process>(
      Process::Options{.argv = std::move(argv), .env = std::move(env), .capture_stderr = true});
  EXPECT_TRUE(p->ok()) << p->error();
  return p;
}

/// Output and wait status of a program run to its end within `timeout`; one that is
/// still running then is a test failure and is killed, so a hang cannot block the suite.
inline std::pair<std::string, int> finish(Process& p, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out = p.read_all(timeout);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  auto status = p.wait(std::max(left, std::chrono::milliseconds(0)));
  if (!status) {
    ADD_FAILURE() << "still running after " << timeout.count() << " ms; output so far:\n" << out;
    return {out, p.kill_and_reap()};
  }
  return {out, *status};
}

using test::free_tcp_port;

/// A context with K data streams (0: config default) and optionally a handshake timeout.
inline std::unique_ptr<Context> make_context(uint32_t streams = 0, std::optional<uint32_t> handshake_timeout_ms = {}) {
  ContextOptions options;
  if (streams != 0) options.streams_per_endpoint = streams;
  options.handshake_timeout_ms = handshake_timeout_ms;
  auto r = Context::create(options);
  if (!r) {
    ADD_FAILURE() << "Context::create: " << describe(r.status());
    return nullptr;
  }
  return std::move(r).value();
}

/// Connects to 127.0.0.1:port (failure is a test failure and a null endpoint).
inline std::shared_ptr<Endpoint> connect_to(Context& ctx, uint16_t port,
                                            std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto r = ctx.connect("127.0.0.1:" + std::to_string(port), timeout);
  if (!r) {
    ADD_FAILURE() << "connect to 127.0.0.1:" << port << ": " << describe(r.status());
    return nullptr;
  }
  return std::move(r).value();
}

/// Spawns a listening peer for `scenario`, connects to it. On failure `ep` is null.
struct PeerSession {
  std::unique_ptr<Process> peer;
  std::shared_ptr<Endpoint> ep;
};
inline PeerSession start_listening_peer(Context& ctx, std::vector<std::string> args, std::vector<std::string> env = {}) {
  PeerSession s;
  args.push_back("--role=listen");
  args.push_back("--address=127.0.0.1:0");
  s.peer = spawn_peer(std::move(args), std::move(env));
  if (!s.peer->ok()) return s;
  const uint16_t port = read_port(*s.peer);
  if (port == 0) return s;
  s.ep = connect_to(ctx, port);
  return s;
}

/// A context with a test device added (the device outlives the context).
struct DeviceContext {
  std::unique_ptr<testing::TestDeviceDomain> dev;
  std::unique_ptr<Context> ctx;
};

/// Two contexts in this process connected over loopback (a listens, b connects).
struct Pair {
  std::unique_ptr<Context> a, b;
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Endpoint> ea, eb;  // ea on a (accepted), eb on b (connected)
};

/// Ends the pair: endpoints, listener, then contexts.
inline void reset(Pair& p) {
  p.ea.reset();
  p.eb.reset();
  p.listener.reset();
  p.a.reset();
  p.b.reset();
}

inline Pair make_pair_in_process(std::unique_ptr<Context> a, std::unique_ptr<Context> b) {
  using namespace std::chrono_literals;
  Pair p;
  p.a = std::move(a);
  p.b = std::move(b);
  if (!p.a || !p.b) return p;
  auto l = p.a->listen("127.0.0.1:0");
  if (!l) {
    ADD_FAILURE() << describe(l.status());
    return p;
  }
  p.listener = std::move(l).value();
  auto accepted = std::async(std::launch::async, [&] { return p.listener->accept(20s); });
  p.eb = connect_to(*p.b, p.listener->port(), 20s);
  auto acc = accepted.get();
  if (!acc) {
    ADD_FAILURE() << "accept: " << describe(acc.status());
    return p;
  }
  p.ea = std::move(acc).value();
  return p;
}

}  // namespace remora::itest
