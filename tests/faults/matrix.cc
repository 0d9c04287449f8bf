// tests/faults/matrix.cc — `remora_faults [--workloads=a,b] [--faults=x,y] [--peer-timeout-ms=N]
// [--margin-ms=N] [--window=N] [--size=B]`: every workload / fault cell between real processes in three network
// namespaces on one bridge, one table line per cell; exit status 1 when any cell broke
// its expectation (tests/README.md lists them).
//
//   namespace 0  the observer: runs the workload against the victim, owns the fd/RSS counts
//   namespace 1  the victim: gets the fault (a signal, its link, its connections, its traffic)
//   namespace 2  the healthy peer: must keep working with the observer after the fault
//
// Every process is fresh in every cell; the namespaces are made once and removed at the
// end (also on failure: NetnsBridge is RAII). The fault hits once the observer has seen
// a round of its workload complete and keeps the next one in flight; nothing here sleeps
// to synchronise (the descriptor count is polled, with a deadline, after the release).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "faults.h"
#include "support/netns.h"
#include "support/peer_program.h"
#include "support/process.h"

namespace remora::faults {
namespace {

using itest::CommandResult;
using itest::Process;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

enum class FaultKind {
  kSigkill,
  kSigstop,
  kLinkDown,
  kTcpReset,
  kDrop,
  kRate,
  kDelay,
  kRailDown,
  kRailReset,
  kControlRailDown
};

struct Fault {
  std::string name;
  FaultKind kind;
  double drop = 0;            ///< kDrop: probability per packet, each direction
  uint64_t rounds_after = 4;  ///< conditions: rounds of the workload after the fault
  /// Every process runs with two rails (REMORA_RAILS=rmr: rmr0 and rmr1), and the
  /// fault hits one: failover must finish every operation on the other (the first, but
  /// for control-rail-down, which takes the control stream's own rail down).
  bool rails = false;
  /// The peer timeout of the cell's processes; 0: the matrix's (--peer-timeout-ms). A
  /// lossy link needs one above TCP's retransmission backoff: at 10% loss each way a
  /// segment lost three times in a row waits 1.4 s (200 + 400 + 800 ms), and with it
  /// every byte behind it on the control connection, heartbeats included, so that a
  /// 1 s timeout declared live peers dead about once in 80 cells (docs/configuration.md).
  uint32_t peer_timeout_ms = 0;
  /// Every connection between the victim and the observer reset at once (tcp-reset) is
  /// survived since the control stream is resumed (docs/rails.md): a condition too.
  bool is_failure() const { return kind <= FaultKind::kLinkDown; }
};

const std::vector<Fault>& all_faults() {
  static const std::vector<Fault> faults = {
      {"sigkill", FaultKind::kSigkill},
      {"sigstop", FaultKind::kSigstop},
      {"link-down", FaultKind::kLinkDown},
      {"tcp-reset", FaultKind::kTcpReset},
      {"drop-2%", FaultKind::kDrop, 0.02, 4, false, 3000},
      {"drop-10%", FaultKind::kDrop, 0.10, 2, false, 3000},
      {"rate-100mbit", FaultKind::kRate},
      {"delay-50ms", FaultKind::kDelay},
      {"rail-down", FaultKind::kRailDown, 0, 4, true},
      {"rail-reset", FaultKind::kRailReset, 0, 4, true},
      {"control-rail-down", FaultKind::kControlRailDown, 0, 4, true},
  };
  return faults;
}

constexpr uint64_t kVictimSeed = 0x51c7;
constexpr uint64_t kHealthySeed = 0x4ea1;
constexpr long kRssSlackKib = 64 << 10;  // a generous bound: allocator caches, not leaks
constexpr auto kStepDeadline = 60s;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string self_exe() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) itest::die("readlink /proc/self/exe failed");
  return std::string(buf.data(), static_cast<size_t>(n));
}

