// tools/perf/session.h — what both sides of a perf run share: the spawned loopback
// follower, the connection, JSON control messages, registered buffers and stats.
// Private to tools/perf.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory.h"
#include "perf.h"
#include "remora/remora.h"

namespace remora::perf::internal {

/// Tags of the perf protocol. Distinct tags per purpose, so a driver and a follower that
/// disagree about the plan time out instead of silently mixing messages.
inline constexpr Tag kPlanTag{1};
inline constexpr Tag kReadyTag{2};
inline constexpr Tag kReportTag{3};
inline constexpr Tag kByeTag{4};
inline constexpr Tag kVerdictTag{5};  ///< the follower's data check of one size (demo, rma)
inline constexpr Tag kDoneTag{6};     ///< the driver is done with one size (rma: the target may let go)
inline constexpr Tag kStepTag{7};     ///< the driver starts one step (p2p: its device copy rate)
inline constexpr Tag kPingTag{10};
inline constexpr Tag kPongTag{11};
inline constexpr Tag kSumTag{12};
inline constexpr Tag kAckTag{13};
inline constexpr Tag kDataTag{14};
inline constexpr Tag kKeyTag{15};  ///< a serialized RemoteKey (rma)

/// Bound on any single wait: generous (64 MiB at 100 MB/s is under a second), so a
/// stuck run ends with an error instead of hanging.
inline constexpr std::chrono::seconds kOpTimeout{60};
inline constexpr std::chrono::seconds kConnectTimeout{15};

/// Waits for `r`; an error status gets `what` as context.
Status wait_ok(const Request& r, std::string_view what);
Status wait_all_ok(std::span<const Request> rs, std::string_view what);

/// A follower process started by the driver. Killed (SIGTERM) if still running when
/// destroyed; `wait` reaps it and turns a nonzero exit into an error.
class ServerProcess {
 public:
  ServerProcess() = default;
  ServerProcess(ServerProcess&& other) noexcept;
  ServerProcess& operator=(ServerProcess&& other) noexcept;
  ~ServerProcess();

  /// fork + exec `self_exe serve --listen 127.0.0.1:0 --port-fd N`; returns once the
  /// child has written its port to the pipe (no sleeps; bounded by kConnectTimeout).
  static Result<ServerProcess> spawn(const std::string& self_exe);
  uint16_t port() const { return port_; }
  bool running() const { return pid_ > 0; }
  Status wait(std::chrono::milliseconds timeout);

 private:
  void terminate() noexcept;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

/// Buffers for one run: host memory from a Pool or registered explicitly, or device
/// memory (use_memory), registered explicitly with its domain.
class BufferSet {
 public:
  /// Pool arenas of `arena_bytes` serve the size classes up to it (one arena per class);
  /// a larger buffer gets an arena of its own. Small arenas keep pinned memory modest.
  BufferSet(Context& ctx, BufferSource source, size_t arena_bytes = size_t{4} << 20);
  /// What get() and expose() hand out from now on: `device`'s memory, or host memory
  /// when null. `device` must outlive the set.
  void use_memory(DeviceMemory* device) noexcept { device_ = device; }
  /// A registered buffer of `bytes` (at least 1), of the memory in use, that lives as
  /// long as the set or until release_all(). Device memory cannot be touched directly:
  /// fill, check and damage it through the set.
  Result<std::span<std::byte>> get(size_t bytes);
  /// As get(), always host memory (acks, small protocol messages).
  Result<std::span<std::byte>> get_host(size_t bytes);
  /// Writes fill_pattern(seed) into `buf` (a buffer of this set, or part of one).
  Status fill(std::span<std::byte> buf, uint64_t seed);
  /// "" when `buf` holds fill_pattern(seed), else where it differs (check_pattern).
  Result<std::string> check(std::span<const std::byte> buf, uint64_t seed);
  /// Flips one bit of byte `at` of `buf` (fault injection: a check must see it).
  Status damage(std::span<std::byte> buf, size_t at);
  /// A buffer of `bytes` (at least 1) that a peer may read, write and run atomics on,
  /// and the key granting exactly that: what an RMA target hands its initiator.
  struct Exposed {
    std::span<std::byte> span;
    RemoteKey key;
  };
  Result<Exposed> expose(size_t bytes);
  void release_all();
  nlohmann::json stats() const;  ///< pool (if used) and registry counters

