// tools/perf/report_test.cc — the printers of report.cc on hand-made reports: the
// summary lines, the JSON writer's success and failure, and the exact lines of the p2p,
// staging-check, RMA and demo tables that scripts and the CTest checks of
// tools/programs.cmake read.
#include "report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace remora::perf {
namespace {

nlohmann::json config_json() {
  return {{"streams", 2}, {"chunk_bytes", 512 * 1024}, {"eager_limit", 16 * 1024}, {"spin_us", 200},
          {"peer", "127.0.0.1:7100"}, {"follower", "spawned on loopback"}};
}

nlohmann::json pool_side() {
  return {{"pool",
           {{"registrations", 1}, {"bytes_registered", 4 << 20}, {"hits", 5}, {"misses", 1}, {"buffers_in_use", 0}}}};
}

/// What `print` writes to stdout.
template <typename Print>
std::string captured(Print print) {
  std::fflush(stdout);
  testing::internal::CaptureStdout();
  print();
  std::fflush(stdout);
  return testing::internal::GetCapturedStdout();
}

TEST(Report, ConfigAndPoolLines) {
  EXPECT_EQ(config_line(config_json()), "2 data streams, chunk 512K, eager limit 16K, spin 200 us");
  nlohmann::json with_checksum = config_json();
  with_checksum["checksum"] = "crc32c";
  EXPECT_EQ(config_line(with_checksum), "2 data streams, chunk 512K, eager limit 16K, spin 200 us, checksum crc32c");
  EXPECT_EQ(pool_line(pool_side()), "1 arenas, 4 MiB registered, 5 hits, 1 misses, 0 buffers in use");
  EXPECT_EQ(pool_line(nlohmann::json::object()), "explicit registration");
}

TEST(Report, WriteJsonWritesTheFileOrSaysWhyNot) {
  EXPECT_TRUE(write_json("", {{"a", 1}})) << "no path: nothing to write, not an error";
  const std::string path = testing::TempDir() + "report_test.json";
  ASSERT_TRUE(write_json(path, {{"a", 1}}));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "{\n  \"a\": 1\n}\n");
  std::remove(path.c_str());
  testing::internal::CaptureStderr();
  EXPECT_FALSE(write_json("/nonexistent-dir/x.json", {{"a", 1}}));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "remora: error: cannot write /nonexistent-dir/x.json\n");
}

TEST(Report, P2pLatencyTable) {
  P2pReport r;
  r.mode = P2pMode::kLatency;
  r.json = {{"config", config_json()}, {"local", pool_side()}, {"peer", nlohmann::json::object()}};
  P2pRow row;
  row.size = 8;
  row.iterations = 200;
  row.latency = {.avg_us = 12.5, .p50_us = 12.25, .p99_us = 20, .min_us = 0, .max_us = 0};
  r.rows.push_back(row);
  const std::string out = captured([&] { print_p2p_report(r, {.mode = "lat", .buffers = "pool", .window = 64}); });
  EXPECT_EQ(
      out,
      "# remora bench p2p lat — peer 127.0.0.1:7100 (spawned on loopback)\n"
      "# 2 data streams, chunk 512K, eager limit 16K, spin 200 us; buffers: pool\n"
      "# memory: here host, peer host\n"
      "# Size         Latency (us)        p50        p99    iters\n"
      "8                     12.50      12.25      20.00      200\n"
      "# one-way latency = round trip / 2\n"
      "# data checked once per size after the timed part: verified\n"
      "# staged through pinned buffers: here 0 transfers (0 MiB), peer 0 transfers (0 MiB)\n"
      "# pool: here 1 arenas, 4 MiB registered, 5 hits, 1 misses, 0 buffers in use; peer explicit registration\n");
}

nlohmann::json endpoint_side(uint64_t transfers, uint64_t bytes) {
  return {{"endpoint", {{"staged_transfers", transfers}, {"staged_bytes", bytes}}}};
}

TEST(Report, MemoryAndStagedLines) {
  EXPECT_EQ(memory_line(config_json()), "memory: here host, peer host");
  nlohmann::json cfg = config_json();
  cfg["memory"] = {{"driver", "test-device"}, {"follower", "host"}, {"device_copy_rate", "2.500 GB/s"}};
  EXPECT_EQ(memory_line(cfg), "memory: here test-device, peer host; test-device copy rate: 2.500 GB/s");
  cfg["memory"] = {{"driver", "host"}, {"follower", "host"}, {"device_copy_rate", "auto"}};
  EXPECT_EQ(memory_line(cfg), "memory: here host, peer host") << "no test device: no rate to speak of";
  const nlohmann::json report = {{"local", endpoint_side(256, uint64_t{1} << 30)}, {"peer", endpoint_side(3, 4096)}};
  EXPECT_EQ(staged_line(report),
            "staged through pinned buffers: here 256 transfers (1024 MiB), peer 3 transfers (0 MiB)");
}

