// tools/perf/p2p.cc — osu_bw / osu_bibw / osu_latency over remora endpoints.
//
// bw:   the driver posts a window of sends, the follower a window of receives; the
//       follower answers each window with a 4-byte ack. bandwidth = bytes / time.
// bibw: both sides post a window of receives and a window of sends, and wait for both.
// lat:  ping-pong, receives posted before the matching send can arrive; one-way
//       latency = round trip / 2, per iteration, so we can report p50 and p99.
// Only the driver times. Buffers come from a Pool (or explicit registration) and are
// registered before the first timed byte. The loops run over a Link (session.h), so
// remora bench coll measures its reference with the same code over a Communicator.
#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pattern.h"
#include "session.h"

namespace remora::perf {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

P2pMode parse_mode(std::string_view text) {
  if (text == "lat") return P2pMode::kLatency;
  if (text == "bibw") return P2pMode::kBiBandwidth;
  return P2pMode::kBandwidth;
}

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

Status run_window(Link& link, BufferSet& buffers, P2pMode mode, uint32_t window, bool distinct, const Step& st,
                  bool driver, const StartFn& start, const ProgressFn& progress, double* seconds) {
  const uint32_t slots = distinct ? window_slots(st.size, window) : 1;
  const bool sends_data = driver || mode == P2pMode::kBiBandwidth;
  const bool receives_data = !driver || mode == P2pMode::kBiBandwidth;
  std::span<std::byte> send_region, recv_region;
  if (sends_data) {
    REMORA_ASSIGN_OR_RETURN(send_region, buffers.get(st.size * slots));
    fill_pattern(send_region, st.size);
  }
  if (receives_data) {
    REMORA_ASSIGN_OR_RETURN(recv_region, buffers.get(st.size * slots));
  }
  REMORA_ASSIGN_OR_RETURN(auto ack, buffers.get(4));
  ack = ack.first(4);
  std::fill(ack.begin(), ack.end(), std::byte{0});

  std::vector<Request> sends(sends_data ? window : 0), recvs(receives_data ? window : 0);
  const uint32_t total = st.warmup + st.iters;
  const std::string label = format_size(st.size);  // formatted once, not per iteration
  REMORA_RETURN_IF_ERROR(start());
  Clock::time_point t0 = Clock::now();
  for (uint32_t it = 0; it < total; ++it) {
    if (it == st.warmup) t0 = Clock::now();
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
    if (progress) progress(label, it + 1, total);
  }
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return Status::ok();
}

Status run_pingpong(Link& link, BufferSet& buffers, const Step& st, bool driver, const StartFn& start,
                    const ProgressFn& progress, std::vector<double>* rtt_us) {
  REMORA_ASSIGN_OR_RETURN(auto send_buf, buffers.get(st.size));
  REMORA_ASSIGN_OR_RETURN(auto recv_buf, buffers.get(st.size));
  send_buf = send_buf.first(st.size);
  recv_buf = recv_buf.first(st.size);
  fill_pattern(send_buf, st.size + (driver ? 0 : 1));
  const uint32_t total = st.warmup + st.iters;
  if (driver) rtt_us->assign(st.iters, 0.0);

  if (!driver) {
    Request r = link.recv(recv_buf, kPingTag);
    REMORA_RETURN_IF_ERROR(start());
    for (uint32_t it = 0; it < total; ++it) {
      REMORA_RETURN_IF_ERROR(wait_ok(r, "ping receive"));
      if (r.bytes() != st.size) return Status(StatusCode::kProtocol, fmt::format("ping of {} bytes, expected {}", r.bytes(), st.size));
      if (it + 1 < total) r = link.recv(recv_buf, kPingTag);
      REMORA_RETURN_IF_ERROR(wait_ok(link.send(send_buf, kPongTag), "pong send"));
    }
    return Status::ok();
  }

  REMORA_RETURN_IF_ERROR(start());
  const std::string label = format_size(st.size);  // formatted once, not per iteration
  for (uint32_t it = 0; it < total; ++it) {
    const Clock::time_point t = Clock::now();
    const std::array<Request, 2> pair{link.recv(recv_buf, kPongTag), link.send(send_buf, kPingTag)};
    REMORA_RETURN_IF_ERROR(wait_all_ok(pair, "ping-pong"));
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t).count();
    if (pair[0].bytes() != st.size) return Status(StatusCode::kProtocol, fmt::format("pong of {} bytes, expected {}", pair[0].bytes(), st.size));
    if (it >= st.warmup) (*rtt_us)[it - st.warmup] = us;
    if (progress && (it & 63) == 0) progress(label, it + 1, total);
  }
  return Status::ok();
}

