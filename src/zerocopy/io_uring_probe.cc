// zerocopy/io_uring_probe.cc — see io_uring_probe.h.
#include "zerocopy/io_uring_probe.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "zerocopy/uapi.h"
#include "zerocopy/zcrx_queue.h"

#if defined(REMORA_HAVE_LIBURING)
#include <liburing.h>
#endif

namespace remora::zerocopy {
namespace {

std::optional<int> read_disabled_sysctl() {
  std::ifstream in("/proc/sys/kernel/io_uring_disabled");
  int v = 0;
  if (in >> v) return v;
  return std::nullopt;  // before 6.6 there is no such sysctl
}

[[maybe_unused]] std::string ring_hint(int err, std::optional<int> sysctl) {
  if (err == EPERM && sysctl && *sysctl == 2) return "io_uring is disabled: sysctl kernel.io_uring_disabled=0";
  if (err == EPERM && sysctl && *sysctl == 1) {
    return "io_uring is limited to the group in kernel.io_uring_group: join it, or sysctl kernel.io_uring_disabled=0";
  }
  if (err == ENOSYS) return "this kernel has no io_uring (CONFIG_IO_URING off)";
  if (err == ENOMEM) return "not enough locked memory for the ring (raise RLIMIT_MEMLOCK)";
  if (err == EINVAL) return "this kernel lacks a setup flag zcrx needs (SINGLE_ISSUER 6.0, DEFER_TASKRUN 6.1)";
  return "";
}

[[maybe_unused]] Status without_liburing() {
  return {StatusCode::kUnsupported,
          "built without io_uring (liburing was not found at build time, or REMORA_WITH_IO_URING=OFF)"};
}

#if defined(REMORA_HAVE_LIBURING)

/// A ring set up with `flags`, closed on destruction.
class Ring {
 public:
  explicit Ring(uint32_t flags) {
    io_uring_params p{};
    p.flags = flags;
    const int rc = io_uring_queue_init_params(8, &ring_, &p);
    err_ = rc < 0 ? -rc : 0;
  }
  ~Ring() {
    if (err_ == 0) io_uring_queue_exit(&ring_);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  int error() const { return err_; }
  io_uring* get() { return &ring_; }

 private:
  io_uring ring_{};
  int err_ = 0;
};

#endif  // REMORA_HAVE_LIBURING

std::string zcrx_hint(int err) {
  switch (err) {
    case EPERM: return "zcrx needs CAP_NET_ADMIN";
    case EINVAL:
      return "refused as invalid: the ring's setup flags (DEFER_TASKRUN, CQE32), a queue id the interface has, or "
             "header split off (ethtool -G <if> tcp-data-split on)";
    case EOPNOTSUPP:
      return "the interface cannot: zcrx needs a DMA device under it and a driver with the queue-management API and "
             "unreadable netmem (bnxt_en, mlx5, gve, fbnic; lo and veth never)";
    case ENODEV: return "no such interface in this network namespace";
    case EBUSY:
    case EEXIST: return "the queue is taken (a devmem binding, another zcrx, AF_XDP, or an XDP program)";
    case ENOMEM: return "not enough locked memory for the area (raise RLIMIT_MEMLOCK)";
    default: return "";
  }
}

}  // namespace

Status zcrx_register_refusal(const std::string& what, int err) {
  std::string text = fmt::format("{}: the kernel refused: {}", what, errno_text(err));
  if (const auto hint = zcrx_hint(err); !hint.empty()) text += " — " + hint;
  const StatusCode code = err == EPERM                                     ? StatusCode::kAccessDenied
                          : err == EBUSY || err == EEXIST || err == ENOMEM ? StatusCode::kNoResource
                          : err == EINVAL || err == ENODEV                 ? StatusCode::kInvalidArgument
                                                                           : StatusCode::kUnsupported;
  return Status(code, text);
}

bool built_with_io_uring() {
#if defined(REMORA_HAVE_LIBURING)
  return true;
#else
  return false;
#endif
}

IoUringProbe probe_io_uring() {
  IoUringProbe out;
  out.disabled_sysctl = read_disabled_sysctl();
#if !defined(REMORA_HAVE_LIBURING)
  out.ring = without_liburing();
  out.zcrx_ring = without_liburing();
#else
  {
    Ring ring(0);
    if (ring.error() != 0) {
      out.ring_refusal.err = ring.error();
      std::string text = "io_uring_setup: " + out.ring_refusal.to_string();
      if (const auto hint = ring_hint(ring.error(), out.disabled_sysctl); !hint.empty()) text += " — " + hint;
      out.ring = Status(ring.error() == EPERM ? StatusCode::kAccessDenied : StatusCode::kUnsupported, text);
      out.zcrx_ring = Status(StatusCode::kUnsupported, "no io_uring ring at all (see above)");
      return out;
    }
    if (io_uring_probe* probe = io_uring_get_probe_ring(ring.get()); probe != nullptr) {
      out.send_zc = io_uring_opcode_supported(probe, uapi::kIoringOpSendZc) != 0;
      out.recv_zc = io_uring_opcode_supported(probe, uapi::kIoringOpRecvZc) != 0;
      io_uring_free_probe(probe);
    }
  }
  Ring zcrx(uapi::kIoringSetupSingleIssuer | uapi::kIoringSetupDeferTaskrun | uapi::kIoringSetupCqe32);
  if (zcrx.error() != 0) {
    std::string text = "io_uring_setup(SINGLE_ISSUER|DEFER_TASKRUN|CQE32): " + errno_text(zcrx.error());
    if (const auto hint = ring_hint(zcrx.error(), out.disabled_sysctl); !hint.empty()) text += " — " + hint;
    out.zcrx_ring = Status(StatusCode::kUnsupported, text);
  }
#endif
  return out;
}

Status try_zcrx_register(uint32_t ifindex, uint32_t rx_queue, KernelError* refusal) {
  // A zcrx queue's own kernel object (zerocopy/zcrx_queue.h): a ring with the zcrx setup
  // flags, a 16-page host area and a 64-entry refill ring. Destroying it closes the ring,
  // which undoes the registration.
  KernelError ke;
  auto kernel = make_io_uring_zcrx_kernel(&ke);
  if (kernel) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    auto reg = (*kernel)->register_queue(ifindex, rx_queue, 16 * page, 64, -1, &ke);
    if (refusal != nullptr) *refusal = ke;
    return reg.status();
  }
  if (refusal != nullptr) *refusal = ke;
  return kernel.status().with_context(
      fmt::format("io_uring zcrx registration of ifindex {} RX queue {}", ifindex, rx_queue));
}

Status try_zcrx_device_less(KernelError* refusal) {
  KernelError ke;
  auto kernel = make_io_uring_zcrx_kernel(&ke);
  if (kernel) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    auto reg = (*kernel)->register_device_less(16 * page, 64, &ke);
    if (refusal != nullptr) *refusal = ke;
    return reg.status();
  }
  if (refusal != nullptr) *refusal = ke;
  return kernel.status().with_context("io_uring zcrx device-less registration (ZCRX_REG_NODEV)");
}

}  // namespace remora::zerocopy
