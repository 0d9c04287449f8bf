// Bootstrap end to end with real processes: `remora run` starting ranks that meet through
// the rendezvous store and exchange data, a failing rank reported by the launcher, and
// Communicator::init failing with a timeout that names the rank that never came.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "support/process.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Process> spawn(std::vector<std::string> argv, std::vector<std::string> env = {}) {
  auto p = std::make_unique<Process>(Process::Options{.argv = std::move(argv), .env = std::move(env), .capture_stderr = true});
  EXPECT_TRUE(p->ok()) << p->error();
  return p;
}

/// Output and wait status of a short command; a hang fails instead of blocking the suite.
std::pair<std::string, int> finish(Process& p, std::chrono::milliseconds timeout = 120s) {
  std::string out = p.read_all(timeout);
  auto status = p.wait(timeout);
  if (!status) {
    ADD_FAILURE() << "still running; output so far:\n" << out;
    return {out, p.kill_and_reap()};
  }
  return {out, *status};
}

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(Bootstrap, RemoraRunThreeRanksMeetAndExchange) {
  auto p = spawn({REMORA_TOOL_PATH, "run", "-n", "3", "--timeout", "100", "--", REMORA_COLL_PEER_PATH},
                 {"REMORA_COLL_TIMEOUT_MS=60000"});
  auto [out, status] = finish(*p);
  EXPECT_TRUE(Process::exited_ok(status)) << Process::describe(status) << "\n" << out;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(out.find("rank " + std::to_string(r) + " of 3 ok"), std::string::npos) << out;
  }
}

TEST(Bootstrap, RemoraRunSingleRankNeedsNoNetwork) {
  auto p = spawn({REMORA_TOOL_PATH, "run", "-n", "1", REMORA_COLL_PEER_PATH});
  auto [out, status] = finish(*p);
  EXPECT_TRUE(Process::exited_ok(status)) << Process::describe(status) << "\n" << out;
  EXPECT_NE(out.find("rank 0 of 1 ok"), std::string::npos) << out;
}

TEST(Bootstrap, RemoraRunReportsTheFailingRankAndExitsNonZero) {
  // The other ranks wait in init for rank 1; the launcher must stop them, not wait out
  // their (long) rendezvous timeout.
  auto p = spawn({REMORA_TOOL_PATH, "run", "-n", "3", "--timeout", "100", "--", REMORA_COLL_PEER_PATH, "--fail-rank", "1"},
                 {"REMORA_COLL_TIMEOUT_MS=90000"});
  auto [out, status] = finish(*p);
  ASSERT_TRUE(WIFEXITED(status)) << Process::describe(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("remora run: rank 1 (pid"), std::string::npos) << out;
  EXPECT_NE(out.find("exited with code 3"), std::string::npos) << out;
}

TEST(Bootstrap, RemoraRunTimeoutStopsEverythingWith124) {
  auto p = spawn({REMORA_TOOL_PATH, "run", "-n", "2", "--timeout", "1", "--", "sleep", "60"});
  auto [out, status] = finish(*p);
  ASSERT_TRUE(WIFEXITED(status)) << Process::describe(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 124) << out;
  EXPECT_NE(out.find("timed out"), std::string::npos) << out;
}

TEST(Bootstrap, InitTimesOutNamingTheRankThatNeverShowedUp) {
  const std::string store = "REMORA_STORE=127.0.0.1:" + std::to_string(free_port());
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < 2; ++r) {  // rank 2 of 3 never starts
    ranks.push_back(spawn({REMORA_COLL_PEER_PATH}, {"REMORA_RANK=" + std::to_string(r), "REMORA_WORLD_SIZE=3", store,
                                                    "REMORA_COLL_TIMEOUT_MS=1500"}));
  }
  auto [out0, status0] = finish(*ranks[0]);
  auto [out1, status1] = finish(*ranks[1]);
  ASSERT_TRUE(WIFEXITED(status0)) << Process::describe(status0) << "\n" << out0;
  EXPECT_EQ(WEXITSTATUS(status0), 2) << out0;
  EXPECT_NE(out0.find("timeout"), std::string::npos) << out0;
  EXPECT_NE(out0.find("rank(s) 2 of 3 never showed up"), std::string::npos) << out0;
  // Rank 1 fails too: with the same timeout, or because rank 0's store went away first.
  ASSERT_TRUE(WIFEXITED(status1)) << Process::describe(status1) << "\n" << out1;
  EXPECT_EQ(WEXITSTATUS(status1), 2) << out1;
}

}  // namespace
}  // namespace remora::itest
