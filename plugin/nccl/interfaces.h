// plugin/nccl/interfaces.h — which network interfaces the NCCL plugin offers as its
// devices: NCCL's NCCL_SOCKET_IFNAME convention (a comma-separated list of name
// prefixes; a leading '^' excludes them, a leading '=' asks for exact names), with
// REMORA_NCCL_IFNAME taking precedence, and each device's link facts from sysfs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace remora::nccl_plugin {

/// A parsed interface filter.
struct IfFilter {
  bool exclude = false;  ///< '^': every interface except those listed
  bool exact = false;    ///< '=': names must match exactly, not as prefixes
  std::vector<std::string> names;

  /// Parses "eth,ib", "^docker,lo", "=eth0", "^=docker0". Empty names are skipped.
  static IfFilter parse(std::string_view spec);
  bool matches(std::string_view ifname) const;
};

/// One device: an interface that is up and has an address, or the rails of the
/// plugin's context (REMORA_RAILS) as one.
struct NetDevice {
  std::string ifname;   ///< "eth0"; rails: "eth0+eth1"
  std::string address;  ///< numeric host, IPv6 in brackets: "10.0.0.1", "[fd00::1]" (rails: the first's)
  /// Where listen() binds, when not `address`: the rails' wildcard ("0.0.0.0", "[::]"),
  /// so that the listener takes, and advertises, every rail.
  std::string listen_address;
  std::string pci_path;  ///< realpath of /sys/class/net/<if>/device when it is a PCI device, else empty
  int speed_mbps = 0;    ///< /sys/class/net/<if>/speed
  bool speed_known = false;
};

/// The choice made, with the reason for the logs.
struct DeviceChoice {
  std::vector<NetDevice> devices;
  std::string reason;  ///< "REMORA_NCCL_IFNAME=^docker", "default: every interface but lo and docker*", ...
};

/// Lists the interfaces (getifaddrs) and keeps those the filter from the environment
/// (REMORA_NCCL_IFNAME, else NCCL_SOCKET_IFNAME, else NCCL's default: all but lo* and
/// docker*, and lo when nothing else is left) selects; IPv4 before IPv6, link-local
/// IPv6 skipped. At most 16 devices (NCCL's socket transport has the same limit).
DeviceChoice choose_devices();

/// The same choice from an explicit filter spec (tests); `spec` empty = the default.
DeviceChoice choose_devices(std::string_view spec, std::string reason);

/// One rail of the plugin's context: its interface and address ("10.0.1.5", "fd00::5").
struct RailDevice {
  std::string ifname;
  std::string address;
};

/// The context's rails (REMORA_RAILS, in its order) as ONE device: every connection of
/// the plugin spreads its data streams over all of them anyway, so NCCL is offered the
/// sum of their speeds rather than several devices that would each use every rail.
DeviceChoice rails_as_one_device(const std::vector<RailDevice>& rails, std::string reason);

}  // namespace remora::nccl_plugin
