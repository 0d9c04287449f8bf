// Collectives across real processes, under the launchers people use: the whole
// remora_coll_check suite (every collective against the sequential reference, on every
// rank) started by `remora run`, by Open MPI's mpirun, and with explicit REMORA_*
// variables in four network namespaces joined by a bridge; and a rank killed (SIGKILL)
// or stopped in the middle of a loop of collectives, which must fail every surviving rank
// with the peer's failure, not a hang and not the collective timeout, also where the
// survivors wait in their communicator's shared segment.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/netns.h"
#include "support/process.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;

constexpr char kCheck[] = REMORA_COLL_CHECK_PATH;
/// Long enough that only a detected failure, never the timeout, ends a collective
/// within the test's own (shorter) waits: a pass proves detection.
constexpr char kLongCollTimeout[] = "REMORA_COLL_TIMEOUT_MS=120000";
/// Bound on one whole job; well below the ctest timeout, so a hang fails here first.
constexpr auto kJobDeadline = std::chrono::seconds(kSanitized ? 480 : 240);

/// Time left until `deadline` (at least 1 ms, so a wait still looks once).
std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                  std::chrono::milliseconds(1));
}

/// The lines of `out` that start with `prefix`, without it.
std::vector<std::string> lines_after(const std::string& out, const std::string& prefix) {
  std::vector<std::string> found;
  size_t at = 0;
  while (at < out.size()) {
    const size_t end = std::min(out.find('\n', at), out.size());
    if (out.compare(at, prefix.size(), prefix) == 0 && end - at >= prefix.size()) {
      found.push_back(out.substr(at + prefix.size(), end - at - prefix.size()));
    }
    at = end + 1;
  }
  return found;
}

/// `out` holds rank r's success line, "rank R of N: K checks ok (launcher L)" with K > 0.
void expect_rank_passed(const std::string& out, int r, int n, const std::string& launcher) {
  const std::string tail = " checks ok (launcher " + launcher + ")";
  for (const std::string& rest : lines_after(out, "rank " + std::to_string(r) + " of " + std::to_string(n) + ": ")) {
    const size_t digits = rest.find_first_not_of("0123456789");
    if (digits > 0 && digits != std::string::npos && rest[0] != '0' && rest.substr(digits) == tail) return;
  }
  ADD_FAILURE() << "rank " << r << " did not pass; output:\n" << out;
}

/// The job exited 0 and every rank 0..n-1 printed its success line.
void expect_every_rank_passed(const std::string& out, int status, int n, const std::string& launcher) {
  EXPECT_TRUE(Process::exited_ok(status)) << Process::describe(status) << "\n" << out;
  for (int r = 0; r < n; ++r) expect_rank_passed(out, r, n, launcher);
}

/// An executable `name` in one of PATH's folders ("" if none).
std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    std::string candidate = dirs.substr(begin, end - begin) + "/" + name;
    struct stat st {};
    if (end > begin && ::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    begin = end + 1;
  }
  return "";
}

TEST(CollLaunch, RemoraRunFiveRanksPassTheWholeSuite) {
  auto p = spawn_program(
      {REMORA_TOOL_PATH, "run", "-n", "5", "--timeout", std::to_string(kJobDeadline.count() - 10), "--", kCheck},
      {kLongCollTimeout});
  auto [out, status] = finish(*p, kJobDeadline);
  expect_every_rank_passed(out, status, 5, "remora");
}

