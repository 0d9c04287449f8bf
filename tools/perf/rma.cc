// tools/perf/rma.cc — ib_write_bw / ib_read_bw / ib_write_lat / ib_read_lat over remora's
// one-sided operations.
//
// Per size, the follower (the target) registers a region with every remote right, fills
// it (get modes: a known pattern; put modes: poison), sends its RemoteKey on kKeyTag and
// then waits for the driver's "done" without touching the endpoint: its progress thread
// serves the puts and gets (passive target). Only put_lat and notify_lat need it awake.
//
// put_bw / get_bw / put_rate: the driver posts `window` puts (gets) from (into) one
//   reused local buffer to offset 0 of the target's region and waits for all of them;
//   a put completes at the target's acknowledgement (or at once, through a mapping of
//   the peer's pool memory), so a window needs no extra ack.
// put_lat: both sides expose a region and swap keys; the driver puts with a notification,
//   the target waits for it and puts back with one, the driver waits for that. One-way
//   latency = round trip / 2. A zero-length put with kStopValue ends the target's loop.
// get_lat: one get at a time, reported as is (a round trip, or a copy through a mapping
//   of the peer's pool memory: docs/protocol.md, "Direct mappings").
// notify_lat: one put with a notification at a time, timed until the put completes (the
//   target's acknowledgement: a round trip), while the target takes each notification and
//   answers nothing: the latency of handing a block to a consumer that is told of it.
// atomic_lat: one fetch_add of 1 at a time on the first word of the target's region (the
//   size must be 8), timed until it completes: a round trip, or the hardware atomic itself
//   through a mapping of the peer's pool memory. Each result must be one more than the
//   last, and the word ends at its start plus the number of adds.
// After the timed part, the driver checks the data once: puts are read back with a get
// and compared with what was put (and the target compares its region independently);
// gets are compared with the target's pattern. A mismatch or any failed operation ends
// the run with an error.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pattern.h"
#include "session.h"

namespace remora::perf {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

/// put_lat's and notify_lat's "stop" notification: above any iteration number.
inline constexpr uint64_t kStopValue = uint64_t{1} << 63;
inline constexpr std::byte kTargetPoison{0xA5}, kLocalPoison{0x5A};

bool is_put(RmaMode mode) {
  return mode != RmaMode::kGetBandwidth && mode != RmaMode::kGetLatency && mode != RmaMode::kAtomicLatency;
}
/// atomic_lat: the word the target's region starts with (the pattern's first 8 bytes).
uint64_t first_word(std::span<const std::byte> region) {
  uint64_t w = 0;
  std::memcpy(&w, region.data(), sizeof w);
  return w;
}
/// Modes whose target waits for each put's notification.
bool target_waits(RmaMode mode) { return mode == RmaMode::kPutLatency || mode == RmaMode::kNotifyLatency; }

/// Patterns: what the initiator puts, what the target holds for gets (and put_lat's
/// target puts back). Distinct per size, so a stale region from another size fails.
uint64_t initiator_seed(size_t size) { return mix64(mix64(size) ^ 1); }
uint64_t target_seed(size_t size) { return mix64(mix64(size) ^ 2); }

/// Keys travel as their 40 serialized bytes on kKeyTag, from a registered buffer:
/// the first half of `buf` is outgoing, the second incoming.
class KeyExchange {
 public:
  static Result<KeyExchange> create(BufferSet& buffers) {
    REMORA_ASSIGN_OR_RETURN(auto buf, buffers.get(2 * RemoteKey::kSerializedSize));
    return KeyExchange(buf);
  }
  Status send(Endpoint& ep, const RemoteKey& key) {
    const auto bytes = key.serialize();
    const auto out = buf_.first(RemoteKey::kSerializedSize);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return wait_ok(ep.send(out, kKeyTag), "sending the remote key");
  }
  Request post_recv(Endpoint& ep) { return ep.recv(in(), kKeyTag); }
  Result<RemoteKey> finish_recv(const Request& r) {
    REMORA_RETURN_IF_ERROR(wait_ok(r, "receiving the remote key"));
    if (r.bytes() != RemoteKey::kSerializedSize) {
      return Status(StatusCode::kProtocol, fmt::format("a remote key of {} bytes", r.bytes()));
    }
    return RemoteKey::deserialize(in());
  }

