// Shrinking a communicator to its survivors across real processes (remora_coll_shrink):
// a 4-rank job loops over collectives; a rank is SIGKILLed (a middle one, or rank 0,
// which hosts the rendezvous store); every survivor sees the failure and who failed,
// shrinks to the others without restarting and without the store, and checks
// allgather, allreduce, broadcast and barrier on the new communicator exactly; then a
// second death and a second shrink; survivors that disagree on the list fail with a
// clear error within the shrink's timeout instead of hanging; and a failed shrink called
// again at once by every survivor succeeds.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "itest_util.h"
#include "support/process.h"

namespace remora::itest {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr char kShrink[] = REMORA_COLL_SHRINK_PATH;
constexpr int kRanks = 4;
/// Long enough that only a detected failure ends the loop's collectives.
constexpr char kLongCollTimeout[] = "REMORA_COLL_TIMEOUT_MS=120000";

std::chrono::milliseconds left_until(Clock::time_point deadline) {
  return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()), 1ms);
}

class Job {
 public:
  /// Starts kRanks ranks of remora_coll_shrink, rank r with args(r).
  template <typename Args>
  explicit Job(Args args, const std::vector<std::string>& extra_env = {}) {
    const std::string store = "REMORA_STORE=127.0.0.1:" + std::to_string(free_tcp_port());
    for (int r = 0; r < kRanks; ++r) {
      std::vector<std::string> argv{kShrink};
      for (auto& a : args(r)) argv.push_back(a);
      std::vector<std::string> env{"REMORA_RANK=" + std::to_string(r), "REMORA_WORLD_SIZE=" + std::to_string(kRanks),
                                   store, kLongCollTimeout};
      env.insert(env.end(), extra_env.begin(), extra_env.end());
      ranks_.push_back(spawn_program(std::move(argv), std::move(env)));
      out_.emplace_back();
    }
  }

  /// Reads rank r's output until a line "rank r of 4: <starts_with>…"; returns its rest.
  std::optional<std::string> expect_line(int r, const std::string& starts_with, Clock::time_point deadline) {
    const std::string mine = "rank " + std::to_string(r) + " of 4: ";
    Process& p = *ranks_[static_cast<size_t>(r)];
    while (auto line = p.read_line(left_until(deadline))) {
      out_[static_cast<size_t>(r)] += *line + "\n";
      if (line->rfind(mine + starts_with, 0) == 0) return line->substr(mine.size());
    }
    ADD_FAILURE() << "rank " << r << ": no line starting with '" << starts_with << "' ("
                  << (p.timed_out() ? "timed out" : "EOF") << "); output so far:\n"
                  << out_[static_cast<size_t>(r)];
    return std::nullopt;
  }

  /// SIGSTOP: its kernel still takes connections; only the heartbeat notices it.
  void stop(int r) { ranks_[static_cast<size_t>(r)]->signal(SIGSTOP); }

  void kill(int r) {
    const int status = ranks_[static_cast<size_t>(r)]->kill_and_reap();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << Process::describe(status);
  }

  /// Waits for rank r's exit; its status, with the rest of its output in `out`.
  int finish_rank(int r, Clock::time_point deadline, std::string* out) {
    auto [rest, status] = finish(*ranks_[static_cast<size_t>(r)], left_until(deadline));
    *out = out_[static_cast<size_t>(r)] + rest;
    return status;
  }

 private:
  std::vector<std::unique_ptr<Process>> ranks_;
  std::vector<std::string> out_;
};

/// "... epoch E ..." → E.
std::string epoch_of(const std::string& line) {
  const size_t at = line.find(" epoch ");
  if (at == std::string::npos) return "";
  const size_t begin = at + 7;
  return line.substr(begin, line.find(' ', begin) - begin);
}

std::string list_text(const std::vector<int>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "}";
}

