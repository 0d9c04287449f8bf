// tools/doctor.cc — `remora doctor`: the capability report, human-readable or as JSON.
#include "doctor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/cpus.h"
#include "net/rails.h"
#include "net/same_host.h"
#include "net/shm_ring.h"
#include "remora/config.h"
#include "remora/cuda.h"
#include "remora/version.h"
#include "zerocopy/rxq_client.h"

namespace remora::tools {
namespace {

std::string errno_name(int err) {
  if (err == 0) return "";
  const char* name = strerrorname_np(err);
  return name != nullptr ? name : fmt::format("errno {}", err);
}

nlohmann::json answer_json(const ProbeAnswer& a) {
  nlohmann::json j = {{"state", std::string(to_string(a.state))},
                      {"detail", a.detail},
                      {"reason", a.reason},
                      {"fix", a.fix},
                      {"errno", a.error},
                      {"errno_name", nullptr},
                      {"kernel_message", a.kernel_message}};
  if (a.error != 0) j["errno_name"] = errno_name(a.error);
  return j;
}

/// Whether endpoints here would have their data streams steered for devmem receive:
/// REMORA_RXQ_SOCKET set, and `remora rxq serve` accepting on it. Only a connection is
/// made (a request would install a flow-steering rule), and closed at once.
ProbeAnswer rxq_answer() {
  ProbeAnswer a;
  const char* path = std::getenv("REMORA_RXQ_SOCKET");
  if (path == nullptr || *path == '\0') {
    a.state = ProbeAnswer::State::kNo;
    a.reason = "REMORA_RXQ_SOCKET is unset: endpoints ask no `remora rxq serve` to steer their data streams, so "
               "they receive device memory by staging";
    a.fix = "run `remora rxq serve --ifname IF --socket PATH` (CAP_NET_ADMIN) and give the application "
            "REMORA_RXQ_SOCKET=PATH";
    return a;
  }
  auto client = zerocopy::rxq::Client::connect(path);
  if (!client) {
    a.state = ProbeAnswer::State::kNo;
    a.reason = fmt::format("REMORA_RXQ_SOCKET={}: {}", path, client.status().message());
    a.fix = fmt::format("start `remora rxq serve --ifname IF --socket {}`", path);
    return a;
  }
  a.state = ProbeAnswer::State::kYes;
  a.detail = fmt::format("`remora rxq serve` accepts on {} (REMORA_RXQ_SOCKET): endpoints ask it to steer their data "
                         "streams to devmem RX queues",
                         path);
  a.reason = "whether its interface can do devmem receive is that interface's devmem RX answer; rxq in stand-in "
             "mode steers nothing, and endpoints refuse it";
  return a;
}

/// What happens to memory a same-host peer pulls again and again (REMORA_PULL_HUGEPAGES,
/// docs/protocol.md): a 2 MiB frame of fresh memory collapsed for real, as a sender does.
std::string pull_huge_pages_note() {
  const char* env = std::getenv("REMORA_PULL_HUGEPAGES");
  if (env != nullptr && std::string_view(env) == "off") return "REMORA_PULL_HUGEPAGES=off: it stays on its pages";
  constexpr size_t kFrame = net::HugePagePromoter::kFrameBytes;
  void* map = ::mmap(nullptr, 2 * kFrame, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return std::string("not tried: mmap: ") + std::strerror(errno);
  auto* frame = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(map) + kFrame - 1) & ~uintptr_t{kFrame - 1});
  std::memset(frame, 1, kFrame);
  net::HugePagePromoter promoter;
  for (int pass = 0; pass < net::HugePagePromoter::kPasses; ++pass) {
    promoter.announced(reinterpret_cast<uintptr_t>(frame), kFrame);
  }
  const int err = errno;
  ::munmap(map, 2 * kFrame);
  if (promoter.promoted() == 1) return "it is collapsed into 2 MiB huge pages (MADV_COLLAPSE worked here)";
  return fmt::format("it stays on 4 KiB pages: MADV_COLLAPSE failed here ({})", std::strerror(err));
}

/// What two sibling processes of this user could do with each other (tried for real by
/// same_host_probe): read memory (same-host pulls), and take and map a sealed memfd (the
/// shared-memory channel's rings and direct mappings). Each "" where it worked.
struct SameHostProbe {
  std::string pulls = "fork failed";
  std::string shared = "fork failed";
  std::string yama;
  std::string scope;
  bool off = false;  // REMORA_SAME_HOST=off: nothing was tried
};

/// The word the probe's memfd holds, which the sibling's mapping must show.
constexpr uint64_t kProbeWord = 0x52454d4f52414d50;

/// Takes the sibling's memfd `fd` of process `pid` as the channel and mappings do
/// (pidfd_getfd), checks its seals and maps it; "" when the mapping shows kProbeWord.
std::string shared_memory_refusal(pid_t pid, int fd) {
  auto taken = net::take_peer_fd(pid, fd);
  if (!taken) return "pidfd_getfd: " + taken.status().message();
  auto size = net::sealed_memfd_size(taken->get(), "the probe's memfd");
  if (!size) return size.status().message();
  void* map = ::mmap(nullptr, *size, PROT_READ, MAP_SHARED, taken->get(), 0);
  if (map == MAP_FAILED) return std::string("mmap: ") + std::strerror(errno);
  uint64_t word = 0;
  std::memcpy(&word, map, sizeof word);
  ::munmap(map, *size);
  return word == kProbeWord ? "" : "the mapping did not show the sibling's bytes";
}

/// Tried between two children of this process, siblings as a launcher's ranks are: the
/// second reads the first's probe word with process_vm_readv exactly as an endpoint
/// does, then takes a sealed memfd the first holds and maps it, as the shared-memory
/// channel does. Yama's ptrace_scope says why not.
SameHostProbe same_host_probe() {
  SameHostProbe p;
  if (std::ifstream in("/proc/sys/kernel/yama/ptrace_scope"); !(in >> p.scope)) p.scope.clear();
  p.yama = p.scope.empty() ? "no Yama LSM" : "Yama ptrace_scope " + p.scope;
  const char* env = std::getenv("REMORA_SAME_HOST");
  if (env != nullptr && std::string_view(env) == "off") {
    p.off = true;
    return p;
  }
  const net::HostIdentity me = net::this_host();  // the probe word is set before the fork
  // The memfd the first child holds (inherited): sealed, one page, kProbeWord first.
  int memfd = ::memfd_create("remora-doctor-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd >= 0 && (::pwrite(memfd, &kProbeWord, sizeof kProbeWord, 0) != sizeof kProbeWord ||
                     ::ftruncate(memfd, 4096) != 0 || ::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)) {
    ::close(memfd);
    memfd = -1;
  }
  const std::string no_memfd = std::string("memfd_create or its seals: ") + std::strerror(errno);
  int holder_pipe[2], reader_pipe[2];
  if (::pipe(holder_pipe) != 0 || ::pipe(reader_pipe) != 0) {
    p.pulls = p.shared = std::string("pipe: ") + std::strerror(errno);
    if (memfd >= 0) ::close(memfd);
    return p;
  }
  const pid_t holder = ::fork();
  if (holder == 0) {  // holds its probe word and memfd until the doctor closes the pipe
    ::close(holder_pipe[1]);
    ::close(reader_pipe[0]);
    ::close(reader_pipe[1]);
    char c;
    while (::read(holder_pipe[0], &c, 1) > 0) {
    }
    ::_exit(0);
  }
  ::close(holder_pipe[0]);
  std::string answer;  // the reading child's: pulls' refusal, a newline, shared memory's
  bool answered = false;
  if (holder > 0) {
    net::HostIdentity peer = me;
    peer.pid = static_cast<uint32_t>(holder);
    const pid_t reader = ::fork();
    if (reader == 0) {
      ::close(holder_pipe[1]);
      ::close(reader_pipe[0]);
      std::string out = net::same_host_refusal(peer) + "\n";
      if (memfd >= 0) {
        ::close(memfd);  // its own copy: the memfd must come from the sibling
        out += shared_memory_refusal(holder, memfd);
      } else {
        out += no_memfd;
      }
      (void)!::write(reader_pipe[1], out.data(), out.size());
      ::_exit(0);
    }
    ::close(reader_pipe[1]);
    if (reader > 0) {
      char buf[512];
      ssize_t n;
      while ((n = ::read(reader_pipe[0], buf, sizeof buf)) > 0) answer.append(buf, static_cast<size_t>(n));
      int status = 0;
      (void)::waitpid(reader, &status, 0);
      answered = WIFEXITED(status) && answer.find('\n') != std::string::npos;
      if (!answered) p.pulls = p.shared = "the reading child did not finish";
    }
    ::close(reader_pipe[0]);
  } else {
    ::close(reader_pipe[0]);
    ::close(reader_pipe[1]);
  }
  ::close(holder_pipe[1]);
  if (memfd >= 0) ::close(memfd);
  if (holder > 0) (void)::waitpid(holder, nullptr, 0);
  if (answered) {
    const size_t nl = answer.find('\n');
    p.pulls = answer.substr(0, nl);
    p.shared = answer.substr(nl + 1);
  }
  return p;
}