 private:
  explicit KeyExchange(std::span<std::byte> buf) : buf_(buf) {}
  std::span<std::byte> in() const { return buf_.subspan(RemoteKey::kSerializedSize, RemoteKey::kSerializedSize); }
  std::span<std::byte> buf_;
};

/// Runs `one(iteration, timed)`: st.warmup untimed iterations, then timed ones until
/// st.iters of them ran or, with `duration_s`, until that much time has passed.
template <typename Iteration>
Status timed_loop(const Step& st, std::optional<double> duration_s, const ProgressFn& progress,
                  const std::string& label, Iteration&& one, uint32_t* timed, double* seconds) {
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration_s.value_or(0)));
  const uint64_t total = duration_s ? 1000 : uint64_t{st.warmup} + st.iters;  // progress: per mille of the time
  Clock::time_point t0 = Clock::now();
  uint32_t it = 0;
  for (;; ++it) {
    if (it == st.warmup) t0 = Clock::now();
    const bool is_timed = it >= st.warmup;
    Clock::duration elapsed{};
    if (is_timed && duration_s) {
      elapsed = Clock::now() - t0;
      if (elapsed >= limit) break;
    } else if (is_timed && it - st.warmup >= st.iters) {
      break;
    }
    REMORA_RETURN_IF_ERROR(one(it, is_timed));
    if (progress && (it & 15) == 0) {
      const double part = duration_s ? std::chrono::duration<double>(elapsed) / limit : 0;
      progress(label, duration_s ? static_cast<uint64_t>(1000 * std::min(1.0, part)) : it + 1, total);
    }
  }
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  *timed = it - st.warmup;
  return Status::ok();
}

/// The driver's side of one size.
struct DriverStep {
  DriverSession& d;
  RmaMode mode;
  uint32_t window;
  Step st;
  std::optional<double> duration_s;
  bool corrupt;
  ProgressFn progress;