/// Kills `victims[0]`, then (after the survivors' shrink) `victims[1]`, …, each named in
/// world ranks; the survivors shrink with `stages` each time and must verify the new
/// communicator, report the failed rank, and agree on one fresh epoch per shrink.
void kill_and_shrink(const std::vector<int>& victims, const std::string& stages, bool stop = false) {
  // A stopped rank is noticed by the heartbeat (REMORA_PEER_TIMEOUT_MS) and by
  // failed_ranks()'s handshake, which it never answers (5 s).
  Job job([&](int) { return std::vector<std::string>{"--stages=" + stages, "--shrink-timeout-ms=60000"}; },
          stop ? std::vector<std::string>{"REMORA_PEER_TIMEOUT_MS=1000"} : std::vector<std::string>{});
  const auto deadline = Clock::now() + 180s;
  std::set<int> alive;
  for (int r = 0; r < kRanks; ++r) {
    alive.insert(r);
    ASSERT_TRUE(job.expect_line(r, "looping as rank " + std::to_string(r) + " of 4 epoch 0", deadline));
  }
  std::vector<int> members(alive.begin(), alive.end());  // world ranks, in communicator order
  std::set<std::string> epochs{"0"};
  for (int victim : victims) {
    const int victim_comm_rank =
        static_cast<int>(std::find(members.begin(), members.end(), victim) - members.begin());
    if (stop) {
      job.stop(victim);  // killed (and reaped) when the job ends
    } else {
      job.kill(victim);
    }
    alive.erase(victim);
    members.erase(std::find(members.begin(), members.end(), victim));
    std::string epoch;
    for (int r : alive) {
      SCOPED_TRACE("rank " + std::to_string(r) + " after the death of world rank " + std::to_string(victim));
      auto failed = job.expect_line(r, "collective failed with ", deadline);
      ASSERT_TRUE(failed);
      // "collective failed with <code>: <message>": detected, not the collective's timeout.
      EXPECT_NE(failed->substr(0, 31), "collective failed with timeout:") << *failed;
      auto who = job.expect_line(r, "failed ranks ", deadline);
      ASSERT_TRUE(who);
      EXPECT_EQ(*who, "failed ranks " + list_text({victim_comm_rank}));
      const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
      auto verified = job.expect_line(r, "verified as ", deadline);
      ASSERT_TRUE(verified);
      EXPECT_EQ(verified->substr(0, verified->find(" epoch ")),
                "verified as rank " + std::to_string(new_rank) + " of " + std::to_string(members.size()));
      EXPECT_NE(verified->find(" members " + list_text(members)), std::string::npos) << *verified;
      if (epoch.empty()) epoch = epoch_of(*verified);
      EXPECT_EQ(epoch_of(*verified), epoch) << "the survivors' epochs differ";
      ASSERT_TRUE(job.expect_line(r, "looping as rank " + std::to_string(new_rank), deadline));
    }
    EXPECT_TRUE(epochs.insert(epoch).second) << "epoch " << epoch << " was not fresh";
  }
  for (int r : alive) {
    std::string out;
    const int status = job.finish_rank(r, deadline, &out);
    EXPECT_TRUE(Process::exited_ok(status)) << "rank " << r << " " << Process::describe(status) << "\n" << out;
    EXPECT_NE(out.find("rank " + std::to_string(r) + " of 4: done"), std::string::npos) << out;
  }
}

TEST(ShrinkSurvivors, AMiddleRankDiesAndTheSurvivorsGoOnWithoutIt) { kill_and_shrink({2}, "2"); }

TEST(ShrinkSurvivors, RankZeroWhichHostedTheStoreDiesAndTheSurvivorsExcludeWhatFailedRanksSays) {
  kill_and_shrink({0}, "auto");
}

TEST(ShrinkSurvivors, AStoppedRankIsFoundByTheHeartbeatAndTheSurvivorsShrinkWithoutIt) {
  kill_and_shrink({1}, "auto", /*stop=*/true);
}

TEST(ShrinkSurvivors, ASecondDeathAfterTheFirstShrinkShrinksAgain) {
  // World rank 1 dies (communicator rank 1), then world rank 0 (rank 0 of the shrunk one).
  kill_and_shrink({1, 0}, "1/0");
}

TEST(ShrinkSurvivors, UnderRemoraRunWithKeepGoingTheSurvivorsOfAKilledRankShrinkAndFinish) {
  auto p = spawn_program({REMORA_TOOL_PATH, "run", "-n", "4", "--keep-going", "--timeout", "200", "--", kShrink,
                          "--stages=auto", "--die-as-rank=2"},
                         {kLongCollTimeout});
  auto [out, status] = finish(*p, 240s);
  // A rank died, so the launcher still reports a failure, but after the others ended.
  ASSERT_TRUE(WIFEXITED(status)) << Process::describe(status) << "\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("remora run: rank 2 "), std::string::npos) << out;
  EXPECT_NE(out.find("the others go on (--keep-going)"), std::string::npos) << out;
  for (int r : {0, 1, 3}) {
    const std::string me = "rank " + std::to_string(r) + " of 4: ";
    EXPECT_NE(out.find(me + "failed ranks {2}"), std::string::npos) << out;
    EXPECT_NE(out.find(me + "verified as rank " + std::to_string(r == 3 ? 2 : r) + " of 3"), std::string::npos) << out;
    EXPECT_NE(out.find(me + "done"), std::string::npos) << out;
  }
}

