// tools/perf/report.cc — the tables, version line and JSON files `remora` prints (see
// report.h). The column layouts follow OSU (p2p), perftest (rma) and nccl-tests (coll).
#include "report.h"

#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "remora/remora.h"

namespace remora::perf {
namespace {

/// The two lines every `bench p2p` and `bench rma` table starts with.
void print_bench_header(std::string_view what, const nlohmann::json& report, std::string_view buffers) {
  const auto& cfg = report["config"];
  fmt::print("# remora bench {} — peer {} ({})\n", what, cfg.value("peer", std::string("?")),
             cfg.value("follower", std::string("?")));
  fmt::print("# {}; buffers: {}\n", config_line(cfg), buffers);
}

/// The line every `bench p2p` and `bench rma` table ends with.
void print_bench_pools(const nlohmann::json& report) {
  fmt::print("# pool: here {}; peer {}\n", pool_line(report["local"]), pool_line(report["peer"]));
}

/// The four cells of one placement (time, algbw, busbw, #wrong), or n/a as wide.
std::string timing_cells(const remora::perf::CollTiming& t, bool checked) {
  if (!t.ran) return fmt::format("{:>10}{:25}", "n/a", "");  // as wide as the four cells
  return fmt::format("{:>10.2f} {:>8.3f} {:>8.3f} {:>6}", t.time_us, t.algbw_gbps, t.busbw_gbps,
                     checked ? std::to_string(t.wrong) : "N/A");
}

/// How busbw follows from algbw for `op`, as the table header shows it.
std::string bus_formula(remora::CollectiveKind op) {
  switch (op) {
    case remora::CollectiveKind::kAllreduce: return "2(n-1)/n";
    case remora::CollectiveKind::kBroadcast:
    case remora::CollectiveKind::kReduce: return "1";
    case remora::CollectiveKind::kBarrier: return "-";
    default: return "(n-1)/n";
  }
}

/// The lines above the tables: the job, the configuration, what the columns mean.
void print_coll_header(const CollReport& r, const CollOptions& o) {
  const auto& cfg = r.json["config"];
  fmt::print("# remora bench coll — {} ranks ({}), type {}, redop {}, root {}\n", r.ranks, r.launcher,
             to_string(o.type), to_string(o.redop), o.root);
  fmt::print("# {} data streams configured, chunk {}, eager limit {}, spin {} us; data check: {}\n",
             cfg.value("streams_configured", 0u), format_size(cfg.value("chunk_bytes", size_t{0})),
             format_size(cfg.value("eager_limit", size_t{0})), cfg.value("spin_us", 0u), o.check ? "on" : "off");
  fmt::print(
      "# time: per operation, each rank's average over the timed iterations, the slowest rank's;\n"
      "# algbw = size / time; busbw = algbw x bus factor; GB/s = 10^9 bytes/s\n");
}

/// One table per operation (out of place and in place side by side), then #wrong and
/// the average bus bandwidth.
void print_coll_tables(const CollReport& r, const CollOptions& o) {
  using remora::CollectiveKind;
  const std::string blank;
  double busbw_sum = 0;
  int busbw_rows = 0;
  CollectiveKind current = CollectiveKind::kBarrier;
  bool first = true;
  for (const auto& row : r.rows) {
    if (first || row.op != current) {
      fmt::print("#\n# {} (bus factor {})\n", op_name(row.op, o), bus_formula(row.op));
      fmt::print("# {:63} {:-^35}  {:-^35}\n", blank, " out-of-place ", " in-place ");
      fmt::print("# {:>10} {:>12} {:>8} {:>5} {:>4} {:>13} {:>5} {:>10} {:>8} {:>8} {:>6}  {:>10} {:>8} {:>8} {:>6}\n",
                 "size", "count", "type", "redop", "root", "algorithm", "steps", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong");
      fmt::print("# {:>10} {:>12} {:>8} {:>5} {:>4} {:>13} {:>5} {:>10} {:>8} {:>8} {:>6}  {:>10} {:>8} {:>8} {:>6}\n",
                 "(B)", "(elements)", "", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
                 "");
      current = row.op;
      first = false;
    }
    const bool reduction = row.op == CollectiveKind::kAllreduce || row.op == CollectiveKind::kReduce ||
                           row.op == CollectiveKind::kReduceScatter;
    const bool rooted = row.op == CollectiveKind::kReduce || row.op == CollectiveKind::kBroadcast ||
                        row.op == CollectiveKind::kGather || row.op == CollectiveKind::kScatter;
    fmt::print("  {:>10} {:>12} {:>8} {:>5} {:>4} {:>13} {:>5} {}  {}\n", row.size, row.count, to_string(o.type),
               reduction ? std::string(to_string(o.redop)) : "none", rooted ? o.root : -1, row.algorithm, row.steps,
               timing_cells(row.out_of_place, o.check), timing_cells(row.in_place, o.check));
    for (const auto* t : {&row.out_of_place, &row.in_place}) {
      if (t->ran && row.op != CollectiveKind::kBarrier) {
        busbw_sum += t->busbw_gbps;
        ++busbw_rows;
      }
    }
  }
  fmt::print("#\n# #wrong: {}\n", o.check ? fmt::format("{} (every size checked on every rank)", r.wrong)
                                          : std::string("not checked (--no-check)"));
  if (busbw_rows > 0) fmt::print("# Avg bus bandwidth: {:.3f} GB/s\n", busbw_sum / busbw_rows);
}

/// The p2p reference of ranks 0 and 1; false (after saying why) when none was measured.
bool print_coll_reference(const CollReport& r, const CollOptions& o) {
  const auto& ref = r.reference;
  if (!ref.measured) {
    fmt::print("# reference: {}\n", o.reference ? "needs 2 ranks" : "not measured (--no-reference)");
    return false;
  }
  fmt::print("#\n# reference, ranks 0 and 1 in this run over their communicator endpoint (bench p2p's loops):\n");
  if (ref.exchanges.empty()) fmt::print("#   bidirectional exchange: no size >= 1M in this run\n");
  for (const auto& e : ref.exchanges) {
    fmt::print("#   bidirectional exchange {:>5}: {:.3f} GB/s per direction (window {}, {} iterations)\n",
               format_size(e.size), e.gbps_per_direction, e.window, e.iterations);
  }
  fmt::print("#   {} ping-pong round trip: avg {:.2f} us, p50 {:.2f} us, p99 {:.2f} us ({} round trips)\n",
             format_size(ref.pingpong_size), ref.rtt.avg_us, ref.rtt.p50_us, ref.rtt.p99_us, ref.pingpong_iterations);
  return true;
}

/// Each ratio against the reference with its target, and how to read them.
void print_coll_ratios(const CollReport& r, const CollOptions& o) {
  if (o.rounds > 1) {
    fmt::print("#   (this reference and the table above: round 1 of {})\n", o.rounds);
  }
  fmt::print("#\n# {:<15} {:>6} {:<13} {:>9} {:>5} {:>12} {:>14} {:>7}  {}\n", "vs reference", "size", "placement",
             "algorithm", "steps", "value", "reference", "ratio", "target");
  for (const auto& x : r.ratios) {
    const std::string what = fmt::format("{} {}", op_name(x.op, o), x.bandwidth ? "busbw" : "time");
    const std::string value = x.bandwidth ? fmt::format("{:.3f} GB/s", x.value) : fmt::format("{:.2f} us", x.value);
    const std::string reference = x.bandwidth ? fmt::format("{:.3f} GB/s", x.reference)
                                              : fmt::format("{} x {:.2f} us", x.steps, x.reference / x.steps);
    std::string target = "-";
    if (x.target) target = fmt::format("{} {} {}", x.bandwidth ? ">=" : "<=", *x.target, x.met() ? "met" : "MISS");
    fmt::print("  {:<15} {:>6} {:<13} {:>9} {:>5} {:>12} {:>14} {:>7.2f}  {}{}\n", what, format_size(x.size),
               x.placement, x.algorithm, x.steps, value, reference, x.ratio, target,
               x.bandwidth ? "" : fmt::format("  (against the p50 RTT: {:.2f})", x.ratio_p50));
    if (x.per_round.size() > 1) fmt::print("  {:<15} per round: {:.2f}\n", "", fmt::join(x.per_round, " "));
  }
  if (o.rounds > 1) {
    fmt::print(
        "# {} rounds, the reference first in odd rounds and last in even ones; value, reference and ratio are\n"
        "# the medians over the rounds\n",
        o.rounds);
  }
  fmt::print(
      "# busbw ratio: busbw / the exchange's per-direction bandwidth at the same size;\n"
      "# time ratio: time / (steps x the average {} round trip); targets are the issue's, for allreduce\n",
      format_size(r.reference.pingpong_size));
}

}  // namespace

std::string config_line(const nlohmann::json& c) {
  // The checksum is named only when on (REMORA_CHECKSUM=crc32c): its cost shows in the rows.
  const std::string checksum = c.value("checksum", std::string("none"));
  return fmt::format("{} data streams, chunk {}, eager limit {}, spin {} us{}", c.value("streams", 0u),
                     format_size(c.value("chunk_bytes", size_t{0})), format_size(c.value("eager_limit", size_t{0})),
                     c.value("spin_us", 0u), checksum == "none" ? "" : ", checksum " + checksum);
}

std::string pool_line(const nlohmann::json& side) {
  if (!side.contains("pool")) return "explicit registration";
  const auto& p = side["pool"];
  return fmt::format("{} arenas, {} MiB registered, {} hits, {} misses, {} buffers in use",
                     p.value("registrations", 0u), p.value("bytes_registered", size_t{0}) >> 20,
                     p.value("hits", 0u), p.value("misses", 0u), p.value("buffers_in_use", 0u));
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

void print_version(const Config& c, bool as_json) {
  if (as_json) {
    const nlohmann::json j = {{"version", version_string()},
                              {"wire_version", kWireVersion},
                              {"config",
                               {{"streams", c.streams_per_endpoint},
                                {"chunk_bytes", c.chunk_bytes},
                                {"eager_limit", c.eager_limit},
                                {"eager_credit", c.eager_credit},
                                {"spin_us", c.spin_us},
                                {"progress_linger_us", c.progress_linger_us}}}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("remora {} (wire protocol {})\n", version_string(), kWireVersion);
    fmt::print("config: {} data streams, chunk {}, eager limit {}, spin {} us\n", c.streams_per_endpoint,
               format_size(c.chunk_bytes), format_size(c.eager_limit), c.spin_us);
  }
}

void print_demo_report(const DemoReport& report) {
  const auto& cfg = report.json["config"];
  fmt::print("# remora demo: two processes over {} ({}); tagged ping-pong both ways\n",
             cfg.value("peer", std::string("?")), config_line(cfg));
  fmt::print("# {:>8} {:>7} {:>14} {:>12}  {}\n", "size", "iters", "latency (us)", "bw (GB/s)", "verified");
  for (const auto& r : report.rows) {
    fmt::print("  {:>8} {:>7} {:>14.2f} {:>12.3f}  {}\n", format_size(r.size), r.iterations, r.latency_us,
               r.bandwidth_gbps, r.verified ? "yes" : "NO: " + r.problem);
  }
  fmt::print("# latency = half a round trip; bw = size / one-way time; verified = checksums on both sides\n");
  fmt::print("# pool (this process): {}\n", pool_line(report.json["local"]));
  fmt::print("# pool (peer process): {}\n", pool_line(report.json["peer"]));
  if (const std::string path = path_line(report.json); !path.empty()) fmt::print("# {}\n", path);
}

std::string memory_line(const nlohmann::json& config) {
  const nlohmann::json memory = config.value("memory", nlohmann::json::object());
  const std::string here = memory.value("driver", std::string("host"));
  const std::string peer = memory.value("follower", std::string("host"));
  std::string line = fmt::format("memory: here {}, peer {}", here, peer);
  if (here == "test-device" || peer == "test-device") {
    const std::string rate = memory.value("device_copy_rate", std::string("unlimited"));
    line += fmt::format("; test-device copy rate: {}", rate == "auto" ? "auto (the host-to-host rate measured just "
                                                                        "before, at each size)"
                                                                      : rate);
  }
  return line;
}

std::string staged_line(const nlohmann::json& report) {
  const auto side = [&](const char* which) {
    const nlohmann::json ep = report.value(which, nlohmann::json::object()).value("endpoint", nlohmann::json::object());
    return fmt::format("{} transfers ({} MiB)", ep.value("staged_transfers", uint64_t{0}),
                       ep.value("staged_bytes", uint64_t{0}) >> 20);
  };
  return fmt::format("staged through pinned buffers: here {}, peer {}", side("local"), side("peer"));
}

std::string path_line(const nlohmann::json& report) {
  const auto endpoint = [&](const char* which) {
    return report.value(which, nlohmann::json::object()).value("endpoint", nlohmann::json::object());
  };
  const nlohmann::json here = endpoint("local"), peer = endpoint("peer");
  if (!here.contains("same_host_reason")) return {};
  const std::string reason = here.value("same_host_reason", std::string());
  if (!reason.empty()) return "chunks over loopback TCP: " + reason;
  return fmt::format(
      "chunks read by same-host pulls: here {} MiB out of the peer's memory, peer {} MiB out of ours "
      "(REMORA_SAME_HOST=off measures loopback TCP)",
      here.value("bytes_pulled", uint64_t{0}) >> 20, peer.value("bytes_pulled", uint64_t{0}) >> 20);
}

std::string direct_line(const nlohmann::json& report) {
  const nlohmann::json here =
      report.value("local", nlohmann::json::object()).value("endpoint", nlohmann::json::object());
  const uint64_t direct = here.value("direct", uint64_t{0});
  const std::string reason = here.value("direct_reason", std::string());
  if (direct > 0) {
    return fmt::format(
        "{} of {} puts, gets and atomics went through a mapping of the peer's pool memory", direct,
        here.value("puts", uint64_t{0}) + here.value("gets", uint64_t{0}) + here.value("atomics", uint64_t{0}));
  }
  return reason.empty() ? std::string() : "puts, gets and atomics through the peer: " + reason;
}

void print_p2p_report(const P2pReport& report, const BenchLabels& labels) {
  print_bench_header("p2p " + std::string(labels.mode), report.json, labels.buffers);
  fmt::print("# {}\n", memory_line(report.json["config"]));
  // --device-copy-rate auto: the rate each row's copies were held to.
  const bool rates = !report.calibration.empty();
  const auto rate_cell = [&](const P2pRow& r) {
    if (!rates) return std::string();
    return r.device_copy_rate > 0 ? fmt::format(" {:>16.2f}", r.device_copy_rate / 1e6)
                                  : fmt::format(" {:>16}", "unlimited");
  };
  const std::string rate_head = rates ? fmt::format(" {:>16}", "Copy rate (MB/s)") : "";
  if (report.mode == P2pMode::kLatency) {
    fmt::print("# {:<10} {:>14} {:>10} {:>10} {:>8}{}\n", "Size", "Latency (us)", "p50", "p99", "iters", rate_head);
    for (const auto& r : report.rows) {
      fmt::print("{:<12} {:>14.2f} {:>10.2f} {:>10.2f} {:>8}{}\n", r.size, r.latency.avg_us, r.latency.p50_us,
                 r.latency.p99_us, r.iterations, rate_cell(r));
    }
    fmt::print("# one-way latency = round trip / 2\n");
  } else {
    fmt::print("# window {}\n", labels.window);
    fmt::print("# {:<10} {:>18} {:>8}{}\n", "Size", "Bandwidth (MB/s)", "iters", rate_head);
    for (const auto& r : report.rows) {
      fmt::print("{:<12} {:>18.2f} {:>8}{}\n", r.size, r.bandwidth_mbps, r.iterations, rate_cell(r));
    }
  }
  if (rates) fmt::print("# copy rate: each size's host-to-host network rate, measured just before it in this run\n");
  fmt::print("# data checked once per size after the timed part: verified\n");
  fmt::print("# {}\n", staged_line(report.json));
  if (const std::string path = path_line(report.json); !path.empty()) fmt::print("# {}\n", path);
  print_bench_pools(report.json);
}

namespace {

/// Milliseconds per transfer (one message of the window) of a staging-check row.
double ms_per_transfer(const P2pRow& r, uint32_t window) {
  const double transfers = static_cast<double>(r.iterations) * window;
  return transfers > 0 ? r.seconds / transfers * 1e3 : 0;
}

/// CPU cores both sides' processes kept busy during a row's timed part (their CPU time
/// over its wall time; both count on one host, the default loopback follower).
double cores_busy(const P2pRow& r) {
  return r.seconds > 0 ? (r.cpu_driver_seconds + r.cpu_follower_seconds) / r.seconds : 0;
}

void print_staging_phase(const StagingCheckReport& r, const StagingPhase& phase) {
  if (phase.copy_rate > 0) {
    fmt::print("#\n# copies at the network rate: {:.3f} GB/s per copy engine, both sides\n", phase.copy_rate / 1e9);
  } else {
    fmt::print("#\n# copies unlimited (a memcpy)\n");
  }
  fmt::print("# {:>4}  {:<12} {:>10} {:>12} {:>7} {:>11} {:>15}\n", "pair", "order", "host (ms)", "device (ms)",
             "ratio", "host GB/s", "cores host/dev");
  for (size_t i = 0; i < phase.pairs.size(); ++i) {
    const StagingPair& p = phase.pairs[i];
    fmt::print("  {:>4}  {:<12} {:>10.2f} {:>12.2f} {:>7.3f} {:>11.3f} {:>15}\n", i + 1,
               p.host_first ? "host, device" : "device, host", ms_per_transfer(p.host, r.window),
               ms_per_transfer(p.device, r.window), p.ratio, network_rate(P2pMode::kBandwidth, p.host) / 1e9,
               fmt::format("{:.2f}/{:.2f}", cores_busy(p.host), cores_busy(p.device)));
  }
  fmt::print("# median device/host: {:.3f} (bound <= {}: {})\n", phase.median_ratio, r.bound,
             phase.within_bound ? "PASS" : "FAIL");
}

}  // namespace

void print_staging_report(const StagingCheckReport& r) {
  const auto& cfg = r.json["config"];
  fmt::print("# remora bench staging — peer {} ({})\n", cfg.value("peer", std::string("?")),
             cfg.value("follower", std::string("?")));
  fmt::print("# {}, {} staging buffers\n", config_line(cfg), cfg.value("staging_buffers", 0u));
  fmt::print("# a transfer: one {} message (window {}) and its 4-byte ack; {} timed after {} warm-up per measurement\n",
             format_size(r.size), r.window, cfg.value("iters", 0u), cfg.value("warmup", 0u));
  const double network = network_rate(P2pMode::kBandwidth, r.calibration);
  fmt::print("# calibration, host to host: {} transfers, {:.2f} ms each = {:.3f} GB/s\n",
             static_cast<uint64_t>(r.calibration.iterations) * r.window, ms_per_transfer(r.calibration, r.window),
             network / 1e9);
  print_staging_phase(r, r.matched);
  print_staging_phase(r, r.unlimited);
  fmt::print(
      "#\n# ratio: device-to-device time / host-to-host time of the same pair (adjacent measurements);\n"
      "# host GB/s: the pair's network rate (a pair faster than the calibration had copies slower than it);\n"
      "# the bound is issue 18's, for copies at the network rate. A design that copies the whole message\n"
      "# before sending it takes at least 2x there (3x when the receiver also copies after it arrived).\n"
      "# cores host/dev: CPU time of both processes / wall time. The test device's copies are memcpys, CPU work\n"
      "# a GPU's copy engines do not take; where host to host already keeps every core busy ({} here), those\n"
      "# copies take CPU from the network and the ratio measures the CPU, not the overlap.\n",
      cfg.contains("host_cpus") ? std::to_string(cfg["host_cpus"].get<unsigned>()) : std::string("?"));
  fmt::print("# staging check: {} (median {:.3f}, bound {})\n", r.matched.within_bound ? "PASS" : "FAIL",
             r.matched.median_ratio, r.bound);
  fmt::print("# data checked on the receiving side of every measurement: verified\n");
  fmt::print("# {}\n", staged_line(r.json));
}

void print_rma_report(const RmaReport& report, const BenchLabels& labels) {
  print_bench_header("rma " + std::string(labels.mode), report.json, labels.buffers);
  if (is_latency(report.mode)) {
    fmt::print("# {:<10} {:>14} {:>10} {:>10} {:>9}\n", "Size", "Latency (us)", "p50", "p99", "iters");
    for (const auto& r : report.rows) {
      fmt::print("{:<12} {:>14.2f} {:>10.2f} {:>10.2f} {:>9}\n", r.size, r.latency.avg_us, r.latency.p50_us,
                 r.latency.p99_us, r.iterations);
    }
    fmt::print(
        "# {}\n",
        report.mode == RmaMode::kPutLatency
            ? "one-way latency = round trip / 2 (a put with a notification, answered by one)"
        : report.mode == RmaMode::kNotifyLatency
            ? "latency of one put with a notification until it completed: a full round trip, as is"
        : report.mode == RmaMode::kAtomicLatency
            ? "latency of one fetch_add, as is: a full round trip, or the atomic through a mapping where one is said "
              "below"
            : "latency of one get, as is: a full round trip, or a copy through a mapping where one is said below");
  } else {
    fmt::print("# window {}; every operation to offset 0 of one target region, from one local buffer\n",
               labels.window);
    fmt::print("# {:<10} {:>18} {:>16} {:>8}\n", "Size", "Bandwidth (MB/s)", "Messages/s", "windows");
    for (const auto& r : report.rows) {
      fmt::print("{:<12} {:>18.2f} {:>16.0f} {:>8}\n", r.size, r.bandwidth_mbps, r.ops_per_second, r.iterations);
    }
  }
  fmt::print("# data checked once per size after the timed part: verified\n");
  if (const std::string direct = direct_line(report.json); !direct.empty()) fmt::print("# {}\n", direct);
  print_bench_pools(report.json);
}

void print_coll_report(const CollReport& r, const CollOptions& o) {
  print_coll_header(r, o);
  print_coll_tables(r, o);
  fmt::print(
      "# connections at the end: rank 0 holds {} endpoints ({} sockets); the most any rank holds: {} ({} "
      "sockets); a communicator connects to a rank when something first needs it\n",
      r.connections.peers, r.connections.sockets, r.most_peers, r.most_sockets);
  if (r.connections.segment_ranks > 0) {
    fmt::print("# rank 0's shared segment: {} ranks map it\n", r.connections.segment_ranks);
  } else {
    fmt::print("# rank 0 has no shared segment: {}\n", r.connections.no_segment);
  }
  if (!print_coll_reference(r, o) || r.ratios.empty()) return;
  print_coll_ratios(r, o);
}

}  // namespace remora::perf