  Status run(RmaRow* row) {
    Endpoint& ep = d.ep;
    REMORA_ASSIGN_OR_RETURN(auto keys, KeyExchange::create(d.buffers));
    REMORA_ASSIGN_OR_RETURN(auto local, d.buffers.get(st.size));
    local = local.first(st.size);
    if (is_put(mode)) {
      fill_pattern(local, initiator_seed(st.size));
    } else {
      std::fill(local.begin(), local.end(), kLocalPoison);
    }
    // put_lat: our own region, for the target's puts back.
    std::span<std::byte> mine;
    RemoteKey mine_key;
    const Request key_in = keys.post_recv(ep);
    REMORA_ASSIGN_OR_RETURN(const RemoteKey key, keys.finish_recv(key_in));  // the target is ready
    if (mode == RmaMode::kPutLatency) {
      REMORA_ASSIGN_OR_RETURN(auto exposed, d.buffers.expose(st.size));
      mine = exposed.span.first(st.size);
      mine_key = exposed.key;
      std::fill(mine.begin(), mine.end(), kTargetPoison);
      REMORA_RETURN_IF_ERROR(keys.send(ep, exposed.key));
    }

    const std::string label = format_size(st.size);  // formatted once, not per iteration
    uint32_t timed = 0;
    if (is_latency(mode)) {
      std::vector<double> samples_us;
      if (!duration_s) samples_us.reserve(st.iters);
      uint64_t last_previous = 0;  // atomic_lat: the previous fetch_add's result
      const Clock::time_point start = Clock::now();
      const auto one = [&](uint32_t it, bool is_timed) -> Status {
        if (is_timed && it == st.warmup && duration_s) {
          // Size the samples from the warm-up's pace (1.5x, at most 8M: 64 MiB), so
          // the vector seldom grows inside the timed loop; without a warm-up, 64K.
          size_t expect = size_t{1} << 16;
          if (st.warmup > 0) {
            const double per_s = std::chrono::duration<double>(Clock::now() - start).count() / st.warmup;
            expect = static_cast<size_t>(std::min(*duration_s / std::max(per_s, 1e-7) * 1.5, 8e6)) + 1024;
          }
          samples_us.reserve(expect);
        }
        const Clock::time_point t = Clock::now();
        if (mode == RmaMode::kGetLatency) {
          REMORA_RETURN_IF_ERROR(wait_ok(ep.get(local, key, 0), "get"));
        } else if (mode == RmaMode::kAtomicLatency) {
          uint64_t previous = 0;
          REMORA_RETURN_IF_ERROR(wait_ok(ep.fetch_add(&previous, key, 0, 1), "fetch_add"));
          if (it > 0 && previous != last_previous + 1) {
            return Status(StatusCode::kProtocol, fmt::format("fetch_add {} returned {}, after {}: an add was lost", it,
                                                             previous, last_previous));
          }
          last_previous = previous;
        } else if (mode == RmaMode::kNotifyLatency) {
          REMORA_RETURN_IF_ERROR(wait_ok(ep.put(local, key, 0, PutOptions{.notify = it}), "notified put"));
        } else {
          const Request put = ep.put(local, key, 0, PutOptions{.notify = it});
          REMORA_ASSIGN_OR_RETURN(const Notification n, ep.wait_notification(kOpTimeout));
          // Notification offsets count from the region's start (a pool buffer sits inside
          // an arena): the key's window start plus the put's offset, 0.
          if (n.value != it || n.length != st.size || n.offset != mine_key.offset) {
            return Status(
                StatusCode::kProtocol,
                fmt::format("round trip {}: notification {} for {} bytes at offset {}, expected {} for {} at {}", it,
                            n.value, n.length, n.offset, it, st.size, mine_key.offset));
          }
          const double us = std::chrono::duration<double, std::micro>(Clock::now() - t).count();
          REMORA_RETURN_IF_ERROR(wait_ok(put, "put"));  // normally done already: its ack went out before the put back
          if (is_timed) samples_us.push_back(us);
          return Status::ok();
        }
        if (is_timed) samples_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
        return Status::ok();
      };
      REMORA_RETURN_IF_ERROR(timed_loop(st, duration_s, progress, label, one, &timed, &row->seconds));
      if (target_waits(mode)) {
        REMORA_RETURN_IF_ERROR(wait_ok(ep.put(local.first(0), key, 0, PutOptions{.notify = kStopValue}), "stop put"));
      }
      row->latency = summarize_latency(std::move(samples_us), mode == RmaMode::kPutLatency ? 2 : 1);
      row->operations = timed;
      if (row->latency.avg_us > 0) row->bandwidth_mbps = static_cast<double>(st.size) / row->latency.avg_us;
    } else {
      std::vector<Request> ops(window);
      const char* what = is_put(mode) ? "window of puts" : "window of gets";
      const auto one = [&](uint32_t, bool) -> Status {
        for (Request& op : ops) op = is_put(mode) ? ep.put(local, key, 0) : ep.get(local, key, 0);
        return wait_all_ok(ops, what);
      };
      REMORA_RETURN_IF_ERROR(timed_loop(st, duration_s, progress, label, one, &timed, &row->seconds));
      row->operations = uint64_t{timed} * window;
      row->bandwidth_mbps = static_cast<double>(row->operations) * static_cast<double>(st.size) / row->seconds / 1e6;
    }
    row->iterations = timed;
    row->ops_per_second = row->seconds > 0 ? static_cast<double>(row->operations) / row->seconds : 0;

    if (corrupt && st.size > 0) {  // fault injection: the check below must catch this
      if (mode == RmaMode::kAtomicLatency) {
        REMORA_RETURN_IF_ERROR(wait_ok(ep.fetch_add(nullptr, key, 0, 1), "corrupting add"));  // not counted
      } else if (is_put(mode)) {
        REMORA_ASSIGN_OR_RETURN(auto bad, d.buffers.get(1));
        bad[0] = local[st.size / 2] ^ std::byte{0x01};
        REMORA_RETURN_IF_ERROR(wait_ok(ep.put(bad.first(1), key, st.size / 2), "corrupting put"));
      } else {
        local[st.size / 2] ^= std::byte{0x01};
      }
    }

    // The data, once per size.
    std::string problem;
    uint64_t adds = 0;  // atomic_lat: every fetch_add, the warm-up's included
    if (mode == RmaMode::kAtomicLatency) {
      adds = uint64_t{st.warmup} + timed;
      REMORA_ASSIGN_OR_RETURN(auto check, d.buffers.get(sizeof(uint64_t)));
      REMORA_RETURN_IF_ERROR(wait_ok(ep.get(check.first(sizeof(uint64_t)), key, 0), "get reading the word back"));
      std::vector<std::byte> start(sizeof(uint64_t));
      fill_pattern(start, target_seed(st.size));
      if (first_word(check) != first_word(start) + adds) {
        problem = fmt::format("the word is {} after {} adds to {}", first_word(check), adds, first_word(start));
      }
    } else if (is_put(mode)) {
      REMORA_ASSIGN_OR_RETURN(auto check, d.buffers.get(st.size));
      check = check.first(st.size);
      std::fill(check.begin(), check.end(), kLocalPoison);
      REMORA_RETURN_IF_ERROR(wait_ok(ep.get(check, key, 0), "get reading the puts back"));
      if (std::string p = first_difference(check, local); !p.empty()) problem = "read back after the puts: " + p;
      if (mode == RmaMode::kPutLatency && problem.empty()) {
        if (std::string p = check_pattern(mine, target_seed(st.size)); !p.empty()) problem = "the target's puts: " + p;
      }
    } else if (std::string p = check_pattern(local, target_seed(st.size)); !p.empty()) {
      problem = "the gets' data: " + p;
    }
    REMORA_RETURN_IF_ERROR(d.control.send(kDoneTag, {{"size", st.size}, {"adds", adds}}));
    REMORA_ASSIGN_OR_RETURN(auto verdict, d.control.recv(kVerdictTag));
    if (!verdict.value("verified", false)) {  // both views, when both saw damage: where it happened tells a lot
      problem +=
          (problem.empty() ? "" : "; ") + ("target's own check: " + verdict.value("problem", std::string("failed")));
    }
    if (!problem.empty()) return Status(StatusCode::kInternal, "data check failed: " + problem);
    return Status::ok();
  }
};