namespace {

nlohmann::json plan_json(P2pMode mode, uint32_t window, bool distinct, BufferSource source,
                         const std::vector<Step>& steps) {
  nlohmann::json j = {{"kind", "p2p"},      {"mode", to_string(mode)},        {"window", window},
                      {"buffers", to_string(source)}, {"distinct_buffers", distinct}};
  j["steps"] = nlohmann::json::array();
  for (const Step& st : steps) j["steps"].push_back({{"size", st.size}, {"iters", st.iters}, {"warmup", st.warmup}});
  return j;
}

}  // namespace

Status follow_p2p(Endpoint& ep, ControlChannel& control, BufferSet& buffers, const nlohmann::json& plan) {
  const P2pMode mode = parse_mode(plan.value("mode", "bw"));
  const uint32_t window = plan.value("window", 64u);
  const bool distinct = plan.value("distinct_buffers", false);
  EndpointLink link(ep);
  for (const auto& js : plan.at("steps")) {
    const Step st{.size = js.at("size").get<size_t>(), .iters = js.at("iters").get<uint32_t>(), .warmup = js.at("warmup").get<uint32_t>()};
    const StartFn ready = [&] { return send_ready(control, st.size); };
    Status s;
    if (mode == P2pMode::kLatency) {
      s = run_pingpong(link, buffers, st, /*driver=*/false, ready, nullptr, nullptr);
    } else {
      double unused = 0;
      s = run_window(link, buffers, mode, window, distinct, st, /*driver=*/false, ready, nullptr, &unused);
    }
    if (!s.is_ok()) return s.with_context(fmt::format("size {}", st.size));
    buffers.release_all();
  }
  return Status::ok();
}

}  // namespace internal

using namespace internal;  // NOLINT(google-build-using-namespace)

Result<P2pReport> run_p2p(const PeerOptions& peer, const P2pOptions& o) {
  if (o.sizes.empty()) return Status(StatusCode::kInvalidArgument, "no message sizes given");
  if (o.window == 0 && o.mode != P2pMode::kLatency) return Status(StatusCode::kInvalidArgument, "--window must be at least 1");
  if (o.iters && *o.iters == 0) return Status(StatusCode::kInvalidArgument, "--iters must be at least 1");

  const StepKind kind = o.mode == P2pMode::kLatency ? StepKind::kPingPong : StepKind::kWindow;
  std::vector<Step> steps;
  for (size_t size : o.sizes) steps.push_back(default_step(kind, size, o.window, o.iters, o.warmup));

  P2pReport report;
  report.mode = o.mode;
  report.json = {{"tool", "remora bench p2p"}, {"version", version_string()}, {"mode", to_string(o.mode)}};
  const auto body = [&](DriverSession& d) -> Status {
    report.json["config"]["window"] = o.window;
    report.json["config"]["distinct_buffers"] = o.distinct_buffers;
    report.json["config"]["buffers"] = to_string(o.buffers);
    EndpointLink link(d.ep);
    for (const Step& st : steps) {
      P2pRow row;
      row.size = st.size;
      row.iterations = st.iters;
      row.warmup = st.warmup;
      const StartFn ready = [&] { return await_ready(d.control, st.size); };
      Status s;
      if (o.mode == P2pMode::kLatency) {
        std::vector<double> rtt_us;
        s = run_pingpong(link, d.buffers, st, /*driver=*/true, ready, o.progress, &rtt_us);
        double total_us = 0;
        for (double v : rtt_us) total_us += v;
        row.seconds = total_us / 1e6;
        row.latency = summarize_latency(std::move(rtt_us), 2);
        if (row.latency.avg_us > 0) row.bandwidth_mbps = static_cast<double>(st.size) / row.latency.avg_us;
      } else {
        s = run_window(link, d.buffers, o.mode, o.window, o.distinct_buffers, st, /*driver=*/true, ready, o.progress,
                       &row.seconds);
        const double directions = o.mode == P2pMode::kBiBandwidth ? 2.0 : 1.0;
        const double bytes = directions * static_cast<double>(st.size) * o.window * st.iters;
        row.bandwidth_mbps = bytes / row.seconds / 1e6;
      }
      if (!s.is_ok()) return s.with_context(fmt::format("size {}", st.size));
      d.buffers.release_all();
      report.rows.push_back(row);
    }
    return Status::ok();
  };
  REMORA_RETURN_IF_ERROR(run_driver(peer, o.buffers, plan_json(o.mode, o.window, o.distinct_buffers, o.buffers, steps),
                                    &report.json, body));

  report.json["results"] = nlohmann::json::array();
  for (const P2pRow& r : report.rows) {
    nlohmann::json row = {{"size", r.size}, {"iterations", r.iterations}, {"warmup", r.warmup}, {"seconds", r.seconds}};
    if (o.mode == P2pMode::kLatency) {
      row["latency_us"] = latency_json(r.latency);
    } else {
      row["window"] = o.window;
    }
    row["bandwidth_MBps"] = r.bandwidth_mbps;
    report.json["results"].push_back(row);
  }
  return report;
}

}  // namespace remora::perf
