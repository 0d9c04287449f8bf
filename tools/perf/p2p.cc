// tools/perf/p2p.cc — osu_bw / osu_bibw / osu_latency over remora endpoints.
//
// bw:   the driver posts a window of sends, the follower a window of receives; the
//       follower answers each window with a 4-byte ack. bandwidth = bytes / time.
// bibw: both sides post a window of receives and a window of sends, and wait for both.
// lat:  ping-pong in osu_latency's order: each side sends, then posts its next
//       receive (an answer that comes first waits as an unexpected message); one-way
//       latency = round trip / 2, per iteration, so we can report p50 and p99.
// Only the driver times. Host buffers come from a Pool (or explicit registration),
// device buffers from the side's device memory (memory.h), registered explicitly;
// either way before the first timed byte. After each size's timed part every side that
// received checks what it received against the sender's pattern (the follower reports
// its verdict). The loops run over a Link (session.h), so remora bench coll measures its
// reference with the same code over a Communicator.
#include "p2p.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "pattern.h"

namespace remora::perf {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

Status check_bytes(std::span<const Request> rs, size_t size) {
  for (const Request& r : rs) {
    if (r.bytes() != size) {
      return Status(StatusCode::kProtocol, fmt::format("received {} bytes, expected {}", r.bytes(), size));
    }
  }
  return Status::ok();
}

/// The window of `slots` buffers of `size` bytes carved from one registered region.
std::span<std::byte> slot(std::span<std::byte> region, size_t size, uint32_t slots, uint32_t i) {
  return region.subspan(static_cast<size_t>(i % slots) * size, size);
}

}  // namespace

namespace {
/// This process's CPU time so far, user and system, all threads (getrusage).
double process_cpu_seconds() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  const auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return secs(u.ru_utime) + secs(u.ru_stime);
}
}  // namespace

Status run_window(const LoopSide& side, P2pMode mode, uint32_t window, bool distinct, const Step& st, double* seconds,
                  double* cpu_seconds) {
  Link& link = side.link;
  BufferSet& buffers = side.buffers;
  const bool driver = side.driver;
  const uint32_t slots = distinct ? window_slots(st.size, window) : 1;
  const size_t region_bytes = st.size * slots;
  const bool sends_data = driver || mode == P2pMode::kBiBandwidth;
  const bool receives_data = !driver || mode == P2pMode::kBiBandwidth;
  std::span<std::byte> send_region, recv_region;
  if (sends_data) {
    REMORA_ASSIGN_OR_RETURN(send_region, buffers.get(region_bytes));
    send_region = send_region.first(region_bytes);
    REMORA_RETURN_IF_ERROR(buffers.fill(send_region, st.size));
  }
  if (receives_data) {
    REMORA_ASSIGN_OR_RETURN(recv_region, buffers.get(region_bytes));
    recv_region = recv_region.first(region_bytes);
  }
  REMORA_ASSIGN_OR_RETURN(auto ack, buffers.get_host(4));
  ack = ack.first(4);
  std::fill(ack.begin(), ack.end(), std::byte{0});

  std::vector<Request> sends(sends_data ? window : 0), recvs(receives_data ? window : 0);
  const uint32_t total = st.warmup + st.iters;
  const std::string label = format_size(st.size);  // formatted once, not per iteration
  REMORA_RETURN_IF_ERROR(side.start());
  Clock::time_point t0 = Clock::now();
  double cpu0 = process_cpu_seconds();
  for (uint32_t it = 0; it < total; ++it) {
    if (it == st.warmup) {
      t0 = Clock::now();
      cpu0 = process_cpu_seconds();
    }
    Request ack_req;
    if (driver && mode == P2pMode::kBandwidth) ack_req = link.recv(ack, kAckTag);
    for (uint32_t w = 0; w < recvs.size(); ++w) recvs[w] = link.recv(slot(recv_region, st.size, slots, w), kDataTag);
    for (uint32_t w = 0; w < sends.size(); ++w) sends[w] = link.send(slot(send_region, st.size, slots, w), kDataTag);
    REMORA_RETURN_IF_ERROR(wait_all_ok(sends, "window send"));
    REMORA_RETURN_IF_ERROR(wait_all_ok(recvs, "window receive"));
    REMORA_RETURN_IF_ERROR(check_bytes(recvs, st.size));
    if (mode == P2pMode::kBandwidth) {
      if (driver) {
        REMORA_RETURN_IF_ERROR(wait_ok(ack_req, "ack receive"));
      } else {
        REMORA_RETURN_IF_ERROR(wait_ok(link.send(ack, kAckTag), "ack send"));
      }
    }
    if (side.progress) side.progress(label, it + 1, total);
  }
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (cpu_seconds != nullptr) *cpu_seconds = process_cpu_seconds() - cpu0;
  if (side.problem != nullptr) {
    // Slot w of every window received slot w of the sender's region: the whole region
    // holds the sender's pattern.
    if (side.damage && !recv_region.empty())
      REMORA_RETURN_IF_ERROR(buffers.damage(recv_region, recv_region.size() / 2));
    REMORA_ASSIGN_OR_RETURN(*side.problem, buffers.check(recv_region, st.size));
  }
  return Status::ok();
}

