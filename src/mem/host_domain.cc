// mem/host_domain.cc — the host memory domain: range validation, page locking
// (mlock) according to PinMode, and synchronous copies.
//
// Page locks in Linux are not counted: one munlock() undoes any number of mlock()s
// of the same page. Two registrations may share pages (the same buffer registered
// twice, or two small buffers in one page), so the domain keeps a reference count per
// locked page range and only calls mlock/munlock when a page's count goes 0→1 / 1→0.
// Memory the application locks itself (mlock, mlockall) is outside this accounting:
// deregistering an overlapping region unlocks it.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/log.h"
#include "remora/memory.h"

namespace remora {
namespace {

uintptr_t page_size() noexcept {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

/// True when [ptr, ptr+len) does not wrap around the address space.
bool range_fits(const void* ptr, size_t len) noexcept {
  return reinterpret_cast<uintptr_t>(ptr) <= UINTPTR_MAX - len;
}

std::string describe_limit(rlim_t value) {
  if (value == RLIM_INFINITY) return "unlimited";
  return fmt::format("{} bytes ({} KiB)", static_cast<uint64_t>(value), static_cast<uint64_t>(value) / 1024);
}

std::string memlock_soft_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return fmt::format("unknown ({})", std::strerror(errno));
  return describe_limit(limit.rlim_cur);
}

/// mlock/munlock through the raw system call: sanitizer runtimes intercept the libc
/// wrappers and turn them into silent no-ops (ASan: "mlock is unsupported"), which
/// would make sanitizer builds report pages as pinned that are not.
int sys_mlock(uintptr_t start, uintptr_t len) noexcept { return static_cast<int>(syscall(SYS_mlock, start, len)); }
int sys_munlock(uintptr_t start, uintptr_t len) noexcept {
  return static_cast<int>(syscall(SYS_munlock, start, len));
}

bool is_budget_errno(int err) noexcept { return err == ENOMEM || err == EPERM || err == EAGAIN; }

/// Is every page of [start, end) (page-aligned) mapped? mincore() fails with ENOMEM
/// for unmapped pages and, unlike madvise, changes nothing about the mapping.
bool pages_mapped(uintptr_t start, uintptr_t end) noexcept {
  constexpr size_t kVecPages = 4096;
  unsigned char vec[kVecPages];
  const uintptr_t page = page_size();
  while (start < end) {
    const uintptr_t pages = std::min<uintptr_t>((end - start) / page, kVecPages);
    const size_t bytes = pages * page;
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    if (mincore(reinterpret_cast<void*>(start), bytes, vec) != 0 && errno == ENOMEM) return false;
    start += bytes;
  }
  return true;
}

class CompletedCopy final : public AsyncCopy {
 public:
  Status test() override { return Status::ok(); }
  Status wait(Duration /*timeout*/) override { return Status::ok(); }
  void on_done(std::function<void()> fn) override { fn(); }
};

class HostDomain final : public MemoryDomain {
 public:
  MemoryKind kind() const noexcept override { return MemoryKind::kHost; }
  std::string_view name() const noexcept override { return "host"; }

  bool owns(const void* ptr, size_t len) const override { return ptr != nullptr && range_fits(ptr, len); }

  Result<DomainRegistration> register_range(void* ptr, size_t len, PinMode mode) override {
    if (ptr == nullptr) return Status(StatusCode::kInvalidArgument, "cannot register a null pointer");
    if (len == 0) return Status(StatusCode::kInvalidArgument, "cannot register an empty range (length 0)");
    if (!range_fits(ptr, len)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("range {} + {} bytes wraps around the address space", ptr, len));
    }
    const auto [start, end] = page_span(ptr, len);
    if (end == 0 || !pages_mapped(start, end)) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("range {} + {} bytes is not mapped memory", ptr, len));
    }

    DomainRegistration reg;
    if (mode == PinMode::kOff) return reg;