/// The fix where Yama keeps processes of one user from each other, if it does.
std::string yama_fix(const SameHostProbe& p) {
  if (p.scope.empty() || p.scope == "0") return "";
  return "sysctl kernel.yama.ptrace_scope=0 lets processes of one user read each other, as a debugger could";
}

/// What one of the same-host answers says: after "REMORA_SAME_HOST=off: ", where it
/// worked (with a note), and what a refusal means.
struct SameHostWording {
  std::string_view off;
  std::string yes;
  std::string_view note;
  std::string_view no;
};

/// A same-host answer from the probe's `refusal` ("" where it worked).
ProbeAnswer same_host_kind(const SameHostProbe& p, const std::string& refusal, const SameHostWording& w) {
  ProbeAnswer a;
  if (p.off) {
    a.state = ProbeAnswer::State::kNo;
    a.reason = fmt::format("REMORA_SAME_HOST=off: {}", w.off);
    a.fix = "unset REMORA_SAME_HOST (or set it to auto)";
  } else if (refusal.empty()) {
    a.state = ProbeAnswer::State::kYes;
    a.detail = w.yes;
    a.reason = w.note;
  } else {
    a.state = ProbeAnswer::State::kNo;
    a.reason = fmt::format("{} ({}): {}", refusal, p.yama, w.no);
    a.fix = yama_fix(p);
  }
  return a;
}