Status run_pingpong(const LoopSide& side, const Step& st, std::vector<double>* rtt_us) {
  Link& link = side.link;
  const bool driver = side.driver;
  REMORA_ASSIGN_OR_RETURN(auto send_buf, side.buffers.get(st.size));
  REMORA_ASSIGN_OR_RETURN(auto recv_buf, side.buffers.get(st.size));
  send_buf = send_buf.first(st.size);
  recv_buf = recv_buf.first(st.size);
  // Each side's own pattern: a message that came back unchanged would not verify.
  const uint64_t my_seed = st.size + (driver ? 0 : 1), peer_seed = st.size + (driver ? 1 : 0);
  REMORA_RETURN_IF_ERROR(side.buffers.fill(send_buf, my_seed));
  const uint32_t total = st.warmup + st.iters;
  if (driver) rtt_us->assign(st.iters, 0.0);

  if (!driver) {
    Request r = link.recv(recv_buf, kPingTag);
    REMORA_RETURN_IF_ERROR(side.start());
    for (uint32_t it = 0; it < total; ++it) {
      REMORA_RETURN_IF_ERROR(wait_ok(r, "ping receive"));
      if (r.bytes() != st.size) return Status(StatusCode::kProtocol, fmt::format("ping of {} bytes, expected {}", r.bytes(), st.size));
      // The pong first, then the next receive, as osu_latency's MPI_Send then MPI_Recv:
      // posting the receive overlaps the pong's flight instead of delaying it.
      const Request pong = link.send(send_buf, kPongTag);
      if (it + 1 < total) r = link.recv(recv_buf, kPingTag);
      REMORA_RETURN_IF_ERROR(wait_ok(pong, "pong send"));
    }
  } else {
    REMORA_RETURN_IF_ERROR(side.start());
    const std::string label = format_size(st.size);  // formatted once, not per iteration
    for (uint32_t it = 0; it < total; ++it) {
      const Clock::time_point t = Clock::now();
      // The ping first, then the pong's receive (osu_latency's order, as above).
      const Request ping = link.send(send_buf, kPingTag);
      const std::array<Request, 2> pair{link.recv(recv_buf, kPongTag), ping};
      REMORA_RETURN_IF_ERROR(wait_all_ok(pair, "ping-pong"));
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t).count();
      if (pair[0].bytes() != st.size)
        return Status(StatusCode::kProtocol, fmt::format("pong of {} bytes, expected {}", pair[0].bytes(), st.size));
      if (it >= st.warmup) (*rtt_us)[it - st.warmup] = us;
      if (side.progress && (it & 63) == 0) side.progress(label, it + 1, total);
    }
  }
  if (side.problem != nullptr) {
    if (side.damage && !recv_buf.empty()) REMORA_RETURN_IF_ERROR(side.buffers.damage(recv_buf, recv_buf.size() / 2));
    REMORA_ASSIGN_OR_RETURN(*side.problem, side.buffers.check(recv_buf, peer_seed));
  }
  return Status::ok();
}

