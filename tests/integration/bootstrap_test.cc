// Bootstrap end to end with real processes: `remora run` starting ranks that meet through
// the rendezvous store and exchange data, a failing rank reported by the launcher, and
// Communicator::init failing with a timeout that names the rank that never came.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/process.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;

TEST(Bootstrap, RemoraRunThreeRanksMeetAndExchange) {
  auto p = spawn_program({REMORA_TOOL_PATH, "run", "-n", "3", "--timeout", "100", "--", REMORA_COLL_PEER_PATH},
                         {"REMORA_COLL_TIMEOUT_MS=60000"});
  auto [out, status] = finish(*p);
  EXPECT_TRUE(Process::exited_ok(status)) << Process::describe(status) << "\n" << out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(out.find("rank " + std::to_string(r) + " of 3 ok"), std::string::npos) << out;
  }
}

TEST(Bootstrap, RemoraRunSingleRankNeedsNoNetwork) {
  auto p = spawn_program({REMORA_TOOL_PATH, "run", "-n", "1", REMORA_COLL_PEER_PATH});
  auto [out, status] = finish(*p);
  EXPECT_TRUE(Process::exited_ok(status)) << Process::describe(status) << "\n" << out;
  EXPECT_NE(out.find("rank 0 of 1 ok"), std::string::npos) << out;
}

TEST(Bootstrap, RemoraRunReportsTheFailingRankAndExitsNonZero) {
  // The other ranks wait in init for rank 1; the launcher must stop them, not wait out
  // their (long) rendezvous timeout.
  auto p = spawn_program(
      {REMORA_TOOL_PATH, "run", "-n", "3", "--timeout", "100", "--", REMORA_COLL_PEER_PATH, "--fail-rank", "1"},
      {"REMORA_COLL_TIMEOUT_MS=90000"});
  auto [out, status] = finish(*p);
  ASSERT_TRUE(WIFEXITED(status)) << Process::describe(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("remora run: rank 1 (pid"), std::string::npos) << out;
  EXPECT_NE(out.find("exited with code 3"), std::string::npos) << out;
}

// A rank that fails at once while the others are still starting: the launcher stops them
// and says why, and never claims a signal that nobody sent it (a SIGTERM for a rank that
// had not yet put back its default handlers used to run the launcher's handler there).
TEST(Bootstrap, RemoraRunStoppingRanksAtStartUpReportsNoSignalOfItsOwn) {
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto p = spawn_program({REMORA_TOOL_PATH, "run", "-n", "48", "--timeout", "100", "--", "sh", "-c",
                            "if [ \"$REMORA_RANK\" = 0 ]; then exit 3; fi; exec sleep 30"});
    auto [out, status] = finish(*p);
    ASSERT_TRUE(WIFEXITED(status)) << Process::describe(status) << "\n" << out;
    EXPECT_EQ(WEXITSTATUS(status), 1) << out;
    EXPECT_NE(out.find("remora run: rank 0 (pid"), std::string::npos) << out;
    EXPECT_NE(out.find("exited with code 3; stopping the other ranks"), std::string::npos) << out;
    EXPECT_EQ(out.find("got signal"), std::string::npos) << out;
  }
}

TEST(Bootstrap, RemoraRunTimeoutStopsEverythingWith124) {
  auto p = spawn_program({REMORA_TOOL_PATH, "run", "-n", "2", "--timeout", "1", "--", "sleep", "60"});
  auto [out, status] = finish(*p);
  ASSERT_TRUE(WIFEXITED(status)) << Process::describe(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 124) << out;
  EXPECT_NE(out.find("timed out"), std::string::npos) << out;
}

TEST(Bootstrap, InitTimesOutNamingTheRankThatNeverShowedUp) {
  const std::string store = "REMORA_STORE=127.0.0.1:" + std::to_string(free_tcp_port());
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < 2; ++r) {  // rank 2 of 3 never starts
    ranks.push_back(spawn_program({REMORA_COLL_PEER_PATH}, {"REMORA_RANK=" + std::to_string(r), "REMORA_WORLD_SIZE=3",
                                                            store, "REMORA_COLL_TIMEOUT_MS=1500"}));
  }
  auto [out0, status0] = finish(*ranks[0]);
  auto [out1, status1] = finish(*ranks[1]);
  ASSERT_TRUE(WIFEXITED(status0)) << Process::describe(status0) << "\n" << out0;
  EXPECT_EQ(WEXITSTATUS(status0), 2) << out0;
  EXPECT_NE(out0.find("timeout"), std::string::npos) << out0;
  EXPECT_NE(out0.find("rank(s) 2 of 3 never showed up"), std::string::npos) << out0;
  // Rank 1 fails too: with the same timeout, or because rank 0's store went away first;
  // either way naming rank 2.
  ASSERT_TRUE(WIFEXITED(status1)) << Process::describe(status1) << "\n" << out1;
  EXPECT_EQ(WEXITSTATUS(status1), 2) << out1;
  EXPECT_NE(out1.find("rank(s) 2 of 3 "), std::string::npos) << out1;
}

// The outside client's case: rank 2 holds another key, so it never gets into the store.
// Ranks 0 and 1 time out at about the same moment; rank 0's store goes with rank 0, and
// rank 1 must still name rank 2 (it named nobody in about 2 runs of 7).
TEST(Bootstrap, InitTimeoutNamesTheMissingRankEvenWhenTheStoreGoesFirst) {
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string store = "REMORA_STORE=127.0.0.1:" + std::to_string(free_tcp_port());
    std::vector<std::unique_ptr<Process>> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.push_back(spawn_program({REMORA_COLL_PEER_PATH},
                                    {"REMORA_RANK=" + std::to_string(r), "REMORA_WORLD_SIZE=3", store,
                                     "REMORA_COLL_TIMEOUT_MS=1200",
                                     std::string("REMORA_AUTH_KEY=") + (r == 2 ? "another-key" : "the-job-key")}));
    }
    for (int r = 0; r < 3; ++r) {
      auto [out, status] = finish(*ranks[static_cast<size_t>(r)]);
      ASSERT_TRUE(WIFEXITED(status)) << Process::describe(status) << "\n" << out;
      EXPECT_EQ(WEXITSTATUS(status), 2) << out;
      if (r == 2) {
        EXPECT_NE(out.find("access_denied"), std::string::npos) << out;
      } else {
        EXPECT_NE(out.find("rank(s) 2 of 3 "), std::string::npos) << "rank " << r << ":\n" << out;
      }
    }
  }
}

}  // namespace
}  // namespace remora::itest
