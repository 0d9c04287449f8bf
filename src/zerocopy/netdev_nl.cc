// zerocopy/netdev_nl.cc — see netdev_nl.h.
#include "zerocopy/netdev_nl.h"

#include <linux/netlink.h>

#include <cerrno>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace remora::zerocopy {
namespace {

constexpr uint16_t kQueueMaxAttr = uapi::kNetdevAQueueXsk;
constexpr uint16_t kDevMaxAttr = uapi::kNetdevADevXskFeatures;
constexpr uint16_t kDmabufMaxAttr = uapi::kNetdevADmabufId;

Result<uint64_t> optional_u64(const nl::AttrTable& t, uint16_t type, std::string_view what) {
  if (t[type] == nullptr) return uint64_t{0};
  return nl::get_u64(t[type], what);
}

/// A netdev request whose one attribute is the u32 `value`.
nl::Message one_u32(uint16_t family, uint8_t cmd, uint16_t flags, uint32_t seq, uint16_t type, uint32_t value) {
  nl::Message m(family, cmd, uapi::kNetdevFamilyVersion, flags, seq);
  m.put_u32(type, value);
  return m;
}

}  // namespace

nl::Message build_dev_get(uint16_t family, uint32_t seq, uint32_t ifindex) {
  return one_u32(family, uapi::kNetdevCmdDevGet, NLM_F_ACK, seq, uapi::kNetdevADevIfindex, ifindex);
}

Result<NetdevInfo> parse_dev(std::span<const std::byte> reply) {
  REMORA_ASSIGN_OR_RETURN(const nl::AttrTable t,
                          nl::reply_attrs(reply, uapi::kNetdevCmdDevGet, kDevMaxAttr, "dev-get"));
  NetdevInfo info;
  REMORA_ASSIGN_OR_RETURN(info.ifindex, nl::get_u32(t[uapi::kNetdevADevIfindex], "dev-get ifindex"));
  REMORA_ASSIGN_OR_RETURN(info.xdp_features, optional_u64(t, uapi::kNetdevADevXdpFeatures, "dev-get xdp-features"));
  REMORA_ASSIGN_OR_RETURN(auto segs, nl::get_optional_u32(t, uapi::kNetdevADevXdpZcMaxSegs, "xdp-zc-max-segs"));
  info.xdp_zc_max_segs = segs.value_or(0);
  REMORA_ASSIGN_OR_RETURN(info.xdp_rx_metadata_features,
                          optional_u64(t, uapi::kNetdevADevXdpRxMetadataFeatures, "xdp-rx-metadata-features"));
  REMORA_ASSIGN_OR_RETURN(info.xsk_features, optional_u64(t, uapi::kNetdevADevXskFeatures, "xsk-features"));
  return info;
}

nl::Message build_queue_dump(uint16_t family, uint32_t seq, uint32_t ifindex) {
  return one_u32(family, uapi::kNetdevCmdQueueGet, NLM_F_DUMP, seq, uapi::kNetdevAQueueIfindex, ifindex);
}

Result<NetdevQueue> parse_queue(std::span<const std::byte> reply) {
  REMORA_ASSIGN_OR_RETURN(const nl::AttrTable t,
                          nl::reply_attrs(reply, uapi::kNetdevCmdQueueGet, kQueueMaxAttr, "queue-get"));
  NetdevQueue q;
  REMORA_ASSIGN_OR_RETURN(q.id, nl::get_u32(t[uapi::kNetdevAQueueId], "queue id"));
  REMORA_ASSIGN_OR_RETURN(q.ifindex, nl::get_u32(t[uapi::kNetdevAQueueIfindex], "queue ifindex"));
  REMORA_ASSIGN_OR_RETURN(q.type, nl::get_u32(t[uapi::kNetdevAQueueType], "queue type"));
  if (q.type != uapi::kNetdevQueueTypeRx && q.type != uapi::kNetdevQueueTypeTx) {
    return Status(StatusCode::kProtocol, fmt::format("queue {}: unknown queue type {}", q.id, q.type));
  }
  REMORA_ASSIGN_OR_RETURN(q.napi_id, nl::get_optional_u32(t, uapi::kNetdevAQueueNapiId, "queue napi-id"));
  REMORA_ASSIGN_OR_RETURN(q.dmabuf, nl::get_optional_u32(t, uapi::kNetdevAQueueDmabuf, "queue dmabuf"));
  q.io_uring = t[uapi::kNetdevAQueueIoUring] != nullptr;
  q.xsk = t[uapi::kNetdevAQueueXsk] != nullptr;
  return q;
}