TEST(Report, PathLineSaysWhetherChunksWerePulledOrWentOverTcp) {
  EXPECT_EQ(path_line({{"local", pool_side()}}), "") << "no endpoint counters: nothing to say";
  nlohmann::json local = endpoint_side(0, 0), peer = endpoint_side(0, 0);
  local["endpoint"]["same_host_reason"] = "";
  local["endpoint"]["bytes_pulled"] = uint64_t{3} << 30;
  peer["endpoint"]["bytes_pulled"] = uint64_t{5} << 20;
  EXPECT_EQ(path_line({{"local", local}, {"peer", peer}}),
            "chunks read by same-host pulls: here 3072 MiB out of the peer's memory, peer 5 MiB out of ours "
            "(REMORA_SAME_HOST=off measures loopback TCP)");
  local["endpoint"]["same_host_reason"] = "REMORA_SAME_HOST=off";
  EXPECT_EQ(path_line({{"local", local}, {"peer", peer}}), "chunks over loopback TCP: REMORA_SAME_HOST=off");
}

TEST(Report, DirectLineCountsOperationsThroughAMappingOrSaysWhyNot) {
  EXPECT_EQ(direct_line({{"local", pool_side()}}), "") << "no endpoint counters: nothing to say";
  nlohmann::json local = endpoint_side(0, 0);
  local["endpoint"]["puts"] = 10;
  local["endpoint"]["gets"] = 5;
  local["endpoint"]["atomics"] = 3;
  local["endpoint"]["direct"] = 12;
  local["endpoint"]["direct_reason"] = "";
  EXPECT_EQ(direct_line({{"local", local}}),
            "12 of 18 puts, gets and atomics went through a mapping of the peer's pool memory");
  local["endpoint"]["direct"] = 0;
  local["endpoint"]["direct_reason"] = "the peer does not share the memory (unsupported)";
  EXPECT_EQ(direct_line({{"local", local}}),
            "puts, gets and atomics through the peer: the peer does not share the memory (unsupported)");
}

TEST(Report, P2pBandwidthTableOfDeviceMemoryAtTheMeasuredRate) {
  P2pReport r;
  r.mode = P2pMode::kBandwidth;
  nlohmann::json cfg = config_json();
  cfg["memory"] = {{"driver", "test-device"}, {"follower", "test-device"}, {"device_copy_rate", "auto"}};
  r.json = {{"config", cfg}, {"local", endpoint_side(10, 5 << 20)}, {"peer", endpoint_side(10, 5 << 20)}};
  P2pRow row;
  row.size = 1 << 20;
  row.iterations = 5;
  row.bandwidth_mbps = 1500;
  row.device_copy_rate = 2.25e9;
  r.rows.push_back(row);
  row.size = 0;
  row.device_copy_rate = 0;
  r.rows.push_back(row);
  r.calibration.resize(2);
  const std::string out = captured([&] { print_p2p_report(r, {.mode = "bw", .buffers = "pool", .window = 2}); });
  EXPECT_EQ(out,
            "# remora bench p2p bw — peer 127.0.0.1:7100 (spawned on loopback)\n"
            "# 2 data streams, chunk 512K, eager limit 16K, spin 200 us; buffers: pool\n"
            "# memory: here test-device, peer test-device; test-device copy rate: auto (the host-to-host rate "
            "measured just before, at each size)\n"
            "# window 2\n"
            "# Size         Bandwidth (MB/s)    iters Copy rate (MB/s)\n"
            "1048576                 1500.00        5          2250.00\n"
            "0                       1500.00        5        unlimited\n"
            "# copy rate: each size's host-to-host network rate, measured just before it in this run\n"
            "# data checked once per size after the timed part: verified\n"
            "# staged through pinned buffers: here 10 transfers (5 MiB), peer 10 transfers (5 MiB)\n"
            "# pool: here explicit registration; peer explicit registration\n");
}

