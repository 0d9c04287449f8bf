// zerocopy/devmem_rx.cc — see devmem_rx.h.
#include "zerocopy/devmem_rx.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include <fmt/format.h>

namespace remora::zerocopy {
namespace {

constexpr size_t kHeaderBytes = CMSG_LEN(0);  // the aligned cmsghdr before the data
constexpr size_t kDmabufCmsgLen = CMSG_LEN(sizeof(uapi::DmabufCmsg));

Status protocol(std::string message) { return {StatusCode::kProtocol, std::move(message)}; }

std::string binding_list(std::span<const uint32_t> ids) {
  if (ids.empty()) return "none";
  return fmt::format("{}", fmt::join(ids, ", "));
}

/// The first error seen while walking the control messages; later ones are dropped, but
/// the walk goes on so that every token is collected.
class FirstError {
 public:
  void set(Status s) {
    if (!error_) error_ = std::move(s);
  }
  std::optional<Status> take() { return std::move(error_); }

 private:
  std::optional<Status> error_;
};

}  // namespace

Status parse_devmem_rx(const msghdr& msg, size_t received, const DevmemRxPolicy& policy,
                       std::vector<DevmemFragment>* fragments) {
  const auto* control = static_cast<const std::byte*>(msg.msg_control);
  const size_t control_len = control == nullptr ? 0 : msg.msg_controllen;
  FirstError first;
  uint64_t dmabuf_bytes = 0, linear_bytes = 0;
  size_t devmem_cmsgs = 0;

  // Walked by hand rather than with CMSG_NXTHDR, which stops silently at a malformed
  // length: here a malformed length is an error, and the stop is loud.
  for (size_t off = 0; off + sizeof(cmsghdr) <= control_len;) {
    cmsghdr header;
    std::memcpy(&header, control + off, sizeof header);
    if (header.cmsg_len < kHeaderBytes || header.cmsg_len > control_len - off) {
      first.set(
          protocol(fmt::format("malformed control message at byte {}: cmsg_len {} (a header takes {}, "
                               "{} bytes of control data remain); the rest of the control data is unreadable",
                               off, header.cmsg_len, kHeaderBytes, control_len - off)));
      break;
    }
    const size_t this_off = off;
    off += CMSG_ALIGN(header.cmsg_len);
    const bool devmem = header.cmsg_level == SOL_SOCKET &&
                        (header.cmsg_type == uapi::kScmDevmemDmabuf || header.cmsg_type == uapi::kScmDevmemLinear);
    if (!devmem) {
      first.set(protocol(
          fmt::format("unexpected control message (level {}, type {}) at byte {} on a devmem stream: "
                      "only SCM_DEVMEM_DMABUF ({}) and SCM_DEVMEM_LINEAR ({}) belong here",
                      header.cmsg_level, header.cmsg_type, this_off, uapi::kScmDevmemDmabuf, uapi::kScmDevmemLinear)));
      continue;
    }
    if (header.cmsg_len < kDmabufCmsgLen) {
      first.set(
          protocol(fmt::format("malformed devmem control message at byte {}: cmsg_len {}, less than the {} "
                               "bytes of a struct dmabuf_cmsg",
                               this_off, header.cmsg_len, kDmabufCmsgLen)));
      continue;
    }
    uapi::DmabufCmsg frag;
    std::memcpy(&frag, control + this_off + kHeaderBytes, sizeof frag);
    ++devmem_cmsgs;
    if (header.cmsg_type == uapi::kScmDevmemLinear) {
      fragments->push_back({.kind = FragmentKind::kLinear, .offset = linear_bytes, .size = frag.frag_size});
      linear_bytes += frag.frag_size;
      if (!policy.allow_linear) {
        first.set(protocol(fmt::format(
            "{} bytes of linear data (SCM_DEVMEM_LINEAR) on a stream that takes device memory only: the NIC did not "
            "split the header from this payload (header split off, or the packet under its threshold: "
            "ethtool -G <if> tcp-data-split on, and hds-thresh 0 where the driver has it)",
            frag.frag_size)));
      }
      continue;
    }
    fragments->push_back({.kind = FragmentKind::kDmabuf,
                          .offset = frag.frag_offset,
                          .size = frag.frag_size,
                          .token = frag.frag_token,
                          .binding_id = frag.dmabuf_id});
    dmabuf_bytes += frag.frag_size;
    if (std::find(policy.bindings.begin(), policy.bindings.end(), frag.dmabuf_id) == policy.bindings.end()) {
      first.set(protocol(fmt::format(
          "fragment of dmabuf binding {} on a stream bound to {} (foreign binding): flow steering sends this "
          "connection to a queue bound to another dmabuf; its ntuple rule must name one of our queues",
          frag.dmabuf_id, binding_list(policy.bindings))));
    }
  }

  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return {StatusCode::kTruncated,
            fmt::format("control data truncated (MSG_CTRUNC) after {} devmem fragments in {} bytes: the tokens of "
                        "the fragments that did not fit are lost and pin dmabuf pages until the socket closes; give "
                        "recvmsg a bigger control buffer ({} bytes per fragment, devmem_control_bytes())",
                        devmem_cmsgs, control_len, CMSG_SPACE(sizeof(uapi::DmabufCmsg)))};
  }
  if (auto error = first.take()) return *error;
  const uint64_t described = dmabuf_bytes + linear_bytes;
  if (received > 0 && devmem_cmsgs == 0) {
    return protocol(fmt::format(
        "misrouted flow: {} bytes arrived without any devmem control message, so they came from a queue with no "
        "dmabuf bound: flow steering is not sending this connection to the bound queues (install an ntuple rule, "
        "ethtool -N <if> flow-type tcp4 ... queue <bound queue>)",
        received));
  }
  if (described < received) {
    return protocol(fmt::format(
        "misrouted flow: recvmsg returned {} bytes but the devmem control messages describe {} ({} in the dmabuf, "
        "{} linear): {} bytes came without one, from a queue with no dmabuf bound (check the ntuple rule)",
        received, described, dmabuf_bytes, linear_bytes, received - described));
  }
  if (described > received) {
    return protocol(
        fmt::format("malformed devmem control data: its fragments add up to {} bytes ({} in the dmabuf, "
                    "{} linear) but recvmsg returned {}",
                    described, dmabuf_bytes, linear_bytes, received));
  }
  return Status::ok();
}

}  // namespace remora::zerocopy