/// Whether two processes of this user on this host can read each other's chunks
/// (same-host pulls, docs/protocol.md).
ProbeAnswer same_host_answer(const SameHostProbe& p) {
  return same_host_kind(
      p, p.pulls,
      {.off = "every byte between processes of this host goes over loopback TCP",
       .yes = p.off || !p.pulls.empty()
                  ? std::string()
                  : fmt::format("a process of this user read a sibling's memory with process_vm_readv ({}): endpoints "
                                "between processes of this host read each other's chunks straight out of memory "
                                "(REMORA_SAME_HOST=auto); memory read again and again: {}",
                                p.yama, pull_huge_pages_note()),
       .note = "other users, other network or pid namespaces (containers) and non-dumpable processes stay on TCP",
       .no = "endpoints between processes of this host use loopback TCP"});
}

/// Whether two processes of this user on this host can map each other's shared memory
/// (the shared-memory channel and direct mappings, docs/protocol.md).
ProbeAnswer shared_memory_answer(const SameHostProbe& p) {
  return same_host_kind(
      p, p.shared,
      {.off = "no shared-memory channel and no direct mappings",
       .yes = fmt::format(
           "a process of this user took a sibling's sealed memfd with pidfd_getfd and mapped it ({}): between "
           "processes of this host the control stream runs in shared-memory rings, and puts and gets of at most "
           "16 KiB and atomics into pool buffers go through a mapping (direct mappings)",
           p.yama),
       .note = "not with REMORA_ENCRYPT (sealed endpoints stay on TCP), nor where same-host pulls are refused",
       .no = "the control stream between processes of this host stays on loopback TCP"});
}

/// The rails an endpoint of this process would use (REMORA_RAILS, docs/rails.md): one
/// answer per interface of this network namespace, yes with its address for a rail, no
/// with the reason for the others; `error` when the setting itself is refused (a
/// context would not be created with it). Unset: each interface that is up, not
/// loopback and addressed is a candidate, answered no with the way to use it.
struct RailsView {
  std::optional<std::string> setting;
  std::string error;
  std::vector<std::pair<std::string, ProbeAnswer>> interfaces;
  ProbeAnswer progress_threads;  // who moves the data streams' bytes (progress_threads_answer)
};