nl::Message build_bind_rx(uint16_t family, uint32_t seq, uint32_t ifindex, uint32_t dmabuf_fd,
                          std::span<const uint32_t> rx_queues) {
  // Each queue nest: its header and two u32 attributes.
  nl::Message m(family, uapi::kNetdevCmdBindRx, uapi::kNetdevFamilyVersion, NLM_F_ACK, seq, 64 + rx_queues.size() * 20);
  m.put_u32(uapi::kNetdevADmabufIfindex, ifindex);
  m.put_u32(uapi::kNetdevADmabufFd, dmabuf_fd);
  for (const uint32_t q : rx_queues) {
    nlattr* nest = m.begin_nest(uapi::kNetdevADmabufQueues);
    m.put_u32(uapi::kNetdevAQueueId, q);
    m.put_u32(uapi::kNetdevAQueueType, uapi::kNetdevQueueTypeRx);
    m.end_nest(nest);
  }
  return m;
}

nl::Message build_bind_tx(uint16_t family, uint32_t seq, uint32_t ifindex, uint32_t dmabuf_fd) {
  nl::Message m = one_u32(family, uapi::kNetdevCmdBindTx, NLM_F_ACK, seq, uapi::kNetdevADmabufIfindex, ifindex);
  m.put_u32(uapi::kNetdevADmabufFd, dmabuf_fd);
  return m;
}

Result<uint32_t> parse_binding_id(std::span<const std::byte> reply) {
  REMORA_ASSIGN_OR_RETURN(const nlmsghdr* msg, nl::as_message(reply));
  REMORA_ASSIGN_OR_RETURN(const nl::AttrTable t, nl::parse_genl_attrs(msg, kDmabufMaxAttr));  // bind-rx's or bind-tx's
  REMORA_ASSIGN_OR_RETURN(const uint32_t id, nl::get_u32(t[uapi::kNetdevADmabufId], "binding id"));
  if (id == 0) return Status(StatusCode::kProtocol, "binding id 0 (the kernel's ids start at 1)");
  return id;
}

// ---- NetdevClient ----

Result<NetdevClient> NetdevClient::open() {
  REMORA_ASSIGN_OR_RETURN(nl::Socket socket, nl::Socket::open());
  REMORA_ASSIGN_OR_RETURN(nl::FamilyInfo family, socket.resolve(uapi::kNetdevFamilyName));
  return NetdevClient(std::move(socket), std::move(family));
}

Result<NetdevInfo> NetdevClient::dev_get(uint32_t ifindex, KernelError* refusal) {
  std::optional<NetdevInfo> info;
  REMORA_RETURN_IF_ERROR(socket_.transact(
      build_dev_get(family_.id, socket_.next_seq(), ifindex),
      [&](std::span<const std::byte> reply) -> Status {
        REMORA_ASSIGN_OR_RETURN(info, parse_dev(reply));
        return Status::ok();
      },
      fmt::format("netdev dev-get ifindex {}", ifindex), refusal));
  if (!info) return Status(StatusCode::kProtocol, "netdev dev-get: acknowledged without a reply");
  return *info;
}

Result<std::vector<NetdevQueue>> NetdevClient::queues(uint32_t ifindex, KernelError* refusal) {
  std::vector<NetdevQueue> out;
  REMORA_RETURN_IF_ERROR(socket_.transact(
      build_queue_dump(family_.id, socket_.next_seq(), ifindex),
      [&](std::span<const std::byte> reply) -> Status {
        REMORA_ASSIGN_OR_RETURN(NetdevQueue q, parse_queue(reply));
        out.push_back(q);
        return Status::ok();
      },
      fmt::format("netdev queue-get dump of ifindex {}", ifindex), refusal));
  return out;
}

// ---- DevmemBinding ----

