#include "support/netns.h"

#include <unistd.h>

#include <chrono>

#include "support/process.h"

namespace remora::itest {
namespace {
constexpr std::chrono::milliseconds kCommandTimeout{20'000};
}

bool NetnsPair::run(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv, kCommandTimeout);
  if (r.ok()) return true;
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  error_ = "`" + cmd + "` " + Process::describe(r.status) + ": " + r.output;
  return false;
}

NetnsPair::NetnsPair() {
  const int pid = static_cast<int>(getpid());
  ns_[0] = "remora-t" + std::to_string(pid) + "-a";
  ns_[1] = "remora-t" + std::to_string(pid) + "-b";
  const std::string subnet = "10.199." + std::to_string(pid % 250 + 1) + ".";
  addr_[0] = subnet + "1";
  addr_[1] = subnet + "2";
  // Leftovers from an earlier process with the same pid (a crash) would make `add` fail.
  for (const auto& ns : ns_) (void)run_command({"ip", "netns", "del", ns}, kCommandTimeout);
  for (int i = 0; i < 2; ++i) {
    if (!run({"ip", "netns", "add", ns_[i]})) return;
    created_[i] = true;
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

NetnsPair::~NetnsPair() {
  for (int i = 0; i < 2; ++i) {
    if (created_[i]) (void)run_command({"ip", "netns", "del", ns_[i]}, kCommandTimeout);
  }
}

std::vector<std::string> NetnsPair::exec_prefix(const std::string& ns) const { return {"ip", "netns", "exec", ns}; }

}  // namespace remora::itest