/// REMORA_PROGRESS_THREADS as a context of this process would take it with `rails`
/// rails (docs/rails.md): yes with the threads where workers run, no with the way to have
/// them, or no with the configuration's refusal.
ProbeAnswer progress_threads_answer(size_t rails) {
  ProbeAnswer a;
  a.state = ProbeAnswer::State::kNo;
  auto config = Config::from_env();
  if (!config) {
    a.reason = "a context would refuse this environment: " + config.status().message();
    return a;
  }
  const int cpus = core::usable_cpus();
  const bool automatic = config->progress_threads == 0;
  const uint32_t threads = automatic ? core::progress_threads_for(rails, cpus) : config->progress_threads;
  const std::string setting =
      automatic ? fmt::format("REMORA_PROGRESS_THREADS=0 (one per rail, at most half the CPUs: {} {})", threads,
                              rails == 0 ? std::string("without REMORA_RAILS")
                                         : fmt::format("with {} rail{}", rails, rails == 1 ? "" : "s"))
                : fmt::format("REMORA_PROGRESS_THREADS={}", threads);
  if (threads <= 1) {
    a.reason = fmt::format(
        "{}: each context's progress thread alone moves every data stream's bytes, at one core's rate ({} CPUs "
        "usable here)",
        setting, cpus);
    if (cpus > 2) {
      a.fix =
          "REMORA_PROGRESS_THREADS=N gives each context N-1 workers that send and receive chunks of host memory "
          "(docs/rails.md; they pay only where cores are free, and were measured only on a 2-vCPU VM, where they "
          "cost bandwidth)";
    }
    return a;
  }
  a.state = ProbeAnswer::State::kYes;
  a.detail = fmt::format(
      "{}: each context's progress thread and {} worker{} send and receive data-stream chunks of host memory ({} "
      "CPUs usable here)",
      setting, threads - 1, threads == 2 ? "" : "s", cpus);
  if (threads > static_cast<uint32_t>(cpus)) a.reason = "more threads than usable CPUs: they take turns on the cores";
  return a;
}

/// Fills `v`'s setting, error and interfaces; returns how many rails a context would take.
size_t list_rails(RailsView& v) {
  if (const char* text = std::getenv("REMORA_RAILS"); text != nullptr) v.setting = text;
  auto interfaces = net::local_interfaces();
  if (!interfaces) {
    v.error = interfaces.status().message();
    return 0;
  }
  // Unset: what `^` with nothing excluded would take (every interface but loopback).
  auto spec = v.setting
                  ? net::parse_rail_spec(*v.setting)
                  : Result<net::RailSpec>(net::RailSpec{.exclude = true, .exact = false, .names = {}, .addresses = {}});
  if (!spec) {
    v.error = spec.status().message();
    return 0;
  }
  std::vector<net::Rail> rails;
  if (v.setting) {
    auto matched = net::match_rails(*spec, *interfaces, *v.setting);
    if (!matched) v.error = matched.status().message();
    if (matched) rails = std::move(matched).value();
  }
  std::vector<std::string> names;
  for (const net::InterfaceAddress& i : *interfaces) {
    if (std::find(names.begin(), names.end(), i.name) == names.end()) names.push_back(i.name);
  }
  for (const std::string& name : names) {
    ProbeAnswer a;
    const std::string why = net::why_not_a_rail(*spec, *interfaces, name);
    auto rail = std::find_if(rails.begin(), rails.end(), [&](const net::Rail& r) { return r.interface == name; });
    if (v.setting && rail != rails.end()) {
      a.state = ProbeAnswer::State::kYes;
      a.detail = fmt::format("{}/{}", net::address_text(rail->address), rail->prefix_length);
    } else if (!v.setting && why.empty()) {
      a.state = ProbeAnswer::State::kNo;
      a.reason = "a candidate: REMORA_RAILS is unset, so each endpoint takes one path, the route's";
      a.fix = "REMORA_RAILS=" + name + ",... (docs/rails.md)";
    } else {
      a.state = ProbeAnswer::State::kNo;
      a.reason = why.empty() ? v.error : why;
    }
    v.interfaces.emplace_back(name, std::move(a));
  }
  return rails.size();
}

