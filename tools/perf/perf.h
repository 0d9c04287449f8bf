// tools/perf/perf.h — remora's benchmarks and demo as a library; the `remora` command
// line (tools/remora.cc) is a thin layer over it, as ucx_perftest is over libucxperf.
// What the tool prints of a report (tables, JSON files) is in report.h.
//
// p2p, rma and the demo have two sides. The *driver* decides what to measure, sends the
// plan to the *follower* as its first message, times the run and reports. The follower
// is either a process the driver spawns on loopback (the default), or a `remora bench
// p2p --listen` started by hand on another host. Results come back as plain structs
// plus JSON. The collective benchmark (run_coll) instead runs as every rank of a job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "remora/communicator.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora::perf {

/// Called from the driver's loop as work completes; `total` is the iterations of the
/// current message size (including warm-up). Must be cheap.
using ProgressFn = std::function<void(std::string_view what, uint64_t done, uint64_t total)>;

/// Where the follower comes from. Neither set: spawn `self_exe serve` on 127.0.0.1.
struct PeerOptions {
  std::string peer;                       ///< "host:port" of a listening follower
  std::string self_exe = "/proc/self/exe";  ///< what to spawn as the loopback follower
};

enum class P2pMode : uint8_t {
  kBandwidth,    ///< a window of sends, then one small ack (osu_bw)
  kLatency,      ///< ping-pong; one-way latency = round trip / 2 (osu_latency)
  kBiBandwidth,  ///< both sides send a window at once (osu_bibw)
};
std::string_view to_string(P2pMode mode) noexcept;

/// Where benchmark buffers come from; either way they are registered before the run.
enum class BufferSource : uint8_t { kPool, kRegister };
std::string_view to_string(BufferSource source) noexcept;

/// The memory a side's message buffers are of: MemoryKind::kHost; kTestDevice, a
/// remora::testing::TestDeviceDomain (a test double of a device: memory reachable only
/// through its asynchronous copies) that the side creates and adds to its context; or
/// kCuda, which this remora refuses (the CUDA domain is not built into it yet). Device
/// memory moves through the endpoint's staging path (pinned bounce buffers, device
/// copies overlapping the network). "host", "test-device" or "cuda"; kInvalidArgument
/// otherwise.
Result<MemoryKind> parse_bench_memory(std::string_view text);

/// What each copy engine of a test device moves per second (--device-copy-rate).
struct DeviceCopyRate {
  double bytes_per_second = 0;  ///< 0: unlimited (a memcpy)
  /// "auto": before each size, the same measurement on host memory at both sides, and
  /// the copy rate set to the network rate it found (bytes one way per second).
  bool automatic = false;
};
/// "auto"; bytes per second as a number ("2500000000", "2.5e9", 0 = unlimited) or with
/// a K/M/G suffix (powers of 1024: "2G"). kInvalidArgument otherwise.
Result<DeviceCopyRate> parse_device_copy_rate(std::string_view text);
/// "unlimited", "auto", or "2.500 GB/s" (10^9 bytes/s).
std::string to_string(const DeviceCopyRate& rate);

/// The memory of both sides' message buffers. p2p takes it; rma takes the same struct
/// once puts and gets of device memory are wired (the follower's side is the target's
/// region there). Acks and control messages stay in host memory.
struct MemoryOptions {
  MemoryKind local = MemoryKind::kHost;  ///< the driver's (--memory)
  std::optional<MemoryKind> peer;        ///< the follower's (--peer-memory); unset: as `local`
  DeviceCopyRate copy_rate;              ///< of the test devices on both sides
  MemoryKind peer_kind() const { return peer.value_or(local); }
};

struct P2pOptions {
  P2pMode mode = P2pMode::kBandwidth;
  std::vector<size_t> sizes = {8, 4096, size_t{1} << 20, size_t{16} << 20};
  uint32_t window = 64;            ///< outstanding messages per window (bw, bibw)
  std::optional<uint32_t> iters;   ///< timed iterations per size; unset = scaled by size
  std::optional<uint32_t> warmup;  ///< untimed iterations per size; unset = scaled by size
  BufferSource buffers = BufferSource::kPool;
  /// false (default, as osu_bw and iperf3 do): every message of a window uses the same
  /// send buffer and the same receive buffer, so a size that fits the cache stays in
  /// it. true: a window cycles through up to 64 MiB of distinct buffers (memory-bound).
  bool distinct_buffers = false;
  MemoryOptions memory;
  /// Fault injection for tests: the follower damages one byte of what it received at
  /// each size (through the device's copies for device memory) before its data check,
  /// so the check must fail the run.
  bool inject_corruption = false;
  ProgressFn progress;
};

