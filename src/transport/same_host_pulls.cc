// transport/same_host_pulls.cc — same-host pulls on an endpoint (docs/protocol.md, "Same-host
// pulls"): HOST says who the peer is (and, with can_pull, that it reads this side's
// memory); PULL announces a chunk to read out of the peer; PULLED answers one of ours.
// The chunk scheduler reads and writes the pulled chunks (datapath/chunk_scheduler.h).
#include "core/log.h"
#include "net/same_host.h"
#include "transport/endpoint_core.h"

namespace remora::detail {

wire::HostFrame EndpointCore::host_frame(bool can_pull) {
  const net::HostIdentity me = net::this_host();
  return wire::HostFrame{.pid = me.pid,
                         .boot_id = me.boot_id,
                         .netns = me.netns,
                         .probe_address = me.probe_address,
                         .probe_value = me.probe_value,
                         .can_pull = can_pull};
}

bool EndpointCore::same_host_negotiated() const noexcept {
  return config_.same_host_pulls && (params_.peer_capabilities & wire::kCapSameHost) != 0;
}

void EndpointCore::handle_host(const wire::HostFrame& f) {
  if (!same_host_negotiated()) {
    protocol_error("HOST on an endpoint without same-host pulls negotiated");
    return;
  }
  if (f.can_pull) {
    // The peer read our probe: it reads our chunks itself from now on.
    if (chunks_.pull_tx()) {
      protocol_error("HOST with can_pull twice");
      return;
    }
    chunks_.enable_pull_tx(config_.pull_huge_pages);
    return;  // read_control pumps: ready transfers go as PULLs
  }
  if (host_heard_) {
    protocol_error("a second HOST identity");
    return;
  }
  host_heard_ = true;
  // A stream steered to devmem or zcrx RX takes its bytes from a NIC queue; such an
  // endpoint's peer is on another host anyway, and this side keeps it on TCP.
  for (uint16_t i = 0; i < chunks_.streams(); ++i) {
    if (chunks_.stream_in(i) != nullptr && chunks_.stream_in(i)->devmem() != nullptr) {
      same_host_reason_ = "this side receives into device memory through devmem or zcrx RX queues";
      shm_reason_ = same_host_reason_;
      return;
    }
  }
  same_host_reason_ = net::same_host_refusal(net::HostIdentity{.pid = f.pid,
                                                               .boot_id = f.boot_id,
                                                               .netns = f.netns,
                                                               .probe_address = f.probe_address,
                                                               .probe_value = f.probe_value});
  if (!same_host_reason_.empty()) {
    REMORA_LOG(kDebug, "endpoint to {}: chunks stay on TCP: {}", params_.peer, same_host_reason_);
    shm_reason_ = same_host_reason_;
    return;
  }
  peer_pid_ = f.pid;
  chunks_.enable_pull_rx(static_cast<pid_t>(f.pid));
  append_frame(host_frame(/*can_pull=*/true));
  offer_shm();
}

void EndpointCore::handle_pull(const wire::PullFrame& f) {
  RxTransfer* op = find_announced("PULL", f.kind, f.recv_id);
  if (op == nullptr) return;
  if (std::string violation = chunks_.expect_pull(op, f.offset, f.length, f.address,
                                                  f.has_crc ? std::optional<uint32_t>(f.crc) : std::nullopt);
      !violation.empty()) {
    protocol_error(std::move(violation));
    return;
  }
  chunks_.read_pulls();
  if (state_ == State::kDraining) maybe_finalize();
}

void EndpointCore::handle_pulled(const wire::PulledFrame& f) {
  if (std::string violation = chunks_.pulled(f.kind, f.recv_id, f.length); !violation.empty()) {
    protocol_error(std::move(violation));
  }
}

}  // namespace remora::detail