RailsView rails_view() {
  RailsView v;
  v.progress_threads = progress_threads_answer(list_rails(v));
  return v;
}

void print_rails(const RailsView& v) {
  fmt::print("\nRails ({})\n", v.setting ? "REMORA_RAILS=" + *v.setting : "REMORA_RAILS unset: one path per endpoint");
  if (!v.error.empty()) fmt::print("  refused: {}\n", v.error);
  for (const auto& [name, answer] : v.interfaces) print_answer(name, answer);
  print_answer("progress threads", v.progress_threads);
}

nlohmann::json rails_json(const RailsView& v) {
  nlohmann::json interfaces = nlohmann::json::object();
  for (const auto& [name, answer] : v.interfaces) interfaces[name] = answer_json(answer);
  return {{"setting", v.setting ? nlohmann::json(*v.setting) : nlohmann::json()},
          {"error", v.error},
          {"interfaces", std::move(interfaces)},
          {"progress_threads", answer_json(v.progress_threads)}};
}

nlohmann::json optional_json(const std::optional<uint32_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

nlohmann::json interface_json(const InterfaceCapabilities& c) {
  const QueueCounts& q = c.queue_counts;
  nlohmann::json queues = answer_json(c.queues);
  queues["counts"] = {{"rx", optional_json(q.rx)},
                      {"tx", optional_json(q.tx)},
                      {"combined", optional_json(q.combined)},
                      {"other", optional_json(q.other)},
                      {"rx_max", optional_json(q.rx_max)},
                      {"tx_max", optional_json(q.tx_max)},
                      {"combined_max", optional_json(q.combined_max)},
                      {"other_max", optional_json(q.other_max)},
                      {"rx_queue_ids", q.rx_queue_ids}};
  return {{"name", c.name},
          {"ifindex", c.ifindex},
          {"driver", answer_json(c.driver)},
          {"header_split", answer_json(c.header_split)},
          {"header_split_settable", answer_json(c.header_split_settable)},
          {"ntuple", answer_json(c.ntuple)},
          {"queues", std::move(queues)},
          {"devmem_rx", answer_json(c.devmem_rx)},
          {"devmem_tx", answer_json(c.devmem_tx)},
          {"zcrx", answer_json(c.zcrx)},
          {"device_path", c.device_path()}};
}

int exit_code(const CapabilityReport& r) { return r.device_path_available ? kDoctorDevicePath : kDoctorNoDevicePath; }

// ---- human-readable ----

/// The CUDA driver, as the CUDA memory domain sees it (remora/cuda.h). Device memory of a
/// GPU moves through the staging path wherever the driver loads; a "no" says why not.
void print_cuda(const remora::CudaProbe& p) {
  if (!p.driver_loaded) {
    fmt::print("  {:<24} no: {}\n", "CUDA driver", p.reason);
  } else {
    fmt::print("  {:<24} yes: {} (driver {}.{}), {} device(s)\n", "CUDA driver", p.driver_path,
               p.driver_version / 1000, (p.driver_version % 1000) / 10, p.devices.size());
    for (const auto& d : p.devices) {
      fmt::print("    GPU {}: {} ({}), {} MiB, sm_{}{}, dmabuf export {}{}\n", d.ordinal, d.name, d.pci_bus_id,
                 d.total_memory_bytes >> 20, d.compute_capability_major, d.compute_capability_minor,
                 d.dmabuf_supported ? "yes" : "no", d.error.empty() ? "" : " (" + d.error + ")");
    }
  }
  fmt::print("  {:<24} {}\n", "CUDA unpack kernel", p.unpack_kernel_built ? "built into this library" : "not built (no nvcc at build time)");
}

nlohmann::json cuda_json(const remora::CudaProbe& p) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : p.devices) {
    devices.push_back({{"ordinal", d.ordinal},
                       {"name", d.name},
                       {"pci_bus_id", d.pci_bus_id},
                       {"total_memory_bytes", d.total_memory_bytes},
                       {"compute_capability", fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor)},
                       {"dmabuf_supported", d.dmabuf_supported},
                       {"error", d.error}});
  }
  // The shape of every other answer (state, detail, reason, fix, errno ...), plus the
  // driver's and its devices' particulars.
  ProbeAnswer a;
  a.state = p.driver_loaded ? ProbeAnswer::State::kYes : ProbeAnswer::State::kNo;
  if (p.driver_loaded) {
    a.detail = fmt::format("{} (driver {}.{}), {} device(s)", p.driver_path, p.driver_version / 1000,
                           (p.driver_version % 1000) / 10, p.devices.size());
  } else {
    a.reason = p.reason;
    a.fix = "install the NVIDIA driver (libcuda.so.1), or point REMORA_CUDA_DRIVER at it";
  }
  nlohmann::json j = answer_json(a);
  j["driver_loaded"] = p.driver_loaded;
  j["driver_path"] = p.driver_path;
  j["driver_version"] = p.driver_version;
  j["devices"] = std::move(devices);
  j["unpack_kernel_built"] = p.unpack_kernel_built;
  return j;
}