/// The next line of `p` starting with `prefix` (its remainder), collecting the lines
/// before it (the child's stderr) into `log`; nullopt at EOF or the deadline.
std::optional<std::string> expect_line(Process& p, const std::string& prefix, std::chrono::milliseconds within,
                                       std::string* log) {
  const auto deadline = Clock::now() + within;
  while (Clock::now() < deadline) {
    auto line = p.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    if (!line) break;
    if (line->rfind(prefix, 0) == 0) return line->substr(prefix.size());
    *log += "    | " + *line + "\n";
  }
  *log += "    (no \"" + prefix + "\" line within " + std::to_string(within.count()) + " ms" +
          (p.timed_out() ? ")\n" : ", the process ended)\n");
  return std::nullopt;
}

/// key=value fields of an END line.
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::stringstream in(line);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

uint64_t num(const std::map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

bool stop_child(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WEXITED | WNOWAIT) != 0) return false;
  return info.si_code == CLD_STOPPED;
}

struct Row {
  std::string cell, evidence, in_flight, outcome, end, fds, rss, survivor;
  bool pass = true;
  std::string why;  ///< the broken expectations and the processes' output
  void fail(const std::string& what) {
    pass = false;
    why += "    FAIL: " + cell + ": " + what + "\n";  // the cell named: CI keeps only these lines
  }
};

class Matrix {
 public:
  Matrix(const itest::NetnsBridge& net, uint32_t peer_timeout_ms, uint32_t margin_ms)
      : net_(net), exe_(self_exe()), peer_timeout_ms_(peer_timeout_ms), margin_ms_(margin_ms) {
    // NetnsBridge names its switch namespace like its members, with "sw" for the index.
    switch_ns_ = net.ns(0).substr(0, net.ns(0).size() - 1) + "sw";
  }

  Row run(const std::string& workload, const Fault& fault);

  /// Segmentation offloads off on both ends of the victim's link: packets then are
  /// MTU-sized frames, as on a wire, so a drop loses one frame rather than a 64 KB
  /// super-packet (which would make "2%" mean far fewer, far larger losses).
  bool wire_like(std::string* log) {
    return sh({"ip", "netns", "exec", net_.ns(1), "ethtool", "-K", "rmr0", "tso", "off", "gso", "off", "gro", "off"},
              log) &&
           sh({"ip", "netns", "exec", switch_ns_, "ethtool", "-K", "rmrp1", "tso", "off", "gso", "off", "gro", "off"},
              log);
  }

 private:
  std::unique_ptr<Process> spawn(int ns, std::vector<std::string> args, bool rails, bool capture = true) {
    std::vector<std::string> argv = net_.exec_prefix(net_.ns(ns));
    argv.push_back(exe_);
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"REMORA_PEER_TIMEOUT_MS=" + std::to_string(cell_timeout_ms_)};
    if (rails) env.emplace_back("REMORA_RAILS=rmr");
    return std::make_unique<Process>(
        Process::Options{.argv = argv, .env = std::move(env), .capture_stderr = capture, .pipe_stdin = true});
  }
  bool sh(const std::vector<std::string>& argv, std::string* log) {
    const CommandResult r = itest::run_command(argv, 20s);
    if (r.ok()) return true;
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    *log += "    `" + cmd + "` " + Process::describe(r.status) + ": " + r.output + "\n";
    return false;
  }
  std::vector<std::string> iptables() const { return {"ip", "netns", "exec", net_.ns(1), "iptables-legacy"}; }
  /// Applies the fault; `evidence` says what it did (sockets reset, ...).
  bool apply(const Fault& fault, Process& victim, std::string* log, std::string* evidence);
  /// Removes it; `evidence` gets what the kernel counted while it was there (packets
  /// dropped, held, throttled).
  void undo(const Fault& fault, Process& victim, std::string* log, std::string* evidence);
  /// Output of a short command run in the victim's namespace (empty on failure).
  std::string output_of(const std::vector<std::string>& argv) {
    const CommandResult r = itest::run_command(argv, 20s);
    return r.ok() ? r.output : std::string();
  }

  const itest::NetnsBridge& net_;
  std::string exe_, switch_ns_;
  uint32_t peer_timeout_ms_, margin_ms_;
  uint32_t cell_timeout_ms_ = 0;  // the cell's: Fault::peer_timeout_ms, else peer_timeout_ms_

 public:
  uint64_t window_ = 8;      ///< the observer's operations per round
  uint64_t size_ = 1 << 20;  ///< the size of every other operation (the rest are small)

 private:
  std::unique_ptr<Process> delayer_;
};

