// zerocopy/flow_steering.cc — see flow_steering.h.
#include "zerocopy/flow_steering.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "net/socket.h"
#include "zerocopy/genl.h"

namespace remora::zerocopy {
namespace {

bool all_zero(const std::array<uint8_t, 16>& a) {
  for (uint8_t b : a) {
    if (b != 0) return false;
  }
  return true;
}

std::string address_text(bool ipv6, const std::array<uint8_t, 16>& a) {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(ipv6 ? AF_INET6 : AF_INET, a.data(), text, sizeof text);
  return text;
}

}  // namespace

std::string TcpFlow::describe() const {
  std::string s = fmt::format("flow-type {} dst-port {}", ipv6 ? "tcp6" : "tcp4", dst_port);
  if (src_port != 0) s += fmt::format(" src-port {}", src_port);
  if (!all_zero(dst_addr)) s += fmt::format(" dst-ip {}", address_text(ipv6, dst_addr));
  if (!all_zero(src_addr)) s += fmt::format(" src-ip {}", address_text(ipv6, src_addr));
  return s;
}

ethtool_rxnfc build_rule_insert(const TcpFlow& flow, uint32_t queue) {
  ethtool_rxnfc n{};
  n.cmd = ETHTOOL_SRXCLSRLINS;
  ethtool_rx_flow_spec& fs = n.fs;
  fs.flow_type = flow.ipv6 ? TCP_V6_FLOW : TCP_V4_FLOW;
  fs.ring_cookie = queue;
  fs.location = RX_CLS_LOC_ANY;
  // The mask has a field's bits set where the rule matches on it.
  if (flow.ipv6) {
    ethtool_tcpip6_spec& h = fs.h_u.tcp_ip6_spec;
    ethtool_tcpip6_spec& m = fs.m_u.tcp_ip6_spec;
    h.pdst = htons(flow.dst_port);
    m.pdst = 0xffff;
    if (flow.src_port != 0) h.psrc = htons(flow.src_port), m.psrc = 0xffff;
    if (!all_zero(flow.dst_addr)) {
      std::memcpy(h.ip6dst, flow.dst_addr.data(), 16);
      std::memset(m.ip6dst, 0xff, 16);
    }
    if (!all_zero(flow.src_addr)) {
      std::memcpy(h.ip6src, flow.src_addr.data(), 16);
      std::memset(m.ip6src, 0xff, 16);
    }
  } else {
    ethtool_tcpip4_spec& h = fs.h_u.tcp_ip4_spec;
    ethtool_tcpip4_spec& m = fs.m_u.tcp_ip4_spec;
    h.pdst = htons(flow.dst_port);
    m.pdst = 0xffff;
    if (flow.src_port != 0) h.psrc = htons(flow.src_port), m.psrc = 0xffff;
    if (!all_zero(flow.dst_addr)) std::memcpy(&h.ip4dst, flow.dst_addr.data(), 4), m.ip4dst = 0xffffffff;
    if (!all_zero(flow.src_addr)) std::memcpy(&h.ip4src, flow.src_addr.data(), 4), m.ip4src = 0xffffffff;
  }
  return n;
}

ethtool_rxnfc build_rule_delete(uint32_t location) {
  ethtool_rxnfc n{};
  n.cmd = ETHTOOL_SRXCLSRLDEL;
  n.fs.location = location;
  return n;
}

std::vector<uint32_t> equal_indirection(uint32_t size, uint32_t rss_queues) {
  std::vector<uint32_t> table(size);
  for (uint32_t i = 0; i < size; ++i) table[i] = rss_queues == 0 ? 0 : i % rss_queues;
  return table;
}

std::string steering_hint(int err, const std::string& ifname, std::string_view request) {
  if (err == EPERM || err == EACCES) return "run as root, or give the process CAP_NET_ADMIN";
  (void)request;  // EOPNOTSUPP: the driver lacks it, and no command changes that
  if (err == ENODEV) return fmt::format("bring {} up or check that it exists", ifname);
  return "";
}

// ---- FlowSteering ----

Result<FlowSteering> FlowSteering::open(const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ || ifname.find('/') != std::string::npos) {
    return Status(StatusCode::kInvalidArgument, fmt::format("'{}' is not an interface name", ifname));
  }
  return FlowSteering(ifname);
}

int FlowSteering::ioctl(void* data) {
  net::Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  ifreq req{};
  std::memcpy(req.ifr_name, ifname_.data(), ifname_.size());
  req.ifr_data = static_cast<char*>(data);
  return ::ioctl(fd.get(), SIOCETHTOOL, &req) == 0 ? 0 : errno;
}

namespace {

Status refused(const std::string& ifname, std::string_view request, std::string_view what, int err,
               KernelError* refusal) {
  KernelError ke;
  ke.err = err;
  if (refusal != nullptr) *refusal = ke;
  return nl::refusal_status(fmt::format("SIOCETHTOOL {} ({}) on {}", request, what, ifname), ke,
                            steering_hint(err, ifname, request));
}

}  // namespace

Result<uint32_t> FlowSteering::rx_rings(KernelError* refusal) {
  ethtool_rxnfc n{};
  n.cmd = ETHTOOL_GRXRINGS;
  if (int err = ioctl(&n); err != 0) return refused(ifname_, "ETHTOOL_GRXRINGS", "RX ring count", err, refusal);
  return static_cast<uint32_t>(n.data);
}

Result<std::vector<uint32_t>> FlowSteering::indirection(KernelError* refusal) {
  ethtool_rxfh_indir head{};
  head.cmd = ETHTOOL_GRXFHINDIR;
  if (int err = ioctl(&head); err != 0) {
    return refused(ifname_, "ETHTOOL_GRXFHINDIR", "RSS indirection table size", err, refusal);
  }
  // ethtool_rxfh_indir is {cmd, size, ring_index[size]}: as u32 words.
  std::vector<uint32_t> words = {ETHTOOL_GRXFHINDIR, head.size};
  words.resize(2 + static_cast<size_t>(head.size));
  if (int err = ioctl(words.data()); err != 0) {
    return refused(ifname_, "ETHTOOL_GRXFHINDIR", "RSS indirection table", err, refusal);
  }
  return std::vector<uint32_t>(words.begin() + 2, words.end());
}

Status FlowSteering::set_indirection(const std::vector<uint32_t>& table, KernelError* refusal) {
  std::vector<uint32_t> words = {ETHTOOL_SRXFHINDIR, static_cast<uint32_t>(table.size())};
  words.insert(words.end(), table.begin(), table.end());
  if (int err = ioctl(words.data()); err != 0) {
    return refused(ifname_, "ETHTOOL_SRXFHINDIR", fmt::format("RSS indirection table of {}", table.size()), err,
                   refusal);
  }
  return Status::ok();
}

Result<uint32_t> FlowSteering::insert_rule(const TcpFlow& flow, uint32_t queue, KernelError* refusal) {
  ethtool_rxnfc n = build_rule_insert(flow, queue);
  if (int err = ioctl(&n); err != 0) {
    return refused(ifname_, "ETHTOOL_SRXCLSRLINS", fmt::format("{} action {}", flow.describe(), queue), err, refusal);
  }
  return n.fs.location;
}

Status FlowSteering::delete_rule(uint32_t location, KernelError* refusal) {
  ethtool_rxnfc n = build_rule_delete(location);
  if (int err = ioctl(&n); err != 0) {
    return refused(ifname_, "ETHTOOL_SRXCLSRLDEL", fmt::format("rule at location {}", location), err, refusal);
  }
  return Status::ok();
}

}  // namespace remora::zerocopy
