// tools/perf/demo.cc — `remora demo`: two processes, tagged messages of growing size in
// both directions, every byte accounted for.
//
// Per size, both sides:
//  1. verify rounds: each side fills its send buffer with a fresh pattern, poisons its
//     receive buffer, and sends the data plus its checksum (another tag) while receiving
//     the peer's; the received bytes must hash to the peer's checksum;
//  2. timed ping-pong (no per-iteration hashing, so the numbers are the transport's);
//     afterwards the last received message must still hash to the last verified checksum.
// The follower sends its verdict per size; the driver reports both.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "pattern.h"
#include "session.h"

namespace remora::perf {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

struct DemoStep {
  size_t size = 0;
  uint32_t iters = 0;
  uint32_t verify = 1;
};

uint64_t seed_for(size_t size, uint32_t round, bool driver) {
  return mix64(mix64(size) ^ (uint64_t{round} << 1) ^ (driver ? 0 : 1));
}

uint64_t load_u64(std::span<const std::byte> b) {
  uint64_t v;
  std::memcpy(&v, b.data(), 8);
  return v;
}

/// One side of one size. Transport errors are returned; data that does not verify goes
/// to `problem` (first one wins) and the run goes on.
Status exchange(Endpoint& ep, BufferSet& buffers, ControlChannel& control, const DemoStep& st, bool driver,
                bool corrupt, const ProgressFn& progress, double* seconds, std::string* problem) {
  const auto note = [&](std::string what) {
    if (problem->empty()) *problem = std::move(what);
  };
  REMORA_ASSIGN_OR_RETURN(auto out, buffers.get(st.size));
  REMORA_ASSIGN_OR_RETURN(auto in, buffers.get(st.size));
  REMORA_ASSIGN_OR_RETURN(auto sums, buffers.get(16));
  out = out.first(st.size);
  in = in.first(st.size);
  const auto sum_out = sums.first(8), sum_in = sums.subspan(8, 8);
  const Tag my_tag = driver ? kPingTag : kPongTag, peer_tag = driver ? kPongTag : kPingTag;

  REMORA_RETURN_IF_ERROR(driver ? await_ready(control, st.size) : send_ready(control, st.size));

  uint64_t last_peer_sum = 0;
  for (uint32_t v = 0; v < st.verify; ++v) {
    fill_pattern(out, seed_for(st.size, v, driver));
    const uint64_t mine = checksum(out);
    std::memcpy(sum_out.data(), &mine, 8);
    if (corrupt && v == 0) out[out.size() / 2] ^= std::byte{0x01};
    std::fill(in.begin(), in.end(), std::byte{0xA5});
    const std::array<Request, 4> rs{ep.recv(in, peer_tag), ep.recv(sum_in, kSumTag), ep.send(out, my_tag),
                                    ep.send(sum_out, kSumTag)};
    REMORA_RETURN_IF_ERROR(wait_all_ok(rs, fmt::format("verify round {}", v)));
    last_peer_sum = load_u64(sum_in);
    if (rs[0].bytes() != st.size) {
      note(fmt::format("verify round {}: received {} bytes, expected {}", v, rs[0].bytes(), st.size));
    } else if (const uint64_t got = checksum(in); got != last_peer_sum) {
      note(fmt::format("verify round {}: checksum {:016x}, the peer sent {:016x}", v, got, last_peer_sum));
    }
  }

  const uint32_t total = st.iters;
  const std::string label = format_size(st.size);  // formatted once, not per iteration
  if (driver) {
    const Clock::time_point t0 = Clock::now();
    for (uint32_t it = 0; it < total; ++it) {
      const std::array<Request, 2> pair{ep.recv(in, kPongTag), ep.send(out, kPingTag)};
      REMORA_RETURN_IF_ERROR(wait_all_ok(pair, "ping-pong"));
      if (pair[0].bytes() != st.size) note(fmt::format("pong {}: {} bytes, expected {}", it, pair[0].bytes(), st.size));
      if (progress && (it & 15) == 0) progress(label, it + 1, total);
    }
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  } else {
    Request r = ep.recv(in, kPingTag);
    for (uint32_t it = 0; it < total; ++it) {
      REMORA_RETURN_IF_ERROR(wait_ok(r, "ping receive"));
      if (r.bytes() != st.size) note(fmt::format("ping {}: {} bytes, expected {}", it, r.bytes(), st.size));
      if (it + 1 < total) r = ep.recv(in, kPingTag);
      REMORA_RETURN_IF_ERROR(wait_ok(ep.send(out, kPongTag), "pong send"));
    }
  }
  if (total > 0 && checksum(in) != last_peer_sum) {
    note("the last message of the timed round trips differs from the verified data");
  }
  return Status::ok();
}

std::vector<size_t> default_sizes() {
  std::vector<size_t> sizes;
  for (size_t s = 1; s <= (size_t{64} << 20); s *= 4) sizes.push_back(s);
  return sizes;
}

}  // namespace