bool Matrix::apply(const Fault& fault, Process& victim, std::string* log, std::string* evidence) {
  switch (fault.kind) {
    case FaultKind::kSigkill:
      victim.signal(SIGKILL);
      *evidence = "killed";
      return true;
    case FaultKind::kSigstop: *evidence = "stopped"; return stop_child(victim.pid());
    case FaultKind::kLinkDown:
      *evidence = "link down";
      return sh({"ip", "-n", net_.ns(1), "link", "set", "rmr0", "down"}, log);
    case FaultKind::kRailDown:
      *evidence = "rail 2 down";
      return sh({"ip", "-n", net_.ns(1), "link", "set", "rmr1", "down"}, log);
    case FaultKind::kControlRailDown:
      *evidence = "rail 1 down";
      return sh({"ip", "-n", net_.ns(1), "link", "set", "rmr0", "down"}, log);
    case FaultKind::kTcpReset:
    case FaultKind::kRailReset: {
      // Destroys the victim's sockets to the observer (CONFIG_INET_DIAG_DESTROY): each
      // sends a RST, so both ends see their connections reset. ss lists what it destroyed.
      // On the second rail only the data streams go there.
      const std::string to = fault.kind == FaultKind::kTcpReset ? net_.addr(0) : net_.addr2(0);
      const std::string out = output_of({"ip", "netns", "exec", net_.ns(1), "ss", "-tnK", "dst", to});
      const long lines = std::count(out.begin(), out.end(), '\n');
      *evidence = fmt::format("{} socks reset", lines > 0 ? lines - 1 : 0);
      return lines > 1;
    }
    case FaultKind::kDrop: {
      const std::string p = fmt::format("{:.3f}", fault.drop);
      for (const auto& [chain, dir] : {std::pair{"INPUT", "-i"}, std::pair{"OUTPUT", "-o"}}) {
        auto argv = iptables();
        argv.insert(argv.end(), {"-A", chain, dir, "rmr0", "-m", "statistic", "--mode", "random", "--probability", p,
                                 "-j", "DROP"});
        if (!sh(argv, log)) return false;
      }
      return true;
    }
    case FaultKind::kRate:
      // Both directions: the victim's egress and the bridge port's towards it.
      return sh({"tc", "-n", net_.ns(1), "qdisc", "add", "dev", "rmr0", "root", "tbf", "rate", "100mbit", "burst",
                 "64kb", "latency", "50ms"},
                log) &&
             sh({"tc", "-n", switch_ns_, "qdisc", "add", "dev", "rmrp1", "root", "tbf", "rate", "100mbit", "burst",
                 "64kb", "latency", "50ms"},
                log);
    case FaultKind::kDelay: {
      delayer_ = spawn(1, {"delay", "--queue=7", "--ms=50"}, false);
      if (!expect_line(*delayer_, "READY", kStepDeadline, log)) return false;
      for (const auto& [chain, dir] : {std::pair{"INPUT", "-i"}, std::pair{"OUTPUT", "-o"}}) {
        auto argv = iptables();
        argv.insert(argv.end(), {"-A", chain, dir, "rmr0", "-j", "NFQUEUE", "--queue-num", "7"});
        if (!sh(argv, log)) return false;
      }
      return true;
    }
  }
  return false;
}