namespace {

std::vector<MemoryKind> distinct_kinds(const std::vector<P2pStep>& steps, MemoryKind P2pStep::*side) {
  std::vector<MemoryKind> kinds;
  for (const P2pStep& st : steps) {
    if (std::find(kinds.begin(), kinds.end(), st.*side) == kinds.end()) kinds.push_back(st.*side);
  }
  return kinds;
}

Status bad_plan(std::string_view what) {
  return Status(StatusCode::kProtocol, fmt::format("p2p plan: {} (the driver runs another version?)", what));
}

/// `j[key]` as T when it is there and of T's JSON type.
template <typename T>
Result<T> plan_field(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return bad_plan(fmt::format("no '{}'", key));
  const nlohmann::json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) return v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (v.is_string()) return v.get<std::string>();
  } else {
    if (v.is_number_unsigned() && v.get<uint64_t>() <= std::numeric_limits<T>::max()) return v.get<T>();
  }
  return bad_plan(fmt::format("'{}' is {}", key, v.dump()));
}

/// `j[key]` as the one of `values` whose to_string it is.
template <typename E>
Result<E> plan_enum(const nlohmann::json& j, const char* key, std::initializer_list<E> values) {
  REMORA_ASSIGN_OR_RETURN(std::string text, plan_field<std::string>(j, key));
  for (E e : values) {
    if (text == to_string(e)) return e;
  }
  return bad_plan(fmt::format("{} '{}'", key, text));
}

Result<MemoryKind> plan_memory(const nlohmann::json& j, const char* key) {
  REMORA_ASSIGN_OR_RETURN(std::string text, plan_field<std::string>(j, key));
  auto kind = parse_bench_memory(text);
  if (!kind) return bad_plan(kind.status().message());
  return *kind;
}

StagedCounts staged_of(const EndpointStats& s) { return {.transfers = s.staged_transfers, .bytes = s.staged_bytes}; }
StagedCounts staged_since(const StagedCounts& before, const EndpointStats& now) {
  return {.transfers = now.staged_transfers - before.transfers, .bytes = now.staged_bytes - before.bytes};
}

/// The timing of a step into `row` (the driver's loop results).
void time_row(P2pMode mode, uint32_t window, const Step& st, double seconds, std::vector<double> rtt_us, P2pRow* row) {
  if (mode == P2pMode::kLatency) {
    double total_us = 0;
    for (double v : rtt_us) total_us += v;
    row->seconds = total_us / 1e6;
    row->latency = summarize_latency(std::move(rtt_us), 2);
    if (row->latency.avg_us > 0) row->bandwidth_mbps = static_cast<double>(st.size) / row->latency.avg_us;
  } else {
    row->seconds = seconds;
    const double directions = mode == P2pMode::kBiBandwidth ? 2.0 : 1.0;
    const double bytes = directions * static_cast<double>(st.size) * window * st.iters;
    row->bandwidth_mbps = seconds > 0 ? bytes / seconds / 1e6 : 0;
  }
}

/// One side of a step: who it is and what it runs with.
struct StepSide {
  Endpoint& ep;
  BufferSet& buffers;
  DeviceSet& devices;
  bool driver = false;
  StartFn start;
  ProgressFn progress;
  bool damage = false;  ///< P2pPlan::inject_corruption, the follower's
};

/// What one side's part of a step gave.
struct SideResult {
  double seconds = 0;          ///< the timed part (bw, bibw)
  double cpu_seconds = 0;      ///< this process's CPU time during it (bw, bibw)
  std::vector<double> rtt_us;  ///< every timed round trip (lat, the driver's)
  std::string problem;         ///< its data check: "" when verified
  StagedCounts staged;         ///< its endpoint's staged transfers during the step
};