 private:
  struct Held;
  Result<std::shared_ptr<Held>> allocate(size_t bytes, Access access, DeviceMemory* device);
  /// The device memory `buf` lies in, or null for host memory.
  DeviceMemory* device_of(std::span<const std::byte> buf) const;
  Context& ctx_;
  BufferSource source_;
  Pool pool_;
  DeviceMemory* device_ = nullptr;
  std::vector<std::shared_ptr<Held>> held_;
};

/// Small JSON messages over the endpoint, from a registered control buffer.
class ControlChannel {
 public:
  static constexpr size_t kMaxMessage = 64 * 1024;
  ControlChannel(Endpoint& ep, std::span<std::byte> buffer) : ep_(ep), buffer_(buffer) {}
  Status send(Tag tag, const nlohmann::json& message);
  Result<nlohmann::json> recv(Tag tag) { return finish_recv(post_recv(tag)); }
  /// Split receive, for a message that must be posted before something else happens.
  /// One posted receive at a time: they share the buffer.
  Request post_recv(Tag tag);
  /// `timeout`: kForever for a passive wait that only the peer's going away may end.
  Result<nlohmann::json> finish_recv(const Request& r, Duration timeout = kOpTimeout);

 private:
  Endpoint& ep_;
  std::span<std::byte> buffer_;  ///< kMaxMessage bytes: first half out, second half in
};

/// The driver's view of a run: its device memory, context, the endpoint and, when it
/// spawned one, the follower process. The follower is spawned before the devices and
/// the context exist (no threads at fork time).
struct DriverLink {
  std::unique_ptr<ServerProcess> server;  ///< null with PeerOptions::peer
  std::unique_ptr<DeviceSet> devices;     ///< declared before ctx: outlives it
  std::unique_ptr<Context> ctx;
  std::shared_ptr<Endpoint> ep;
  std::string peer_address;

  /// `memory`: the kinds of the driver's buffers; each is opened and added to the
  /// context. One that is not available here is refused before anything starts.
  static Result<DriverLink> open(const PeerOptions& options, std::span<const MemoryKind> memory = {});
  /// Goodbye to the follower, close, reap the spawned process.
  Status close();
};

/// What a driver's body works with once the follower has its plan.
struct DriverSession {
  Endpoint& ep;
  ControlChannel& control;
  BufferSet& buffers;  ///< of the source the plan names; the body releases them per size
  DeviceSet& devices;  ///< the device memory the driver's buffers may be of
};
using DriverBody = std::function<Status(DriverSession&)>;

/// What a driver's run is made of, besides its body.
struct DriverSetup {
  BufferSource buffers = BufferSource::kPool;
  std::vector<MemoryKind> memory;  ///< kinds of the driver's buffers (DriverLink::open)
  nlohmann::json plan;             ///< sent to the follower first
};

/// The driver's whole run: opens the link, fills (*json)["config"], sends the plan, runs
/// `body`, then collects the follower's report into (*json)["peer"] and its own stats
/// into (*json)["local"], says goodbye and reaps the follower. The body's error is the
/// one returned (the follower's exit, which follows from it, is not).
Status run_driver(const PeerOptions& peer, const DriverSetup& setup, nlohmann::json* json, const DriverBody& body);

/// The context's transport settings (streams configured, chunk, eager limit, spin, ...).
nlohmann::json config_json(const Context& ctx);
/// The same, plus what this endpoint negotiated and its peer.
nlohmann::json config_json(const Context& ctx, const Endpoint& ep);
nlohmann::json endpoint_json(const EndpointStats& stats);

/// What the follower serves with; `devices` outlives `ctx`, whose domains it holds.
struct FollowerSide {
  Endpoint& ep;
  ControlChannel& control;
  BufferSet& buffers;
  DeviceSet& devices;  ///< attached to the follower's context: what it opens is added
};

/// The follower's side of each plan kind (the driver's is in run_p2p / run_demo / run_rma).
Status follow_p2p(FollowerSide& side, const nlohmann::json& plan);
Status follow_demo(Endpoint& ep, ControlChannel& control, BufferSet& buffers, const nlohmann::json& plan);
Status follow_rma(Endpoint& ep, ControlChannel& control, BufferSet& buffers, const nlohmann::json& plan);

/// The follower says it is ready for `size` (its buffers exist); the driver waits for
/// that before timing anything, so allocation is never timed.
Status send_ready(ControlChannel& control, size_t size);
/// Instead of ready: the follower cannot serve the plan, and says why (the driver's
/// await_ready returns it as the follower's error).
Status send_refusal(ControlChannel& control, const Status& why);
Status await_ready(ControlChannel& control, size_t size);

/// What the p2p loops (run_window, run_pingpong) send and receive through: an Endpoint
/// (remora bench p2p), or one peer of a Communicator (the reference of remora bench coll).
class Link {
 public:
  virtual ~Link() = default;
  virtual Request send(std::span<const std::byte> data, Tag tag) = 0;
  virtual Request recv(std::span<std::byte> data, Tag tag) = 0;
};

/// A Link over an endpoint, with remora's own tags.
class EndpointLink final : public Link {
 public:
  explicit EndpointLink(Endpoint& ep) : ep_(ep) {}
  Request send(std::span<const std::byte> data, Tag tag) override { return ep_.send(data, tag); }
  Request recv(std::span<std::byte> data, Tag tag) override { return ep_.recv(data, tag); }