/// Sum of the packet counters of the rules in `listing` (iptables -L -v -x -n).
uint64_t rule_packets(const std::string& listing) {
  uint64_t sum = 0;
  std::stringstream in(listing);
  for (std::string line; std::getline(in, line);) {
    std::stringstream words(line);
    std::string pkts, bytes, target;
    if (words >> pkts >> bytes >> target && (target == "DROP" || target == "NFQUEUE")) {
      sum += std::strtoull(pkts.c_str(), nullptr, 10);
    }
  }
  return sum;
}

void Matrix::undo(const Fault& fault, Process& victim, std::string* log, std::string* evidence) {
  if (fault.kind == FaultKind::kDrop || fault.kind == FaultKind::kDelay) {
    auto argv = iptables();
    argv.insert(argv.end(), {"-L", "-v", "-x", "-n"});
    *evidence = fmt::format("{} pkts {}", rule_packets(output_of(argv)),
                            fault.kind == FaultKind::kDrop ? "dropped" : "delayed");
  } else if (fault.kind == FaultKind::kRate) {
    uint64_t overlimits = 0;
    for (const auto& [ns, dev] : {std::pair{net_.ns(1), "rmr0"}, std::pair{switch_ns_, "rmrp1"}}) {
      const std::string out = output_of({"tc", "-n", ns, "-s", "qdisc", "show", "dev", dev});
      const auto at = out.find("overlimits ");
      if (at != std::string::npos) overlimits += std::strtoull(out.c_str() + at + 11, nullptr, 10);
    }
    *evidence = fmt::format("{} pkts throttled", overlimits);
  }
  switch (fault.kind) {
    case FaultKind::kSigstop: victim.signal(SIGCONT); break;
    case FaultKind::kLinkDown:
    case FaultKind::kControlRailDown: (void)sh({"ip", "-n", net_.ns(1), "link", "set", "rmr0", "up"}, log); break;
    case FaultKind::kRailDown: (void)sh({"ip", "-n", net_.ns(1), "link", "set", "rmr1", "up"}, log); break;
    case FaultKind::kDrop:
    case FaultKind::kDelay: {
      auto argv = iptables();
      argv.push_back("-F");
      (void)sh(argv, log);
      delayer_.reset();  // after the rules: nothing is queued to it any more
      break;
    }
    case FaultKind::kRate:
      (void)sh({"tc", "-n", net_.ns(1), "qdisc", "del", "dev", "rmr0", "root"}, log);
      (void)sh({"tc", "-n", switch_ns_, "qdisc", "del", "dev", "rmrp1", "root"}, log);
      break;
    default: break;
  }
}