TEST(Report, StagingCheckPairsMediansAndVerdict) {
  StagingCheckReport r;
  r.size = size_t{64} << 20;
  r.window = 1;
  r.bound = 1.25;
  nlohmann::json cfg = config_json();
  cfg["staging_buffers"] = 8;
  cfg["iters"] = 8;
  cfg["warmup"] = 1;
  cfg["host_cpus"] = 2;
  r.json = {{"config", cfg}, {"local", endpoint_side(108, 6912ull << 20)}, {"peer", endpoint_side(108, 6912ull << 20)}};
  const auto row = [](double ms) {
    P2pRow x;
    x.iterations = 8;
    x.seconds = ms * 8 / 1e3;
    x.bandwidth_mbps = 67.108864 / (ms / 1e3);
    x.cpu_driver_seconds = x.seconds;  // 1.50 cores in all
    x.cpu_follower_seconds = x.seconds * 0.5;
    return x;
  };
  r.calibration = row(32);
  r.calibration.iterations = 16;
  r.calibration.seconds = 16 * 0.032;
  r.matched = {.name = "matched", .copy_rate = 2.097152e9, .pairs = {}, .median_ratio = 1.1, .within_bound = true};
  r.matched.pairs.push_back({.host_first = true, .host = row(30), .device = row(33), .ratio = 1.1});
  r.matched.pairs.push_back({.host_first = false, .host = row(40), .device = row(44), .ratio = 1.1});
  r.unlimited = {.name = "unlimited", .copy_rate = 0, .pairs = {}, .median_ratio = 1.5, .within_bound = false};
  r.unlimited.pairs.push_back({.host_first = true, .host = row(20), .device = row(30), .ratio = 1.5});
  const std::string out = captured([&] { print_staging_report(r); });
  EXPECT_EQ(out,
            "# remora bench staging — peer 127.0.0.1:7100 (spawned on loopback)\n"
            "# 2 data streams, chunk 512K, eager limit 16K, spin 200 us, 8 staging buffers\n"
            "# a transfer: one 64M message (window 1) and its 4-byte ack; 8 timed after 1 warm-up per measurement\n"
            "# calibration, host to host: 16 transfers, 32.00 ms each = 2.097 GB/s\n"
            "#\n"
            "# copies at the network rate: 2.097 GB/s per copy engine, both sides\n"
            "# pair  order         host (ms)  device (ms)   ratio   host GB/s  cores host/dev\n"
            "     1  host, device      30.00        33.00   1.100       2.237       1.50/1.50\n"
            "     2  device, host      40.00        44.00   1.100       1.678       1.50/1.50\n"
            "# median device/host: 1.100 (bound <= 1.25: PASS)\n"
            "#\n"
            "# copies unlimited (a memcpy)\n"
            "# pair  order         host (ms)  device (ms)   ratio   host GB/s  cores host/dev\n"
            "     1  host, device      20.00        30.00   1.500       3.355       1.50/1.50\n"
            "# median device/host: 1.500 (bound <= 1.25: FAIL)\n"
            "#\n"
            "# ratio: device-to-device time / host-to-host time of the same pair (adjacent measurements);\n"
            "# host GB/s: the pair's network rate (a pair faster than the calibration had copies slower than it);\n"
            "# the bound is issue 18's, for copies at the network rate. A design that copies the whole message\n"
            "# before sending it takes at least 2x there (3x when the receiver also copies after it arrived).\n"
            "# cores host/dev: CPU time of both processes / wall time. The test device's copies are memcpys, CPU work\n"
            "# a GPU's copy engines do not take; where host to host already keeps every core busy (2 here), those\n"
            "# copies take CPU from the network and the ratio measures the CPU, not the overlap.\n"
            "# staging check: PASS (median 1.100, bound 1.25)\n"
            "# data checked on the receiving side of every measurement: verified\n"
            "# staged through pinned buffers: here 108 transfers (6912 MiB), peer 108 transfers (6912 MiB)\n");
}

TEST(Report, RmaBandwidthTable) {
  RmaReport r;
  r.mode = RmaMode::kPutBandwidth;
  r.json = {{"config", config_json()}, {"local", nlohmann::json::object()}, {"peer", nlohmann::json::object()}};
  RmaRow row;
  row.size = 4096;
  row.iterations = 5;
  row.bandwidth_mbps = 1234.5;
  row.ops_per_second = 300000;
  r.rows.push_back(row);
  const std::string out = captured([&] { print_rma_report(r, {.mode = "put_bw", .buffers = "register", .window = 8}); });
  EXPECT_EQ(out,
            "# remora bench rma put_bw — peer 127.0.0.1:7100 (spawned on loopback)\n"
            "# 2 data streams, chunk 512K, eager limit 16K, spin 200 us; buffers: register\n"
            "# window 8; every operation to offset 0 of one target region, from one local buffer\n"
            "# Size         Bandwidth (MB/s)       Messages/s  windows\n"
            "4096                    1234.50           300000        5\n"
            "# data checked once per size after the timed part: verified\n"
            "# pool: here explicit registration; peer explicit registration\n");
}

TEST(Report, DemoTableShowsEachVerdict) {
  DemoReport r;
  r.json = {{"config", config_json()}, {"local", pool_side()}, {"peer", pool_side()}};
  r.rows.push_back({.size = 1024, .iterations = 10, .latency_us = 5, .bandwidth_gbps = 0.25, .verified = true, .problem = ""});
  r.rows.push_back(
      {.size = 4096, .iterations = 10, .latency_us = 6, .bandwidth_gbps = 1, .verified = false, .problem = "checksum"});
  const std::string out = captured([&] { print_demo_report(r); });
  EXPECT_NE(out.find("\n        1K      10           5.00        0.250  yes\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\n        4K      10           6.00        1.000  NO: checksum\n"), std::string::npos) << out;
  EXPECT_NE(out.find("# pool (peer process): 1 arenas, 4 MiB registered"), std::string::npos) << out;
}

}  // namespace
}  // namespace remora::perf
