// remora_coll_shrink — one rank of a job that loses ranks and goes on: init, then a loop
// of checked collectives; when one fails (a rank was killed), the survivors learn who
// failed, shrink to the rest and prove the new communicator with exactly checked
// collectives, then go on looping (or end) on it. Used by coll_shrink_test.cc.
//
//   remora_coll_shrink --stages=S1/S2/...  [--shrink-timeout-ms=T] [--die-as-rank=W]
//
// --die-as-rank=W: world rank W SIGKILLs itself after its first round (for launchers,
// such as `remora run --keep-going`, where the test cannot reach the ranks' pids).
// Each stage is the exclude list of one shrink, comma-separated ranks of the
// communicator at that point (empty: none), or "auto" for what failed_ranks() says,
// optionally followed by "@<ms>", that call's timeout. A stage may name several
// lists joined by "+": when a shrink fails, the next is called at once, on the same
// communicator (the retry of a failed attempt). After the last stage's shrink the rank
// runs a few more rounds and exits 0. Output lines, each
// "rank W of N: " (W, N: the world rank and size from the launcher) followed by:
//   looping as rank R of M epoch E      the loop runs (once per communicator)
//   collective failed with <code>: <m>  the loop saw the failure
//   failed ranks {a, b}                 what failed_ranks() said (communicator ranks)
//   shrink failed with <code>: <m>      exit 3 when the stage has no list left
//   verified as rank R of M epoch E members {w0, w1}   the new communicator's checks passed
//   done                                exit 0
// Exit 1: a result differs (the line says what); 2: a failure with no stage left.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "remora/remora.h"