/// One side's part of `step`: its test devices at `copy_rate`, its buffers of the
/// step's memory for it, the loop, and its data check.
Status run_step_side(const StepSide& s, const P2pPlan& plan, const P2pStep& step, double copy_rate, SideResult* out) {
  const Step& st = step.counts;
  REMORA_RETURN_IF_ERROR(s.devices.set_copy_rate(copy_rate));
  REMORA_ASSIGN_OR_RETURN(DeviceMemory * memory, s.devices.open(s.driver ? step.driver_memory : step.follower_memory));
  const StagedCounts before = staged_of(s.ep.stats());
  EndpointLink link(s.ep);
  s.buffers.use_memory(memory);
  const LoopSide side{.link = link,
                      .buffers = s.buffers,
                      .driver = s.driver,
                      .start = s.start,
                      .progress = s.progress,
                      .problem = &out->problem,
                      .damage = s.damage};
  Status status = plan.mode == P2pMode::kLatency
                      ? run_pingpong(side, st, s.driver ? &out->rtt_us : nullptr)
                      : run_window(side, plan.mode, plan.window, plan.distinct_buffers, st, &out->seconds,
                                   &out->cpu_seconds);
  s.buffers.release_all();
  s.buffers.use_memory(nullptr);
  if (!status.is_ok()) return status.with_context(fmt::format("size {}", st.size));
  out->staged = staged_since(before, s.ep.stats());
  return Status::ok();
}

}  // namespace

std::vector<MemoryKind> P2pPlan::driver_memory() const { return distinct_kinds(steps, &P2pStep::driver_memory); }
std::vector<MemoryKind> P2pPlan::follower_memory() const { return distinct_kinds(steps, &P2pStep::follower_memory); }

nlohmann::json to_json(const P2pPlan& plan) {
  nlohmann::json j = {{"kind", "p2p"},
                      {"mode", to_string(plan.mode)},
                      {"window", plan.window},
                      {"buffers", to_string(plan.buffers)},
                      {"distinct_buffers", plan.distinct_buffers},
                      {"inject_corruption", plan.inject_corruption}};
  j["steps"] = nlohmann::json::array();
  for (const P2pStep& st : plan.steps) {
    j["steps"].push_back({{"size", st.counts.size},
                          {"iters", st.counts.iters},
                          {"warmup", st.counts.warmup},
                          {"driver_memory", to_string(st.driver_memory)},
                          {"follower_memory", to_string(st.follower_memory)}});
  }
  return j;
}

Result<P2pPlan> p2p_plan_from_json(const nlohmann::json& j) {
  P2pPlan plan;
  REMORA_ASSIGN_OR_RETURN(std::string kind, plan_field<std::string>(j, "kind"));
  if (kind != "p2p") return bad_plan(fmt::format("kind '{}'", kind));
  REMORA_ASSIGN_OR_RETURN(plan.mode,
                          plan_enum(j, "mode", {P2pMode::kBandwidth, P2pMode::kLatency, P2pMode::kBiBandwidth}));
  REMORA_ASSIGN_OR_RETURN(plan.window, plan_field<uint32_t>(j, "window"));
  REMORA_ASSIGN_OR_RETURN(plan.buffers, plan_enum(j, "buffers", {BufferSource::kPool, BufferSource::kRegister}));
  REMORA_ASSIGN_OR_RETURN(plan.distinct_buffers, plan_field<bool>(j, "distinct_buffers"));
  REMORA_ASSIGN_OR_RETURN(plan.inject_corruption, plan_field<bool>(j, "inject_corruption"));
  if (!j.contains("steps") || !j["steps"].is_array()) return bad_plan("no 'steps' list");
  for (const nlohmann::json& js : j["steps"]) {
    P2pStep st;
    REMORA_ASSIGN_OR_RETURN(st.counts.size, plan_field<size_t>(js, "size"));
    REMORA_ASSIGN_OR_RETURN(st.counts.iters, plan_field<uint32_t>(js, "iters"));
    REMORA_ASSIGN_OR_RETURN(st.counts.warmup, plan_field<uint32_t>(js, "warmup"));
    REMORA_ASSIGN_OR_RETURN(st.driver_memory, plan_memory(js, "driver_memory"));
    REMORA_ASSIGN_OR_RETURN(st.follower_memory, plan_memory(js, "follower_memory"));
    plan.steps.push_back(st);
  }
  return plan;
}