 private:
  Endpoint& ep_;
};

/// Iterations of one message size.
struct Step {
  size_t size = 0;
  uint32_t iters = 0;   ///< timed iterations (windows, round trips)
  uint32_t warmup = 0;  ///< untimed ones before them
};
/// How a benchmark iterates, which decides its default counts.
enum class StepKind : uint8_t {
  kWindow,      ///< an iteration is a window of `window` large operations: ~2 GiB per size
  kRate,        ///< a window of small operations: as kWindow, but up to 2000 windows
  kPingPong,    ///< an iteration is one round trip: 10000 up to 8 KiB, fewer above
  kCollective,  ///< an iteration is one collective: 256 MiB per size, 5…1000 of them
};
/// The counts for `size`; `iters` / `warmup` override the scaled defaults.
Step default_step(StepKind kind, size_t size, uint32_t window, std::optional<uint32_t> iters,
                  std::optional<uint32_t> warmup);
/// avg/p50/p99/min/max of `samples_us`, each divided by `divisor` (2: one-way latency
/// from round trips). Percentiles are nearest-rank.
LatencySummary summarize_latency(std::vector<double> samples_us, double divisor);
nlohmann::json latency_json(const LatencySummary& l);

/// Buffers a window of `size`-byte messages cycles through: distinct up to 64 MiB.
uint32_t window_slots(size_t size, uint32_t window);

/// Called once a side's buffers are ready, before its first message of a size: the
/// follower says "ready", the driver waits for it, so allocation is never timed.
using StartFn = std::function<Status()>;

/// One side's part in a p2p loop (run_window, run_pingpong).
struct LoopSide {
  Link& link;
  BufferSet& buffers;  ///< message buffers of the memory in use; acks are host memory
  bool driver = false;
  StartFn start;
  ProgressFn progress;  ///< the driver's only
  /// After the timed part, what this side received is checked against the sender's
  /// pattern: *problem gets "" when it verified (or nothing was received), else where
  /// it differs. Null: no check.
  std::string* problem = nullptr;
  bool damage = false;  ///< fault injection: flip a received byte before the check
};

/// Both sides of p2p bw and bibw (osu_bw, osu_bibw): windows of `window` messages of
/// st.size bytes (bw: the driver sends, the follower acks each window; bibw: both send
/// and receive a window at once). `seconds` gets the timed part on either side; only the
/// driver reports progress.
/// `cpu_seconds`, where given: this process's CPU time (all threads) during the timed part.
Status run_window(const LoopSide& side, P2pMode mode, uint32_t window, bool distinct, const Step& st, double* seconds,
                  double* cpu_seconds = nullptr);
/// Both sides of p2p lat (osu_latency): st.size-byte ping-pong. The driver fills
/// `rtt_us` with every timed round trip (the follower passes nullptr).
Status run_pingpong(const LoopSide& side, const Step& st, std::vector<double>* rtt_us);

}  // namespace remora::perf::internal