struct LatencySummary {
  double avg_us = 0, p50_us = 0, p99_us = 0, min_us = 0, max_us = 0;
};

/// Transfers of one side's endpoint that moved through staging buffers
/// (EndpointStats::staged_transfers, staged_bytes).
struct StagedCounts {
  uint64_t transfers = 0;
  uint64_t bytes = 0;
};

struct P2pRow {
  size_t size = 0;
  uint32_t iterations = 0;
  uint32_t warmup = 0;
  double seconds = 0;           ///< timed part only
  double bandwidth_mbps = 0;    ///< 10^6 bytes/s, as OSU reports; both directions for bibw
  LatencySummary latency;       ///< one-way, lat mode only
  MemoryKind driver_memory = MemoryKind::kHost;
  MemoryKind follower_memory = MemoryKind::kHost;
  double device_copy_rate = 0;                  ///< bytes/s each test-device copy engine was held to; 0: unlimited
  bool verified = false;                        ///< both sides' data check of this size passed
  StagedCounts staged_driver, staged_follower;  ///< during this size (warm-up, timed part, check)
  /// CPU time (user + system, all threads) of each side's process during the timed
  /// part (bw, bibw): with `seconds`, how many cores the transfer kept busy.
  double cpu_driver_seconds = 0, cpu_follower_seconds = 0;
};

/// The network rate of a row, bytes one way per second: bw's bandwidth, half of
/// bibw's, lat's size / one-way latency. What --device-copy-rate auto sets.
double network_rate(P2pMode mode, const P2pRow& row);

struct P2pReport {
  P2pMode mode = P2pMode::kBandwidth;
  std::vector<P2pRow> rows;
  /// --device-copy-rate auto: the host-to-host measurement before each row (same index).
  std::vector<P2pRow> calibration;
  nlohmann::json json;  ///< everything: config, rows, pool/registry/endpoint stats of both sides
};

/// `remora bench staging`, issue 18's acceptance check of the staging path: does a
/// device-to-device transfer hide its device copies behind the network? One run, one
/// connection, bw mode with a window of `window` messages of `size` bytes:
///  1. calibration: host to host, `calibration_iters` windows; its network rate
///     (network_rate) becomes the copy rate of the test devices on both sides;
///  2. `pairs` pairs of one host-to-host and one test-device-to-test-device measurement,
///     back to back, host first in odd pairs and device first in even ones; each pair's
///     ratio is device time / host time, and the median of the ratios is checked
///     against `bound`. With copies as fast as the network, each copy alone costs what
///     the transfer does: a design that copies the whole message before sending it
///     takes at least 2x (3x when the receiver too copies only after the whole message
///     arrived); staging that overlaps the copies with the network, about 1x;
///  3. the same pairs with the copies unlimited.
/// Only adjacent measurements make a ratio: on a host whose speed drifts between a
/// slow and a fast state, the two sides of a pair nearly always share one.
struct StagingCheckOptions {
  size_t size = size_t{64} << 20;
  uint32_t window = 1;              ///< messages per timed iteration (one transfer: 1)
  uint32_t pairs = 6;               ///< at least 4
  uint32_t iters = 8;               ///< timed iterations per measurement
  uint32_t warmup = 1;              ///< untimed iterations before them
  uint32_t calibration_iters = 16;  ///< timed iterations of the calibration
  double bound = 1.25;              ///< device time / host time, at most
  ProgressFn progress;
};

struct StagingPair {
  bool host_first = true;
  P2pRow host, device;
  double ratio = 0;  ///< device seconds / host seconds
};

struct StagingPhase {
  std::string name;      ///< "matched" (copy rate = network rate) or "unlimited"
  double copy_rate = 0;  ///< bytes/s per copy engine; 0: unlimited
  std::vector<StagingPair> pairs;
  double median_ratio = 0;    ///< of the pairs' ratios
  bool within_bound = false;  ///< median_ratio <= the bound
};

struct StagingCheckReport {
  size_t size = 0;
  uint32_t window = 1;
  double bound = 1.25;
  P2pRow calibration;  ///< host to host; its network rate is matched.copy_rate
  StagingPhase matched, unlimited;
  nlohmann::json json;  ///< everything, as bench p2p's, plus the pairs and verdicts
};