std::string bind_refusal_hint(DevmemBinding::Direction d, const KernelError& refusal) {
  const bool rx = d == DevmemBinding::Direction::kRx;
  switch (refusal.err) {
    case EPERM:
    case EACCES: return "bind-rx needs CAP_NET_ADMIN: run as root, or grant the capability (setcap cap_net_admin+ep)";
    case EOPNOTSUPP:
      return rx ? "the driver cannot do devmem RX (it needs the queue-management API and unreadable netmem: bnxt_en, "
                  "mlx5, gve, fbnic; virtual devices such as lo and veth never can)"
                : "the driver has no netmem TX (bnxt_en, mlx5, gve, fbnic have it on 6.16+; lo and veth never)";
    case ENODEV: return "no such interface in this network namespace";
    case EBADF:
    case EINVAL:
      if (refusal.message.find("split") != std::string::npos)
        return "turn header split on: ethtool -G <if> tcp-data-split on";
      return "a real dmabuf is needed (from a GPU driver, or /dev/udmabuf with a sealed memfd), and queue ids the "
             "interface has";
    case EBUSY: return "a queue is already bound (another devmem binding, io_uring zcrx or AF_XDP)";
    default: return "";
  }
}

Result<DevmemBinding> DevmemBinding::bind(Direction d, uint32_t ifindex, int dmabuf_fd,
                                          std::span<const uint32_t> rx_queues, KernelError* refusal) {
  if (dmabuf_fd < 0) return Status(StatusCode::kInvalidArgument, fmt::format("dmabuf fd {} is negative", dmabuf_fd));
  if (d == Direction::kRx && rx_queues.empty()) {
    return Status(StatusCode::kInvalidArgument, "bind-rx needs at least one RX queue");
  }
  REMORA_ASSIGN_OR_RETURN(nl::Socket socket, nl::Socket::open());
  REMORA_ASSIGN_OR_RETURN(const nl::FamilyInfo family, socket.resolve(uapi::kNetdevFamilyName));
  const bool rx = d == Direction::kRx;
  const uint32_t cmd = rx ? uapi::kNetdevCmdBindRx : uapi::kNetdevCmdBindTx;
  if (!family.has_op(cmd)) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("this kernel's netdev family has no {} (devmem RX needs Linux 6.12, TX 6.16)",
                              rx ? "bind-rx" : "bind-tx"));
  }
  const uint32_t fd = static_cast<uint32_t>(dmabuf_fd);
  const nl::Message request = rx ? build_bind_rx(family.id, socket.next_seq(), ifindex, fd, rx_queues)
                                 : build_bind_tx(family.id, socket.next_seq(), ifindex, fd);
  std::optional<uint32_t> id;
  KernelError local;
  KernelError* out = refusal != nullptr ? refusal : &local;
  const std::string what =
      rx ? fmt::format("devmem bind-rx of fd {} to ifindex {} queues {}", dmabuf_fd, ifindex, fmt::join(rx_queues, ","))
         : fmt::format("devmem bind-tx of fd {} on ifindex {}", dmabuf_fd, ifindex);
  Status s = socket.transact(
      request,
      [&](std::span<const std::byte> reply) -> Status {
        REMORA_ASSIGN_OR_RETURN(id, parse_binding_id(reply));
        return Status::ok();
      },
      what, out);
  if (!s) {
    // The hint depends on the errno, which the transaction just learnt.
    if (out->err != 0) return nl::refusal_status(what, *out, bind_refusal_hint(d, *out));
    return s;
  }
  if (!id) return Status(StatusCode::kProtocol, what + ": acknowledged without a binding id");
  return DevmemBinding(std::move(socket), *id, ifindex, d);
}

Result<DevmemBinding> DevmemBinding::bind_rx(uint32_t ifindex, int dmabuf_fd, std::span<const uint32_t> rx_queues,
                                             KernelError* refusal) {
  return bind(Direction::kRx, ifindex, dmabuf_fd, rx_queues, refusal);
}

Result<DevmemBinding> DevmemBinding::bind_tx(uint32_t ifindex, int dmabuf_fd, KernelError* refusal) {
  return bind(Direction::kTx, ifindex, dmabuf_fd, {}, refusal);
}

}  // namespace remora::zerocopy
