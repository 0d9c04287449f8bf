// zerocopy/devmem_rx.h — the devmem TCP receive parser: turns the control data of one
// recvmsg(MSG_SOCK_DEVMEM) on a devmem stream into the list of fragments it delivered
// (pieces in the bound dmabuf, each with a token to give back, and pieces that landed in
// the iov), in stream order, and refuses everything a devmem stream must not accept:
// truncated control data, malformed or unknown control messages, fragments of a binding
// that is not ours, payload without any devmem control message (a misrouted flow) and
// linear data on a stream that forbids it. Pure: no system calls.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "remora/status.h"
#include "zerocopy/uapi.h"

namespace remora::zerocopy {

/// Where a fragment's bytes are.
enum class FragmentKind : uint8_t {
  kDmabuf,  ///< in the bound dmabuf (SCM_DEVMEM_DMABUF); holds a token until given back
  kLinear,  ///< in the recvmsg's iov (SCM_DEVMEM_LINEAR: the NIC did not split the header off)
};

/// One piece of the stream, as one control message described it.
struct DevmemFragment {
  FragmentKind kind = FragmentKind::kDmabuf;
  /// kDmabuf: where the fragment starts in the dmabuf (the kernel's frag_offset).
  /// kLinear: where it starts in the iov bytes of this recvmsg (linear bytes fill the iov
  /// in stream order, so the first linear fragment is at 0, the next after it, ...).
  uint64_t offset = 0;
  uint32_t size = 0;
  uint32_t token = 0;       ///< kDmabuf: what SO_DEVMEM_DONTNEED takes back; kLinear: 0
  uint32_t binding_id = 0;  ///< kDmabuf: the dmabuf binding (bind-rx's id); kLinear: 0

  friend bool operator==(const DevmemFragment&, const DevmemFragment&) = default;
};

/// What one devmem stream accepts.
struct DevmemRxPolicy {
  /// The binding ids (bind-rx replies) whose fragments this stream may receive. A
  /// fragment of any other binding means the flow is steered to a queue bound to someone
  /// else's dmabuf.
  std::span<const uint32_t> bindings;
  /// Whether SCM_DEVMEM_LINEAR data is acceptable. Header-split misses put small packets
  /// in the iov; a stream whose payload must land in device memory says false.
  bool allow_linear = true;
};

/// The control buffer a recvmsg needs to describe `fragments` fragments without
/// MSG_CTRUNC: CMSG_SPACE(sizeof(DmabufCmsg)) = 40 bytes each.
constexpr size_t devmem_control_bytes(size_t fragments) { return fragments * CMSG_SPACE(sizeof(uapi::DmabufCmsg)); }

/// Parses the control data of one recvmsg(MSG_SOCK_DEVMEM) that returned `received`
/// bytes (`msg.msg_control`/`msg_controllen` as the kernel left them, `msg.msg_flags`
/// its flags) and appends its fragments to `*fragments` in stream order.
///
/// Errors (nothing is dropped silently):
///  - kTruncated: MSG_CTRUNC, the control buffer was too small: the tokens of the
///    control messages that did not fit are lost to us and pin dmabuf pages until the
///    socket closes. Give recvmsg devmem_control_bytes(n) bytes for n fragments.
///  - kProtocol: a control message whose length is malformed; one of another level or
///    type; a dmabuf fragment of a binding not in `policy.bindings` (foreign binding);
///    payload with no devmem control message at all, or more payload than the fragments
///    account for (a misrouted flow: flow steering does not send this connection to the
///    bound queues); linear data where `policy.allow_linear` is false; fragments that
///    add up to more than `received`.
///
/// Whatever it returns, every dmabuf fragment appended holds a token of this socket,
/// and the caller must give those back (TokenReturner) even when it drops the data.
/// When the status is an error, the data of this recvmsg is not to be used.
Status parse_devmem_rx(const msghdr& msg, size_t received, const DevmemRxPolicy& policy,
                       std::vector<DevmemFragment>* fragments);

}  // namespace remora::zerocopy