/// The follower's (target's) side of one size.
Status follow_step(Endpoint& ep, ControlChannel& control, BufferSet& buffers, RmaMode mode, size_t size) {
  REMORA_ASSIGN_OR_RETURN(auto keys, KeyExchange::create(buffers));
  REMORA_ASSIGN_OR_RETURN(auto exposed, buffers.expose(size));
  const auto region = exposed.span.first(size);
  if (is_put(mode)) {
    std::fill(region.begin(), region.end(), kTargetPoison);
  } else {
    fill_pattern(region, target_seed(size));
  }
  Request key_in;
  std::span<std::byte> src;
  if (mode == RmaMode::kPutLatency) {
    REMORA_ASSIGN_OR_RETURN(src, buffers.get(size));
    src = src.first(size);
    fill_pattern(src, target_seed(size));
    key_in = keys.post_recv(ep);
  }
  REMORA_RETURN_IF_ERROR(keys.send(ep, exposed.key));

  if (target_waits(mode)) {
    RemoteKey key;
    if (mode == RmaMode::kPutLatency) {
      REMORA_ASSIGN_OR_RETURN(key, keys.finish_recv(key_in));
    }
    Request back;
    for (uint64_t expect = 0;; ++expect) {
      REMORA_ASSIGN_OR_RETURN(const Notification n, ep.wait_notification(kOpTimeout));
      if (n.value == kStopValue) break;
      // Every iteration's, once and in order (the warm-up's first).
      if (n.value != expect || n.length != size || n.offset != exposed.key.offset) {
        return Status(StatusCode::kProtocol,
                      fmt::format("notification {} for {} bytes at offset {}, expected {} for {} at {}", n.value,
                                  n.length, n.offset, expect, size, exposed.key.offset));
      }
      if (mode != RmaMode::kPutLatency) continue;
      if (back.valid()) REMORA_RETURN_IF_ERROR(wait_ok(back, "put back"));
      back = ep.put(src, key, 0, PutOptions{.notify = n.value});
    }
    if (back.valid()) REMORA_RETURN_IF_ERROR(wait_ok(back, "put back"));
  }

  // Passive: nothing to do until the driver is done, however long it takes (a driver
  // that goes away fails the receive).
  REMORA_ASSIGN_OR_RETURN(auto done, control.finish_recv(control.post_recv(kDoneTag), kForever));
  if (done.value("size", size_t{0}) != size) return Status(StatusCode::kProtocol, "the driver is at another size");
  std::string problem;
  if (mode == RmaMode::kAtomicLatency) {
    // The word holds its start plus the driver's adds; nothing else changed.
    std::vector<std::byte> start(size);
    fill_pattern(start, target_seed(size));
    const uint64_t want = first_word(start) + done.value("adds", uint64_t{0});
    std::memcpy(start.data(), &want, sizeof want);
    problem = first_difference(region, start);
  } else {
    problem = check_pattern(region, is_put(mode) ? initiator_seed(size) : target_seed(size));
  }
  return control.send(kVerdictTag, {{"size", size}, {"verified", problem.empty()}, {"problem", problem}});
}