TEST(CollLaunch, MpirunFourRanksPassTheWholeSuite) {
  const std::string mpirun = find_in_path("mpirun");
  if (mpirun.empty()) {
    GTEST_SKIP() << "mpirun not found in PATH: install Debian's openmpi-bin (scripts/lib/deps.sh lists it) to "
                    "run the Open MPI launcher test";
  }
  // The program never calls MPI_Init: mpirun only starts it with OMPI_COMM_WORLD_RANK
  // and _SIZE, which remora reads itself; the store address comes through -x.
  // --allow-run-as-root: CI containers run as root, which mpirun refuses otherwise;
  // --oversubscribe: four ranks on a machine with fewer cores (mpirun's slots).
  std::vector<std::string> env = {"REMORA_STORE=127.0.0.1:" + std::to_string(free_tcp_port()), kLongCollTimeout};
  // mpirun's own out-of-band channel stays on loopback (every rank is local): otherwise
  // it takes up every interface, and in containers bridge and veth interfaces it cannot
  // use are a known cause of hangs (open-mpi/ompi#2320, #6377).
  env.emplace_back("OMPI_MCA_oob_tcp_if_include=lo");
  // No binding: by default Open MPI pins ranks to cores, which on a shared 2-core CI
  // machine stacks busy ranks and their progress threads onto the cores it picks.
  env.emplace_back("OMPI_MCA_hwloc_base_binding_policy=none");
  // PMIx keeps job data in shared memory with process-shared locks by default, which
  // fails in some containers ("PMIX ERROR ... gds_ds12_lock_pthread.c",
  // open-mpi/ompi#7516); the hash store needs neither.
  env.emplace_back("PMIX_MCA_gds=hash");
  auto p = spawn_program({mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "4", "-x", "REMORA_STORE", "-x",
                          "REMORA_COLL_TIMEOUT_MS", kCheck},
                         std::move(env));
  auto [out, status] = finish(*p, kJobDeadline);
  expect_every_rank_passed(out, status, 4, "openmpi");
}

// The whole suite as 4 ranks, rank r in network namespace r % `hosts` of `hosts` joined by
// a bridge in another (each namespace is a host: the store's port is free in rank 0's,
// and every rank listens on the address through which it reaches rank 0). Every rank
// passes and says its small calls took `small_path`, and a 1 MiB allreduce `large_path`.
void expect_suite_across_namespaces(int hosts, const std::string& small_path, const std::string& alltoall_path,
                                    const std::string& large_path, int ranks_in_all = 4,
                                    const std::string& large_blocks_path = "") {
  const int n = ranks_in_all;
  NetnsBridge net(hosts);
  REMORA_NETNS_OR_SKIP(net);
  const std::string store = "REMORA_STORE=" + net.addr(0) + ":29500";
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> argv = net.exec_prefix(net.ns(r % hosts));
    argv.emplace_back(kCheck);
    ranks.push_back(spawn_program(
        std::move(argv),
        {"REMORA_RANK=" + std::to_string(r), "REMORA_WORLD_SIZE=" + std::to_string(n), store, kLongCollTimeout}));
  }
  const auto deadline = std::chrono::steady_clock::now() + kJobDeadline;
  for (int r = 0; r < n; ++r) {
    auto [out, status] = finish(*ranks[static_cast<size_t>(r)], left_until(deadline));
    EXPECT_TRUE(Process::exited_ok(status)) << "rank " << r << " " << Process::describe(status) << "\n" << out;
    expect_rank_passed(out, r, n, "remora");
    const std::string me = "rank " + std::to_string(r) + " of " + std::to_string(n) + ": ";
    EXPECT_EQ(lines_after(out, me + "small calls: "), std::vector<std::string>{small_path}) << out;
    EXPECT_EQ(lines_after(out, me + "small alltoall: "), std::vector<std::string>{alltoall_path}) << out;
    EXPECT_EQ(lines_after(out, me + "large allreduce: "), std::vector<std::string>{large_path}) << out;
    for (const char* kind : {"reduce_scatter", "allgather"}) {
      EXPECT_EQ(lines_after(out, me + "large " + kind + ": "),
                std::vector<std::string>{large_blocks_path.empty() ? large_path : large_blocks_path})
          << out;
    }
  }
}

// One rank per host: no two share memory, so everything goes by messages.
TEST(CollLaunch, FourNamespacesJoinedByABridgePassTheWholeSuite) {
  expect_suite_across_namespaces(4, "dissemination", "pairwise", "ring");
}