/// Runs the staging check as the driver (the follower as for run_p2p). Every
/// measurement's data is checked on the receiving side; the verdict against the bound
/// is reported, never an error.
Result<StagingCheckReport> run_staging_check(const PeerOptions& peer, const StagingCheckOptions& options);

/// One-sided benchmarks, as perftest's ib_write_bw / ib_read_bw / ib_write_lat /
/// ib_read_lat. The driver is the initiator; the follower is the target: it registers a
/// region (remote read, write, atomic), sends its RemoteKey over a tagged message and
/// then makes no call while the driver works (passive target), except in put_lat and notify_lat.
enum class RmaMode : uint8_t {
  kPutBandwidth,   ///< a window of puts from one reused buffer, then wait for all (osu_bw, ib_write_bw)
  kGetBandwidth,   ///< a window of gets into one reused buffer (ib_read_bw)
  kPutLatency,     ///< both sides put with a notification into the other; one-way = round trip / 2 (ib_write_lat)
  kGetLatency,     ///< one get at a time; a get is a full round trip, reported as is (ib_read_lat)
  kPutRate,        ///< a window of small puts; operations per second (osu_mbw_mr with one pair)
  kNotifyLatency,  ///< one put with a notification at a time, until it completes; the target takes each notification
  kAtomicLatency,  ///< one fetch_add at a time on the region's first word, until it completes (ib_atomic_lat)
};
std::string_view to_string(RmaMode mode) noexcept;
/// Modes that time one operation at a time (a latency table), not a window.
bool is_latency(RmaMode mode) noexcept;
/// "put_bw", "get_bw", "put_lat", "get_lat", "put_rate", "notify_lat", "atomic_lat"; kInvalidArgument
/// otherwise.
Result<RmaMode> parse_rma_mode(std::string_view text);

struct RmaOptions {
  RmaMode mode = RmaMode::kPutBandwidth;
  /// Empty: 8,4K,1M,16M (put_rate: 8,64,512,4K).
  std::vector<size_t> sizes;
  uint32_t window = 64;            ///< operations in flight per window (put_bw, get_bw, put_rate)
  std::optional<uint32_t> iters;   ///< timed iterations per size (windows or round trips); unset = scaled by size
  std::optional<uint32_t> warmup;  ///< untimed iterations per size; unset = scaled by size
  /// Timed seconds per size instead of a count of iterations (the warm-up still counts).
  std::optional<double> duration_s;
  BufferSource buffers = BufferSource::kPool;  ///< the initiator's buffers and the target's region
  /// Fault injection for tests: after each size's timed part, damage one byte (put
  /// modes: a 1-byte put of a flipped byte into the target; get modes: the local copy),
  /// so the data check must fail the run.
  bool inject_corruption = false;
  ProgressFn progress;
};

struct RmaRow {
  size_t size = 0;
  uint32_t iterations = 0;  ///< timed windows (bw, rate) or round trips (lat)
  uint32_t warmup = 0;
  uint64_t operations = 0;    ///< timed puts or gets
  double seconds = 0;         ///< timed part only
  double bandwidth_mbps = 0;  ///< 10^6 bytes/s
  double ops_per_second = 0;
  LatencySummary latency;  ///< lat modes: one-way (put_lat) or per get (get_lat)
};

struct RmaReport {
  RmaMode mode = RmaMode::kPutBandwidth;
  std::vector<RmaRow> rows;
  nlohmann::json json;  ///< everything: config, rows, pool/registry/endpoint stats of both sides
};

/// Runs the RMA benchmark as the driver (initiator). Every size's data is checked once
/// after its timed part (puts read back with a get and checked by the target too; gets
/// compared with the target's pattern); a mismatch or any failed operation is an error.
Result<RmaReport> run_rma(const PeerOptions& peer, const RmaOptions& options);

struct DemoOptions {
  /// Default: 1 B to 64 MiB in powers of 4.
  std::vector<size_t> sizes;
  std::optional<uint32_t> iters;  ///< timed round trips per size; unset = scaled by size
  uint32_t verify_rounds = 2;     ///< extra round trips per size with fresh data + checksums
  /// Fault injection for tests: flip one byte of each size's first verified message
  /// after its checksum is taken, so the follower must report the mismatch.
  bool inject_corruption = false;
  PeerOptions peer;
  ProgressFn progress;
};

