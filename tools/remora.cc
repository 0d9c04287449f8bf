// tools/remora.cc — the `remora` command: demo, bench p2p, bench staging, bench rma, bench coll, run,
// soak, doctor, rxq, version. A thin layer over tools/perf (and tools/doctor.h): parse arguments, draw the progress
// line, run, and hand the report to the printers of tools/perf/report.h.
#include "remora/remora.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config.h"
#include "doctor.h"
#include "perf.h"
#include "report.h"
#include "run.h"
#include "rxq.h"
#include "soak.h"

namespace {

/// A one-line progress indicator on stderr: only when stderr is a terminal and only
/// once a run has taken more than a second (short runs stay clean).
class TtyProgress {
 public:
  TtyProgress() : enabled_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}
  ~TtyProgress() { clear(); }
  TtyProgress(const TtyProgress&) = delete;
  TtyProgress& operator=(const TtyProgress&) = delete;

  remora::perf::ProgressFn callback() {
    if (!enabled_) return nullptr;
    return [this](std::string_view what, uint64_t done, uint64_t total) { update(what, done, total); };
  }
  void clear() {
    if (shown_) std::fputs("\r\033[K", stderr);
    shown_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void update(std::string_view what, uint64_t done, uint64_t total) {
    const auto now = Clock::now();
    if (now - start_ < std::chrono::seconds(1) || now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = total == 0 ? kWidth : static_cast<int>(kWidth * done / total);
    fmt::print(stderr, "\r  {:>5} [{:=<{}}{:<{}}] {}/{}\033[K", what, "", filled, "", kWidth - filled, done, total);
    std::fflush(stderr);
    shown_ = true;
  }
  bool enabled_;
  bool shown_ = false;
  Clock::time_point start_, last_{};
};

int fail(const remora::Status& s) {
  fmt::print(stderr, "remora: error: {}\n", s.to_string());
  return 1;
}

remora::Status parse_sizes(const std::vector<std::string>& texts, std::vector<size_t>* out) {
  for (const std::string& t : texts) {
    auto size = remora::perf::parse_size(t);
    if (!size) return size.status();
    out->push_back(*size);
  }
  return remora::Status::ok();
}

int print_version(bool as_json) {
  auto config = remora::Config::from_env();
  if (!config) return fail(config.status());
  remora::perf::print_version(*config, as_json);
  return 0;
}

int run_demo(const std::vector<std::string>& size_texts, std::optional<uint32_t> iters, const std::string& json,
             bool inject_corruption) {
  remora::perf::DemoOptions o;
  o.inject_corruption = inject_corruption;
  if (auto s = parse_sizes(size_texts, &o.sizes); !s) return fail(s);
  o.iters = iters;
  TtyProgress progress;
  o.progress = progress.callback();
  auto report = remora::perf::run_demo(o);
  progress.clear();
  if (!report) return fail(report.status());
  remora::perf::print_demo_report(*report);
  if (!remora::perf::write_json(json, report->json)) return 1;
  if (!report->ok) {
    fmt::print(stderr, "remora demo: FAILED: data did not verify (see the table)\n");
    return 1;
  }
  return 0;
}

/// Options every `remora bench` shares.
struct BenchArgs {
  std::vector<std::string> sizes;
  uint32_t window = 64;
  std::optional<uint32_t> iters, warmup;
  std::string json, peer, listen, buffers = "pool";

  void add_to(CLI::App* cmd) {
    cmd->add_option("--window", window, "operations in flight per window (bandwidth and rate modes)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--iters", iters, "timed iterations per size (default: scaled by size)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", warmup, "untimed iterations per size (default: scaled by size)");
    cmd->add_option("--json", json, "also write everything (results, config, stats) as JSON here");
    cmd->add_option("--buffers", buffers, "where buffers come from: pool or register")
        ->check(CLI::IsMember({"pool", "register"}))
        ->capture_default_str();
    auto* peer_opt = cmd->add_option("--peer", peer, "drive a follower started with --listen at host:port");
    auto* listen_opt =
        cmd->add_option("--listen", listen, "be the follower: listen on host:port, the --peer side drives");
    peer_opt->excludes(listen_opt);
  }
  remora::perf::BufferSource buffer_source() const {
    return buffers == "register" ? remora::perf::BufferSource::kRegister : remora::perf::BufferSource::kPool;
  }
  remora::perf::PeerOptions peer_options() const { return {.peer = peer}; }
  remora::perf::BenchLabels labels(std::string_view mode) const {
    return {.mode = mode, .buffers = buffers, .window = window};
  }
};

/// With --listen the process is the follower: the driver (the --peer side) sends the
/// plan, whichever benchmark it is. nullopt when this process drives.
std::optional<int> maybe_follow(const BenchArgs& a) {
  if (a.listen.empty()) return std::nullopt;
  if (auto s = remora::perf::serve(a.listen, -1); !s) return fail(s);
  return 0;
}

struct P2pArgs : BenchArgs {
  std::string mode = "bw";
  bool distinct_buffers = false;
  std::string memory = "host";
  std::optional<std::string> peer_memory;
  std::string device_copy_rate = "0";
  bool inject_corruption = false;
  P2pArgs() { sizes = {"8", "4K", "1M", "16M"}; }
};

/// --memory, --peer-memory and --device-copy-rate into `o`.
remora::Status memory_options(const P2pArgs& a, remora::perf::MemoryOptions* o) {
  auto local = remora::perf::parse_bench_memory(a.memory);
  if (!local) return local.status().with_context("--memory");
  o->local = *local;
  if (a.peer_memory) {
    auto peer = remora::perf::parse_bench_memory(*a.peer_memory);
    if (!peer) return peer.status().with_context("--peer-memory");
    o->peer = *peer;
  }
  auto rate = remora::perf::parse_device_copy_rate(a.device_copy_rate);
  if (!rate) return rate.status().with_context("--device-copy-rate");
  o->copy_rate = *rate;
  return remora::Status::ok();
}

int run_p2p(const P2pArgs& a) {
  if (auto rc = maybe_follow(a)) return *rc;
  remora::perf::P2pOptions o;
  if (auto s = memory_options(a, &o.memory); !s) return fail(s);
  o.inject_corruption = a.inject_corruption;
  o.distinct_buffers = a.distinct_buffers;
  o.mode = a.mode == "lat"    ? remora::perf::P2pMode::kLatency
           : a.mode == "bibw" ? remora::perf::P2pMode::kBiBandwidth
                              : remora::perf::P2pMode::kBandwidth;
  o.sizes.clear();
  if (auto s = parse_sizes(a.sizes, &o.sizes); !s) return fail(s);
  o.window = a.window;
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.buffers = a.buffer_source();
  TtyProgress progress;
  o.progress = progress.callback();
  auto report = remora::perf::run_p2p(a.peer_options(), o);
  progress.clear();
  if (!report) return fail(report.status());
  remora::perf::print_p2p_report(*report, a.labels(a.mode));
  return remora::perf::write_json(a.json, report->json) ? 0 : 1;
}

struct StagingArgs {
  std::string size = "64M";
  remora::perf::StagingCheckOptions options;
  std::string json, peer, listen;
  bool strict = false;
};

int run_staging(StagingArgs& a) {
  if (!a.listen.empty()) {
    if (auto s = remora::perf::serve(a.listen, -1); !s) return fail(s);
    return 0;
  }
  auto size = remora::perf::parse_size(a.size);
  if (!size) return fail(size.status().with_context("--size"));
  a.options.size = *size;
  TtyProgress progress;
  a.options.progress = progress.callback();
  auto report = remora::perf::run_staging_check({.peer = a.peer}, a.options);
  progress.clear();
  if (!report) return fail(report.status());
  remora::perf::print_staging_report(*report);
  if (!remora::perf::write_json(a.json, report->json)) return 1;
  if (a.strict && !report->matched.within_bound) {
    fmt::print(stderr, "remora bench staging: FAILED (--strict): median device/host {:.3f} is above the bound {}\n",
               report->matched.median_ratio, report->bound);
    return 1;
  }
  return 0;
}

struct RmaArgs : BenchArgs {
  std::string mode = "put_bw";
  std::optional<double> duration;
  bool inject_corruption = false;
};

int run_rma(const RmaArgs& a) {
  if (auto rc = maybe_follow(a)) return *rc;
  remora::perf::RmaOptions o;
  auto mode = remora::perf::parse_rma_mode(a.mode);
  if (!mode) return fail(mode.status());
  o.mode = *mode;
  if (auto s = parse_sizes(a.sizes, &o.sizes); !s) return fail(s);
  o.window = a.window;
  o.iters = a.iters;
  o.warmup = a.warmup;
  o.duration_s = a.duration;
  o.inject_corruption = a.inject_corruption;
  o.buffers = a.buffer_source();
  TtyProgress progress;
  o.progress = progress.callback();
  auto report = remora::perf::run_rma(a.peer_options(), o);
  progress.clear();
  if (!report) return fail(report.status());
  remora::perf::print_rma_report(*report, a.labels(a.mode));
  return remora::perf::write_json(a.json, report->json) ? 0 : 1;
}

struct CollArgs {
  std::vector<std::string> ops = {"allreduce"};
  std::string minbytes = "4K", maxbytes = "64M";
  uint32_t stepfactor = 4;
  std::vector<std::string> sizes;
  std::string type = "float32", redop = "sum";
  int root = 0;
  std::optional<uint32_t> iters, warmup, reference_iters;
  uint32_t rounds = 1;
  bool check = true, no_reference = false, inject_corruption = false;
  std::string json;
  std::optional<int> ranks;
};

/// Turns the arguments into options; the sizes from --sizes or -b/-e/-f.
remora::Status coll_options(const CollArgs& a, remora::perf::CollOptions* o) {
  using remora::CollectiveKind;
  o->ops.clear();
  for (const std::string& name : a.ops) {
    if (name == "all") {
      for (int k = 0; k <= static_cast<int>(CollectiveKind::kAlltoall); ++k) {
        o->ops.push_back(static_cast<CollectiveKind>(k));
      }
      continue;
    }
    if (name == "alltoallv") o->alltoallv = true;    // the alltoall rows, as alltoallv
    if (name == "allgatherv") o->allgatherv = true;  // the allgather rows, as allgatherv
    auto op = remora::parse_collective_kind(name == "alltoallv"    ? "alltoall"
                                            : name == "allgatherv" ? "allgather"
                                                                   : name);
    if (!op) return op.status().with_context("--op");
    if (*op == CollectiveKind::kAlltoall && std::count(o->ops.begin(), o->ops.end(), *op) > 0) {
      return {remora::StatusCode::kInvalidArgument, "--op: alltoall and alltoallv are one row each; run them apart"};
    }
    if (*op == CollectiveKind::kAllgather && std::count(o->ops.begin(), o->ops.end(), *op) > 0) {
      return {remora::StatusCode::kInvalidArgument, "--op: allgather and allgatherv are one row each; run them apart"};
    }
    o->ops.push_back(*op);
  }
  if (a.sizes.empty()) {
    auto lo = remora::perf::parse_size(a.minbytes);
    if (!lo) return lo.status().with_context("-b/--minbytes");
    auto hi = remora::perf::parse_size(a.maxbytes);
    if (!hi) return hi.status().with_context("-e/--maxbytes");
    if (*lo == 0 || *lo > *hi) {
      return {remora::StatusCode::kInvalidArgument,
              fmt::format("-b {} -e {}: need 1 <= minbytes <= maxbytes (--sizes takes a list, 0 included)", a.minbytes,
                          a.maxbytes)};
    }
    for (size_t s = *lo; s <= *hi; s *= a.stepfactor) {
      o->sizes.push_back(s);
      if (s > *hi / a.stepfactor) break;
    }
  } else if (auto s = parse_sizes(a.sizes, &o->sizes); !s) {
    return s;
  }
  auto type = remora::parse_data_type(a.type);
  if (!type) return type.status().with_context("--type");
  o->type = *type;
  auto redop = remora::parse_reduce_op(a.redop);
  if (!redop) return redop.status().with_context("--redop");
  o->redop = *redop;
  o->root = a.root;
  o->iters = a.iters;
  o->warmup = a.warmup;
  o->check = a.check;
  o->reference = !a.no_reference;
  o->reference_iters = a.reference_iters;
  o->rounds = a.rounds;
  o->inject_corruption = a.inject_corruption;
  o->expect_ranks = a.ranks;
  return remora::Status::ok();
}

/// This executable's path, for starting ranks of it (argv[0] may be a bare name).
std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("/proc/self/exe");
}

/// `remora bench coll`: as a rank of a launched job, or, with no launcher around, the
/// launcher of N ranks of itself on this host (remora run's machinery).
int run_coll(const CollArgs& a, const std::vector<std::string>& argv) {
  remora::perf::CollOptions o;
  if (auto s = coll_options(a, &o); !s) return fail(s);
  auto launched = remora::perf::launched_as_rank();
  if (!launched) return fail(launched.status());
  if (!*launched) {
    const int n = a.ranks.value_or(2);
    o.expect_ranks = n;
    if (auto s = remora::perf::validate(o, n); !s) return fail(s);
    remora::tools::RunOptions run;
    run.ranks = n;
    run.argv = argv;
    run.argv[0] = self_exe();
    return remora::tools::run_ranks(run);
  }
  TtyProgress progress;
  o.progress = progress.callback();
  auto report = remora::perf::run_coll(o);
  progress.clear();
  if (!report) {
    fmt::print(stderr, "remora bench coll: error: {}\n", report.status().to_string());
    return 1;
  }
  if (report->rank != 0) return 0;  // rank 0 speaks for the job (the data check included)
  remora::perf::print_coll_report(*report, o);
  if (!remora::perf::write_json(a.json, report->json)) return 1;
  if (report->wrong > 0) {
    fmt::print(stderr,
               "remora bench coll: FAILED: {} wrong elements: the data check failed (the #wrong column says where)\n",
               report->wrong);
    return 1;
  }
  return 0;
}

/// Everything the command line sets: one member per subcommand's options, and the
/// subcommands themselves, to see which one was given.
struct Cli {
  CLI::App app{"remora — RDMA-like memory semantics over plain TCP"};