// Two hosts of two ranks each (ranks 0 and 2 in one namespace, 1 and 3 in the other):
// each pair shares a segment, and small calls go through it to the pair's leader, which
// meets the other leader over TCP ("hier", small alltoalls too); large allreduces,
// reduce_scatters and allgathers run in two levels (within each pair, then ranks 0 and 1, 2 and 3 across). The whole
// suite, bit for bit.
TEST(CollLaunch, TwoNamespacesOfTwoRanksEachGoThroughTheirSegmentsAndPassTheWholeSuite) {
  expect_suite_across_namespaces(2, "hier", "hier", "hier");
}

// Two hosts of three and two ranks (ranks 0, 2 and 4 in one namespace, 1 and 3 in the
// other): large allreduces, reduce_scatters and allgathers run in two levels over two
// lanes per host, rank 4 handing its data to the lanes of its host and taking its
// results back. The whole suite, bit for bit. Not under ThreadSanitizer, where it takes
// minutes: the lanes' threads are its in-process tests' (TwoLevel, TwoLevelRanks), and
// the job of 2 + 2 ranks above runs the suite across namespaces there.
TEST(CollLaunch, TwoNamespacesOfThreeAndTwoRanksRunTwoLevelsOverLanesAndPassTheWholeSuite) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the lanes run under ThreadSanitizer in the in-process TwoLevel tests";
#endif
  expect_suite_across_namespaces(2, "hier", "hier", "hier", 5);
}

// Three hosts of two ranks, one and one (ranks 0 and 3 in one namespace, 1 and 2 alone):
// large allreduces run in two levels over one lane per host, rank 3 handing its data to
// rank 0 and taking its result back; large reduce_scatters and allgathers one ring, host
// by host (lanes would carry as much into a host of one rank). The whole suite, bit for
// bit. Not under ThreadSanitizer, as above.
TEST(CollLaunch, ThreeNamespacesOfTwoOneAndOneRankRunAllreducesOverOneLaneAndPassTheWholeSuite) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the lanes run under ThreadSanitizer in the in-process TwoLevel tests";
#endif
  expect_suite_across_namespaces(3, "hier", "hier", "hier", 4, "ring");
}