struct DemoRow {
  size_t size = 0;
  uint32_t iterations = 0;
  double latency_us = 0;   ///< half a round trip
  double bandwidth_gbps = 0;  ///< size / one-way time, 10^9 bytes/s
  bool verified = false;
  std::string problem;     ///< why not verified
};

struct DemoReport {
  std::vector<DemoRow> rows;
  bool ok = false;         ///< every size verified on both sides
  nlohmann::json json;
};

/// Runs the p2p benchmark as the driver.
Result<P2pReport> run_p2p(const PeerOptions& peer, const P2pOptions& options);

/// The two-process demo: tagged ping-pong of growing sizes in both directions, every
/// size checked with checksums on both sides. A verification failure is reported in the
/// rows (and `ok`), a transport failure as an error.
Result<DemoReport> run_demo(const DemoOptions& options);

/// The follower: listens on `address`, reports the bound port on `port_fd` as
/// "<port>\n" (then closes it) or, when port_fd < 0, on stderr; serves one driver and
/// returns when it says goodbye.
Status serve(std::string_view address, int port_fd);

// --- collectives (coll.cc) ------------------------------------------------------------

/// `remora bench coll`, the nccl-tests of remora. Every rank of a job calls run_coll;
/// rank 0 gets the results. Sizes, counts and bus bandwidth follow nccl-tests (see
/// bench/README.md): "size" is the bytes of the whole buffer the operation is named by
/// (allreduce, reduce, broadcast: the vector; allgather, gather: the gathered result;
/// reduce_scatter, scatter: the input; alltoall: each rank's send buffer), rounded down
/// to a multiple of ranks × element size where it is cut into per-rank blocks.
struct CollOptions {
  std::vector<CollectiveKind> ops = {CollectiveKind::kAllreduce};
  /// The alltoall rows run alltoallv instead, every count the same and the blocks in
  /// rank order (`--op alltoallv`).
  bool alltoallv = false;
  /// The allgather rows run allgatherv instead, every count the same and the blocks in
  /// rank order (`--op allgatherv`).
  bool allgatherv = false;
  /// Table sizes in bytes, in order. Empty: 4K, 16K, ... 64M (powers of 4).
  std::vector<size_t> sizes;
  DataType type = DataType::kFloat32;
  ReduceOp redop = ReduceOp::kSum;  ///< reductions only
  int root = 0;                     ///< rooted operations only (reduce, broadcast, gather, scatter)
  std::optional<uint32_t> iters;    ///< timed operations per size; unset = scaled by size
  std::optional<uint32_t> warmup;   ///< untimed ones before them; unset = scaled by size
  /// Check every size's result (both placements) against the expected data; the count
  /// of wrong elements over all ranks is the #wrong column. A wrong element is not an
  /// error of run_coll: the report carries it (CollReport::wrong).
  bool check = true;
  /// Measure the point-to-point reference between ranks 0 and 1 before the table.
  bool reference = true;
  /// Timed windows per exchange size and timed round trips of the reference; unset =
  /// scaled as remora bench p2p scales them (bibw: ~2 GiB per size; lat: 10000).
  std::optional<uint32_t> reference_iters;
  /// Rounds of (reference, table): the reference and the table are measured this many
  /// times, the reference first in odd rounds and last in even ones (ABBA), so that a
  /// host whose speed drifts during the run moves both sides of a ratio alike. Each
  /// ratio is then the median of its per-round ratios. The data check runs in the
  /// first round only (the later rounds only time).
  uint32_t rounds = 1;
  /// Fault injection for tests: after each checked operation, one rank that checks
  /// flips a byte in the middle of its result before checking it.
  bool inject_corruption = false;
  /// When set, the job must have exactly this many ranks (`-n` under a launcher).
  std::optional<int> expect_ranks;
  ProgressFn progress;  ///< called on rank 0 only
};

/// An operation's name in the report: to_string's, but "alltoallv" or "allgatherv" where
/// CollOptions::alltoallv or allgatherv says the alltoall or allgather rows run it.
inline std::string_view op_name(CollectiveKind op, const CollOptions& o) noexcept {
  if (op == CollectiveKind::kAlltoall && o.alltoallv) return "alltoallv";
  if (op == CollectiveKind::kAllgather && o.allgatherv) return "allgatherv";
  return to_string(op);
}

