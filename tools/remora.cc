// tools/remora.cc — the `remora` command: demo, bench p2p, bench rma, run, version. A thin layer over
// tools/perf: parse arguments, draw tables and the progress line, write JSON.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "perf.h"
#include "run.h"
#include "remora/remora.h"

namespace {

using remora::perf::format_size;

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

bool write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return true;
  std::ofstream f(path);
  f << j.dump(2) << '\n';
  if (!f) {
    fmt::print(stderr, "remora: error: cannot write {}\n", path);
    return false;
  }
  return true;
}

std::string config_line(const nlohmann::json& c) {
  return fmt::format("{} data streams, chunk {}, eager limit {}, spin {} us", c.value("streams", 0u),
                     format_size(c.value("chunk_bytes", size_t{0})), format_size(c.value("eager_limit", size_t{0})),
                     c.value("spin_us", 0u));
}

std::string pool_line(const nlohmann::json& side) {
  if (!side.contains("pool")) return "explicit registration";
  const auto& p = side["pool"];
  return fmt::format("{} arenas, {} MiB registered, {} hits, {} misses, {} buffers in use",
                     p.value("registrations", 0u), p.value("bytes_registered", size_t{0}) >> 20,
                     p.value("hits", 0u), p.value("misses", 0u), p.value("buffers_in_use", 0u));
}

