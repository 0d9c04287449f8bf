// tools/doctor.cc — `remora doctor`: the capability report, human-readable or as JSON.
#include "doctor.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "remora/version.h"

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

constexpr int kLabel = 24;

/// One answer: "  label  yes  detail", then the reason, the kernel's words and the fix
/// on their own indented lines.
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

void print_report(const CapabilityReport& r) {
  fmt::print("remora doctor {}: zero-copy paths on this host (Linux {})\n\n", version_string(), r.host.kernel);
  fmt::print("Note: {}\n\n", r.hardware_note);
  fmt::print("Host\n");
  print_answer("dmabuf exporter", r.host.dmabuf_source);
  print_answer("netdev netlink", r.host.netdev_family);
  print_answer("ethtool netlink", r.host.ethtool_family);
  print_answer("io_uring", r.host.io_uring);
  print_answer("MSG_ZEROCOPY", r.host.msg_zerocopy);
  // ---- CUDA (driver, devices, dmabuf export): to be filled in by the CUDA memory domain.
  fmt::print("  CUDA: {}\n", r.host.cuda.reason);
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

nlohmann::json doctor_json(const CapabilityReport& r) {
  nlohmann::json interfaces = nlohmann::json::array();
  for (const auto& c : r.interfaces) interfaces.push_back(interface_json(c));
  return {{"remora_version", version_string()},
          {"kernel", r.host.kernel},
          {"hardware_note", r.hardware_note},
          {"host",
           {{"dmabuf_source", answer_json(r.host.dmabuf_source)},
            {"netdev_family", answer_json(r.host.netdev_family)},
            {"ethtool_family", answer_json(r.host.ethtool_family)},
            {"io_uring", answer_json(r.host.io_uring)},
            {"msg_zerocopy", answer_json(r.host.msg_zerocopy)},
            // The CUDA memory domain will fill this in; until then "unknown: not probed yet".
            {"cuda", answer_json(r.host.cuda)}}},
          {"interfaces", std::move(interfaces)},
          {"device_path_available", r.device_path_available},
          {"exit_code", exit_code(r)}};
}

int run_doctor(const DoctorOptions& options) {
  const auto report = probe_capabilities({.interfaces = options.interfaces, .try_bind = !options.no_bind});
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