// Rank `victim` of a looping 4-rank job is killed (SIGKILL) or stopped (SIGSTOP: its
// kernel still ACKs, so only the endpoints' heartbeat notices, REMORA_PEER_TIMEOUT_MS);
// every survivor must fail with the peer's failure, not wait it out. `small`: the loop of
// small calls, which the ranks (all of this host) wait for in their shared segment.
// `two_hosts`: ranks 0 and 2 in one network namespace, 1 and 3 in another, so that each
// pair shares a segment and the small calls' leaders (ranks 0 and 1) meet over TCP.
void expect_survivors_fail(int victim, bool stop, bool small = false, bool two_hosts = false) {
  constexpr int kRanks = 4;
  std::optional<NetnsBridge> net;
  if (two_hosts) {
    net.emplace(2);
    REMORA_NETNS_OR_SKIP(*net);
  }
  const std::string store = two_hosts ? "REMORA_STORE=" + net->addr(0) + ":29500"
                                      : "REMORA_STORE=127.0.0.1:" + std::to_string(free_tcp_port());
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::string> argv = two_hosts ? net->exec_prefix(net->ns(r % 2)) : std::vector<std::string>{};
    argv.insert(argv.end(), {kCheck, "--loop"});
    if (small) argv.emplace_back("--small");
    ranks.push_back(spawn_program(
        std::move(argv),
        {"REMORA_RANK=" + std::to_string(r), "REMORA_WORLD_SIZE=" + std::to_string(kRanks), store, kLongCollTimeout,
         // The default (30 s) where nothing stops, so the killed-rank case is as before.
         stop ? "REMORA_PEER_TIMEOUT_MS=1000" : "REMORA_PEER_TIMEOUT_MS=30000"}));
  }
  // Every rank has finished one round of the loop: the mesh is up and every rank is
  // inside the loop (it prints nothing more until something fails).
  const auto started_by = std::chrono::steady_clock::now() + 120s;
  for (int r = 0; r < kRanks; ++r) {
    Process& p = *ranks[static_cast<size_t>(r)];
    const std::string mine = "rank " + std::to_string(r) + " of 4: ";
    std::optional<std::string> line;
    // Its stderr shares the pipe: log lines (a memlock warning, say) may come first.
    while ((line = p.read_line(left_until(started_by))) && line->rfind(mine, 0) != 0) {
    }
    ASSERT_TRUE(line.has_value()) << "rank " << r << (p.timed_out() ? " timed out" : " EOF");
    ASSERT_EQ(*line, mine + (small ? (two_hosts ? "looping (barrier: hier)" : "looping (barrier: shm)") : "looping"));
  }
  if (stop) {
    ranks[static_cast<size_t>(victim)]->signal(SIGSTOP);  // killed (and reaped) at the end
  } else {
    const int victim_status = ranks[static_cast<size_t>(victim)]->kill_and_reap();
    ASSERT_TRUE(WIFSIGNALED(victim_status) && WTERMSIG(victim_status) == SIGKILL)
        << "the victim was not killed by us: " << Process::describe(victim_status);
  }

  // Every survivor must be gone well within the collective timeout: one that waits
  // it out (or hangs) is killed at this deadline and fails the test.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    auto [out, status] = finish(*ranks[static_cast<size_t>(r)], left_until(deadline));
    SCOPED_TRACE("rank " + std::to_string(r) + " " + Process::describe(status) + ":\n" + out);
    // Exit 2: an operation failed (1 would be wrong data, 0 a loop that went on).
    ASSERT_TRUE(WIFEXITED(status)) << "not a normal exit";
    EXPECT_EQ(WEXITSTATUS(status), 2);
    // "rank R of 4: <what> failed with <status code>: <message>"
    const auto lines = lines_after(out, "rank " + std::to_string(r) + " of 4: ");
    const auto failure = std::find_if(
        lines.begin(), lines.end(), [](const std::string& l) { return l.find(" failed with ") != std::string::npos; });
    ASSERT_NE(failure, lines.end()) << "no failure line";
    const std::string code = failure->substr(failure->find(" failed with ") + 13);
    EXPECT_NE(code.substr(0, code.find(':')), "timeout") << "the failure was waited out, not detected";
  }
}

class DeadRank : public ::testing::TestWithParam<int> {};

TEST_P(DeadRank, EverySurvivorFailsWithThePeersFailureNotATimeout) { expect_survivors_fail(GetParam(), false); }

INSTANTIATE_TEST_SUITE_P(Victim, DeadRank, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& p) { return "Rank" + std::to_string(p.param); });

TEST(StoppedRank, EverySurvivorFailsWithinThePeerTimeoutNotACollectiveTimeout) { expect_survivors_fail(2, true); }

TEST(DeadRankInTheSegment, EverySurvivorWaitingInTheSharedSegmentFailsNotATimeout) {
  expect_survivors_fail(1, false, true);
}

TEST(StoppedRankInTheSegment, EverySurvivorWaitingInTheSharedSegmentFailsWithinThePeerTimeout) {
  expect_survivors_fail(1, true, true);
}

// Two hosts of two ranks: a member killed (its leader waits for it in the segment, the
// other host's ranks for that leader), and a leader stopped (its member waits for it in
// the segment, the other leader for its message).
TEST(DeadRankInTwoHostsSegments, EverySurvivorFailsNotATimeout) { expect_survivors_fail(3, false, true, true); }

TEST(StoppedLeaderInTwoHostsSegments, EverySurvivorFailsWithinThePeerTimeout) {
  expect_survivors_fail(1, true, true, true);
}

// The same two hosts with the whole loop, whose large allreduce, reduce_scatter and
// allgather run in two levels (rings within each host's pair and across): a rank
// killed, and a rank stopped, wherever in those levels the others are.
TEST(DeadRankInTwoLevelAllreduces, EverySurvivorFailsNotATimeout) { expect_survivors_fail(3, false, false, true); }

TEST(StoppedRankInTwoLevelAllreduces, EverySurvivorFailsWithinThePeerTimeout) {
  expect_survivors_fail(2, true, false, true);
}

}  // namespace
}  // namespace remora::itest