int print_version(bool as_json) {
  auto config = remora::Config::from_env();
  if (!config) return fail(config.status());
  const remora::Config& c = *config;
  if (as_json) {
    const nlohmann::json j = {{"version", remora::version_string()},
                              {"wire_version", remora::kWireVersion},
                              {"config",
                               {{"streams", c.streams_per_endpoint},
                                {"chunk_bytes", c.chunk_bytes},
                                {"eager_limit", c.eager_limit},
                                {"eager_credit", c.eager_credit},
                                {"spin_us", c.spin_us},
                                {"progress_linger_us", c.progress_linger_us}}}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("remora {} (wire protocol {})\n", remora::version_string(), remora::kWireVersion);
    fmt::print("config: {} data streams, chunk {}, eager limit {}, spin {} us\n", c.streams_per_endpoint,
               format_size(c.chunk_bytes), format_size(c.eager_limit), c.spin_us);
  }
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
  const auto& cfg = report->json["config"];
  fmt::print("# remora demo: two processes over {} ({}); tagged ping-pong both ways\n",
             cfg.value("peer", std::string("?")), config_line(cfg));
  fmt::print("# {:>8} {:>7} {:>14} {:>12}  {}\n", "size", "iters", "latency (us)", "bw (GB/s)", "verified");
  for (const auto& r : report->rows) {
    fmt::print("  {:>8} {:>7} {:>14.2f} {:>12.3f}  {}\n", format_size(r.size), r.iterations, r.latency_us,
               r.bandwidth_gbps, r.verified ? "yes" : "NO: " + r.problem);
  }
  fmt::print("# latency = half a round trip; bw = size / one-way time; verified = checksums on both sides\n");
  fmt::print("# pool (this process): {}\n", pool_line(report->json["local"]));
  fmt::print("# pool (peer process): {}\n", pool_line(report->json["peer"]));
  if (!write_json(json, report->json)) return 1;
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
};

/// With --listen the process is the follower: the driver (the --peer side) sends the
/// plan, whichever benchmark it is. nullopt when this process drives.
std::optional<int> maybe_follow(const BenchArgs& a) {
  if (a.listen.empty()) return std::nullopt;
  if (auto s = remora::perf::serve(a.listen, -1); !s) return fail(s);
  return 0;
}

void print_bench_header(std::string_view what, const nlohmann::json& report, const BenchArgs& a) {
  const auto& cfg = report["config"];
  fmt::print("# remora bench {} — peer {} ({})\n", what, cfg.value("peer", std::string("?")),
             cfg.value("follower", std::string("?")));
  fmt::print("# {}; buffers: {}\n", config_line(cfg), a.buffers);
}

int finish_bench(const nlohmann::json& report, const BenchArgs& a) {
  fmt::print("# pool: here {}; peer {}\n", pool_line(report["local"]), pool_line(report["peer"]));
  return write_json(a.json, report) ? 0 : 1;
}

struct P2pArgs : BenchArgs {
  std::string mode = "bw";
  bool distinct_buffers = false;
  P2pArgs() { sizes = {"8", "4K", "1M", "16M"}; }
};

int run_p2p(const P2pArgs& a) {
  if (auto rc = maybe_follow(a)) return *rc;
  remora::perf::P2pOptions o;
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

  print_bench_header("p2p " + a.mode, report->json, a);
  if (o.mode == remora::perf::P2pMode::kLatency) {
    fmt::print("# {:<10} {:>14} {:>10} {:>10} {:>8}\n", "Size", "Latency (us)", "p50", "p99", "iters");
    for (const auto& r : report->rows) {
      fmt::print("{:<12} {:>14.2f} {:>10.2f} {:>10.2f} {:>8}\n", r.size, r.latency.avg_us, r.latency.p50_us,
                 r.latency.p99_us, r.iterations);
    }
    fmt::print("# one-way latency = round trip / 2\n");
  } else {
    fmt::print("# window {}\n", a.window);
    fmt::print("# {:<10} {:>18} {:>8}\n", "Size", "Bandwidth (MB/s)", "iters");
    for (const auto& r : report->rows) fmt::print("{:<12} {:>18.2f} {:>8}\n", r.size, r.bandwidth_mbps, r.iterations);
  }
  return finish_bench(report->json, a);
}

struct RmaArgs : BenchArgs {
  std::string mode = "put_bw";
  std::optional<double> duration;
  bool inject_corruption = false;
};

int run_rma(const RmaArgs& a) {
  if (auto rc = maybe_follow(a)) return *rc;
  using remora::perf::RmaMode;
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

  print_bench_header("rma " + a.mode, report->json, a);
  const bool latency = o.mode == RmaMode::kPutLatency || o.mode == RmaMode::kGetLatency;
  if (latency) {
    fmt::print("# {:<10} {:>14} {:>10} {:>10} {:>9}\n", "Size", "Latency (us)", "p50", "p99", "iters");
    for (const auto& r : report->rows) {
      fmt::print("{:<12} {:>14.2f} {:>10.2f} {:>10.2f} {:>9}\n", r.size, r.latency.avg_us, r.latency.p50_us,
                 r.latency.p99_us, r.iterations);
    }
    fmt::print("# {}\n", o.mode == RmaMode::kPutLatency
                             ? "one-way latency = round trip / 2 (a put with a notification, answered by one)"
                             : "latency of one get: a full round trip, as is");
  } else {
    fmt::print("# window {}; every operation to offset 0 of one target region, from one local buffer\n", a.window);
    fmt::print("# {:<10} {:>18} {:>16} {:>8}\n", "Size", "Bandwidth (MB/s)", "Messages/s", "windows");
    for (const auto& r : report->rows) {
      fmt::print("{:<12} {:>18.2f} {:>16.0f} {:>8}\n", r.size, r.bandwidth_mbps, r.ops_per_second, r.iterations);
    }
  }
  fmt::print("# data checked once per size after the timed part: verified\n");
  return finish_bench(report->json, a);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"remora — RDMA-like memory semantics over plain TCP"};
  app.require_subcommand(1);

  bool version_json = false;
  auto* version = app.add_subcommand("version", "print the versions and the configuration REMORA_* resolves to");
  version->add_flag("--json", version_json, "as JSON");

  std::vector<std::string> demo_sizes;
  std::optional<uint32_t> demo_iters;
  std::string demo_json;
  auto* demo = app.add_subcommand("demo", "two-process loopback demo: tagged messages 1 B..64 MiB both ways, verified");
  demo->add_option("--sizes", demo_sizes, "message sizes, e.g. 1,4K,1M (default 1 B..64 MiB in powers of 4)")->delimiter(',');
  demo->add_option("--iters", demo_iters, "timed round trips per size (default: scaled by size)")->check(CLI::PositiveNumber);
  demo->add_option("--json", demo_json, "also write the results as JSON to this file");
  bool demo_corrupt = false;
  demo->add_flag("--inject-corruption", demo_corrupt)->group("");  // hidden: proves the checks fail loudly

  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  P2pArgs p2p_args;
  auto* p2p = bench->add_subcommand("p2p", "point-to-point bandwidth and latency (OSU-style)");
  p2p->add_option("--mode", p2p_args.mode, "bw (window + ack), lat (ping-pong), bibw (both ways)")
      ->check(CLI::IsMember({"bw", "lat", "bibw"}))
      ->capture_default_str();
  p2p->add_option("--sizes", p2p_args.sizes, "message sizes (K/M/G = powers of 1024)")->delimiter(',')->capture_default_str();
  p2p_args.add_to(p2p);
  p2p->add_flag("--distinct-buffers", p2p_args.distinct_buffers,
                "cycle a window through up to 64 MiB of distinct buffers (default: reuse one, as osu_bw and iperf3 do)");

  RmaArgs rma_args;
  auto* rma = bench->add_subcommand("rma", "one-sided put/get bandwidth, latency and rate (perftest-style)");
  rma->add_option("--mode", rma_args.mode,
                  "put_bw, get_bw (a window of puts/gets), put_lat (put+notify ping-pong), get_lat (one get at a "
                  "time), put_rate (small puts, operations/s)")
      ->check(CLI::IsMember({"put_bw", "get_bw", "put_lat", "get_lat", "put_rate"}))
      ->capture_default_str();
  rma->add_option("--sizes", rma_args.sizes,
                  "transfer sizes (K/M/G = powers of 1024; default 8,4K,1M,16M, put_rate 8,64,512,4K)")
      ->delimiter(',');
  auto* duration = rma->add_option("--duration", rma_args.duration, "timed seconds per size, instead of --iters")
                       ->check(CLI::PositiveNumber);
  rma_args.add_to(rma);
  duration->excludes(rma->get_option("--iters"));
  rma->add_flag("--inject-corruption", rma_args.inject_corruption)->group("");  // hidden: proves the checks fail loudly

  std::string serve_listen = "127.0.0.1:0";
  int serve_port_fd = -1;
  auto* serve = app.add_subcommand("serve", "")->group("");  // hidden: the spawned follower
  serve->add_option("--listen", serve_listen);
  serve->add_option("--port-fd", serve_port_fd);

  remora::tools::RunOptions run_options;
  int run_timeout_s = 0;
  auto* run = app.add_subcommand("run", "single-host launcher: run N ranks of a program (remora run -n 4 -- prog args)");
  run->add_option("-n,--ranks", run_options.ranks, "number of ranks")->required()->check(CLI::Range(1, 4096));
  run->add_option("--timeout", run_timeout_s, "stop every rank after this many seconds and exit 124 (0: never)")
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--tag-output", run_options.tag_output, "prefix every output line with [rank]");
  // Everything from the program on is the program's, flags included.
  run->prefix_command();

  // `remora run ... -- prog args`: what follows "--" is the program's, never ours.
  std::vector<std::string> after_dashdash;
  if (argc > 1 && std::string_view(argv[1]) == "run") {
    for (int i = 2; i < argc; ++i) {
      if (std::string_view(argv[i]) != "--") continue;
      after_dashdash.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  CLI11_PARSE(app, argc, argv);

  if (*version) return print_version(version_json);
  if (*demo) return run_demo(demo_sizes, demo_iters, demo_json, demo_corrupt);
  if (*p2p) return run_p2p(p2p_args);
  if (*rma) return run_rma(rma_args);
  if (*run) {
    run_options.argv = run->remaining();
    run_options.argv.insert(run_options.argv.end(), after_dashdash.begin(), after_dashdash.end());
    if (run_options.argv.empty()) {
      fmt::print(stderr, "remora run: no program given (remora run -n N [--] prog args...)\n");
      return 2;
    }
    run_options.timeout = std::chrono::seconds(run_timeout_s);
    return remora::tools::run_ranks(run_options);
  }
  if (*serve) {
    if (auto s = remora::perf::serve(serve_listen, serve_port_fd); !s) {
      fmt::print(stderr, "remora serve: error: {}\n", s.to_string());
      return 1;
    }
  }
  return 0;
}