void print_report(const CapabilityReport& r) {
  fmt::print("remora doctor {}: zero-copy paths on this host (Linux {})\n\n", version_string(), r.host.kernel);
  fmt::print("Note: {}\n\n", r.hardware_note);
  fmt::print("Host\n");
  print_answer("dmabuf exporter", r.host.dmabuf_source);
  print_answer("netdev netlink", r.host.netdev_family);
  print_answer("ethtool netlink", r.host.ethtool_family);
  print_answer("io_uring", r.host.io_uring);
  print_answer("MSG_ZEROCOPY", r.host.msg_zerocopy);
  print_answer("zcrx copy mode", r.host.zcrx_copy);
  print_answer("kernel TLS (not used)", r.host.kernel_tls);
  print_answer("encryption (libsodium)", r.host.sealing);
  const SameHostProbe same_host = same_host_probe();
  print_answer("same-host pulls", same_host_answer(same_host));
  print_answer("same-host shared memory", shared_memory_answer(same_host));
  print_answer("rxq (devmem receive)", rxq_answer());
  print_cuda(remora::probe_cuda());
  print_rails(rails_view());
  for (const InterfaceCapabilities& c : r.interfaces) {
    fmt::print("\nInterface {} (index {})\n", c.name, c.ifindex);
    print_answer("driver", c.driver);
    print_answer("header split", c.header_split);
    print_answer("header split settable", c.header_split_settable);
    print_answer("ntuple flow steering", c.ntuple);
    print_answer("queues", c.queues);
    print_answer("devmem RX (bind-rx)", c.devmem_rx);
    print_answer("devmem TX (bind-tx)", c.devmem_tx);
    print_answer("io_uring zcrx", c.zcrx);
  }
  fmt::print("\n");
  if (r.device_path_available) {
    for (const InterfaceCapabilities& c : r.interfaces) {
      if (c.device_path()) fmt::print("Device zero-copy path: yes, on {}\n", c.name);
    }
  } else {
    fmt::print("Device zero-copy path: none on any interface (the reasons are above).\n");
  }
  fmt::print("Host memory: MSG_ZEROCOPY {}, io_uring {}.\n", to_string(r.host.msg_zerocopy.state),
             to_string(r.host.io_uring.state));
  fmt::print("Exit code {} ({}).\n", exit_code(r), r.device_path_available ? "device path" : "no device path");
}

}  // namespace

constexpr int kLabel = 24;

void print_answer(std::string_view label, const ProbeAnswer& a) {
  const std::string_view state = to_string(a.state);
  std::string first = a.state == ProbeAnswer::State::kYes ? a.detail : a.reason;
  fmt::print("  {:<{}} {:<7} {}\n", label, kLabel, state, first);
  const std::string pad(2 + kLabel + 1 + 7 + 1, ' ');
  if (a.state != ProbeAnswer::State::kYes && !a.detail.empty()) fmt::print("{}found: {}\n", pad, a.detail);
  if (a.state == ProbeAnswer::State::kYes && !a.reason.empty()) fmt::print("{}note: {}\n", pad, a.reason);
  if (a.error != 0) {
    fmt::print("{}kernel: {} ({}){}\n", pad, errno_name(a.error), std::strerror(a.error),
               a.kernel_message.empty() ? "" : fmt::format(": \"{}\"", a.kernel_message));
  }
  if (!a.fix.empty()) fmt::print("{}fix: {}\n", pad, a.fix);
}