Status follow_demo(Endpoint& ep, ControlChannel& control, BufferSet& buffers, const nlohmann::json& plan) {
  for (const auto& js : plan.at("steps")) {
    const DemoStep st{.size = js.at("size").get<size_t>(), .iters = js.at("iters").get<uint32_t>(),
                      .verify = js.at("verify").get<uint32_t>()};
    std::string problem;
    double unused = 0;
    Status s = exchange(ep, buffers, control, st, /*driver=*/false, /*corrupt=*/false, nullptr, &unused, &problem);
    if (!s.is_ok()) return s.with_context(fmt::format("size {}", st.size));
    buffers.release_all();
    REMORA_RETURN_IF_ERROR(control.send(kVerdictTag, {{"size", st.size}, {"verified", problem.empty()}, {"problem", problem}}));
  }
  return Status::ok();
}

}  // namespace internal

using namespace internal;  // NOLINT(google-build-using-namespace)

Result<DemoReport> run_demo(const DemoOptions& o) {
  const std::vector<size_t> sizes = o.sizes.empty() ? default_sizes() : o.sizes;
  if (o.iters && *o.iters == 0) return Status(StatusCode::kInvalidArgument, "--iters must be at least 1");
  std::vector<DemoStep> steps;
  nlohmann::json plan = {{"kind", "demo"}, {"buffers", "pool"}, {"steps", nlohmann::json::array()}};
  for (size_t size : sizes) {
    // ~256 MiB per direction per size: 4 round trips at 64 MiB, 1000 for small messages.
    const uint32_t iters = o.iters.value_or(
        static_cast<uint32_t>(std::clamp<size_t>((size_t{256} << 20) / std::max<size_t>(size, 1), 4, 1000)));
    steps.push_back({.size = size, .iters = iters, .verify = std::max<uint32_t>(o.verify_rounds, 1)});
    plan["steps"].push_back({{"size", size}, {"iters", iters}, {"verify", steps.back().verify}});
  }

  DemoReport report;
  report.json = {{"tool", "remora demo"}, {"version", version_string()}};
  const auto body = [&](DriverSession& d) -> Status {
    for (const DemoStep& st : steps) {
      DemoRow row;
      row.size = st.size;
      row.iterations = st.iters;
      double seconds = 0;
      Status s = exchange(d.ep, d.buffers, d.control, st, /*driver=*/true, o.inject_corruption, o.progress, &seconds,
                          &row.problem);
      if (!s.is_ok()) return s.with_context(fmt::format("size {}", st.size));
      d.buffers.release_all();
      REMORA_ASSIGN_OR_RETURN(auto verdict, d.control.recv(kVerdictTag));
      if (!verdict.value("verified", false) && row.problem.empty()) {
        row.problem = "peer: " + verdict.value("problem", std::string("did not verify"));
      }
      row.verified = row.problem.empty();
      const double one_way_s = seconds / st.iters / 2;
      row.latency_us = one_way_s * 1e6;
      row.bandwidth_gbps = one_way_s > 0 ? static_cast<double>(st.size) / one_way_s / 1e9 : 0;
      report.rows.push_back(std::move(row));
    }
    return Status::ok();
  };
  REMORA_RETURN_IF_ERROR(
      run_driver(o.peer, {.buffers = BufferSource::kPool, .memory = {}, .plan = plan}, &report.json, body));

  report.ok = !report.rows.empty();
  report.json["results"] = nlohmann::json::array();
  for (const DemoRow& r : report.rows) {
    report.ok = report.ok && r.verified;
    report.json["results"].push_back({{"size", r.size}, {"iterations", r.iterations},
                                      {"latency_us", r.latency_us}, {"bandwidth_GBps", r.bandwidth_gbps},
                                      {"verified", r.verified}, {"problem", r.problem}});
  }
  report.json["ok"] = report.ok;
  return report;
}

}  // namespace remora::perf
