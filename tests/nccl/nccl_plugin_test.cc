// tests/nccl/nccl_plugin_test.cc — the NCCL net plugin driven through its exported
// tables by the harness (harness.cc) in two processes, for every version v8..v12: over
// loopback and across network namespaces joined by veth, many requests in flight,
// grouped receives, sizes 0 to 200 MiB (one large size, so CI stays quick), registered
// and unregistered buffers, every byte verified; a killed peer turns into an error from
// test() within the deadline; stale, foreign and garbage handles are refused.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/netns.h"
#include "support/process.h"

namespace {

using remora::itest::NetnsPair;
using remora::itest::NetnsRails;
using remora::itest::Process;
using namespace std::chrono_literals;

constexpr auto kLineTimeout = 60s;

struct Pair {
  std::unique_ptr<Process> recv, send;
};

std::vector<std::string> harness_argv(const std::string& role, int version, const std::vector<std::string>& extra,
                                      const std::vector<std::string>& prefix = {}) {
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(), {REMORA_NCCL_HARNESS, role, "--plugin", REMORA_NCCL_PLUGIN, "--version",
                           std::to_string(version)});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

/// Reads lines until one starts with `prefix`; fails the test on EOF, timeout or FAIL.
std::string expect_line(Process& p, const std::string& prefix) {
  for (;;) {
    auto line = p.read_line(kLineTimeout);
    if (!line) {
      ADD_FAILURE() << (p.timed_out() ? "timed out" : "EOF") << " waiting for " << prefix;
      return {};
    }
    if (line->starts_with(prefix)) return *line;
    if (line->starts_with("FAIL")) {
      ADD_FAILURE() << *line;
      return {};
    }
  }
}

Process::Options run_opts(std::vector<std::string> argv, bool pipe_stdin = false) {
  Process::Options o;
  o.argv = std::move(argv);
  o.pipe_stdin = pipe_stdin;
  return o;
}

/// Runs a whole exchange: receiver listens, sender connects with its handle, both check.
void exchange(int version, const std::vector<std::string>& scenario, const std::vector<std::string>& env = {},
              const NetnsPair* net = nullptr) {
  std::vector<std::string> recv_prefix, send_prefix;
  std::vector<std::string> recv_env = env, send_env = env;
  if (net != nullptr) {
    recv_prefix = net->exec_prefix(net->ns_b());
    send_prefix = net->exec_prefix(net->ns_a());
    recv_env.push_back("REMORA_NCCL_IFNAME==rmr1");
    send_env.push_back("NCCL_SOCKET_IFNAME=rmr0");
  }
  Process recv({.argv = harness_argv("recv", version, scenario, recv_prefix), .env = recv_env});
  ASSERT_TRUE(recv.ok()) << recv.error();
  std::string handle = expect_line(recv, "HANDLE ");
  ASSERT_FALSE(handle.empty());
  std::vector<std::string> send_args = scenario;
  send_args.insert(send_args.end(), {"--handle", handle.substr(7)});
  Process send({.argv = harness_argv("send", version, send_args, send_prefix), .env = send_env, .pipe_stdin = true});
  ASSERT_TRUE(send.ok()) << send.error();
  std::string ok = expect_line(recv, "OK");
  EXPECT_FALSE(ok.empty());
  EXPECT_FALSE(expect_line(send, "SENT").empty());
  send.write_line("done");
  EXPECT_FALSE(expect_line(send, "OK").empty());
  auto rs = recv.wait(30s), ss = send.wait(30s);
  ASSERT_TRUE(rs && ss);
  EXPECT_TRUE(Process::exited_ok(*rs)) << Process::describe(*rs);
  EXPECT_TRUE(Process::exited_ok(*ss)) << Process::describe(*ss);
}

class NcclPlugin : public ::testing::TestWithParam<int> {};

TEST_P(NcclPlugin, ManySizesInFlightRegistered) {
  exchange(GetParam(), {"--sizes", "0,1,7,4096,16384,16385,100000,1048576,3000001", "--messages", "144", "--window",
                        "32", "--reg", "1", "--slack", "0"});
}

TEST_P(NcclPlugin, GroupedReceivesSmallerSendsUnregistered) {
  // n = 8 receives per request, each posted 100 bytes larger than what is sent.
  exchange(GetParam(), {"--sizes", "0,5,70000,1024,2000000,33,16384,9", "--messages", "128", "--group", "8",
                        "--window", "32", "--reg", "0", "--slack", "100"});
}

TEST_P(NcclPlugin, RefusesGarbageForeignAndStaleHandles) {
  int v = GetParam();
  for (std::string mode : {"garbage", "bad-stage"}) {
    Process recv(run_opts(harness_argv("recv", v, {"--mode", "stale"}), true));
    std::string handle = expect_line(recv, "HANDLE ");
    ASSERT_FALSE(handle.empty());
    Process send(run_opts(harness_argv("send", v, {"--mode", mode, "--handle", handle.substr(7)})));
    EXPECT_FALSE(expect_line(send, "REFUSED").empty()) << mode;
    recv.write_line("done");
  }
  // Stale: the listener closed before the connect.
  Process recv(run_opts(harness_argv("recv", v, {"--mode", "stale"}), true));
  std::string handle = expect_line(recv, "HANDLE ");
  ASSERT_FALSE(expect_line(recv, "CLOSED").empty());
  Process send(run_opts(harness_argv("send", v, {"--mode", "stale", "--timeout", "30", "--handle", handle.substr(7)})));
  EXPECT_FALSE(expect_line(send, "REFUSED").empty());
  recv.write_line("done");
}

TEST_P(NcclPlugin, RefusesAnotherListenersSecretThenAcceptsTheRightOne) {
  int v = GetParam();
  Process recv(run_opts(harness_argv("recv", v, {"--sizes", "12345", "--messages", "1"})));
  std::string handle = expect_line(recv, "HANDLE ");
  ASSERT_FALSE(handle.empty());
  Process send(run_opts(harness_argv("send", v, {"--sizes", "12345", "--messages", "1", "--mode", "bad-secret",
                                                 "--handle", handle.substr(7)}), true));
  EXPECT_FALSE(expect_line(send, "REFUSED").empty());
  EXPECT_FALSE(expect_line(recv, "OK").empty());
  EXPECT_FALSE(expect_line(send, "SENT").empty());
  send.write_line("done");
  EXPECT_FALSE(expect_line(send, "OK").empty());
}

TEST_P(NcclPlugin, KilledSenderMakesTestFail) {
  int v = GetParam();
  Process recv(run_opts(harness_argv("recv", v, {"--mode", "kill-wait", "--sizes", "1048576", "--timeout", "30"})));
  std::string handle = expect_line(recv, "HANDLE ");
  ASSERT_FALSE(handle.empty());
  Process send(run_opts(harness_argv("send", v, {"--mode", "kill-wait", "--sizes", "1048576", "--handle",
                                                 handle.substr(7)}), true));
  EXPECT_FALSE(expect_line(send, "READY").empty());
  EXPECT_FALSE(expect_line(recv, "POSTED").empty());
  send.kill_and_reap();
  std::string err = expect_line(recv, "PEER_ERROR");
  // ncclRemoteError (6) or ncclSystemError (2), never success or a hang.
  EXPECT_TRUE(err == "PEER_ERROR 6" || err == "PEER_ERROR 2") << err;
}

/// NCCL's proxy polls test() without sleeping. Once its tests find nothing done, test()
/// waits in the kernel (up to REMORA_NCCL_IDLE_WAIT_US) instead of returning at once, so
/// an idle proxy leaves the CPU; and it stays bounded, so a dead peer is still reported.
/// Without the wait (0) the same 300 ms take thousands of calls.
TEST(NcclPluginIdle, TestWaitsInTheKernelWhenNothingIsDoneAndStaysBounded) {
  for (const char* wait_us : {"20000", "0"}) {
    SCOPED_TRACE(std::string("REMORA_NCCL_IDLE_WAIT_US=") + wait_us);
    Process::Options ro =
        run_opts(harness_argv("recv", 12, {"--mode", "kill-wait", "--sizes", "1048576", "--timeout", "30"}));
    ro.env = {std::string("REMORA_NCCL_IDLE_WAIT_US=") + wait_us};
    Process recv(ro);
    std::string handle = expect_line(recv, "HANDLE ");
    ASSERT_FALSE(handle.empty());
    Process send(run_opts(
        harness_argv("send", 12, {"--mode", "kill-wait", "--sizes", "1048576", "--handle", handle.substr(7)}), true));
    EXPECT_FALSE(expect_line(send, "READY").empty());
    std::string idle = expect_line(recv, "IDLE ");
    long calls = -1;
    long long longest_us = -1;
    ASSERT_EQ(std::sscanf(idle.c_str(), "IDLE %ld %lld", &calls, &longest_us), 2) << idle;
    if (std::string(wait_us) == "0") {
      EXPECT_GT(calls, 200) << idle;  // polled: returns at once every time
    } else {
      // 300 ms / 20 ms, plus the polls before the first wait (REMORA_NCCL_IDLE_POLLS, 16);
      // each call within the bound, with room for a loaded host's scheduling.
      EXPECT_LE(calls, 100) << idle;
      EXPECT_LE(longest_us, 2'000'000) << idle;
    }
    EXPECT_FALSE(expect_line(recv, "POSTED").empty());
    send.kill_and_reap();
    std::string err = expect_line(recv, "PEER_ERROR");
    EXPECT_TRUE(err == "PEER_ERROR 6" || err == "PEER_ERROR 2") << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, NcclPlugin, ::testing::Values(8, 9, 10, 11, 12),
                         [](const auto& param_info) {
                           std::string name = "v";
                           name += std::to_string(param_info.param);
                           return name;
                         });

/// The DEVICE line of a harness that only listens (and closes): what getProperties said.
std::string device_line(std::vector<std::string> env) {
  Process::Options o = run_opts(harness_argv("recv", 12, {"--mode", "stale"}), true);
  o.env = std::move(env);
  Process p(o);
  std::string line = expect_line(p, "DEVICE ");
  EXPECT_FALSE(expect_line(p, "CLOSED").empty());
  p.write_line("done");
  return line;
}

TEST(NcclPluginProperties, CudaAdvertisedOnlyWhenTheDomainWorks) {
  // No driver (or a path that is none): host memory only.
  std::string host = device_line({"REMORA_CUDA_DRIVER=/nonexistent/libcuda.so.1"});
  EXPECT_NE(host.find("ptrSupport 1 "), std::string::npos) << host;
#ifdef REMORA_TEST_EMULATED_CUDA
  // A driver that loads and initialises (the emulated one): NCCL_PTR_HOST | NCCL_PTR_CUDA.
  std::string cuda = device_line({std::string("REMORA_CUDA_DRIVER=") + REMORA_TEST_EMULATED_CUDA});
  EXPECT_NE(cuda.find("ptrSupport 3 "), std::string::npos) << cuda;
#endif
}

TEST(NcclPluginProperties, InterfaceChosenByTheVariables) {
  EXPECT_NE(device_line({"REMORA_NCCL_IFNAME==lo"}).find("DEVICE lo "), std::string::npos);
  EXPECT_NE(device_line({"NCCL_SOCKET_IFNAME==lo"}).find("DEVICE lo "), std::string::npos);
  // REMORA_NCCL_IFNAME wins over NCCL_SOCKET_IFNAME.
  EXPECT_NE(device_line({"NCCL_SOCKET_IFNAME=^lo", "REMORA_NCCL_IFNAME==lo"}).find("DEVICE lo "), std::string::npos);
}

#ifdef REMORA_TEST_EMULATED_CUDA
TEST(NcclPluginCuda, CudaMemoryBothSidesThroughStagingWithTheEmulatedDriver) {
  // The emulated driver is host memory behind the driver API (tests/device/emulated_cuda):
  // this proves the plugin's CUDA registration and remora's staging under it, nothing
  // about a GPU.
  // LSAN_OPTIONS=use_tls=0: in the asan preset, LeakSanitizer's exit-time scan faults
  // reading the dynamic TLS of the driver module that both the harness and the plugin's
  // remora dlopen ("DTLS ... Tracer caught signal 11"); the leak check itself stays on.
  std::vector<std::string> env = {std::string("REMORA_CUDA_DRIVER=") + REMORA_TEST_EMULATED_CUDA,
                                  "LSAN_OPTIONS=use_tls=0"};
  exchange(12, {"--memory", "cuda", "--sizes", "0,1,4096,100000,3000001,16385", "--messages", "12", "--group", "2",
                "--slack", "7", "--reg", "1"},
           env);
}
#endif

TEST(NcclPluginLarge, TwoHundredMiBRegistered) {
  exchange(12, {"--sizes", "209715200", "--messages", "1", "--reg", "1", "--timeout", "120"});
}

TEST(NcclPluginNetns, AcrossVethBothVersions) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  for (int v : {8, 12}) {
    exchange(v, {"--sizes", "0,4096,1048576,5000000", "--messages", "64", "--group", "4", "--reg", "1"}, {}, &net);
  }
}

// REMORA_ENCRYPT on both sides: the plugin's endpoints are sealed like any other, and
// every size arrives intact across two network namespaces.
TEST(NcclPluginSealed, AcrossVethSealed) {
  NetnsPair net;
  REMORA_NETNS_OR_SKIP(net);
  exchange(12, {"--sizes", "0,4096,1048576,5000000", "--messages", "32", "--group", "4", "--reg", "1"},
           {"REMORA_AUTH_KEY=nccl job secret", "REMORA_ENCRYPT=on"}, &net);
}

// Only the receiver seals: the sender's connect is refused (the setting must match on
// both sides), so neither side reports a transfer. This is what shows that the plugin
// reads REMORA_ENCRYPT at all.
TEST(NcclPluginSealed, APlainSenderIsRefusedBySealedReceiver) {
  const std::vector<std::string> scenario = {"--sizes", "4096", "--messages", "1", "--timeout", "5"};
  Process recv({.argv = harness_argv("recv", 12, scenario, {}),
                .env = {"REMORA_AUTH_KEY=nccl job secret", "REMORA_ENCRYPT=on"}});
  ASSERT_TRUE(recv.ok()) << recv.error();
  std::string handle = expect_line(recv, "HANDLE ");
  ASSERT_FALSE(handle.empty());
  std::vector<std::string> send_args = scenario;
  send_args.insert(send_args.end(), {"--handle", handle.substr(7)});
  Process send({.argv = harness_argv("send", 12, send_args, {}),
                .env = {"REMORA_AUTH_KEY=nccl job secret"},
                .pipe_stdin = true});
  ASSERT_TRUE(send.ok()) << send.error();
  auto ss = send.wait(60s);
  auto rs = recv.wait(60s);
  ASSERT_TRUE(rs && ss);
  EXPECT_FALSE(Process::exited_ok(*ss)) << "a plain sender must not reach a sealed receiver";
  EXPECT_FALSE(Process::exited_ok(*rs)) << "the sealed receiver must not report a transfer";
}

/// Lines of `p` (stdout and stderr) until one starts with `prefix`, all kept in `seen`.
bool read_until(Process& p, const std::string& prefix, std::string* seen) {
  for (;;) {
    auto line = p.read_line(kLineTimeout);
    if (!line) return false;
    *seen += *line + "\n";
    if (line->starts_with(prefix)) return true;
    if (line->starts_with("FAIL")) return false;
  }
}

/// The bytes the log says rail `ifname` sent when a connection closed (the plugin logs
/// each rail's share with REMORA_RAILS); -1 when it says nothing of that rail.
long long rail_bytes_sent(const std::string& log, const std::string& ifname) {
  const std::string key = "rail " + ifname + " (";
  const size_t at = log.find(key);
  if (at == std::string::npos) return -1;
  const size_t sent = log.find(" bytes sent", at);
  const size_t start = log.rfind(", ", sent);
  if (sent == std::string::npos || start == std::string::npos || start < at) return -1;
  return std::stoll(log.substr(start + 2, sent - start - 2));
}

/// What a rails exchange across two veth pairs must show: the receiver (ns_b, plugin
/// version `recv_version`) and the sender (ns_a, `send_version`) each see one device named
/// after both rails among `ndev`, the messages arrive intact (checked by the harness), and
/// both rails carried bytes (the sender's per-rail log at close). `recv_env` and
/// `send_env` choose the devices; `sender_says` must appear in the sender's log.
void expect_both_rails_carry(const std::vector<std::string>& scenario, int recv_version, int send_version,
                             const std::vector<std::string>& recv_env, const std::vector<std::string>& send_env,
                             int ndev, const std::string& sender_says = "") {
  NetnsRails net(2);
  REMORA_NETNS_OR_SKIP(net);
  std::vector<std::string> renv = recv_env, senv = send_env;
  renv.push_back("REMORA_STREAMS=2");
  senv.insert(senv.end(), {"REMORA_STREAMS=2", "NCCL_DEBUG=INFO"});
  const std::string ndev_line = " ndev " + std::to_string(ndev) + "\n";
  Process recv({.argv = harness_argv("recv", recv_version, scenario, net.exec_prefix(net.ns_b())),
                .env = renv,
                .capture_stderr = true});
  ASSERT_TRUE(recv.ok()) << recv.error();
  std::string recv_log, send_log;
  ASSERT_TRUE(read_until(recv, "HANDLE ", &recv_log)) << recv_log;
  EXPECT_NE(recv_log.find("DEVICE rlb0+rlb1 ptrSupport "), std::string::npos) << recv_log;
  EXPECT_NE(recv_log.find(ndev_line), std::string::npos) << recv_log;
  const size_t h = recv_log.rfind("HANDLE ");
  const std::string handle = recv_log.substr(h + 7, recv_log.find('\n', h) - h - 7);
  std::vector<std::string> send_args = scenario;
  send_args.insert(send_args.end(), {"--handle", handle});
  Process send({.argv = harness_argv("send", send_version, send_args, net.exec_prefix(net.ns_a())),
                .env = senv,
                .capture_stderr = true,
                .pipe_stdin = true});
  ASSERT_TRUE(send.ok()) << send.error();
  EXPECT_TRUE(read_until(recv, "OK", &recv_log)) << recv_log;
  ASSERT_TRUE(read_until(send, "SENT", &send_log)) << send_log;
  EXPECT_NE(send_log.find("DEVICE rla0+rla1 ptrSupport "), std::string::npos) << send_log;
  EXPECT_NE(send_log.find(ndev_line), std::string::npos) << send_log;
  EXPECT_NE(send_log.find(sender_says), std::string::npos) << send_log;
  send.write_line("done");
  EXPECT_TRUE(read_until(send, "OK", &send_log)) << send_log;
  send_log += send.read_all(30s);  // the close's log lines
  auto rs = recv.wait(30s), ss = send.wait(30s);
  ASSERT_TRUE(rs && ss);
  EXPECT_TRUE(Process::exited_ok(*rs)) << Process::describe(*rs) << "\n" << recv_log;
  EXPECT_TRUE(Process::exited_ok(*ss)) << Process::describe(*ss) << "\n" << send_log;
  for (const char* rail : {"rla0", "rla1"}) {
    EXPECT_GT(rail_bytes_sent(send_log, rail), 0) << rail << " carried nothing:\n" << send_log;
  }
}

// REMORA_RAILS on both sides, two veth pairs: the plugin offers the context's rails as
// ONE device ("rla0+rla1": every connection spreads over all of them, so several
// devices would each use every rail), and the messages, every byte checked, travel on
// both rails: the sender's log gives each rail's bytes when it closes the connection.
TEST(NcclPluginRails, TwoRailsAreOneDeviceAndBothCarryTheTransfer) {
  expect_both_rails_carry({"--sizes", "1048576,5000000", "--messages", "16", "--group", "2", "--reg", "1"}, 12, 12,
                          {"REMORA_RAILS==rlb0,rlb1"}, {"REMORA_RAILS==rla0,rla1"}, 1);
}

// NCCL's NIC fusion (makeVDevice, v9+; NCCL_NET_FORCE_MERGE or NCCL_NET_MERGE_LEVEL): two
// physical devices become one virtual device whose connections spread over both as
// rails, without REMORA_RAILS. Bad fusions are refused (the harness checks them first),
// the same fusion twice gives the same device, and the messages, every byte checked,
// travel on both rails.
TEST(NcclPluginRails, FusedDevicesAreOneVirtualDeviceAndBothCarryTheTransfer) {
  expect_both_rails_carry(
      {"--sizes", "1048576,5000000", "--messages", "16", "--group", "2", "--reg", "1", "--merge", "0,1"}, 12, 9,
      {"REMORA_NCCL_IFNAME==rlb0,rlb1"}, {"REMORA_NCCL_IFNAME==rla0,rla1"}, 3, "virtual device 2: rla0+rla1");
}

}  // namespace