/// One placement (out-of-place or in-place) of one size.
struct CollTiming {
  bool ran = false;       ///< false where the operation has no such form (alltoall in place)
  double time_us = 0;     ///< per operation: each rank's average, the slowest rank's
  double algbw_gbps = 0;  ///< size / time, 10^9 bytes/s
  double busbw_gbps = 0;  ///< algbw × the operation's bus factor
  uint64_t wrong = 0;     ///< wrong elements, summed over ranks (0 without a check)
};

struct CollRow {
  CollectiveKind op = CollectiveKind::kAllreduce;
  size_t requested = 0;   ///< the size asked for
  size_t size = 0;        ///< bytes, as nccl-tests' size column
  size_t count = 0;       ///< elements of `size`
  std::string algorithm;  ///< what Communicator::algorithm says ran
  int steps = 0;
  uint32_t iterations = 0;
  uint32_t warmup = 0;
  CollTiming out_of_place, in_place;
};

/// The point-to-point reference, ranks 0 and 1 over the communicator's endpoint, in
/// the same run (what a ring's links can carry at once, and one message's latency).
struct CollReference {
  bool measured = false;
  struct Exchange {
    size_t size = 0;  ///< bytes per message
    uint32_t window = 0;
    uint32_t iterations = 0;
    double seconds = 0;
    double gbps_per_direction = 0;  ///< bytes one way / time, 10^9 bytes/s
  };
  std::vector<Exchange> exchanges;  ///< bidirectional, at the run's sizes >= 1 MiB
  size_t pingpong_size = 4096;
  uint32_t pingpong_iterations = 0;
  LatencySummary rtt;  ///< 4 KiB round trip (not halved)
};

/// A row measured against the reference (the targets).
struct CollRatio {
  CollectiveKind op = CollectiveKind::kAllreduce;
  size_t size = 0;
  bool bandwidth = true;  ///< busbw / per-direction bandwidth; else time / (steps × RTT)
  std::string placement;  ///< "out-of-place" (or "in-place" where there is no other)
  std::string algorithm;
  int steps = 0;
  double value = 0;      ///< busbw (GB/s) or time (us); the median over rounds
  double reference = 0;  ///< per-direction GB/s, or steps × average RTT (us); the median over rounds
  double ratio = 0;              ///< the median of per_round (one round: its ratio)
  std::vector<double> per_round; ///< value / reference in each round, in round order
  double ratio_p50 = 0;          ///< latency only: against steps × the RTT's p50 (median over rounds)
  std::optional<double> target;  ///< allreduce only: >= 0.8 (bandwidth), <= 2 (latency)
  bool met() const { return !target || (bandwidth ? ratio >= *target : ratio <= *target); }
};

struct CollReport {
  int rank = 0;
  int ranks = 1;
  std::string launcher;
  std::vector<CollRow> rows;  ///< rank 0 only, in (op, size) order: the first (checked) round's
  CollReference reference;    ///< rank 0 only: the first round's
  /// Every round's table and reference (rank 0 only; rounds[0] is rows/reference).
  struct Round {
    std::vector<CollRow> rows;
    CollReference reference;
  };
  std::vector<Round> rounds;
  std::vector<CollRatio> ratios;  ///< over all rounds (medians)
  uint64_t wrong = 0;   ///< over every row, placement and rank (every rank knows it)
  /// What this rank held to reach the others at the end (Communicator::connections),
  /// and the most any rank held (endpoints, sockets): a communicator connects lazily.
  ConnectionStats connections;
  int most_peers = 0;
  uint64_t most_sockets = 0;
  nlohmann::json json;  ///< rank 0: everything (config, rows, reference, ratios)
};

/// Checks options that need no job (sizes, root against `ranks`, type × redop).
Status validate(const CollOptions& options, int ranks);
/// Runs as one rank of the job the launcher's environment describes (launch.h). A
/// failure on any rank (including a bad option) fails every rank: an error here, and
/// the communicator's failure reaching the others.
Result<CollReport> run_coll(const CollOptions& options);
/// Whether this process runs as a rank of a launched job: true when detect_launch()
/// finds one; false when none of the variables it reads is set (no launcher at all);
/// detect_launch's error when some are set but do not describe a job.
Result<bool> launched_as_rank();
/// nccl-tests' bus bandwidth factor of `op` on `ranks` ranks.
double bus_factor(CollectiveKind op, int ranks);

/// "4K" → 4096, "16M", "1G", plain bytes. kInvalidArgument otherwise.
Result<size_t> parse_size(std::string_view text);
/// 4096 → "4K", 1048576 → "1M", 1000 → "1000".
std::string format_size(size_t bytes);

}  // namespace remora::perf
