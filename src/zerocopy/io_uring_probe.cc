// zerocopy/io_uring_probe.cc — see io_uring_probe.h.
#include "zerocopy/io_uring_probe.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "zerocopy/pages.h"
#include "zerocopy/uapi.h"

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

uint64_t as_u64(const void* p) { return reinterpret_cast<uintptr_t>(p); }

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
#if !defined(REMORA_HAVE_LIBURING)
  (void)ifindex;
  (void)rx_queue;
  (void)refusal;
  return without_liburing();
#else
  const std::string what = fmt::format("io_uring zcrx registration of ifindex {} RX queue {}", ifindex, rx_queue);
  Ring ring(uapi::kIoringSetupSingleIssuer | uapi::kIoringSetupDeferTaskrun | uapi::kIoringSetupCqe32);
  if (ring.error() != 0) {
    if (refusal != nullptr) refusal->err = ring.error();
    return Status(StatusCode::kUnsupported,
                  fmt::format("{}: no ring with the zcrx setup flags: {}", what, errno_text(ring.error())));
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  constexpr uint32_t kRqEntries = 64;
  // The refill ring: a header page, then the entries (the kernel's documented sizing).
  MappedPages refill(((kRqEntries * sizeof(uapi::ZcrxRqe) + page) + page - 1) / page * page);
  MappedPages area(16 * page);
  if (refill.get() == nullptr || area.get() == nullptr) {
    return Status(StatusCode::kNoResource, what + ": mmap of the area failed");
  }
  uapi::ZcrxAreaReg area_reg{};
  area_reg.addr = as_u64(area.get());
  area_reg.len = area.size();
  uapi::RegionDesc region{};
  region.user_addr = as_u64(refill.get());
  region.size = refill.size();
  region.flags = uapi::kIoringMemRegionTypeUser;
  uapi::ZcrxIfqReg reg{};
  reg.if_idx = ifindex;
  reg.if_rxq = rx_queue;
  reg.rq_entries = kRqEntries;
  reg.area_ptr = as_u64(&area_reg);
  reg.region_ptr = as_u64(&region);
  // liburing 2.3 predates zcrx (io_uring_register_ifq is 2.10): the raw system call, on
  // the ring liburing set up, with remora's own struct definitions (zerocopy/uapi.h).
  const long rc = ::syscall(__NR_io_uring_register, ring.get()->ring_fd, uapi::kIoringRegisterZcrxIfq, &reg, 1);
  if (rc < 0) {
    const int err = errno;
    if (refusal != nullptr) {
      *refusal = KernelError();
      refusal->err = err;
    }
    return zcrx_register_refusal(what, err);
  }
  return Status::ok();  // the ring closes here, and with it the registration
#endif
}

}  // namespace remora::zerocopy
