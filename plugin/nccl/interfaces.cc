// plugin/nccl/interfaces.cc — interface selection and link facts for the NCCL plugin
// (see interfaces.h).
#include "interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>

namespace remora::nccl_plugin {

namespace {

constexpr size_t kMaxDevices = 16;

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return std::string(s);
}

void read_link_facts(NetDevice& dev) {
  std::ifstream speed("/sys/class/net/" + dev.ifname + "/speed");
  long long mbps = -1;
  if (speed && (speed >> mbps) && mbps > 0 && mbps < INT_MAX) {
    dev.speed_mbps = static_cast<int>(mbps);
    dev.speed_known = true;
  } else {
    dev.speed_mbps = 10000;  // NCCL's socket transport assumes 10 Gb/s too when the link does not say
    dev.speed_known = false;
  }
  std::string link = "/sys/class/net/" + dev.ifname + "/device";
  char resolved[PATH_MAX];
  if (realpath(link.c_str(), resolved) != nullptr && std::string_view(resolved).find("/pci") != std::string_view::npos) {
    dev.pci_path = resolved;
  }
}

}  // namespace

IfFilter IfFilter::parse(std::string_view spec) {
  IfFilter f;
  if (!spec.empty() && spec.front() == '^') {
    f.exclude = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    f.exact = true;
    spec.remove_prefix(1);
  }
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string name = trim(spec.substr(0, comma));
    if (!name.empty()) f.names.push_back(std::move(name));
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return f;
}

bool IfFilter::matches(std::string_view ifname) const {
  bool listed = false;
  for (const std::string& n : names) {
    if (exact ? ifname == n : ifname.starts_with(n)) {
      listed = true;
      break;
    }
  }
  // An empty include list selects nothing; an empty exclude list excludes nothing.
  return exclude ? !listed : listed;
}

DeviceChoice choose_devices(std::string_view spec, std::string reason) {
  DeviceChoice choice;
  choice.reason = std::move(reason);
  bool is_default = spec.empty();
  IfFilter filter = IfFilter::parse(is_default ? std::string_view("^docker,lo") : spec);

  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return choice;
  auto collect = [&](int family, const IfFilter& f) {
    for (ifaddrs* ifa = list; ifa != nullptr && choice.devices.size() < kMaxDevices; ifa = ifa->ifa_next) {
      if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != family) continue;
      if ((ifa->ifa_flags & IFF_UP) == 0) continue;
      std::string_view name(ifa->ifa_name);
      if (!f.matches(name)) continue;
      bool seen = false;
      for (const NetDevice& d : choice.devices) seen = seen || d.ifname == name;
      if (seen) continue;  // one device per interface: its first address
      char host[INET6_ADDRSTRLEN] = {};
      NetDevice dev;
      dev.ifname = std::string(name);
      if (family == AF_INET) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);  // NOLINT: getifaddrs' type
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
        dev.address = host;
      } else {
        const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);  // NOLINT: getifaddrs' type
        if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) continue;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
        dev.address = std::string("[") + host + "]";
      }
      read_link_facts(dev);
      choice.devices.push_back(std::move(dev));
    }
  };
  collect(AF_INET, filter);
  collect(AF_INET6, filter);
  if (choice.devices.empty() && is_default) {
    IfFilter lo = IfFilter::parse("lo");
    collect(AF_INET, lo);
    collect(AF_INET6, lo);
    choice.reason += "; nothing but loopback is up, so lo";
  }
  freeifaddrs(list);
  return choice;
}

DeviceChoice rails_as_one_device(const std::vector<RailDevice>& rails, std::string reason) {
  DeviceChoice choice;
  choice.reason = std::move(reason);
  if (rails.empty()) return choice;
  NetDevice one;
  one.speed_mbps = 0;
  one.speed_known = true;
  for (const RailDevice& r : rails) {
    NetDevice d;
    d.ifname = r.ifname;
    read_link_facts(d);
    one.ifname += (one.ifname.empty() ? "" : "+") + r.ifname;
    one.speed_mbps = static_cast<int>(std::min<long long>(INT_MAX, 0LL + one.speed_mbps + d.speed_mbps));
    one.speed_known = one.speed_known && d.speed_known;
    if (one.pci_path.empty()) one.pci_path = d.pci_path;
  }
  const bool v6 = rails.front().address.find(':') != std::string::npos;
  one.address = v6 ? "[" + rails.front().address + "]" : rails.front().address;
  one.listen_address = v6 ? "[::]" : "0.0.0.0";
  choice.devices.push_back(std::move(one));
  return choice;
}

DeviceChoice choose_devices() {
  if (const char* v = std::getenv("REMORA_NCCL_IFNAME"); v != nullptr && *v != '\0') {
    return choose_devices(v, std::string("REMORA_NCCL_IFNAME=") + v);
  }
  if (const char* v = std::getenv("NCCL_SOCKET_IFNAME"); v != nullptr && *v != '\0') {
    return choose_devices(v, std::string("NCCL_SOCKET_IFNAME=") + v);
  }
  return choose_devices("", "default (neither REMORA_NCCL_IFNAME nor NCCL_SOCKET_IFNAME set): every interface but lo* and docker*");
}

}  // namespace remora::nccl_plugin