Row Matrix::run(const std::string& workload, const Fault& fault) {
  Row row;
  row.cell = workload + " / " + fault.name;
  cell_timeout_ms_ = fault.peer_timeout_ms != 0 ? std::max(fault.peer_timeout_ms, peer_timeout_ms_) : peer_timeout_ms_;
  const bool coll = workload == "allreduce";
  const std::string store = "--store=" + net_.addr(0) + ":" + std::to_string(kStorePort);
  // With rails a server listens on the wildcard address, so that it advertises both.
  const bool rails = fault.rails;
  std::vector<std::string> v_args = {"node", "--role=server", "--addr=" + (rails ? "0.0.0.0" : net_.addr(1)),
                                     "--seed=" + std::to_string(kVictimSeed)};
  std::vector<std::string> h_args = {"node", "--role=server", "--addr=" + (rails ? "0.0.0.0" : net_.addr(2)),
                                     "--seed=" + std::to_string(kHealthySeed)};
  if (coll) {
    v_args.insert(v_args.end(), {"--coll=1", "--rank=1", store});
    h_args.insert(h_args.end(), {"--coll=1", "--rank=2", store});
  }
  std::string log;
  auto victim = spawn(1, v_args, rails);
  auto healthy = spawn(2, h_args, rails);
  auto v_ready = expect_line(*victim, "READY ", kStepDeadline, &log);
  auto h_ready = expect_line(*healthy, "READY ", kStepDeadline, &log);
  if (!v_ready || !h_ready) {
    row.fail("a server did not start");
    row.why += log;
    return row;
  }
  auto port_key = [](const std::string& s) {
    const auto sp = s.find(' ');
    return std::pair{s.substr(0, sp), s.substr(sp + 1)};
  };
  const auto [v_port, v_key] = port_key(*v_ready);
  const auto [h_port, h_key] = port_key(*h_ready);
  auto observer =
      spawn(0,
            {"node", "--role=observer", "--workload=" + workload,
             std::string("--expect=") + (fault.is_failure() ? "fail" : "complete"),
             "--rounds-after=" + std::to_string(fault.rounds_after), "--victim=" + net_.addr(1) + ":" + v_port,
             "--victim-key=" + v_key, "--victim-seed=" + std::to_string(kVictimSeed),
             "--healthy=" + net_.addr(2) + ":" + h_port, "--healthy-key=" + h_key, store,
             "--window=" + std::to_string(window_), "--size=" + std::to_string(size_)},
            rails);
  const pid_t pid = observer->pid();
  std::optional<std::string> end, released, survivor, h_coll;
  int fds_before = -1, fds_after = -1;
  long rss_before = -1, rss_after = -1;
  long h_coll_ms = -1;
  long in_flight = 0;  // the observer's operations outstanding just before the fault
  bool applied = false;
  const auto bound = std::chrono::milliseconds(cell_timeout_ms_ + margin_ms_);
  Clock::time_point fault_time{};
  do {
    if (!expect_line(*observer, "BASELINE", kStepDeadline, &log)) break;
    fds_before = count_fds(pid);
    rss_before = rss_kib(pid);
    observer->write_line("go");
    if (!expect_line(*observer, "INFLIGHT", kStepDeadline, &log)) break;
    observer->write_line("arm");
    const auto armed = expect_line(*observer, "ARMED ", kStepDeadline, &log);
    if (!armed) break;
    in_flight = std::strtol(armed->c_str(), nullptr, 10);
    fault_time = Clock::now();
    applied = apply(fault, *victim, &log, &row.evidence);
    if (!applied) row.fail("the fault could not be applied");
    observer->write_line("faulted");
    end = expect_line(*observer, "END ", fault.is_failure() ? bound + 30s : std::chrono::milliseconds(180s), &log);
    if (!end) break;
    if (coll) {
      h_coll = expect_line(*healthy, "COLL ", bound + 30s, &log);
      h_coll_ms = static_cast<long>((Clock::now() - fault_time) / 1ms);
    }
    undo(fault, *victim, &log, &row.evidence);
    applied = false;
    released = expect_line(*observer, "RELEASED", kStepDeadline, &log);
    if (!released) break;
    // Descriptors of a closed endpoint may linger until their last bytes are delivered
    // (LingeringClose): poll, bounded.
    const auto deadline = Clock::now() + bound + 5s;
    while ((fds_after = count_fds(pid)) > fds_before && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    rss_after = rss_kib(pid);
    observer->write_line("survivor");
    survivor = expect_line(*observer, "SURVIVOR ", kStepDeadline, &log);
    observer->write_line("quit");
  } while (false);
  if (applied) undo(fault, *victim, &log, &row.evidence);

  // The observer and the healthy peer must end cleanly; the victim is simply reaped.
  const auto o_status = observer->wait(30s);
  if (!o_status)
    row.fail("the observer did not exit");
  else if (!Process::exited_ok(*o_status))
    row.fail("the observer " + Process::describe(*o_status));
  healthy->write_line("quit");
  log += healthy->read_all(30s);
  const auto h_status = healthy->wait(5s);
  if (!h_status || !Process::exited_ok(*h_status)) {
    row.fail("the healthy peer " + (h_status ? Process::describe(*h_status) : std::string("did not exit")));
  }
  // The victim, unless killed, must not have crashed either: resumed and told to quit,
  // it shuts down cleanly (its endpoint to the observer failed or closed meanwhile).
  victim->signal(SIGCONT);
  if (fault.kind != FaultKind::kSigkill) {
    victim->write_line("quit");
    log += victim->read_all(30s);  // drained, so that it never blocks on a full pipe
    const auto v_status = victim->wait(5s);
    if (!v_status || !Process::exited_ok(*v_status)) {
      row.fail("the victim " + (v_status ? Process::describe(*v_status) : std::string("did not exit on quit")));
    }
  }
  (void)victim->kill_and_reap();
  while (auto line = observer->read_line(1s)) log += "    | " + *line + "\n";

  if (!end) {
    row.fail("the workload never reported its end");
    row.outcome = "no END";
  } else {
    const auto f = fields(*end);
    const uint64_t ok = num(f, "ok"), errors = num(f, "errors"), bad = num(f, "bad"), bytes = num(f, "bytes");
    // From the moment the driver began to apply the fault (steady clock, shared by the processes).
    const long ms = static_cast<long>(
        (static_cast<int64_t>(num(f, "last_end_ns")) - fault_time.time_since_epoch() / 1ns) / 1'000'000);
    const bool failed_before =
        errors != 0 && static_cast<int64_t>(num(f, "first_error_ns")) < fault_time.time_since_epoch() / 1ns;
    if (bad != 0) row.fail(std::to_string(bad) + " operations completed with wrong bytes");
    if (in_flight <= 0) row.fail("nothing was in flight when the fault was applied");
    if (fault.is_failure()) {
      row.outcome = fmt::format("{}: {} ok, {} failed", f.count("code") ? f.at("code") : "?", ok, errors);
      row.in_flight = std::to_string(in_flight);
      row.end = fmt::format("{} <= {} ms", ms, bound.count());
      if (errors == 0) row.fail("no operation failed: the fault hit nothing in flight");
      if (failed_before) row.fail("operations failed before the fault");
      if (ms > bound.count()) row.fail(fmt::format("the last operation ended {} ms after the fault", ms));
    } else {
      row.outcome = fmt::format("ok: {} ops, {:.1f} MiB", ok, static_cast<double>(bytes) / (1 << 20));
      row.in_flight = std::to_string(in_flight);
      row.end = fmt::format("{:.1f} s", static_cast<double>(ms) / 1000);
      if (errors != 0) row.fail(fmt::format("{} operations failed ({})", errors, f.at("code")));
      if (ok == 0) row.fail("nothing completed");
    }
  }
  row.fds = fmt::format("{}->{}", fds_before, fds_after);
  row.rss = fmt::format("{}->{}", rss_before / 1024, rss_after / 1024);
  if (released && fds_after > fds_before) row.fail("descriptors leaked: " + row.fds);
  if (released && (rss_after < 0 || rss_after > rss_before + kRssSlackKib))
    row.fail("resident memory grew: " + row.rss + " MiB");
  row.survivor = survivor ? *survivor : "-";
  if (!survivor || *survivor != "ok") row.fail("the healthy peer stopped working with the observer");
  if (coll) {
    // The healthy rank's own allreduce loop: failed in time after a failure, intact after a condition.
    const auto h = h_coll ? fields("code=" + *h_coll) : std::map<std::string, std::string>{};
    const std::string code = h_coll ? h_coll->substr(0, h_coll->find(' ')) : "none";
    row.survivor += ", rank 2 " + code;
    if (!h_coll)
      row.fail("the healthy rank's allreduce never ended");
    else if (num(h, "bad") != 0)
      row.fail("the healthy rank saw wrong sums");
    else if (fault.is_failure() && code == "ok")
      row.fail("the healthy rank's allreduce did not fail");
    else if (fault.is_failure() && h_coll_ms > bound.count() + 1000)
      row.fail(fmt::format("the healthy rank ended {} ms after the fault", h_coll_ms));
    else if (!fault.is_failure() && code != "ok")
      row.fail("the healthy rank's allreduce failed: " + code);
  }
  if (!row.pass) row.why += log;
  return row;
}

}  // namespace

