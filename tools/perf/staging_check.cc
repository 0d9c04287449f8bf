// tools/perf/staging_check.cc — `remora bench staging`: issue 18's acceptance check of
// the staging path (perf.h, StagingCheckOptions). One p2p plan over one connection: a
// host-to-host calibration, then pairs of host-to-host and test-device-to-test-device
// measurements, first with the test devices' copies held to the calibration's network
// rate, then unlimited. Every measurement is a p2p bw step (drive_p2p_step), so its
// data is checked on the receiving side and its staged transfers counted.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "p2p.h"
#include "remora/testing/test_device.h"

namespace remora::perf {
namespace internal {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Status validate(const StagingCheckOptions& o) {
  if (o.size == 0) return Status(StatusCode::kInvalidArgument, "--size must be at least 1 byte");
  if (o.window == 0) return Status(StatusCode::kInvalidArgument, "--window must be at least 1");
  if (o.pairs < 4) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("--pairs {}: at least 4 pairs, so that the median stands on both orders", o.pairs));
  }
  if (o.iters == 0 || o.calibration_iters == 0) {
    return Status(StatusCode::kInvalidArgument, "--iters and --calibration-iters must be at least 1");
  }
  if (!(o.bound > 0)) return Status(StatusCode::kInvalidArgument, "the bound must be positive");
  return Status::ok();
}

constexpr const char* kPhaseNames[2] = {"matched", "unlimited"};

/// The plan: the calibration, then for each phase `pairs` pairs, host first in odd
/// pairs (1, 3, ...) and device first in even ones.
P2pPlan make_plan(const StagingCheckOptions& o) {
  P2pPlan plan{.mode = P2pMode::kBandwidth,
               .window = o.window,
               .distinct_buffers = false,
               .buffers = BufferSource::kPool,
               .inject_corruption = false,
               .steps = {}};
  const P2pStep host{.counts = {.size = o.size, .iters = o.iters, .warmup = o.warmup},
                     .driver_memory = MemoryKind::kHost,
                     .follower_memory = MemoryKind::kHost};
  P2pStep calibration = host;
  calibration.counts.iters = o.calibration_iters;
  const P2pStep device{
      .counts = host.counts, .driver_memory = testing::kTestDeviceKind, .follower_memory = testing::kTestDeviceKind};
  plan.steps.push_back(calibration);
  for (int phase = 0; phase < 2; ++phase) {  // matched, unlimited: the same pairs
    for (uint32_t p = 0; p < o.pairs; ++p) {
      const bool host_first = p % 2 == 0;
      plan.steps.push_back(host_first ? host : device);
      plan.steps.push_back(host_first ? device : host);
    }
  }
  return plan;
}

nlohmann::json phase_json(const StagingPhase& phase, double bound, uint32_t window) {
  nlohmann::json j = {{"name", phase.name},
                      {"copy_rate_Bps", phase.copy_rate},
                      {"median_ratio", phase.median_ratio},
                      {"bound", bound},
                      {"within_bound", phase.within_bound}};
  j["pairs"] = nlohmann::json::array();
  for (const StagingPair& p : phase.pairs) {
    j["pairs"].push_back({{"host_first", p.host_first},
                          {"ratio", p.ratio},
                          {"host", row_json(P2pMode::kBandwidth, window, p.host)},
                          {"device", row_json(P2pMode::kBandwidth, window, p.device)}});
  }
  return j;
}

}  // namespace
}  // namespace internal

using namespace internal;  // NOLINT(google-build-using-namespace)

Result<StagingCheckReport> run_staging_check(const PeerOptions& peer, const StagingCheckOptions& o) {
  REMORA_RETURN_IF_ERROR(validate(o));
  // The bound compares device memory staged over the network with host memory over the
  // same path. Device memory never goes by same-host pulls, so the host reference must
  // not either: both sides (the spawned follower inherits this) keep chunks on TCP.
  // Set before any context or thread of this process exists.
  if (::setenv("REMORA_SAME_HOST", "off", 1) != 0) return Status(StatusCode::kInternal, "setenv REMORA_SAME_HOST");
  const P2pPlan plan = make_plan(o);
  StagingCheckReport report;
  report.size = o.size;
  report.window = o.window;
  report.bound = o.bound;
  report.json = {{"tool", "remora bench staging"}, {"version", version_string()}};

  const auto body = [&](DriverSession& d) -> Status {
    report.json["config"]["size"] = o.size;
    report.json["config"]["window"] = o.window;
    report.json["config"]["pairs"] = o.pairs;
    report.json["config"]["iters"] = o.iters;
    report.json["config"]["warmup"] = o.warmup;
    report.json["config"]["calibration_iters"] = o.calibration_iters;
    report.json["config"]["host_cpus"] = std::thread::hardware_concurrency();  // this side's
    size_t i = 0;  // the next step of the plan
    REMORA_RETURN_IF_ERROR(drive_p2p_step(d, plan, i++, 0, o.progress, &report.calibration));
    const double network = network_rate(P2pMode::kBandwidth, report.calibration);
    for (StagingPhase* phase : {&report.matched, &report.unlimited}) {
      phase->name = phase == &report.matched ? kPhaseNames[0] : kPhaseNames[1];
      phase->copy_rate = phase == &report.matched ? network : 0;
      std::vector<double> ratios;
      for (uint32_t p = 0; p < o.pairs; ++p) {
        StagingPair pair;
        pair.host_first = plan.steps[i].driver_memory == MemoryKind::kHost;
        P2pRow& first = pair.host_first ? pair.host : pair.device;
        P2pRow& second = pair.host_first ? pair.device : pair.host;
        REMORA_RETURN_IF_ERROR(drive_p2p_step(d, plan, i++, phase->copy_rate, o.progress, &first));
        REMORA_RETURN_IF_ERROR(drive_p2p_step(d, plan, i++, phase->copy_rate, o.progress, &second));
        pair.ratio = pair.host.seconds > 0 ? pair.device.seconds / pair.host.seconds : 0;
        ratios.push_back(pair.ratio);
        phase->pairs.push_back(pair);
      }
      phase->median_ratio = median(ratios);
      phase->within_bound = phase->median_ratio <= o.bound;
    }
    return Status::ok();
  };
  const DriverSetup setup{.buffers = plan.buffers, .memory = plan.driver_memory(), .plan = to_json(plan)};
  REMORA_RETURN_IF_ERROR(run_driver(peer, setup, &report.json, body));

  report.json["calibration"] = row_json(P2pMode::kBandwidth, o.window, report.calibration);
  report.json["calibration"]["network_rate_Bps"] = network_rate(P2pMode::kBandwidth, report.calibration);
  report.json["phases"] = nlohmann::json::array();
  for (const StagingPhase* phase : {&report.matched, &report.unlimited}) {
    report.json["phases"].push_back(phase_json(*phase, o.bound, o.window));
  }
  report.json["verdict"] = {{"bound", o.bound},
                            {"median_ratio", report.matched.median_ratio},
                            {"pass", report.matched.within_bound},
                            {"what",
                             "test-device to test-device time / host to host time, copies at the network "
                             "rate, median over adjacent pairs"}};
  return report;
}

}  // namespace remora::perf