    const int err = lock_pages(start, end);
    if (err == 0) {
      reg.pinned = true;
      return reg;
    }
    if (mode == PinMode::kRequire || !is_budget_errno(err)) {
      if (is_budget_errno(err)) {
        return Status(StatusCode::kNoResource,
                      fmt::format("cannot lock {} bytes in RAM (mlock: {}): RLIMIT_MEMLOCK soft limit is {}; raise it "
                                  "with `ulimit -l`, systemd LimitMEMLOCK=, docker --ulimit memlock, or grant "
                                  "CAP_IPC_LOCK; or set REMORA_PIN=try to run unpinned",
                                  end - start, std::strerror(err), memlock_soft_limit()));
      }
      return Status(StatusCode::kInternal,
                    fmt::format("mlock({} bytes) failed unexpectedly: {}", end - start, std::strerror(err)));
    }
    warn_pin_degraded_once(end - start, err);
    return reg;  // kTry: documented degradation, pinned = false
  }

  void deregister_range(void* ptr, size_t len, const DomainRegistration& reg) noexcept override {
    if (!reg.pinned || ptr == nullptr || len == 0 || !range_fits(ptr, len)) return;
    const auto [start, end] = page_span(ptr, len);
    if (end != 0) unlock_pages(start, end);
  }

  Result<std::unique_ptr<AsyncCopy>> copy_to_host(void* host_dst, const void* src, size_t len) override {
    return copy(host_dst, src, len);
  }
  Result<std::unique_ptr<AsyncCopy>> copy_from_host(void* dst, const void* host_src, size_t len) override {
    return copy(dst, host_src, len);
  }
  /// A udmabuf is host memory: devmem receive into one scatters with memcpy.
  Result<std::unique_ptr<AsyncCopy>> scatter(void* dst_base, const void* src_base,
                                             std::span<const ScatterEntry> entries) override {
    for (const ScatterEntry& e : entries) {
      if (e.length == 0) continue;
      if (dst_base == nullptr || src_base == nullptr) return Status(StatusCode::kInvalidArgument, "scatter with a null base");
      std::memcpy(static_cast<std::byte*>(dst_base) + e.dst_offset, static_cast<const std::byte*>(src_base) + e.src_offset,
                  e.length);
    }
    return std::unique_ptr<AsyncCopy>(std::make_unique<CompletedCopy>());
  }

 private:
  struct LockedSpan {
    uintptr_t end;
    uint32_t count;
  };

  /// The page-aligned cover of [ptr, ptr+len); end == 0 when rounding up wraps.
  static std::pair<uintptr_t, uintptr_t> page_span(const void* ptr, size_t len) noexcept {
    const uintptr_t page = page_size();
    const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
    const uintptr_t last = addr + len - 1;  // no wrap: checked by the caller
    const uintptr_t start = addr & ~(page - 1);
    const uintptr_t end = (last | (page - 1)) == UINTPTR_MAX ? 0 : (last | (page - 1)) + 1;
    return {start, end};
  }

  static Result<std::unique_ptr<AsyncCopy>> copy(void* dst, const void* src, size_t len) {
    if (len == 0) return std::unique_ptr<AsyncCopy>(std::make_unique<CompletedCopy>());
    if (dst == nullptr || src == nullptr) return Status(StatusCode::kInvalidArgument, "copy with a null pointer");
    std::memcpy(dst, src, len);
    return std::unique_ptr<AsyncCopy>(std::make_unique<CompletedCopy>());
  }

  static void warn_pin_degraded_once(uintptr_t bytes, int err) {
    static std::atomic<bool> warned{false};
    if (warned.exchange(true)) return;
    REMORA_LOG(kWarn,
               "could not lock {} bytes of registered memory in RAM (mlock: {}); RLIMIT_MEMLOCK soft limit is {}. "
               "Continuing unpinned (pages may be swapped or migrated). Raise it with `ulimit -l` / systemd "
               "LimitMEMLOCK=, or set REMORA_PIN=off to silence this warning. Logged once per process.",
               bytes, std::strerror(err), memlock_soft_limit());
  }

  /// Splits the locked span containing `at` (if any starts before it) so a span starts at `at`.
  void split_at(uintptr_t at) {
    auto it = locked_.upper_bound(at);
    if (it == locked_.begin()) return;
    --it;
    if (it->first < at && at < it->second.end) {
      locked_.emplace(at, LockedSpan{it->second.end, it->second.count});
      it->second.end = at;
    }
  }

  /// Adds a reference to every page of [start, end), locking pages that had none.
  /// Returns 0 or the errno of the failed mlock (then nothing changed).
  int lock_pages(uintptr_t start, uintptr_t end) {
    std::lock_guard lock(mu_);
    split_at(start);
    split_at(end);
    std::vector<std::pair<uintptr_t, uintptr_t>> gaps;
    uintptr_t cursor = start;
    for (auto it = locked_.lower_bound(start); it != locked_.end() && it->first < end; ++it) {
      if (cursor < it->first) gaps.emplace_back(cursor, it->first);
      cursor = it->second.end;
    }
    if (cursor < end) gaps.emplace_back(cursor, end);

    for (size_t i = 0; i < gaps.size(); ++i) {
      if (sys_mlock(gaps[i].first, gaps[i].second - gaps[i].first) != 0) {
        const int err = errno;
        for (size_t j = 0; j < i; ++j) {
          sys_munlock(gaps[j].first, gaps[j].second - gaps[j].first);
        }
        return err;
      }
    }
    for (auto it = locked_.lower_bound(start); it != locked_.end() && it->first < end; ++it) ++it->second.count;
    for (const auto& [gap_start, gap_end] : gaps) locked_.emplace(gap_start, LockedSpan{gap_end, 1});
    return 0;
  }

  /// Drops a reference from every page of [start, end), unlocking pages left with none.
  void unlock_pages(uintptr_t start, uintptr_t end) noexcept {
    std::lock_guard lock(mu_);
    split_at(start);
    split_at(end);
    for (auto it = locked_.lower_bound(start); it != locked_.end() && it->first < end;) {
      if (--it->second.count > 0) {
        ++it;
        continue;
      }
      if (sys_munlock(it->first, it->second.end - it->first) != 0) {
        REMORA_LOG(kWarn, "munlock({:#x}, {} bytes) failed: {}", it->first, it->second.end - it->first,
                   std::strerror(errno));
      }
      it = locked_.erase(it);
    }
  }

  std::mutex mu_;
  std::map<uintptr_t, LockedSpan> locked_;  // disjoint page-aligned spans with their reference counts
};

}  // namespace

Result<DmabufExport> MemoryDomain::export_dmabuf(const void* /*ptr*/, size_t /*len*/) {
  return Status(StatusCode::kUnsupported, fmt::format("the {} memory domain cannot export a dmabuf", name()));
}

Result<std::unique_ptr<AsyncCopy>> MemoryDomain::scatter(void* /*dst_base*/, const void* /*src_base*/,
                                                         std::span<const ScatterEntry> /*entries*/) {
  return Status(StatusCode::kUnsupported,
                fmt::format("the {} memory domain has no scatter (devmem TCP receive into it needs one)", name()));
}

Result<void*> MemoryDomain::allocate_area(size_t /*len*/) {
  return Status(StatusCode::kUnsupported,
                fmt::format("the {} memory domain cannot allocate memory for remora", name()));
}

MemoryDomain& host_domain() {
  static HostDomain* domain = new HostDomain();  // never destroyed: regions may outlive static teardown
  return *domain;
}

}  // namespace remora
