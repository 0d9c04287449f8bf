// tools/perf/session.cc — spawning the loopback follower, connecting, the control
// messages both sides exchange, and the follower's main loop.
#include "session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "pattern.h"

namespace remora::perf::internal {
namespace {

Status errno_status(std::string_view what) {
  return {StatusCode::kInternal, fmt::format("{}: {}", what, std::strerror(errno))};
}

std::string describe_exit(int wstatus) {
  if (WIFEXITED(wstatus)) return fmt::format("exited with status {}", WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) return fmt::format("killed by signal {} ({})", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
  return "stopped";
}

}  // namespace

Status wait_ok(const Request& r, std::string_view what) {
  Status s = r.wait(kOpTimeout);
  return s.is_ok() ? s : s.with_context(what);
}

Status wait_all_ok(std::span<const Request> rs, std::string_view what) {
  Status s = wait_all(rs, kOpTimeout);
  return s.is_ok() ? s : s.with_context(what);
}

// ---------------------------------------------------------------------------
// ServerProcess

ServerProcess::ServerProcess(ServerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), port_(other.port_) {}

ServerProcess& ServerProcess::operator=(ServerProcess&& other) noexcept {
  if (this != &other) {
    terminate();
    pid_ = std::exchange(other.pid_, -1);
    port_ = other.port_;
  }
  return *this;
}

ServerProcess::~ServerProcess() { terminate(); }

void ServerProcess::terminate() noexcept {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int wstatus = 0;
    ::waitpid(pid_, &wstatus, 0);
    pid_ = -1;
  }
}

Result<ServerProcess> ServerProcess::spawn(const std::string& self_exe) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_status("pipe2");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    Status s = errno_status("fork");
    ::close(fds[0]);
    ::close(fds[1]);
    return s;
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. Dies with the driver.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(3);
    ::close(fds[0]);
    const int wfd = ::fcntl(fds[1], F_DUPFD, 3);  // a copy without O_CLOEXEC
    if (wfd < 0) ::_exit(4);
    char fd_text[16];
    std::snprintf(fd_text, sizeof fd_text, "%d", wfd);
    const char* argv[] = {"remora", "serve", "--listen", "127.0.0.1:0", "--port-fd", fd_text, nullptr};
    ::execv(self_exe.c_str(), const_cast<char* const*>(argv));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    ::_exit(127);
  }
  ::close(fds[1]);
  ServerProcess server;
  server.pid_ = pid;

  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + kConnectTimeout;
  while (text.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::close(fds[0]);
      return Status(StatusCode::kTimeout, "the spawned server did not report its port within 15 s");
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = errno_status("poll");
      ::close(fds[0]);
      return s;
    }
    if (n == 0) continue;
    char chunk[64];
    const ssize_t got = ::read(fds[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ::close(fds[0]);
      int wstatus = 0;
      ::waitpid(pid, &wstatus, 0);
      server.pid_ = -1;
      return Status(StatusCode::kPeerFailed,
                    fmt::format("the spawned server ({}) {} before reporting its port", self_exe, describe_exit(wstatus)));
    }
    text.append(chunk, static_cast<size_t>(got));
  }
  ::close(fds[0]);
  const long port = std::strtol(text.c_str(), nullptr, 10);
  if (port <= 0 || port > 65535) {
    return Status(StatusCode::kProtocol, fmt::format("the spawned server reported a bad port: '{}'", text));
  }
  server.port_ = static_cast<uint16_t>(port);
  return server;
}

Status ServerProcess::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return Status::ok();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int wstatus = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid_, &wstatus, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) return errno_status("waitpid");
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status(StatusCode::kTimeout, fmt::format("the spawned server (pid {}) did not exit", pid_));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // bounded reap poll
  }
  pid_ = -1;
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return Status::ok();
  return Status(StatusCode::kPeerFailed, fmt::format("the spawned server {}", describe_exit(wstatus)));
}

// ---------------------------------------------------------------------------
// BufferSet

struct BufferSet::Held {
  Buffer pooled;
  std::unique_ptr<std::byte, decltype(&std::free)> raw{nullptr, &std::free};
  DeviceBlock device;
  Region region;  // declared after raw and device: deregistered before the memory goes
  std::span<std::byte> span;
};

BufferSet::BufferSet(Context& ctx, BufferSource source, size_t arena_bytes)
    // Every remote right, so that any buffer can be an RMA target (expose); a key is
    // only ever made for the buffers handed out by expose().
    : ctx_(ctx), source_(source), pool_(ctx, PoolOptions{.arena_bytes = arena_bytes, .access = kAllAccess}) {}

