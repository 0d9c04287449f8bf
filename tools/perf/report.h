// tools/perf/report.h — what `remora` prints: the demo's and every benchmark's tables, the
// version lines and the JSON files. The CLI (tools/remora.cc) runs a benchmark and hands
// its report here; the formats are the tool's interface (tests and scripts read them), so
// a change here is a change to the tool's output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "perf.h"
#include "remora/config.h"

namespace remora::perf {

/// "N data streams, chunk C, eager limit E, spin S us" from a report's "config" object.
std::string config_line(const nlohmann::json& config);

/// One side's buffer pool from a report's "local" or "peer" object, or "explicit
/// registration" when that side used none.
std::string pool_line(const nlohmann::json& side);

/// "memory: here K, peer K" from a report's "config" object (host when it names none),
/// with the test-device copy rate when a side used the test device.
std::string memory_line(const nlohmann::json& config);

/// "staged through pinned buffers: here N transfers (M MiB), peer ..." from a report's
/// "local" and "peer" endpoint counters.
std::string staged_line(const nlohmann::json& report);
/// How this side received host-memory chunks: read out of the peer's memory by
/// same-host pulls (and how much each side read), or over TCP and why; "" when the
/// report has no endpoint counters.
std::string path_line(const nlohmann::json& report);
/// "puts and gets through a mapping of the peer's memory: ..." for an RMA run whose
/// initiator mapped the peer's pool memory (or was told why not); "" otherwise.
std::string direct_line(const nlohmann::json& report);

/// Writes `j` (indented, newline-terminated) to `path`; nothing when `path` is empty.
/// false, after saying so on stderr, when the file cannot be written.
bool write_json(const std::string& path, const nlohmann::json& j);

/// `remora version`: the library and wire versions and `config`, as text or JSON.
void print_version(const Config& config, bool as_json);

/// `remora demo`'s table, one row per size with its verdict, and both pools.
void print_demo_report(const DemoReport& report);

/// What a `remora bench p2p` or `bench rma` run prints besides its results.
struct BenchLabels {
  std::string_view mode;     ///< as given on the command line: "bw", "put_lat", ...
  std::string_view buffers;  ///< "pool" or "register"
  uint32_t window = 0;       ///< operations in flight per window
};

/// `remora bench p2p`: header, the latency or bandwidth table, the pools.
void print_p2p_report(const P2pReport& report, const BenchLabels& labels);

/// `remora bench staging`: the calibration, each phase's pairs with their ratios, the
/// medians against the bound, the staged transfers and the pools.
void print_staging_report(const StagingCheckReport& report);

/// `remora bench rma`: header, the latency or bandwidth/rate table, the pools.
void print_rma_report(const RmaReport& report, const BenchLabels& labels);

/// `remora bench coll` on rank 0: one table per operation (nccl-tests' columns, out of
/// place and in place), the #wrong line, the p2p reference and the ratios against it.
void print_coll_report(const CollReport& report, const CollOptions& options);

}  // namespace remora::perf
