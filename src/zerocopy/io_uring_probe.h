// zerocopy/io_uring_probe.h — whether io_uring is usable here (the sysctl
// kernel.io_uring_disabled can forbid it; a kernel can lack it), whether this kernel has
// the zero-copy opcodes (SEND_ZC, RECV_ZC), and a real attempt at io_uring zero-copy
// receive: IORING_REGISTER_ZCRX_IFQ of one interface RX queue with a host memory area,
// on a ring set up as zcrx requires (SINGLE_ISSUER | DEFER_TASKRUN | CQE32). Rings come
// from liburing where the build found it; without it every probe answers
// kUnsupported "built without io_uring".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "remora/status.h"
#include "zerocopy/kernel_error.h"

namespace remora::zerocopy {

/// Whether this build has liburing (the REMORA_WITH_IO_URING option and liburing-dev).
bool built_with_io_uring();

/// What probe_io_uring() found.
struct IoUringProbe {
  Status ring;  ///< a plain ring: ok, or why not (the errno in ring_refusal)
  KernelError ring_refusal;
  std::optional<int> disabled_sysctl;  ///< /proc/sys/kernel/io_uring_disabled (0 on, 1 group only, 2 off)
  Status zcrx_ring;                    ///< a ring with the zcrx setup flags: ok, or why not
  bool send_zc = false;                ///< IORING_OP_SEND_ZC is in the kernel's probe (6.0)
  bool recv_zc = false;                ///< IORING_OP_RECV_ZC is in the kernel's probe (6.15)
};

/// Sets up (and closes) a plain ring and a zcrx-style ring, and reads the opcode probe.
IoUringProbe probe_io_uring();

/// Registers an io_uring zcrx interface queue for RX queue `rx_queue` of `ifindex` with a
/// small host memory area (a few pages) and a refill ring, then closes the ring, which
/// undoes the registration. ok only if the kernel accepted; otherwise its errno in
/// `*refusal` and a Status saying what it needs. On a NIC that can do it, the queue is
/// restarted twice (taken by the area, given back), so ordinary traffic steered to it
/// sees a hiccup.
Status try_zcrx_register(uint32_t ifindex, uint32_t rx_queue, KernelError* refusal = nullptr);

/// Registers a device-less io_uring zcrx queue (ZCRX_REG_NODEV, Linux 7.1+: no NIC, the
/// kernel copies what RECV_ZC receives into the area) with a 16-page host area, then
/// closes the ring, which undoes it. ok only if the kernel accepted; otherwise its errno
/// in `*refusal` and a Status saying what it needs.
Status try_zcrx_device_less(KernelError* refusal = nullptr);

/// The kernel's refusal (errno `err`) of the zcrx registration `what` as a Status: the
/// errno, what it means for zcrx and what would change it; the code by kind (EPERM
/// access, EBUSY/EEXIST/ENOMEM resources, EINVAL/ENODEV arguments, else unsupported).
Status zcrx_register_refusal(const std::string& what, int err);

}  // namespace remora::zerocopy