Result<std::shared_ptr<BufferSet::Held>> BufferSet::allocate(size_t bytes, Access access, DeviceMemory* device) {
  const size_t n = bytes == 0 ? 1 : bytes;
  auto held = std::make_shared<Held>();
  if (device != nullptr) {
    REMORA_ASSIGN_OR_RETURN(held->device, device->allocate(n));
    REMORA_ASSIGN_OR_RETURN(held->region, ctx_.memory().register_memory(held->device.data(), held->device.size(),
                                                                        access, device->domain()));
    held->span = {held->device.data(), n};
  } else if (source_ == BufferSource::kPool) {
    REMORA_ASSIGN_OR_RETURN(held->pooled, pool_.allocate(n));
    held->span = held->pooled.span().first(n);
  } else {
    const size_t rounded = (n + 4095) / 4096 * 4096;
    held->raw.reset(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
    if (!held->raw) return Status(StatusCode::kNoResource, fmt::format("out of memory allocating {} bytes", rounded));
    REMORA_ASSIGN_OR_RETURN(held->region, ctx_.register_memory(held->raw.get(), rounded, access));
    held->span = {held->raw.get(), n};
  }
  held_.push_back(held);
  return held;
}

Result<std::span<std::byte>> BufferSet::get(size_t bytes) {
  REMORA_ASSIGN_OR_RETURN(auto held, allocate(bytes, Access::kLocalWrite, device_));
  return held->span;
}

Result<std::span<std::byte>> BufferSet::get_host(size_t bytes) {
  REMORA_ASSIGN_OR_RETURN(auto held, allocate(bytes, Access::kLocalWrite, nullptr));
  return held->span;
}

Result<BufferSet::Exposed> BufferSet::expose(size_t bytes) {
  REMORA_ASSIGN_OR_RETURN(auto held, allocate(bytes, kAllAccess, device_));
  if (held->pooled) return Exposed{held->span, held->pooled.remote_key()};
  REMORA_ASSIGN_OR_RETURN(RemoteKey key, held->region.remote_key(0, held->span.size(), kRemoteAccessMask));
  return Exposed{held->span, key};
}

DeviceMemory* BufferSet::device_of(std::span<const std::byte> buf) const {
  for (const auto& held : held_) {
    const std::byte* begin = held->device.data();
    if (begin != nullptr && buf.data() >= begin && buf.data() + buf.size() <= begin + held->device.size()) {
      return held->device.owner();
    }
  }
  return nullptr;
}

Status BufferSet::fill(std::span<std::byte> buf, uint64_t seed) {
  DeviceMemory* device = device_of(buf);
  if (device == nullptr) {
    fill_pattern(buf, seed);
    return Status::ok();
  }
  std::vector<std::byte> staged(buf.size());
  fill_pattern(staged, seed);
  return device->write(buf.data(), staged);
}

Result<std::string> BufferSet::check(std::span<const std::byte> buf, uint64_t seed) {
  DeviceMemory* device = device_of(buf);
  if (device == nullptr) return check_pattern(buf, seed);
  std::vector<std::byte> back(buf.size());
  REMORA_RETURN_IF_ERROR(device->read(back, buf.data()));
  return check_pattern(back, seed);
}

Status BufferSet::damage(std::span<std::byte> buf, size_t at) {
  if (at >= buf.size()) return Status(StatusCode::kOutOfRange, fmt::format("byte {} of {}", at, buf.size()));
  DeviceMemory* device = device_of(buf);
  if (device == nullptr) {
    buf[at] ^= std::byte{0x01};
    return Status::ok();
  }
  std::byte b{};
  REMORA_RETURN_IF_ERROR(device->read(std::span(&b, 1), buf.data() + at));
  b ^= std::byte{0x01};
  return device->write(buf.data() + at, std::span(&b, 1));
}

void BufferSet::release_all() { held_.clear(); }

nlohmann::json BufferSet::stats() const {
  nlohmann::json j;
  j["buffers"] = to_string(source_);
  if (source_ == BufferSource::kPool) {
    const PoolStats p = pool_.stats();
    j["pool"] = {{"registrations", p.registrations}, {"bytes_registered", p.bytes_registered},
                 {"hits", p.hits},                   {"misses", p.misses},
                 {"buffers_in_use", p.buffers_in_use}, {"bytes_in_use", p.bytes_in_use}};
  }
  const RegistryStats r = ctx_.memory().stats();
  j["registry"] = {{"registrations", r.registrations}, {"deregistrations", r.deregistrations},
                   {"live_regions", r.live_regions},   {"bytes_registered", r.bytes_registered},
                   {"bytes_pinned", r.bytes_pinned},   {"pin_failures", r.pin_failures}};
  return j;
}

// ---------------------------------------------------------------------------
// ControlChannel

Status ControlChannel::send(Tag tag, const nlohmann::json& message) {
  const std::string text = message.dump();
  const auto out = buffer_.first(kMaxMessage / 2);
  if (text.size() > out.size()) {
    return Status(StatusCode::kInternal, fmt::format("control message of {} bytes is too long", text.size()));
  }
  std::memcpy(out.data(), text.data(), text.size());
  return wait_ok(ep_.send(out.first(text.size()), tag), "control send");
}

Request ControlChannel::post_recv(Tag tag) { return ep_.recv(buffer_.subspan(kMaxMessage / 2, kMaxMessage / 2), tag); }

Result<nlohmann::json> ControlChannel::finish_recv(const Request& r, Duration timeout) {
  const auto in = buffer_.subspan(kMaxMessage / 2, kMaxMessage / 2);
  if (Status s = r.wait(timeout); !s.is_ok()) return s.with_context("control receive");
  const auto* first = reinterpret_cast<const char*>(in.data());  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  nlohmann::json j = nlohmann::json::parse(first, first + r.bytes(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(StatusCode::kProtocol, "control message is not valid JSON");
  return j;
}

// ---------------------------------------------------------------------------
// DriverLink

Result<DriverLink> DriverLink::open(const PeerOptions& options, std::span<const MemoryKind> memory) {
  for (MemoryKind kind : memory) REMORA_RETURN_IF_ERROR(memory_available(kind));
  DriverLink link;
  if (options.peer.empty()) {
    REMORA_ASSIGN_OR_RETURN(ServerProcess server, ServerProcess::spawn(options.self_exe));
    link.peer_address = fmt::format("127.0.0.1:{}", server.port());
    link.server = std::make_unique<ServerProcess>(std::move(server));
  } else {
    link.peer_address = options.peer;
  }
  link.devices = std::make_unique<DeviceSet>();
  for (MemoryKind kind : memory) REMORA_RETURN_IF_ERROR(link.devices->open(kind).status());
  REMORA_ASSIGN_OR_RETURN(link.ctx, Context::create());
  REMORA_RETURN_IF_ERROR(link.devices->attach(*link.ctx));
  REMORA_ASSIGN_OR_RETURN(link.ep, link.ctx->connect(link.peer_address, kConnectTimeout));
  return link;
}

Status DriverLink::close() {
  if (ep) ep->close();
  ep.reset();
  ctx.reset();
  if (server) {
    Status s = server->wait(std::chrono::seconds(10));
    server.reset();
    return s;
  }
  return Status::ok();
}

Status run_driver(const PeerOptions& peer, const DriverSetup& setup, nlohmann::json* json, const DriverBody& body) {
  REMORA_ASSIGN_OR_RETURN(DriverLink link, DriverLink::open(peer, setup.memory));
  Endpoint& ep = *link.ep;
  BufferSet control_buffers(*link.ctx, BufferSource::kPool, ControlChannel::kMaxMessage);
  BufferSet buffers(*link.ctx, setup.buffers);
  (*json)["config"] = config_json(*link.ctx, ep);
  (*json)["config"]["follower"] = link.server ? "spawned on loopback" : "remote";

  auto drive = [&]() -> Status {
    REMORA_ASSIGN_OR_RETURN(auto control_span, control_buffers.get(ControlChannel::kMaxMessage));
    ControlChannel control(ep, control_span);
    REMORA_RETURN_IF_ERROR(control.send(kPlanTag, setup.plan));
    DriverSession session{.ep = ep, .control = control, .buffers = buffers, .devices = *link.devices};
    REMORA_RETURN_IF_ERROR(body(session));
    REMORA_ASSIGN_OR_RETURN((*json)["peer"], control.recv(kReportTag));
    (*json)["local"] = buffers.stats();
    (*json)["local"]["endpoint"] = endpoint_json(ep.stats());
    return control.send(kByeTag, nlohmann::json::object());
  };
  Status s = drive();
  if (!s.is_ok()) {
    // The transport error is the story; the follower's exit (it sees us go) is not.
    (void)link.close();
    return s;
  }
  return link.close();
}

Status send_ready(ControlChannel& control, size_t size) { return control.send(kReadyTag, {{"size", size}}); }

Status send_refusal(ControlChannel& control, const Status& why) {
  return control.send(kReadyTag, {{"refused", why.to_string()}});
}

Status await_ready(ControlChannel& control, size_t size) {
  REMORA_ASSIGN_OR_RETURN(auto ready, control.recv(kReadyTag));
  if (ready.contains("refused")) {
    return Status(StatusCode::kPeerFailed, "the follower refused the plan: " + ready.value("refused", std::string()));
  }
  return ready.value("size", size_t{0}) == size
             ? Status::ok()
             : Status(StatusCode::kProtocol, "the follower is at another message size");
}

Step default_step(StepKind kind, size_t size, uint32_t window, std::optional<uint32_t> iters,
                  std::optional<uint32_t> warmup) {
  Step st{.size = size};
  if (kind == StepKind::kPingPong) {
    st.iters = iters.value_or(
        size <= 8192 ? 10000u : static_cast<uint32_t>(std::clamp<size_t>((size_t{512} << 20) / size, 10, 1000)));
    st.warmup = warmup.value_or(size <= 8192 ? 1000u : std::clamp<uint32_t>(st.iters / 10, 2, 10));
  } else if (kind == StepKind::kCollective) {
    st.iters = iters.value_or(
        static_cast<uint32_t>(std::clamp<size_t>((size_t{256} << 20) / std::max<size_t>(size, 1), 5, 1000)));
    st.warmup = warmup.value_or(std::clamp<uint32_t>(st.iters / 10, 1, 20));
  } else {
    const size_t per_window = std::max<size_t>(size, 1) * std::max<uint32_t>(window, 1);
    const size_t most = kind == StepKind::kRate ? 2000 : 100;
    st.iters = iters.value_or(static_cast<uint32_t>(std::clamp<size_t>((size_t{2} << 30) / per_window, 5, most)));
    st.warmup = warmup.value_or(std::clamp<uint32_t>(st.iters / 10, 1, kind == StepKind::kRate ? 100 : 10));
  }
  return st;
}

LatencySummary summarize_latency(std::vector<double> samples_us, double divisor) {
  LatencySummary s;
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  const auto rank = [&](double p) {  // nearest-rank percentile
    const size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(samples_us.size())));
    return samples_us[std::clamp<size_t>(k, 1, samples_us.size()) - 1] / divisor;
  };
  double sum = 0;
  for (double v : samples_us) sum += v;
  s.avg_us = sum / static_cast<double>(samples_us.size()) / divisor;
  s.p50_us = rank(50);
  s.p99_us = rank(99);
  s.min_us = samples_us.front() / divisor;
  s.max_us = samples_us.back() / divisor;
  return s;
}

nlohmann::json latency_json(const LatencySummary& l) {
  return {{"avg", l.avg_us}, {"p50", l.p50_us}, {"p99", l.p99_us}, {"min", l.min_us}, {"max", l.max_us}};
}

nlohmann::json config_json(const Context& ctx) {
  const Config& c = ctx.config();
  return {{"streams_configured", c.streams_per_endpoint},
          {"chunk_bytes", c.chunk_bytes},
          {"eager_limit", c.eager_limit},
          {"eager_credit", c.eager_credit},
          {"spin_us", c.spin_us},
          {"progress_linger_us", c.progress_linger_us},
          {"progress_threads", c.progress_threads},
          {"max_outstanding", c.max_outstanding},
          {"rma_window", c.rma_window},
          {"max_unexpected", c.max_unexpected},
          {"staging_buffers", c.staging_buffers},
          {"checksum", c.checksum == ChecksumMode::kCrc32c ? "crc32c" : "none"}};
}

nlohmann::json config_json(const Context& ctx, const Endpoint& ep) {
  nlohmann::json j = config_json(ctx);
  j["streams"] = ep.data_streams();
  j["peer"] = ep.peer_address();
  return j;
}

nlohmann::json endpoint_json(const EndpointStats& s) {
  return {{"messages_sent", s.messages_sent},
          {"messages_received", s.messages_received},
          {"bytes_sent", s.bytes_sent},
          {"bytes_received", s.bytes_received},
          {"eager_sent", s.eager_sent},
          {"rendezvous_sent", s.rendezvous_sent},
          {"chunks_sent", s.chunks_sent},
          {"chunks_per_stream", s.chunks_per_stream},
          {"puts", s.puts},
          {"gets", s.gets},
          {"atomics", s.atomics},
          {"rma_bytes_put", s.rma_bytes_put},
          {"rma_bytes_got", s.rma_bytes_got},
          {"served_puts", s.served_puts},
          {"served_gets", s.served_gets},
          {"served_atomics", s.served_atomics},
          {"segmented", s.segmented},
          {"served_segmented", s.served_segmented},
          {"refused", s.refused},
          {"notifications", s.notifications},
          {"staged_bytes", s.staged_bytes},
          {"staged_transfers", s.staged_transfers},
          {"chunks_pulled", s.chunks_pulled},
          {"bytes_pulled", s.bytes_pulled},
          {"shm_tx", s.shm_tx},
          {"shm_rx", s.shm_rx},
          {"same_host_reason", s.same_host_reason},
          {"shm_reason", s.shm_reason},
          {"direct", s.direct},
          {"direct_reason", s.direct_reason}};
}

uint32_t window_slots(size_t size, uint32_t window) {
  constexpr size_t kMaxWindowBytes = size_t{64} << 20;
  const size_t fit = size == 0 ? window : kMaxWindowBytes / size;
  return static_cast<uint32_t>(std::clamp<size_t>(fit, 1, std::max<uint32_t>(window, 1)));
}

}  // namespace remora::perf::internal