namespace {

using namespace std::chrono_literals;

constexpr int kExitMismatch = 1;
constexpr int kExitFailed = 2;
constexpr int kExitShrinkFailed = 3;
constexpr int kExitUsage = 64;
constexpr int kRoundsAfterLastShrink = 5;

int g_rank = -1, g_size = 0;

void say(const std::string& line) {
  std::printf("rank %d of %d: %s\n", g_rank, g_size, line.c_str());
  std::fflush(stdout);
}

std::string list_text(const std::vector<int>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "}";
}

/// One call of shrink.
struct Attempt {
  bool automatic = false;
  std::vector<int> exclude;
  std::optional<std::chrono::milliseconds> timeout;  ///< else --shrink-timeout-ms, else the communicator's
};

/// A shrink and the retries that follow it when it fails.
using Stage = std::vector<Attempt>;

Attempt parse_attempt(const std::string& text) {
  Attempt a;
  std::string list = text;
  if (const size_t at = text.find('@'); at != std::string::npos) {
    a.timeout = std::chrono::milliseconds(std::atol(text.c_str() + at + 1));
    list = text.substr(0, at);
  }
  if (list == "auto") {
    a.automatic = true;
    return a;
  }
  size_t p = 0;
  while (p < list.size()) {
    const size_t comma = std::min(list.find(',', p), list.size());
    a.exclude.push_back(std::atoi(list.substr(p, comma - p).c_str()));
    p = comma + 1;
  }
  return a;
}

[[noreturn]] void mismatch(const std::string& what) {
  say("mismatch: " + what);
  std::exit(kExitMismatch);
}

/// One loop round: a ring-sized allreduce (puts and notifications) and a barrier.
/// Returns the first failure; exits on wrong data.
remora::Status round(remora::Communicator& c, int n) {
  std::vector<float> v(64 * 1024 + 3, float(c.rank() + 1));
  remora::Status s = c.allreduce(remora::kInPlace, v.data(), v.size(), remora::DataType::kFloat32, remora::ReduceOp::kSum);
  if (!s) return s;
  const float want = float(c.size() * (c.size() + 1) / 2);
  for (size_t i = 0; i < v.size(); i += 997) {
    if (v[i] != want) mismatch("loop allreduce element " + std::to_string(i) + " of round " + std::to_string(n));
  }
  return c.barrier();
}

/// The new communicator's checks: membership (its ranks are the survivors in old order),
/// allreduce (small and ring-sized), allgather, broadcast from every root, barrier.
remora::Status verify(remora::Communicator& c, const std::vector<int>& members) {
  const int r = c.rank(), m = c.size();
  if (m != static_cast<int>(members.size())) mismatch("size " + std::to_string(m) + ", want " + list_text(members));
  if (members[static_cast<size_t>(r)] != g_rank) mismatch("rank " + std::to_string(r) + " in " + list_text(members));
  std::vector<int32_t> mine{g_rank}, all(static_cast<size_t>(m), -1);
  if (auto s = c.allgather(mine.data(), all.data(), 1, remora::DataType::kInt32); !s) return s;
  if (std::vector<int>(all.begin(), all.end()) != members) mismatch("allgather of world ranks " + list_text({all.begin(), all.end()}));
  for (size_t count : {size_t{5}, size_t{300 * 1024}}) {
    std::vector<int64_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = int64_t(r) * 7 + int64_t(i);
    if (auto s = c.allreduce(remora::kInPlace, x.data(), count, remora::DataType::kInt64, remora::ReduceOp::kSum); !s) return s;
    for (size_t i = 0; i < count; ++i) {
      const int64_t want = 7 * int64_t(m) * (m - 1) / 2 + int64_t(m) * int64_t(i);
      if (x[i] != want) mismatch("allreduce of " + std::to_string(count) + ": element " + std::to_string(i));
    }
  }
  for (int root = 0; root < m; ++root) {
    std::vector<uint8_t> b(20000);
    for (size_t i = 0; i < b.size(); ++i) b[i] = r == root ? uint8_t(root * 31 + i) : 0;
    if (auto s = c.broadcast(b.data(), b.size(), remora::DataType::kUint8, root); !s) return s;
    for (size_t i = 0; i < b.size(); ++i) {
      if (b[i] != uint8_t(root * 31 + i)) mismatch("broadcast from " + std::to_string(root) + ": byte " + std::to_string(i));
    }
  }
  return c.barrier();
}

int usage(const char* why) {
  std::fprintf(stderr, "remora_coll_shrink: %s\nusage: remora_coll_shrink --stages=S1/S2 [--shrink-timeout-ms=T]\n", why);
  return kExitUsage;
}

int run(int argc, char** argv) {
  std::vector<Stage> stages;
  remora::CommOptions shrink_options;
  int die_as = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--stages=")) {
      std::string text(a.substr(9));
      size_t at = 0;
      while (at <= text.size()) {
        const size_t end = std::min(text.find('/', at), text.size());
        const std::string one = text.substr(at, end - at);
        Stage st;
        size_t p = 0;
        while (p <= one.size()) {
          const size_t plus = std::min(one.find('+', p), one.size());
          st.push_back(parse_attempt(one.substr(p, plus - p)));
          p = plus + 1;
        }
        stages.push_back(st);
        at = end + 1;
      }
    } else if (a.starts_with("--die-as-rank=")) {
      die_as = std::atoi(argv[i] + 14);
    } else if (a.starts_with("--shrink-timeout-ms=")) {
      shrink_options.timeout = std::chrono::milliseconds(std::atol(argv[i] + 20));
    } else {
      return usage(("unknown argument " + std::string(a)).c_str());
    }
  }
  if (stages.empty()) return usage("--stages is required");

  auto launch = remora::detect_launch();
  if (!launch) return usage(launch.status().to_string().c_str());
  g_rank = launch->rank;
  g_size = launch->size;
  auto ctx = remora::Context::create();
  if (!ctx) return say("Context::create failed with " + ctx.status().to_string()), kExitFailed;
  auto world = remora::Communicator::init(**ctx, *launch);
  if (!world) return say("init failed with " + world.status().to_string()), kExitFailed;

  std::vector<std::unique_ptr<remora::Communicator>> comms;  // every communicator made, kept until the end
  comms.push_back(std::move(*world));
  std::vector<int> members;  // world ranks of the current communicator
  for (int w = 0; w < g_size; ++w) members.push_back(w);
  size_t stage = 0;
  int rounds_left = -1;  // until a failure
  for (int n = 0; rounds_left != 0; ++n) {
    remora::Communicator& c = *comms.back();
    remora::Status s = round(c, n);
    if (s) {
      if (n == 0 && g_rank == die_as && comms.size() == 1) {
        say("dying");
        ::raise(SIGKILL);
      }
      if (n == 0) {
        say("looping as rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) + " epoch " +
            std::to_string(c.epoch()));
      }
      if (rounds_left > 0) --rounds_left;
      // Pacing only (the CPUs are shared); no rank waits for another's sleep.
      std::this_thread::sleep_for(2ms);
      continue;
    }
    say("collective failed with " + s.to_string());
    const std::vector<int> failed = c.failed_ranks();
    say("failed ranks " + list_text(failed));
    if (stage == stages.size()) return kExitFailed;
    const Stage& st = stages[stage++];
    std::vector<int> exclude;
    remora::Result<std::unique_ptr<remora::Communicator>> next = remora::Status(remora::StatusCode::kInternal, "");
    for (const Attempt& attempt : st) {  // no pause between a failed attempt and the next
      exclude = attempt.automatic ? failed : attempt.exclude;
      remora::CommOptions options = shrink_options;
      if (attempt.timeout) options.timeout = *attempt.timeout;
      next = c.shrink(exclude, options);
      if (next) break;
      say("shrink failed with " + next.status().to_string());
    }
    if (!next) return kExitShrinkFailed;
    std::vector<int> kept;
    for (int i = 0; i < static_cast<int>(members.size()); ++i) {
      if (std::find(exclude.begin(), exclude.end(), i) == exclude.end()) kept.push_back(members[static_cast<size_t>(i)]);
    }
    members = kept;
    if (remora::Status v = verify(**next, members); !v) {
      return say("verification failed with " + v.to_string()), kExitFailed;
    }
    say("verified as rank " + std::to_string((*next)->rank()) + " of " + std::to_string((*next)->size()) + " epoch " +
        std::to_string((*next)->epoch()) + " members " + list_text(members));
    comms.push_back(std::move(*next));
    n = -1;  // "looping as" again for the new communicator
    if (stage == stages.size()) rounds_left = kRoundsAfterLastShrink;
  }
  // Orderly teardown (the new communicator's endpoints close with GOODBYE), so that a
  // survivor still in its last round sees a rank that finished, not one that died.
  comms.clear();
  ctx->reset();
  say("done");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