Status drive_p2p_step(DriverSession& d, const P2pPlan& plan, size_t index, double copy_rate, const ProgressFn& progress,
                      P2pRow* row) {
  const P2pStep& step = plan.steps.at(index);
  const Step& st = step.counts;
  *row = P2pRow{};
  row->size = st.size;
  row->iterations = st.iters;
  row->warmup = st.warmup;
  row->driver_memory = step.driver_memory;
  row->follower_memory = step.follower_memory;
  row->device_copy_rate = copy_rate;
  REMORA_RETURN_IF_ERROR(d.control.send(kStepTag, {{"index", index}, {"device_copy_rate", copy_rate}}));
  SideResult mine;
  const StepSide side{.ep = d.ep,
                      .buffers = d.buffers,
                      .devices = d.devices,
                      .driver = true,
                      .start = [&] { return await_ready(d.control, st.size); },
                      .progress = progress,
                      .damage = false};
  REMORA_RETURN_IF_ERROR(run_step_side(side, plan, step, copy_rate, &mine));
  time_row(plan.mode, plan.window, st, mine.seconds, std::move(mine.rtt_us), row);
  row->staged_driver = mine.staged;
  row->cpu_driver_seconds = mine.cpu_seconds;

  REMORA_ASSIGN_OR_RETURN(auto verdict, d.control.recv(kVerdictTag));
  row->staged_follower = {.transfers = verdict.value("staged_transfers", uint64_t{0}),
                          .bytes = verdict.value("staged_bytes", uint64_t{0})};
  row->cpu_follower_seconds = verdict.value("cpu_seconds", 0.0);
  std::string problem = mine.problem.empty() ? "" : "what the driver received: " + mine.problem;
  if (!verdict.value("verified", false)) {
    problem += (problem.empty() ? "" : "; ") +
               ("what the follower received: " + verdict.value("problem", std::string("did not verify")));
  }
  if (!problem.empty()) {
    return Status(StatusCode::kInternal, fmt::format("size {}: data check failed: {}", st.size, problem));
  }
  row->verified = true;
  return Status::ok();
}

nlohmann::json row_json(P2pMode mode, uint32_t window, const P2pRow& r) {
  nlohmann::json row = {{"size", r.size}, {"iterations", r.iterations}, {"warmup", r.warmup}, {"seconds", r.seconds}};
  if (mode == P2pMode::kLatency) {
    row["latency_us"] = latency_json(r.latency);
  } else {
    row["window"] = window;
  }
  row["bandwidth_MBps"] = r.bandwidth_mbps;
  row["memory"] = {{"driver", to_string(r.driver_memory)}, {"follower", to_string(r.follower_memory)}};
  row["device_copy_rate_Bps"] = r.device_copy_rate;
  row["verified"] = r.verified;
  if (mode != P2pMode::kLatency) {
    row["cpu_seconds"] = {{"driver", r.cpu_driver_seconds}, {"follower", r.cpu_follower_seconds}};
  }
  row["staged"] = {
      {"driver", {{"staged_transfers", r.staged_driver.transfers}, {"staged_bytes", r.staged_driver.bytes}}},
      {"follower", {{"staged_transfers", r.staged_follower.transfers}, {"staged_bytes", r.staged_follower.bytes}}}};
  return row;
}

Status follow_p2p(FollowerSide& f, const nlohmann::json& plan_json) {
  auto plan = p2p_plan_from_json(plan_json);
  if (!plan) {
    (void)send_refusal(f.control, plan.status());  // the driver's story; ours is the return
    return plan.status();
  }
  for (MemoryKind kind : plan->follower_memory()) {
    if (auto opened = f.devices.open(kind); !opened) {
      (void)send_refusal(f.control, opened.status());
      return opened.status();
    }
  }
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    const P2pStep& step = plan->steps[i];
    const Step& st = step.counts;
    REMORA_ASSIGN_OR_RETURN(auto go, f.control.recv(kStepTag));
    if (go.value("index", plan->steps.size()) != i) {
      return Status(StatusCode::kProtocol, fmt::format("the driver is at another step than {}", i));
    }
    SideResult mine;
    const StepSide side{.ep = f.ep,
                        .buffers = f.buffers,
                        .devices = f.devices,
                        .driver = false,
                        .start = [&] { return send_ready(f.control, st.size); },
                        .progress = nullptr,
                        .damage = plan->inject_corruption};
    REMORA_RETURN_IF_ERROR(run_step_side(side, *plan, step, go.value("device_copy_rate", 0.0), &mine));
    REMORA_RETURN_IF_ERROR(f.control.send(kVerdictTag, {{"size", st.size},
                                                        {"verified", mine.problem.empty()},
                                                        {"problem", mine.problem},
                                                        {"staged_transfers", mine.staged.transfers},
                                                        {"staged_bytes", mine.staged.bytes},
                                                        {"cpu_seconds", mine.cpu_seconds}}));
  }
  return Status::ok();
}

}  // namespace internal