namespace remora::perf {

using namespace internal;  // NOLINT(google-build-using-namespace)

Status serve(std::string_view address, int port_fd) {
  DeviceSet devices;  // before the context: what the plan makes it open outlives the context
  REMORA_ASSIGN_OR_RETURN(auto ctx, Context::create());
  REMORA_RETURN_IF_ERROR(devices.attach(*ctx));
  REMORA_ASSIGN_OR_RETURN(auto listener, ctx->listen(address));
  if (port_fd >= 0) {
    const std::string line = fmt::format("{}\n", listener->port());
    if (::write(port_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      Status s = errno_status("reporting the port");
      ::close(port_fd);
      return s;
    }
    ::close(port_fd);
  } else {
    fmt::print(stderr, "remora: listening on {}, waiting for a driver\n", listener->address());
  }
  REMORA_ASSIGN_OR_RETURN(auto ep, listener->accept(port_fd >= 0 ? Duration(kConnectTimeout) : kForever));
  listener.reset();

  BufferSet control_buffers(*ctx, BufferSource::kPool, ControlChannel::kMaxMessage);
  REMORA_ASSIGN_OR_RETURN(auto control_span, control_buffers.get(ControlChannel::kMaxMessage));
  ControlChannel control(*ep, control_span);
  REMORA_ASSIGN_OR_RETURN(nlohmann::json plan, control.recv(kPlanTag));

  const std::string kind = plan.value("kind", "");
  const BufferSource source = plan.value("buffers", "pool") == "register" ? BufferSource::kRegister : BufferSource::kPool;
  BufferSet buffers(*ctx, source);
  Status s;
  if (kind == "p2p") {
    FollowerSide side{.ep = *ep, .control = control, .buffers = buffers, .devices = devices};
    s = follow_p2p(side, plan);
  } else if (kind == "demo") {
    s = follow_demo(*ep, control, buffers, plan);
  } else if (kind == "rma") {
    s = follow_rma(*ep, control, buffers, plan);
  } else {
    s = Status(StatusCode::kProtocol, fmt::format("unknown plan kind '{}'", kind));
  }
  if (!s.is_ok()) return s;

  buffers.release_all();
  nlohmann::json report = buffers.stats();
  report["endpoint"] = endpoint_json(ep->stats());
  report["config"] = config_json(*ctx, *ep);
  // The driver closes right after its goodbye, and a closed endpoint fails receives
  // posted later, even for a message that arrived before the close: post it first.
  const Request bye = control.post_recv(kByeTag);
  REMORA_RETURN_IF_ERROR(control.send(kReportTag, report));
  REMORA_RETURN_IF_ERROR(control.finish_recv(bye).status());
  ep->close();
  return Status::ok();
}

Result<size_t> parse_size(std::string_view text) {
  if (text.empty()) return Status(StatusCode::kInvalidArgument, "empty size");
  size_t multiplier = 1;
  switch (text.back()) {
    case 'k': case 'K': multiplier = size_t{1} << 10; break;
    case 'm': case 'M': multiplier = size_t{1} << 20; break;
    case 'g': case 'G': multiplier = size_t{1} << 30; break;
    default: break;
  }
  std::string_view digits = multiplier == 1 ? text : text.substr(0, text.size() - 1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos || digits.size() > 12) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("bad size '{}': use bytes or a K/M/G suffix (powers of 1024), e.g. 8,4K,1M", text));
  }
  return std::stoull(std::string(digits)) * multiplier;
}

std::string format_size(size_t bytes) {
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

std::string_view to_string(P2pMode mode) noexcept {
  switch (mode) {
    case P2pMode::kBandwidth: return "bw";
    case P2pMode::kLatency: return "lat";
    case P2pMode::kBiBandwidth: return "bibw";
  }
  return "?";
}

std::string_view to_string(BufferSource source) noexcept {
  return source == BufferSource::kPool ? "pool" : "register";
}

}  // namespace remora::perf
