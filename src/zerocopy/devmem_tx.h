// zerocopy/devmem_tx.h — devmem TCP transmit (Linux 6.16+) and the MSG_ZEROCOPY
// completions it shares with host-memory zero-copy sends.
//
// A devmem send names a range of a dmabuf bound for transmit (bind-tx,
// zerocopy/netdev_nl.h): sendmsg(MSG_ZEROCOPY) on a socket with SO_ZEROCOPY, whose iov
// holds the offset into the dmabuf where a pointer would be, and whose control data is
// one SOL_SOCKET / SCM_DEVMEM_DMABUF message carrying the binding id (a u32). The NIC
// reads the memory later; the range may be reused only once the kernel reports the
// send complete on the socket's error queue: a sock_extended_err of origin
// SO_EE_ORIGIN_ZEROCOPY whose [ee_info, ee_data] is the inclusive range of completed
// send sequence numbers (a 32-bit counter per socket, one per sendmsg that sent bytes).
//
// ZerocopyTracker keeps those numbers: each send registers a cookie (what the caller
// wants back, e.g. the chunk), each completion releases the cookies of its range, in
// order, wrap-safe. The parsing and bookkeeping are the same for host-memory MSG_ZEROCOPY
// sends, which run on loopback here; the devmem send itself is refused by every kernel
// without a bound NIC (EINVAL: no such binding).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>

#include "net/io.h"
#include "remora/status.h"

namespace remora::zerocopy {

/// The control buffer of one devmem sendmsg: CMSG_SPACE(sizeof(uint32_t)) bytes.
inline constexpr size_t kDevmemTxControlBytes = CMSG_SPACE(sizeof(uint32_t));

/// Writes the SCM_DEVMEM_DMABUF control message naming `binding_id` into `out`
/// (cmsg_len = CMSG_LEN(4), level SOL_SOCKET, type SCM_DEVMEM_DMABUF, the id in host
/// byte order, padding zeroed).
void build_devmem_tx_control(uint32_t binding_id, std::span<std::byte, kDevmemTxControlBytes> out);

/// sendmsg(MSG_ZEROCOPY | MSG_DONTWAIT | MSG_NOSIGNAL) of [dmabuf_offset, dmabuf_offset +
/// len) of the dmabuf bound for transmit as `binding_id`. The socket needs SO_ZEROCOPY
/// (enable_zerocopy). EINVAL from the kernel: no such binding on this socket's device
/// (or the range is outside the dmabuf); every kernel without a devmem NIC says it.
net::IoResult send_devmem(int fd, uint32_t binding_id, uint64_t dmabuf_offset, size_t len) noexcept;

/// send(MSG_ZEROCOPY | MSG_DONTWAIT | MSG_NOSIGNAL) of host memory: the same completions.
net::IoResult send_zerocopy(int fd, const void* data, size_t len) noexcept;

/// setsockopt(SO_ZEROCOPY, 1); the errno's Status when refused.
Status enable_zerocopy(int fd);

/// One completion: sends [first, last] (inclusive, wrapping) ended.
struct ZerocopyCompletion {
  uint32_t first = 0, last = 0;
  bool copied = false;  ///< SO_EE_CODE_ZEROCOPY_COPIED: the kernel copied instead (loopback always)
};

/// The zerocopy completion in one MSG_ERRQUEUE message's control data; nullopt when it
/// holds none (another error-queue message: a timestamp). kInternal when the completion
/// carries an errno (the send failed after sendmsg returned).
Result<std::optional<ZerocopyCompletion>> parse_zerocopy_completion(const msghdr& msg);

/// The sends of one socket in flight, by sequence number. Not thread-safe.
class ZerocopyTracker {
 public:
  /// `first_seq`: the socket's next sequence number (0 for a new socket; tests start
  /// near the wrap).
  explicit ZerocopyTracker(uint32_t first_seq = 0) : next_(first_seq) {}
  /// A MSG_ZEROCOPY sendmsg that sent bytes: it took the next sequence number.
  void sent(uint64_t cookie) { inflight_.push_back({next_++, cookie}); }
  /// Releases, oldest first, the cookies of the sends `c` completed. kProtocol for a
  /// range that names sends never made (more than are in flight).
  Status complete(const ZerocopyCompletion& c, const std::function<void(uint64_t cookie)>& released);
  /// Reads every message on `fd`'s error queue (MSG_ERRQUEUE | MSG_DONTWAIT) and applies
  /// each completion; ok when the queue is empty. Counts copied completions.
  Status drain(int fd, const std::function<void(uint64_t cookie)>& released);

  /// Releases every send still in flight, oldest first: its socket is closing, and the
  /// kernel reports nothing more of it.
  void release_all(const std::function<void(uint64_t cookie)>& released);

  size_t in_flight() const noexcept { return inflight_.size(); }
  uint64_t completions() const noexcept { return completions_; }
  uint64_t copied() const noexcept { return copied_; }

 private:
  struct Send {
    uint32_t seq;
    uint64_t cookie;
  };
  uint32_t next_;
  std::deque<Send> inflight_;
  uint64_t completions_ = 0, copied_ = 0;
};

}  // namespace remora::zerocopy