nlohmann::json doctor_json(const CapabilityReport& r) {
  nlohmann::json interfaces = nlohmann::json::array();
  for (const auto& c : r.interfaces) interfaces.push_back(interface_json(c));
  const SameHostProbe same_host = same_host_probe();
  return {{"remora_version", version_string()},
          {"kernel", r.host.kernel},
          {"hardware_note", r.hardware_note},
          {"host",
           {{"dmabuf_source", answer_json(r.host.dmabuf_source)},
            {"netdev_family", answer_json(r.host.netdev_family)},
            {"ethtool_family", answer_json(r.host.ethtool_family)},
            {"io_uring", answer_json(r.host.io_uring)},
            {"msg_zerocopy", answer_json(r.host.msg_zerocopy)},
            {"zcrx_copy", answer_json(r.host.zcrx_copy)},
            {"kernel_tls", answer_json(r.host.kernel_tls)},
            {"sealing", answer_json(r.host.sealing)},
            {"same_host_pulls", answer_json(same_host_answer(same_host))},
            {"same_host_shared_memory", answer_json(shared_memory_answer(same_host))},
            {"rxq", answer_json(rxq_answer())},
            {"cuda", cuda_json(remora::probe_cuda())}}},
          {"interfaces", std::move(interfaces)},
          {"rails", rails_json(rails_view())},
          {"device_path_available", r.device_path_available},
          {"exit_code", exit_code(r)}};
}

/// CUDA device 0's memory exported as a dmabuf for the bind attempts, where the driver
/// and device can (a real GPU's dmabuf is what devmem TCP binds); else `note` says why
/// not. Freed when the doctor is done.
struct GpuDmabuf {
  void* memory = nullptr;
  int fd = -1;
  std::string note;
  GpuDmabuf() = default;
  GpuDmabuf(const GpuDmabuf&) = delete;
  GpuDmabuf& operator=(const GpuDmabuf&) = delete;
  ~GpuDmabuf() {
    if (fd >= 0) ::close(fd);
    if (memory != nullptr) (void)cuda_free(memory);
  }
};

void export_gpu_dmabuf(const CudaProbe& probe, GpuDmabuf& out) {
  constexpr size_t kBytes = size_t{2} << 20;  // cuMemAlloc's alignment: whole pages
  if (!probe.driver_loaded) {
    out.note = "no GPU export was tried (no CUDA driver)";
    return;
  }
  if (probe.devices.empty() || !probe.devices.front().dmabuf_supported) {
    out.note = probe.devices.empty() ? "no GPU export was tried (no CUDA device)"
                                     : "CUDA device 0 cannot export dmabufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 0)";
    return;
  }
  auto domain = cuda_domain();
  auto memory = domain ? cuda_allocate(kBytes, 0) : Result<void*>(domain.status());
  if (!memory) {
    out.note = "CUDA device 0's export not tried: " + memory.status().message();
    return;
  }
  out.memory = *memory;
  auto exported = (*domain)->export_dmabuf(out.memory, kBytes);
  if (!exported) {
    out.note = "CUDA device 0's dmabuf export failed: " + exported.status().message();
    return;
  }
  out.fd = exported->fd;
  out.note = fmt::format("CUDA device 0 ({}) memory, {} bytes, exported with cuMemGetHandleForAddressRange",
                         probe.devices.front().name, kBytes);
}

int run_doctor(const DoctorOptions& options) {
  GpuDmabuf gpu;
  if (!options.no_bind) export_gpu_dmabuf(probe_cuda(), gpu);
  const auto report = probe_capabilities({.interfaces = options.interfaces,
                                          .try_bind = !options.no_bind,
                                          .dmabuf_fd = gpu.fd,
                                          .dmabuf_note = gpu.note});
  if (!report) {
    fmt::print(stderr, "remora doctor: error: {}\n", report.status().to_string());
    return kDoctorProbeFailed;
  }
  if (options.json) {
    fmt::print("{}\n", doctor_json(*report).dump(2));
  } else {
    print_report(*report);
  }
  return exit_code(*report);
}

}  // namespace remora::tools
