// remora_coll_scale — one rank of a large job, started by `remora run -n N` (tests and
// bench/scale.py): Communicator::init, then collectives whose results it checks exactly,
// reporting what this rank holds at each point. Public API only, so that it also
// measures earlier builds.
//
//   remora_coll_scale [--alltoall] [--p2p-all] [--shrink-victim=W]
//
// Prints one JSON line per rank, "{...}" with: rank, size, init_ms, and after init,
// after the small collectives (allreduce, broadcast, reduce_scatter, allgather,
// barrier), and after each optional step: the sockets this process holds (counted in
// /proc/self/fd), the communicator's own count where this build has one (-1 otherwise),
// and the resident memory in KiB. --alltoall: an alltoall as the communicator chooses,
// then a pairwise one, each checked by every rank.
// --p2p-all: a send to and a receive from every other rank. --shrink-victim=W: world
// rank W SIGKILLs itself after the small collectives; the survivors see the failure,
// shrink to the rest and check an allreduce there. Exit 0 when every check passed; 1 on
// a wrong result (the line says which); 2 when an operation failed (the line says why).
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "remora/remora.h"

namespace {

using Clock = std::chrono::steady_clock;

int g_rank = -1;

/// Sockets this process holds now.
int sockets_held() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) {
    char target[64] = {};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t len = ::readlink(path.c_str(), target, sizeof target - 1);
    if (len > 0 && std::string_view(target, static_cast<size_t>(len)).starts_with("socket:")) ++n;
  }
  ::closedir(d);
  return n;
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) return std::atol(line.c_str() + 6);
  }
  return -1;
}

[[noreturn]] void failed(const char* what, const remora::Status& s) {
  std::printf("{\"rank\": %d, \"failed\": \"%s: %s\"}\n", g_rank, what, s.to_string().c_str());
  std::fflush(stdout);
  std::exit(2);
}

[[noreturn]] void wrong(const std::string& what) {
  std::printf("{\"rank\": %d, \"wrong\": \"%s\"}\n", g_rank, what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

void check(const char* what, const remora::Status& s) {
  if (!s) failed(what, s);
}

int64_t value(int rank, size_t i) { return int64_t(rank) * 1000003 + int64_t(i) * 7919; }

/// allreduce (a small and a ring-sized one), broadcast from the last rank,
/// reduce_scatter, allgather, barrier: every result checked.
void small_collectives(remora::Communicator& c) {
  const int r = c.rank(), n = c.size();
  for (size_t count : {size_t{3}, size_t{40'000}}) {
    std::vector<int64_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = value(r, i);
    check("allreduce",
          c.allreduce(remora::kInPlace, x.data(), count, remora::DataType::kInt64, remora::ReduceOp::kSum));
    for (size_t i = 0; i < count; ++i) {
      int64_t want = 0;
      for (int q = 0; q < n; ++q) want += value(q, i);
      if (x[i] != want) wrong("allreduce of " + std::to_string(count) + " at " + std::to_string(i));
    }
  }
  std::vector<int32_t> b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = r == n - 1 ? int32_t(i * 31 + 7) : -1;
  check("broadcast", c.broadcast(b.data(), b.size(), remora::DataType::kInt32, n - 1));
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] != int32_t(i * 31 + 7)) wrong("broadcast at " + std::to_string(i));
  }
  constexpr size_t kBlock = 16;
  std::vector<int64_t> blocks(kBlock * static_cast<size_t>(n)), reduced(kBlock);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = value(r, i);
  check("reduce_scatter",
        c.reduce_scatter(blocks.data(), reduced.data(), kBlock, remora::DataType::kInt64, remora::ReduceOp::kSum));
  for (size_t i = 0; i < kBlock; ++i) {
    int64_t want = 0;
    for (int q = 0; q < n; ++q) want += value(q, size_t(r) * kBlock + i);
    if (reduced[i] != want) wrong("reduce_scatter at " + std::to_string(i));
  }
  std::vector<int32_t> mine(4, r), all(4 * size_t(n), -1);
  check("allgather", c.allgather(mine.data(), all.data(), mine.size(), remora::DataType::kInt32));
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] != int32_t(i / 4)) wrong("allgather at " + std::to_string(i));
  }
  check("barrier", c.barrier());
}

/// An alltoall of 8 int64 a block, checked: first as the communicator chooses (the ranks
/// of one host through their shared segments, the groups' leaders by messages), then
/// pairwise, which opens an endpoint to every other rank.
void alltoall(remora::Communicator& c) {
  const int r = c.rank(), n = c.size();
  constexpr size_t kBlock = 8;
  std::vector<int64_t> sent(kBlock * static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < kBlock; ++i) sent[size_t(q) * kBlock + i] = value(r, size_t(q) * 100 + i);
  }
  for (const auto algorithm : {remora::CollAlgorithm::kAuto, remora::CollAlgorithm::kPairwise}) {
    std::vector<int64_t> in(kBlock * static_cast<size_t>(n), -1);
    check("alltoall", c.alltoall(sent.data(), in.data(), kBlock, remora::DataType::kInt64, {.algorithm = algorithm}));
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < kBlock; ++i) {
        if (in[size_t(q) * kBlock + i] != value(q, size_t(r) * 100 + i)) wrong("alltoall from " + std::to_string(q));
      }
    }
  }
}

