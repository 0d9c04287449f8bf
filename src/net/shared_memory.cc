// net/shared_memory.cc — see shared_memory.h.
#include "net/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#if defined(__SANITIZE_THREAD__)
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <sanitizer/tsan_interface.h>
#endif

namespace remora::net {
namespace {

constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW;

#if defined(__SANITIZE_THREAD__)
/// One address per memfd (device and inode) for ThreadSanitizer's acquire and release:
/// kept for the process's life (a few bytes per memfd, in sanitizer builds only), and
/// never destroyed, since progress threads may still map memory while the process exits.
void* memfd_sync_key(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return nullptr;
  static auto* mu = new std::mutex;
  static auto* keys = new std::map<std::pair<dev_t, ino_t>, std::unique_ptr<char>>;
  std::lock_guard lock(*mu);
  auto& key = (*keys)[{st.st_dev, st.st_ino}];
  if (key == nullptr) key = std::make_unique<char>();
  return key.get();
}
#endif

}  // namespace

#if defined(__SANITIZE_THREAD__)
void sync_acquire(void* key) noexcept {
  if (key != nullptr) __tsan_acquire(key);
}
void sync_release(void* key) noexcept {
  if (key != nullptr) __tsan_release(key);
}
#else
void sync_acquire(void*) noexcept {}
void sync_release(void*) noexcept {}
#endif

SharedMemory& SharedMemory::operator=(SharedMemory&& o) noexcept {
  if (this == &o) return *this;
  if (base_ != nullptr) ::munmap(base_, size_);
  fd_ = std::move(o.fd_);
  base_ = o.base_;
  size_ = o.size_;
  sync_key_ = o.sync_key_;
  o.base_ = nullptr;
  o.size_ = 0;
  o.sync_key_ = nullptr;
  return *this;
}

SharedMemory::~SharedMemory() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

Result<SharedMemory> SharedMemory::map(Fd fd, size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return errno_status(errno, "mmap of shared memory");
  SharedMemory m;
#if defined(__SANITIZE_THREAD__)
  m.sync_key_ = memfd_sync_key(fd.get());
#endif
  m.fd_ = std::move(fd);
  m.base_ = base;
  m.size_ = bytes;
  return m;
}

Result<SharedMemory> SharedMemory::create(const char* name, size_t bytes) {
  Fd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return errno_status(errno, fmt::format("memfd_create of {}", name));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return errno_status(errno, fmt::format("ftruncate of {}", name));
  }
  // The peer maps it too: sealed, so neither side can shrink it under the other's
  // accesses (SIGBUS) or grow it.
  if (::fcntl(fd.get(), F_ADD_SEALS, kSeals | F_SEAL_SEAL) != 0) {
    return errno_status(errno, fmt::format("sealing {}", name));
  }
  return map(std::move(fd), bytes);
}

Result<SharedMemory> SharedMemory::adopt(Fd fd, std::string_view what) {
  REMORA_ASSIGN_OR_RETURN(const uint64_t size, sealed_memfd_size(fd.get(), what));
  if (size == 0) return Status(StatusCode::kProtocol, fmt::format("the peer's {} is empty", what));
  REMORA_ASSIGN_OR_RETURN(SharedMemory m, map(std::move(fd), static_cast<size_t>(size)));
  m.fd_.reset();  // the mapping keeps the memory; the descriptor is only the creator's to offer
  return m;
}

Result<uint64_t> sealed_memfd_size(int fd, std::string_view what) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return Status(StatusCode::kProtocol, fmt::format("the peer's {} is not a memfd ({})", what, std::strerror(errno)));
  }
  if ((static_cast<unsigned>(seals) & kSeals) != kSeals) {
    return Status(StatusCode::kProtocol,
                  fmt::format("the peer's {} is not sealed against shrinking and growing", what));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status(errno, fmt::format("fstat of the peer's {}", what));
  return static_cast<uint64_t>(st.st_size);
}

Result<Fd> take_peer_fd(pid_t pid, int peer_fd) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) {
    if (errno == ENOSYS) return Status(StatusCode::kUnsupported, "the kernel has no pidfd_open (Linux 5.3)");
    if (errno == ESRCH) return Status(StatusCode::kPeerFailed, fmt::format("pidfd_open({}): the peer is gone", pid));
    return errno_status(errno, fmt::format("pidfd_open({})", pid));
  }
  Fd fd(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), peer_fd, 0)));
  if (!fd.valid()) {
    if (errno == ENOSYS) return Status(StatusCode::kUnsupported, "the kernel has no pidfd_getfd (Linux 5.6)");
    if (errno == EPERM) {
      return Status(StatusCode::kAccessDenied,
                    fmt::format("pidfd_getfd of the peer's descriptor {} (pid {}): not allowed (ptrace rules: "
                                "another user, Yama ptrace_scope, or the peer is not dumpable)",
                                peer_fd, pid));
    }
    if (errno == ESRCH) return Status(StatusCode::kPeerFailed, fmt::format("pidfd_getfd({}): the peer is gone", pid));
    return errno_status(errno, fmt::format("pidfd_getfd of the peer's descriptor {} (pid {})", peer_fd, pid));
  }
  return fd;  // pidfd_getfd sets close-on-exec
#else
  (void)pid;
  (void)peer_fd;
  return Status(StatusCode::kUnsupported, "built without pidfd_getfd (Linux 5.6)");
#endif
}

}  // namespace remora::net