/// Kills world rank `victim`; each survivor r then shrinks with `stages(r)`, whose first
/// list fails (every survivor must see exactly one "shrink failed") and whose retry,
/// called at once, must succeed on every survivor with the same fresh epoch.
void kill_and_retry(int victim, const std::function<std::string(int)>& stages) {
  Job job([&](int r) { return std::vector<std::string>{"--stages=" + stages(r), "--shrink-timeout-ms=60000"}; });
  const auto deadline = Clock::now() + 180s;
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(job.expect_line(r, "looping as rank " + std::to_string(r), deadline));
  job.kill(victim);
  std::vector<int> members;
  for (int r = 0; r < kRanks; ++r) {
    if (r != victim) members.push_back(r);
  }
  std::string epoch;
  for (size_t i = 0; i < members.size(); ++i) {
    const int r = members[i];
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(job.expect_line(r, "failed ranks ", deadline));
    auto failed = job.expect_line(r, "shrink failed with ", deadline);
    ASSERT_TRUE(failed);
    auto verified = job.expect_line(r, "verified as ", deadline);
    ASSERT_TRUE(verified) << "the retry failed";
    EXPECT_EQ(verified->substr(0, verified->find(" epoch ")),
              "verified as rank " + std::to_string(i) + " of " + std::to_string(members.size()));
    EXPECT_NE(verified->find(" members " + list_text(members)), std::string::npos) << *verified;
    if (epoch.empty()) epoch = epoch_of(*verified);
    EXPECT_EQ(epoch_of(*verified), epoch) << "the survivors' epochs differ";
  }
  for (int r : members) {
    std::string out;
    const int status = job.finish_rank(r, deadline, &out);
    EXPECT_TRUE(Process::exited_ok(status)) << "rank " << r << " " << Process::describe(status) << "\n" << out;
    // One failed attempt, then the retry: no other failure.
    size_t failures = 0;
    for (size_t at = out.find("shrink failed with"); at != std::string::npos;
         at = out.find("shrink failed with", at + 1)) {
      ++failures;
    }
    EXPECT_EQ(failures, 1u) << "rank " << r << ":\n" << out;
  }
}

// The outside client's case: rank 2 passes a wrong list, every survivor fails that
// attempt and calls shrink again at once with the right one.
TEST(ShrinkRetry, AfterADisagreementEverySurvivorRetriesAtOnceAndSucceeds) {
  kill_and_retry(3, [](int r) { return r == 2 ? "1,3+3" : "3+3"; });
}

TEST(ShrinkRetry, AfterADisagreementWithTheStoreHostDeadEverySurvivorRetriesAtOnceAndSucceeds) {
  kill_and_retry(0, [](int r) { return r == 3 ? "0,2+0" : "0+0"; });
}

// No disagreement: every survivor keeps the dead rank 0 at first, so its dial fails at once.
TEST(ShrinkRetry, AfterKeepingTheDeadStoreHostEverySurvivorRetriesAtOnceAndSucceeds) {
  kill_and_retry(0, [](int) { return "+0"; });
}

// No disagreement: every survivor keeps the dead rank 3 at first and waits for it until a
// short timeout; the first to give up retries while the others are still at their first.
TEST(ShrinkRetry, AfterATimeoutEverySurvivorRetriesAtOnceAndSucceeds) {
  kill_and_retry(3, [](int) { return "@2000+3"; });
}

TEST(ShrinkSurvivors, SurvivorsThatDisagreeOnTheListFailWithinTheTimeoutNotHang) {
  // Rank 3 dies; ranks 0 and 1 exclude it, rank 2 excludes rank 1 as well.
  Job job([](int r) {
    return std::vector<std::string>{r == 2 ? "--stages=1,3" : "--stages=3", "--shrink-timeout-ms=20000"};
  });
  const auto deadline = Clock::now() + 150s;
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(job.expect_line(r, "looping as rank", deadline));
  job.kill(3);
  const auto started = Clock::now();
  bool named_the_disagreement = false;
  for (int r = 0; r < 3; ++r) {
    std::string out;
    const int status = job.finish_rank(r, deadline, &out);
    SCOPED_TRACE("rank " + std::to_string(r) + " " + Process::describe(status) + ":\n" + out);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 3) << "shrink must fail on every survivor";
    if (out.find("disagree on the ranks to exclude") != std::string::npos) named_the_disagreement = true;
  }
  EXPECT_TRUE(named_the_disagreement);
  // Within the shrink's 20 s bound (plus detection and teardown), not a hang.
  EXPECT_LT(Clock::now() - started, 60s);
}

}  // namespace
}  // namespace remora::itest