int matrix_main(int argc, char** argv) {
  itest::Flags f(argc, argv);
  std::vector<std::string> workloads = f.has("workloads") ? split(f.str("workloads")) : kWorkloads;
  std::vector<Fault> faults;
  const auto wanted = split(f.str("faults"));
  for (const Fault& fault : all_faults()) {
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), fault.name) != wanted.end()) faults.push_back(fault);
  }
  for (const auto& w : workloads) {
    if (std::find(kWorkloads.begin(), kWorkloads.end(), w) == kWorkloads.end()) itest::die("unknown workload " + w);
  }
  if (faults.empty()) itest::die("no fault matches --faults=" + f.str("faults"));
  const auto peer_timeout = static_cast<uint32_t>(f.num("peer-timeout-ms", 1000));
  const auto margin = static_cast<uint32_t>(f.num("margin-ms", 1000));
  if (peer_timeout < 1000) itest::die("--peer-timeout-ms: REMORA_PEER_TIMEOUT_MS accepts 1000 to 3600000");

  itest::NetnsBridge net(3, /*nics=*/2);  // the second for the rail cells
  if (!net.ok()) {
    std::fprintf(stderr, "remora_faults: cannot create the network namespaces (needs root): %s\n", net.error().c_str());
    return 77;
  }
  Matrix matrix(net, peer_timeout, margin);
  matrix.window_ = f.num("window", matrix.window_);
  matrix.size_ = f.num("size", matrix.size_);
  // A round's puts must not overlap in the victim's region (each is read back).
  if (matrix.window_ == 0 || matrix.size_ < 8192 || matrix.size_ > kMaxMessage ||
      matrix.window_ * matrix.size_ > kRegionData / 2) {
    itest::die("--size must be within [8192, 4 MiB] and --window × --size at most 8 MiB");
  }
  if (std::string log; !matrix.wire_like(&log)) {
    std::fprintf(stderr, "remora_faults: cannot turn the victim link's offloads off:\n%s", log.c_str());
    return 1;
  }
  fmt::print("fault matrix: REMORA_PEER_TIMEOUT_MS={}, bound for failures = timeout + {} ms\n", peer_timeout, margin);
  // in flight: the observer's operations outstanding just before the fault; end after
  // fault: when the last of them ended (failures: against the bound); fds and RSS: the
  // observer's before the victim's endpoint existed and after it was let go.
  const std::string header =
      fmt::format("{:<24} {:<20} {:>6}  {:<30} {:<16} {:<8} {:<8} {:<24} {}", "cell", "fault did", "flying", "outcome",
                  "end after fault", "fds", "RSS MiB", "survivor", "verdict");
  fmt::print("{}\n{}\n", header, std::string(header.size(), '-'));
  std::fflush(stdout);
  int failed = 0, total = 0;
  const auto start = Clock::now();
  for (const std::string& w : workloads) {
    for (const Fault& fault : faults) {
      Row row = matrix.run(w, fault);
      ++total;
      if (!row.pass) ++failed;
      fmt::print("{:<24} {:<20} {:>6}  {:<30} {:<16} {:<8} {:<8} {:<24} {}\n", row.cell, row.evidence, row.in_flight,
                 row.outcome, row.end, row.fds, row.rss, row.survivor, row.pass ? "pass" : "FAIL");
      if (!row.pass) fmt::print("{}", row.why);
      std::fflush(stdout);
    }
  }
  fmt::print("{} of {} cells passed in {:.0f} s\n", total - failed, total,
             std::chrono::duration<double>(Clock::now() - start).count());
  return failed == 0 ? 0 : 1;
}

}  // namespace remora::faults