std::vector<size_t> default_sizes(RmaMode mode) {
  if (mode == RmaMode::kPutRate) return {8, 64, 512, 4096};
  if (mode == RmaMode::kAtomicLatency) return {8};
  return {8, 4096, size_t{1} << 20, size_t{16} << 20};
}

StepKind step_kind(RmaMode mode) {
  if (is_latency(mode)) return StepKind::kPingPong;
  return mode == RmaMode::kPutRate ? StepKind::kRate : StepKind::kWindow;
}

}  // namespace

Status follow_rma(Endpoint& ep, ControlChannel& control, BufferSet& buffers, const nlohmann::json& plan) {
  REMORA_ASSIGN_OR_RETURN(const RmaMode mode, parse_rma_mode(plan.value("mode", "")));
  for (const auto& js : plan.at("steps")) {
    const size_t size = js.at("size").get<size_t>();
    if (Status s = follow_step(ep, control, buffers, mode, size); !s.is_ok()) {
      return s.with_context(fmt::format("size {}", size));
    }
    buffers.release_all();
  }
  return Status::ok();
}

}  // namespace internal

using namespace internal;  // NOLINT(google-build-using-namespace)

bool is_latency(RmaMode mode) noexcept {
  return mode == RmaMode::kPutLatency || mode == RmaMode::kGetLatency || mode == RmaMode::kNotifyLatency ||
         mode == RmaMode::kAtomicLatency;
}

std::string_view to_string(RmaMode mode) noexcept {
  switch (mode) {
    case RmaMode::kPutBandwidth: return "put_bw";
    case RmaMode::kGetBandwidth: return "get_bw";
    case RmaMode::kPutLatency: return "put_lat";
    case RmaMode::kGetLatency: return "get_lat";
    case RmaMode::kPutRate: return "put_rate";
    case RmaMode::kNotifyLatency: return "notify_lat";
    case RmaMode::kAtomicLatency: return "atomic_lat";
  }
  return "?";
}

