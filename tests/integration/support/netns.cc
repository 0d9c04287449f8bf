#include "support/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ranges>
#include <thread>

#include "support/process.h"

namespace remora::itest {
namespace {
constexpr std::chrono::milliseconds kCommandTimeout{20'000};
}

bool in_netns(const std::string& ns, const std::function<void()>& fn, std::string* error) {
  bool entered = false;
  std::thread t([&] {
    const int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
      *error = "entering " + ns + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return;
    }
    ::close(fd);
    entered = true;
    fn();
  });
  t.join();
  return entered;
}

NetnsGroup::~NetnsGroup() {
  // Namespaces holding a veth end go first, the switch (created first) last.
  for (const std::string& ns : std::views::reverse(created_)) {
    (void)run_command({"ip", "netns", "del", ns}, kCommandTimeout);
  }
}

bool NetnsGroup::run(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv, kCommandTimeout);
  if (r.ok()) return true;
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  error_ = "`" + cmd + "` " + Process::describe(r.status) + ": " + r.output;
  return false;
}

bool NetnsGroup::add_namespace(const std::string& ns) {
  // Leftovers from an earlier process with the same pid (a crash) would make `add` fail.
  (void)run_command({"ip", "netns", "del", ns}, kCommandTimeout);
  if (!run({"ip", "netns", "add", ns})) return false;
  created_.push_back(ns);
  return true;
}

std::string NetnsGroup::subnet_octet() { return std::to_string(static_cast<int>(getpid()) % 250 + 1); }

std::vector<std::string> NetnsGroup::exec_prefix(const std::string& ns) const { return {"ip", "netns", "exec", ns}; }

NetnsPair::NetnsPair() {
  const std::string base = "remora-t" + std::to_string(static_cast<int>(getpid()));
  ns_[0] = base + "-a";
  ns_[1] = base + "-b";
  const std::string subnet = "10.199." + subnet_octet() + ".";
  addr_[0] = subnet + "1";
  addr_[1] = subnet + "2";
  for (const auto& ns : ns_) {
    if (!add_namespace(ns)) return;
  }
  if (!run({"ip", "-n", ns_[0], "link", "add", "rmr0", "type", "veth", "peer", "name", "rmr1", "netns", ns_[1]})) return;
  const char* dev[2] = {"rmr0", "rmr1"};
  for (int i = 0; i < 2; ++i) {
    if (!run({"ip", "-n", ns_[i], "link", "set", "lo", "up"})) return;
    if (!run({"ip", "-n", ns_[i], "addr", "add", addr_[i] + "/24", "dev", dev[i]})) return;
    if (!run({"ip", "-n", ns_[i], "link", "set", dev[i], "up"})) return;
  }
  ok_ = true;
}

NetnsRails::NetnsRails(int n) {
  const std::string base = "remora-r" + std::to_string(static_cast<int>(getpid()));
  ns_[0] = base + "-a";
  ns_[1] = base + "-b";
  for (const auto& ns : ns_) {
    if (!add_namespace(ns)) return;
    if (!run({"ip", "-n", ns, "link", "set", "lo", "up"})) return;
  }
  for (int i = 0; i < n; ++i) {
    const std::string subnet = "10." + std::to_string(196 - i) + "." + subnet_octet() + ".";
    const std::string a = "rla" + std::to_string(i), b = "rlb" + std::to_string(i);
    addr_a_.push_back(subnet + "1");
    addr_b_.push_back(subnet + "2");
    if (!run({"ip", "-n", ns_[0], "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_[1]})) return;
    if (!run({"ip", "-n", ns_[0], "addr", "add", addr_a_.back() + "/24", "dev", a})) return;
    if (!run({"ip", "-n", ns_[1], "addr", "add", addr_b_.back() + "/24", "dev", b})) return;
    if (!run({"ip", "-n", ns_[0], "link", "set", a, "up"})) return;
    if (!run({"ip", "-n", ns_[1], "link", "set", b, "up"})) return;
  }
  ok_ = true;
}

bool NetnsRails::shape_b(int i, const std::string& rate) {
  return run({"ip", "netns", "exec", ns_[1], "tc", "qdisc", "add", "dev", "rlb" + std::to_string(i), "root", "tbf",
              "rate", rate, "burst", "64kb", "latency", "20ms"});
}

bool NetnsRails::shape_a(int i, const std::string& rate) {
  return run({"ip", "netns", "exec", ns_[0], "tc", "qdisc", "add", "dev", "rla" + std::to_string(i), "root", "tbf",
              "rate", rate, "burst", "64kb", "latency", "20ms"});
}

bool NetnsRails::add_unreachable_b() {
  // A veth pair with both ends in ns_b (no dummy device needed).
  return run({"ip", "-n", ns_[1], "link", "add", "rlb9", "type", "veth", "peer", "name", "rlx9"}) &&
         run({"ip", "-n", ns_[1], "addr", "add", "10.193." + subnet_octet() + ".2/24", "dev", "rlb9"}) &&
         run({"ip", "-n", ns_[1], "link", "set", "rlx9", "up"}) &&
         run({"ip", "-n", ns_[1], "link", "set", "rlb9", "up"});
}

NetnsBridge::NetnsBridge(int n, int nics) {
  const std::string base = "remora-b" + std::to_string(static_cast<int>(getpid()));
  switch_ = base + "-sw";
  const std::string& sw = switch_;
  const std::string subnets[2] = {"10.198." + subnet_octet() + ".", "10.197." + subnet_octet() + "."};
  if (!add_namespace(sw)) return;
  for (int nic = 0; nic < nics; ++nic) {
    // No STP: a port forwards as soon as it is up (no listening/learning delay).
    const std::string bridge = nic == 0 ? "rmrbr" : "rmrbr1";
    if (!run({"ip", "-n", sw, "link", "add", bridge, "type", "bridge", "stp_state", "0"})) return;
    if (!run({"ip", "-n", sw, "link", "set", bridge, "up"})) return;
  }
  for (int i = 0; i < n; ++i) {
    ns_.push_back(base + "-" + std::to_string(i));
    const std::string& ns = ns_.back();
    if (!add_namespace(ns)) return;
    if (!run({"ip", "-n", ns, "link", "set", "lo", "up"})) return;
    for (int nic = 0; nic < nics; ++nic) {
      const std::string dev = "rmr" + std::to_string(nic);
      const std::string port = (nic == 0 ? "rmrp" : "rmrq") + std::to_string(i);
      const std::string address = subnets[nic] + std::to_string(i + 1);
      (nic == 0 ? addr_ : addr2_).push_back(address);
      if (!run({"ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", port, "netns", sw})) return;
      if (!run({"ip", "-n", sw, "link", "set", port, "master", nic == 0 ? "rmrbr" : "rmrbr1"})) return;
      if (!run({"ip", "-n", sw, "link", "set", port, "up"})) return;
      if (!run({"ip", "-n", ns, "addr", "add", address + "/24", "dev", dev})) return;
      if (!run({"ip", "-n", ns, "link", "set", dev, "up"})) return;
    }
  }
  ok_ = true;
}

}  // namespace remora::itest