void p2p_all(remora::Communicator& c) {
  const int r = c.rank(), n = c.size();
  std::vector<remora::Request> reqs;
  std::vector<int64_t> sent(static_cast<size_t>(n)), in(static_cast<size_t>(n), -1);
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    sent[size_t(q)] = value(r, size_t(q));
    reqs.push_back(c.irecv(&in[size_t(q)], 1, remora::DataType::kInt64, q, remora::Tag{5}));
    reqs.push_back(c.isend(&sent[size_t(q)], 1, remora::DataType::kInt64, q, remora::Tag{5}));
  }
  check("p2p", remora::wait_all(reqs, std::chrono::seconds(300)));
  for (int q = 0; q < n; ++q) {
    if (q != r && in[size_t(q)] != value(q, size_t(r))) wrong("p2p from " + std::to_string(q));
  }
}

struct Point {
  int sockets;
  int reported;
  long rss;
};

/// The communicator's own count of the sockets its endpoints hold (-1: a build without it).
int reported_sockets(remora::Communicator& c) {
  (void)c;
#ifdef REMORA_SCALE_HAS_CONNECTIONS
  return static_cast<int>(c.connections().sockets);
#else
  return -1;
#endif
}

/// What this rank holds now.
Point now(remora::Communicator& c) { return {sockets_held(), reported_sockets(c), rss_kib()}; }

/// What this rank holds once every rank finished the step before, and before any rank
/// starts the next (a barrier on each side: a rank that finished early must neither close
/// what the others still count nor open what the next step needs while they count).
Point here(remora::Communicator& c) {
  check("barrier", c.barrier());
  const Point p = now(c);
  check("barrier", c.barrier());
  return p;
}

std::string json(const char* name, const Point& p) {
  return "\"" + std::string(name) + "\": {\"sockets\": " + std::to_string(p.sockets) +
         ", \"reported_sockets\": " + std::to_string(p.reported) + ", \"rss_kib\": " + std::to_string(p.rss) + "}";
}

}  // namespace

int main(int argc, char** argv) {
  bool do_alltoall = false, do_p2p = false;
  int victim = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--alltoall") {
      do_alltoall = true;
    } else if (a == "--p2p-all") {
      do_p2p = true;
    } else if (a.starts_with("--shrink-victim=")) {
      victim = std::atoi(argv[i] + 16);
    } else {
      std::fprintf(stderr, "remora_coll_scale: unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  auto launch = remora::detect_launch();
  if (!launch) failed("detect_launch", launch.status());
  g_rank = launch->rank;
  auto ctx = remora::Context::create();
  if (!ctx) failed("Context::create", ctx.status());
  const auto t0 = Clock::now();
  auto comm = remora::Communicator::init(**ctx, *launch);
  if (!comm) failed("init", comm.status());
  const double init_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  remora::Communicator& c = **comm;
  const Point after_init = now(c);  // nothing but init has run (it ends with an exchange every rank finished)
  small_collectives(c);
  const Point after_coll = here(c);
  std::string line = "{\"rank\": " + std::to_string(c.rank()) + ", \"size\": " + std::to_string(c.size()) +
                     ", \"init_ms\": " + std::to_string(init_ms) + ", " + json("init", after_init) + ", " +
                     json("collectives", after_coll);
  if (do_alltoall) {
    alltoall(c);
    line += ", " + json("alltoall", here(c));
  }
  if (do_p2p) {
    p2p_all(c);
    line += ", " + json("p2p", here(c));
  }
  check("final barrier", c.barrier());  // every rank has counted
  if (victim >= 0) {
    if (c.rank() == victim) ::raise(SIGKILL);
    std::vector<int64_t> x(3, 1);
    const remora::Status broken =
        c.allreduce(remora::kInPlace, x.data(), x.size(), remora::DataType::kInt64, remora::ReduceOp::kSum);
    if (broken) wrong("an allreduce with a dead rank succeeded");
    const auto asked = Clock::now();
    // Each of 63 survivors probes the ranks it never connected to, about 3,000 probes in
    // all: under ThreadSanitizer on two cores they take 3.5 s, close to the default 5 s
    // in which an unanswered rank counts as dead. The victim refuses at once, so a long
    // timeout costs nothing here.
    const std::vector<int> dead = c.failed_ranks(std::chrono::seconds(30));
    if (dead != std::vector<int>{victim}) {
      std::string names;
      for (int r : dead) names += (names.empty() ? "" : ",") + std::to_string(r);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - asked).count();
      wrong("failed_ranks named [" + names + "], not the victim alone, after " + std::to_string(ms) + " ms");
    }
    line += ", \"failed_ranks_ms\": " +
            std::to_string(std::chrono::duration<double, std::milli>(Clock::now() - asked).count());
    auto next = c.shrink(dead);
    if (!next) failed("shrink", next.status());
    std::vector<int64_t> y(5, (*next)->rank() + 1);
    check("allreduce after shrink",
          (*next)->allreduce(remora::kInPlace, y.data(), y.size(), remora::DataType::kInt64, remora::ReduceOp::kSum));
    const int64_t m = (*next)->size();
    if (y[0] != m * (m + 1) / 2) wrong("allreduce after shrink");
    line += ", \"shrunk_to\": " + std::to_string(m);
  }
  std::printf("%s}\n", line.c_str());
  std::fflush(stdout);
  return 0;
}