  CLI::App* version = nullptr;
  bool version_json = false;

  CLI::App* config = nullptr;
  remora::tools::ConfigCliOptions config_options;

  CLI::App* demo = nullptr;
  std::vector<std::string> demo_sizes;
  std::optional<uint32_t> demo_iters;
  std::string demo_json;
  bool demo_corrupt = false;

  CLI::App* p2p = nullptr;
  P2pArgs p2p_args;
  CLI::App* staging = nullptr;
  StagingArgs staging_args;
  CLI::App* rma = nullptr;
  RmaArgs rma_args;
  CLI::App* coll = nullptr;
  CollArgs coll_args;

  CLI::App* serve = nullptr;
  std::string serve_listen = "127.0.0.1:0";
  int serve_port_fd = -1;

  CLI::App* doctor = nullptr;
  remora::tools::DoctorOptions doctor_options;

  std::unique_ptr<remora::tools::RxqCli> rxq;

  CLI::App* soak = nullptr;
  remora::tools::SoakOptions soak_options;
  int soak_ranks = 4;
  std::optional<uint64_t> soak_seed;
  std::string soak_max_size = "4M";

  CLI::App* run = nullptr;
  remora::tools::RunOptions run_options;
  int run_timeout_s = 0;
  /// `remora run`'s program and its arguments, cut off before CLI11 parses (take_run_program).
  std::vector<std::string> program_argv;
};

void add_config(Cli& c) {
  c.config = c.app.add_subcommand("config", "every REMORA_* variable: this environment's value, what it takes");
  c.config->add_flag("--markdown", c.config_options.markdown, "the tables of docs/configuration.md");
  c.config->add_flag("--names", c.config_options.names, "the variables' names, one per line");
  c.config->add_option("--check-docs", c.config_options.check_docs,
                       "exit 1 unless this Markdown file holds exactly the generated tables");
  c.config->add_option("--update-docs", c.config_options.update_docs,
                       "rewrite the generated tables of this Markdown file (docs/configuration.md)");
}

void add_version(Cli& c) {
  c.version = c.app.add_subcommand("version", "print the versions and the configuration REMORA_* resolves to");
  c.version->add_flag("--json", c.version_json, "as JSON");
}

void add_demo(Cli& c) {
  auto* demo = c.app.add_subcommand("demo", "two-process loopback demo: tagged messages 1 B..64 MiB both ways, verified");
  demo->add_option("--sizes", c.demo_sizes, "message sizes, e.g. 1,4K,1M (default 1 B..64 MiB in powers of 4)")->delimiter(',');
  demo->add_option("--iters", c.demo_iters, "timed round trips per size (default: scaled by size)")->check(CLI::PositiveNumber);
  demo->add_option("--json", c.demo_json, "also write the results as JSON to this file");
  demo->add_flag("--inject-corruption", c.demo_corrupt)->group("");  // hidden: proves the checks fail loudly
  c.demo = demo;
}

void add_bench_p2p(CLI::App* bench, Cli& c) {
  P2pArgs& a = c.p2p_args;
  auto* p2p = bench->add_subcommand("p2p", "point-to-point bandwidth and latency (OSU-style)");
  p2p->add_option("--mode", a.mode, "bw (window + ack), lat (ping-pong), bibw (both ways)")
      ->check(CLI::IsMember({"bw", "lat", "bibw"}))
      ->capture_default_str();
  p2p->add_option("--sizes", a.sizes, "message sizes (K/M/G = powers of 1024)")->delimiter(',')->capture_default_str();
  a.add_to(p2p);
  p2p->add_flag("--distinct-buffers", a.distinct_buffers,
                "cycle a window through up to 64 MiB of distinct buffers (default: reuse one, as osu_bw and iperf3 do)");
  p2p->add_option("--memory", a.memory,
                  "this side's message buffers: host, test-device (a test double of a device, moved through the "
                  "staging path) or cuda (device 0, through the CUDA driver where one loads)")
      ->capture_default_str();
  p2p->add_option("--peer-memory", a.peer_memory, "the follower's message buffers (default: as --memory)");
  p2p->add_option("--device-copy-rate", a.device_copy_rate,
                  "bytes/s of each test-device copy engine, both sides (0: unlimited; K/M/G = powers of 1024), or "
                  "auto: each size's host-to-host rate, measured just before it")
      ->capture_default_str();
  p2p->add_flag("--inject-corruption", a.inject_corruption)->group("");  // hidden: proves the check fails loudly
  c.p2p = p2p;
}

void add_bench_staging(CLI::App* bench, Cli& c) {
  StagingArgs& a = c.staging_args;
  remora::perf::StagingCheckOptions& o = a.options;
  auto* staging = bench->add_subcommand(
      "staging",
      "the staging path's acceptance check: test-device-to-test-device transfers against host-to-host ones in "
      "adjacent pairs, the devices' copies at the measured network rate, then unlimited");
  staging->add_option("--size", a.size, "message size (K/M/G = powers of 1024)")->capture_default_str();
  staging->add_option("--window", o.window, "messages per timed iteration (1: one transfer)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  staging->add_option("--pairs", o.pairs, "host/device pairs per phase, the order alternating (at least 4)")
      ->check(CLI::Range(4, 1000))
      ->capture_default_str();
  staging->add_option("--iters", o.iters, "timed iterations per measurement")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  staging->add_option("--warmup", o.warmup, "untimed iterations before them")->capture_default_str();
  staging->add_option("--calibration-iters", o.calibration_iters, "timed iterations of the host-to-host calibration")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  staging->add_option("--json", a.json, "also write everything (pairs, verdict, config, stats) as JSON here");
  staging->add_flag("--strict", a.strict, "exit 1 when the median ratio with copies at the network rate is above 1.25");
  auto* peer_opt = staging->add_option("--peer", a.peer, "drive a follower started with --listen at host:port");
  auto* listen_opt =
      staging->add_option("--listen", a.listen, "be the follower: listen on host:port, the --peer side drives");
  peer_opt->excludes(listen_opt);
  c.staging = staging;
}

void add_bench_rma(CLI::App* bench, Cli& c) {
  RmaArgs& a = c.rma_args;
  auto* rma = bench->add_subcommand("rma", "one-sided put/get bandwidth, latency and rate (perftest-style)");
  rma->add_option("--mode", a.mode,
                  "put_bw, get_bw (a window of puts/gets), put_lat (put+notify ping-pong), get_lat (one get at a "
                  "time), put_rate (small puts, operations/s), notify_lat (one put+notify at a time, until done), "
                  "atomic_lat (one fetch_add at a time; size 8)")
      ->check(CLI::IsMember({"put_bw", "get_bw", "put_lat", "get_lat", "put_rate", "notify_lat", "atomic_lat"}))
      ->capture_default_str();
  rma->add_option("--sizes", a.sizes,
                  "transfer sizes (K/M/G = powers of 1024; default 8,4K,1M,16M, put_rate 8,64,512,4K)")
      ->delimiter(',');
  auto* duration = rma->add_option("--duration", a.duration, "timed seconds per size, instead of --iters")
                       ->check(CLI::PositiveNumber);
  a.add_to(rma);
  duration->excludes(rma->get_option("--iters"));
  rma->add_flag("--inject-corruption", a.inject_corruption)->group("");  // hidden: proves the checks fail loudly
  c.rma = rma;
}

void add_bench_coll(CLI::App* bench, Cli& c) {
  CollArgs& a = c.coll_args;
  auto* coll = bench->add_subcommand(
      "coll", "collectives, nccl-tests-style: time, algbw, busbw, #wrong per size, against a p2p reference");
  coll->add_option(
          "--op", a.ops,
          "allreduce, reduce, broadcast, allgather, reduce_scatter, alltoall, gather, scatter, barrier; "
          "several separated by commas, or all; also alltoallv and allgatherv (the alltoall or allgather rows with "
          "equal counts)")
      ->delimiter(',')
      ->capture_default_str();
  auto* minbytes = coll->add_option("-b,--minbytes", a.minbytes, "smallest size (K/M/G = powers of 1024)")
                       ->capture_default_str();
  auto* maxbytes = coll->add_option("-e,--maxbytes", a.maxbytes, "largest size")->capture_default_str();
  auto* stepfactor = coll->add_option("-f,--stepfactor", a.stepfactor, "multiply the size by this each step")
                         ->check(CLI::Range(2u, 1024u))
                         ->capture_default_str();
  coll->add_option("--sizes", a.sizes, "explicit sizes instead of -b/-e/-f, e.g. 4K,16M,64M")
      ->delimiter(',')
      ->excludes(minbytes)
      ->excludes(maxbytes)
      ->excludes(stepfactor);
  coll->add_option(
          "-d,--type", a.type,
          "int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64 (or fp16, bf16, ...)")
      ->capture_default_str();
  coll->add_option("--redop", a.redop, "sum, prod, min, max, avg (reductions)")->capture_default_str();
  coll->add_option("-r,--root", a.root, "root of reduce, broadcast, gather, scatter")->capture_default_str();
  coll->add_option("--iters", a.iters, "timed operations per size (default: scaled by size, 5..1000)")
      ->check(CLI::PositiveNumber);
  coll->add_option("-w,--warmup", a.warmup, "untimed operations per size (default: scaled by size)");
  coll->add_flag("-c,--check,!--no-check", a.check,
                 "check every size's result on every rank (the #wrong column); on by default");
  coll->add_flag("--no-reference", a.no_reference,
                 "skip the p2p reference (bidirectional exchange, 4K ping-pong) between ranks 0 and 1");
  coll->add_option("--reference-iters", a.reference_iters,
                   "timed windows per exchange size and timed round trips of the reference (default: as bench p2p)")
      ->check(CLI::PositiveNumber);
  coll->add_option("--rounds", a.rounds,
                   "measure the reference and the table this many times, alternating which goes first; "
                   "ratios are the medians of the rounds' (the data check runs in the first round)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  coll->add_option("--json", a.json, "rank 0 also writes everything as JSON here");
  coll->add_option("-n,--ranks", a.ranks,
                   "without a launcher: start this many ranks on this host (default 2); under one: must match it")
      ->check(CLI::Range(1, 4096));
  coll->add_flag("--inject-corruption", a.inject_corruption)
      ->group("");  // hidden: proves the check fails loudly
  c.coll = coll;
}

void add_bench(Cli& c) {
  auto* bench = c.app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  add_bench_p2p(bench, c);
  add_bench_staging(bench, c);
  add_bench_rma(bench, c);
  add_bench_coll(bench, c);
}

void add_serve(Cli& c) {
  c.serve = c.app.add_subcommand("serve", "")->group("");  // hidden: the spawned follower
  c.serve->add_option("--listen", c.serve_listen);
  c.serve->add_option("--port-fd", c.serve_port_fd);
}

void add_doctor(Cli& c) {
  auto* doctor = c.app.add_subcommand(
      "doctor",
      "what this host offers for zero-copy: per interface the driver, header split, ntuple flow steering, queues, "
      "devmem bind-rx/bind-tx and io_uring zcrx (tried for real); io_uring and MSG_ZEROCOPY. Every 'no' says why "
      "and what would change it. Exit code: 0 a device zero-copy path exists, 3 none does, 1 the probe could not "
      "run.");
  doctor->add_flag("--json", c.doctor_options.json, "the report as JSON");
  doctor->add_option("-i,--interface", c.doctor_options.interfaces, "probe only these interfaces (default: all)")
      ->delimiter(',');
  doctor->add_flag(
      "--no-bind", c.doctor_options.no_bind,
      "do not try bind-rx, bind-tx and zcrx (on a capable NIC they bind the last RX queue for an instant)");
  c.doctor = doctor;
}

void add_run(Cli& c) {
  auto* run = c.app.add_subcommand(
      "run",
      "single-host launcher: run N ranks of a program. `remora run -n 4 ./app args` and "
      "`remora run -n 4 -- ./app args` are the same: everything from the program on is the program's, "
      "`--` and flags included. `--` is needed only before a program whose name begins with '-'.");
  run->add_option("-n,--ranks", c.run_options.ranks, "number of ranks")->required()->check(CLI::Range(1, 4096));
  run->add_option("--timeout", c.run_timeout_s, "stop every rank after this many seconds and exit 124 (0: never)")
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--tag-output", c.run_options.tag_output, "prefix every output line with [rank]");
  run->add_flag("--keep-going", c.run_options.keep_going,
                "a rank that fails does not stop the others (for jobs whose survivors shrink their communicator); "
                "the exit status is still 1");
  // Everything from the program on is the program's, flags included.
  run->prefix_command();
  c.run = run;
}

/// `remora run [options] [--] prog args`: the program starts at the first argument
/// that is none of run's options (or right after a "--" among them), and from there on
/// everything is the program's. It is cut off here, before CLI11 sees it: CLI11 takes
/// a program named like one of our subcommands ("bench") for that subcommand, and
/// refuses anything after a "--". A "--" after the program is the program's own.
/// Returns the argc CLI11 is to parse.
int take_run_program(int argc, char** argv, std::vector<std::string>* program_argv) {
  if (argc <= 1 || std::string_view(argv[1]) != "run") return argc;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (arg == "-n" || arg == "--ranks" || arg == "--timeout") {
      ++i;  // its value
      continue;
    }
    if (arg != "--" && arg.starts_with("-")) continue;  // an option of ours: -n4, --timeout=5, --tag-output, --keep-going
    program_argv->assign(argv + i + (arg == "--" ? 1 : 0), argv + argc);
    return i;
  }
  return argc;
}

/// `remora run`, once parsed: refuses what CLI11 left over, then launches.
int run_launcher(Cli& c) {
  // The program was cut off before parsing: what CLI11 left over is an option it does not know.
  if (const auto unknown = c.run->remaining(); !unknown.empty()) {
    fmt::print(stderr, "remora run: unknown option '{}' (see remora run --help; a program whose name begins "
                       "with '-' goes after --)\n", unknown.front());
    return 2;
  }
  c.run_options.argv = std::move(c.program_argv);
  if (c.run_options.argv.empty()) {
    fmt::print(stderr, "remora run: no program given (remora run -n N [options] [--] prog args...)\n");
    return 2;
  }
  c.run_options.timeout = std::chrono::seconds(c.run_timeout_s);
  return remora::tools::run_ranks(c.run_options);
}

void add_soak(Cli& c) {
  auto* soak = c.app.add_subcommand(
      "soak",
      "N ranks on this host run mixed operations (send/recv, put, put+notify, get, fetch_add, compare_swap, "
      "collectives) of random sizes for a while, every byte verified; reports operations, bytes, errors and each "
      "rank's descriptors and resident memory after the warm-up and at the end. Exit 1 on any error or when "
      "descriptors or memory grew (tools/soak.h says by how much counts as flat).");
  soak->add_option("-n,--ranks", c.soak_ranks, "ranks to start (under a launcher: the launcher's)")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  soak->add_option("--seconds", c.soak_options.seconds, "how long to run")->capture_default_str()->check(
      CLI::Range(1.0, 86400.0));
  soak->add_option("--seed", c.soak_seed, "the plan's seed (default: random, printed for reproduction)");
  soak->add_option("--max-size", c.soak_max_size, "largest transfer (K/M = powers of 1024)")->capture_default_str();
  soak->add_flag("--inject-corruption", c.soak_options.inject_corruption)->group("");  // hidden: proves the check
  c.soak = soak;
}

/// `remora soak`: as a rank of a launched job, or the launcher of N ranks of itself.
int run_soak(Cli& c, const std::vector<std::string>& argv) {
  auto max_size = remora::perf::parse_size(c.soak_max_size);
  if (!max_size) return fail(max_size.status().with_context("--max-size"));
  if (*max_size < 64 || *max_size > (size_t{256} << 20)) {
    return fail(remora::Status(remora::StatusCode::kInvalidArgument, "--max-size: between 64 B and 256 MiB"));
  }
  c.soak_options.max_size = *max_size;
  auto launched = remora::perf::launched_as_rank();
  if (!launched) return fail(launched.status());
  if (!*launched) {
    // Every rank must draw the same plan: fix the seed here and hand it down.
    const uint64_t seed = c.soak_seed.value_or(std::random_device{}() * 0x100000001ull ^ std::random_device{}());
    remora::tools::RunOptions run;
    run.ranks = c.soak_ranks;
    run.argv = argv;
    run.argv[0] = self_exe();
    if (!c.soak_seed) run.argv.insert(run.argv.end(), {"--seed", std::to_string(seed)});
    run.timeout = std::chrono::seconds(static_cast<int64_t>(c.soak_options.seconds) + 300);
    return remora::tools::run_ranks(run);
  }
  if (!c.soak_seed) return fail(remora::Status(remora::StatusCode::kInvalidArgument,
                                               "remora soak under a launcher: give --seed (every rank needs the same)"));
  c.soak_options.seed = *c.soak_seed;
  return remora::tools::run_soak_rank(c.soak_options);
}

/// `remora serve`: the follower a driver spawned.
int run_serve(const Cli& c) {
  if (auto s = remora::perf::serve(c.serve_listen, c.serve_port_fd); !s) {
    fmt::print(stderr, "remora serve: error: {}\n", s.to_string());
    return 1;
  }
  return 0;
}

/// Runs the subcommand that was given; `argv` is what CLI11 parsed.
int dispatch(Cli& c, const std::vector<std::string>& argv) {
  if (*c.version) return print_version(c.version_json);
  if (*c.config) return remora::tools::run_config(c.config_options);
  if (*c.demo) return run_demo(c.demo_sizes, c.demo_iters, c.demo_json, c.demo_corrupt);
  if (*c.p2p) return run_p2p(c.p2p_args);
  if (*c.staging) return run_staging(c.staging_args);
  if (*c.rma) return run_rma(c.rma_args);
  if (*c.coll) return run_coll(c.coll_args, argv);
  if (*c.run) return run_launcher(c);
  if (*c.soak) return run_soak(c, argv);
  if (*c.doctor) return remora::tools::run_doctor(c.doctor_options);
  if (*c.serve) return run_serve(c);
  if (c.rxq && c.rxq->given()) return c.rxq->run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli;
  cli.app.require_subcommand(1);
  add_version(cli);
  add_config(cli);
  add_demo(cli);
  add_bench(cli);
  add_serve(cli);
  add_run(cli);
  add_soak(cli);
  add_doctor(cli);
  cli.rxq = std::make_unique<remora::tools::RxqCli>(&cli.app);
  argc = take_run_program(argc, argv, &cli.program_argv);
  CLI11_PARSE(cli.app, argc, argv);
  return dispatch(cli, std::vector<std::string>(argv, argv + argc));
}