using namespace internal;  // NOLINT(google-build-using-namespace)

double network_rate(P2pMode mode, const P2pRow& row) {
  return row.bandwidth_mbps * 1e6 / (mode == P2pMode::kBiBandwidth ? 2.0 : 1.0);
}

Result<P2pReport> run_p2p(const PeerOptions& peer, const P2pOptions& o) {
  if (o.sizes.empty()) return Status(StatusCode::kInvalidArgument, "no message sizes given");
  if (o.window == 0 && o.mode != P2pMode::kLatency) return Status(StatusCode::kInvalidArgument, "--window must be at least 1");
  if (o.iters && *o.iters == 0) return Status(StatusCode::kInvalidArgument, "--iters must be at least 1");
  const MemoryKind mine = o.memory.local, theirs = o.memory.peer_kind();
  // A follower spawned here is this program on this machine: what it cannot open, we
  // refuse before starting it. A remote follower refuses for itself.
  if (peer.peer.empty()) REMORA_RETURN_IF_ERROR(memory_available(theirs));
  const bool device = mine != MemoryKind::kHost || theirs != MemoryKind::kHost;
  const bool calibrate = device && o.memory.copy_rate.automatic;

  const StepKind kind = o.mode == P2pMode::kLatency ? StepKind::kPingPong : StepKind::kWindow;
  P2pPlan plan{.mode = o.mode,
               .window = o.window,
               .distinct_buffers = o.distinct_buffers,
               .buffers = o.buffers,
               .inject_corruption = o.inject_corruption,
               .steps = {}};
  for (size_t size : o.sizes) {
    const Step counts = default_step(kind, size, o.window, o.iters, o.warmup);
    if (calibrate)
      plan.steps.push_back(  // host to host, just before
          {.counts = counts, .driver_memory = MemoryKind::kHost, .follower_memory = MemoryKind::kHost});
    plan.steps.push_back({.counts = counts, .driver_memory = mine, .follower_memory = theirs});
  }

  P2pReport report;
  report.mode = o.mode;
  report.json = {{"tool", "remora bench p2p"}, {"version", version_string()}, {"mode", to_string(o.mode)}};
  const auto body = [&](DriverSession& d) -> Status {
    report.json["config"]["window"] = o.window;
    report.json["config"]["distinct_buffers"] = o.distinct_buffers;
    report.json["config"]["buffers"] = to_string(o.buffers);
    report.json["config"]["memory"] = {{"driver", to_string(mine)},
                                       {"follower", to_string(theirs)},
                                       {"device_copy_rate", to_string(o.memory.copy_rate)}};
    size_t i = 0;  // the next step of the plan
    while (i < plan.steps.size()) {
      double rate = device ? o.memory.copy_rate.bytes_per_second : 0;
      if (calibrate) {  // a host-to-host step, then the measured one at its rate
        P2pRow host;
        REMORA_RETURN_IF_ERROR(drive_p2p_step(d, plan, i++, 0, o.progress, &host));
        rate = network_rate(o.mode, host);
        report.calibration.push_back(host);
      }
      P2pRow row;
      REMORA_RETURN_IF_ERROR(drive_p2p_step(d, plan, i++, rate, o.progress, &row));
      report.rows.push_back(row);
    }
    return Status::ok();
  };
  DriverSetup setup{.buffers = o.buffers, .memory = plan.driver_memory(), .plan = to_json(plan)};
  REMORA_RETURN_IF_ERROR(run_driver(peer, setup, &report.json, body));

  report.json["results"] = nlohmann::json::array();
  for (size_t i = 0; i < report.rows.size(); ++i) {
    nlohmann::json row = row_json(o.mode, o.window, report.rows[i]);
    if (calibrate) row["calibration"] = row_json(o.mode, o.window, report.calibration[i]);
    report.json["results"].push_back(row);
  }
  return report;
}

}  // namespace remora::perf