Result<RmaMode> parse_rma_mode(std::string_view text) {
  for (RmaMode m : {RmaMode::kPutBandwidth, RmaMode::kGetBandwidth, RmaMode::kPutLatency, RmaMode::kGetLatency,
                    RmaMode::kPutRate, RmaMode::kNotifyLatency, RmaMode::kAtomicLatency}) {
    if (text == to_string(m)) return m;
  }
  return Status(
      StatusCode::kInvalidArgument,
      fmt::format("unknown RMA mode '{}': use put_bw, get_bw, put_lat, get_lat, put_rate, notify_lat or atomic_lat",
                  text));
}

Result<RmaReport> run_rma(const PeerOptions& peer, const RmaOptions& o) {
  if (o.window == 0 && !is_latency(o.mode)) return Status(StatusCode::kInvalidArgument, "--window must be at least 1");
  if (o.iters && *o.iters == 0) return Status(StatusCode::kInvalidArgument, "--iters must be at least 1");
  if (o.duration_s && !(*o.duration_s > 0)) return Status(StatusCode::kInvalidArgument, "--duration must be positive");
  const std::vector<size_t> sizes = o.sizes.empty() ? default_sizes(o.mode) : o.sizes;
  if (o.mode == RmaMode::kAtomicLatency && std::ranges::any_of(sizes, [](size_t s) { return s != sizeof(uint64_t); })) {
    return Status(StatusCode::kInvalidArgument, "atomic_lat works on one 8-byte word: --sizes 8");
  }

  std::vector<Step> steps;
  nlohmann::json plan = {{"kind", "rma"},
                         {"mode", to_string(o.mode)},
                         {"window", o.window},
                         {"buffers", to_string(o.buffers)},
                         {"steps", nlohmann::json::array()}};
  for (size_t size : sizes) {
    steps.push_back(default_step(step_kind(o.mode), size, o.window, o.iters, o.warmup));
    plan["steps"].push_back({{"size", size}, {"iters", steps.back().iters}, {"warmup", steps.back().warmup}});
  }

  RmaReport report;
  report.mode = o.mode;
  report.json = {{"tool", "remora bench rma"}, {"version", version_string()}, {"mode", to_string(o.mode)}};
  const auto body = [&](DriverSession& d) -> Status {
    report.json["config"]["window"] = o.window;
    report.json["config"]["buffers"] = to_string(o.buffers);
    if (o.duration_s) report.json["config"]["duration_s"] = *o.duration_s;
    for (const Step& st : steps) {
      RmaRow row;
      row.size = st.size;
      row.warmup = st.warmup;
      DriverStep step{.d = d,
                      .mode = o.mode,
                      .window = o.window,
                      .st = st,
                      .duration_s = o.duration_s,
                      .corrupt = o.inject_corruption,
                      .progress = o.progress};
      if (Status s = step.run(&row); !s.is_ok()) return s.with_context(fmt::format("size {}", st.size));
      d.buffers.release_all();
      report.rows.push_back(row);
    }
    return Status::ok();
  };
  REMORA_RETURN_IF_ERROR(run_driver(peer, {.buffers = o.buffers, .memory = {}, .plan = plan}, &report.json, body));

  report.json["results"] = nlohmann::json::array();
  for (const RmaRow& r : report.rows) {
    nlohmann::json row = {{"size", r.size},
                          {"iterations", r.iterations},
                          {"warmup", r.warmup},
                          {"operations", r.operations},
                          {"seconds", r.seconds},
                          {"bandwidth_MBps", r.bandwidth_mbps},
                          {"ops_per_second", r.ops_per_second},
                          {"verified", true}};
    if (is_latency(o.mode)) {
      row["latency_us"] = latency_json(r.latency);
      row["latency_is"] = o.mode == RmaMode::kPutLatency      ? "one-way (round trip / 2)"
                          : o.mode == RmaMode::kNotifyLatency ? "per notified put (a full round trip)"
                                                              : "per get (a full round trip)";
    } else {
      row["window"] = o.window;
    }
    report.json["results"].push_back(row);
  }
  return report;
}

}  // namespace remora::perf
