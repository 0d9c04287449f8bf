// net/shared_memory.h — memory that processes of one host map together: a sealed memfd
// one process creates and the others take with pidfd_getfd(2) (allowed where
// process_vm_readv is: same user, or CAP_SYS_PTRACE). The shared-memory channel's rings
// (net/shm_ring.h) and a communicator's segment (coll/shm_segment.h) live in one.
//
// Sealed against shrinking and growing, so no process can make another's mapping fault.
// Every byte of it may be written by a hostile peer: what lives in it is checked where it
// is read.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "net/socket.h"
#include "remora/status.h"

namespace remora::net {

/// A mapping of a sealed memfd (move-only; unmaps on destruction).
class SharedMemory {
 public:
  /// A new memfd of `bytes` (zeros) named `name` (what /proc/PID/fd shows), sealed and
  /// mapped. fd() is the descriptor a peer takes.
  static Result<SharedMemory> create(const char* name, size_t bytes);
  /// Maps the whole of a memfd a peer created (taken with take_peer_fd) and closes `fd`.
  /// kProtocol, naming `what`, when it is not a memfd sealed against shrinking and growing.
  static Result<SharedMemory> adopt(Fd fd, std::string_view what);

  SharedMemory() = default;
  SharedMemory(SharedMemory&& o) noexcept { *this = std::move(o); }
  SharedMemory& operator=(SharedMemory&& o) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  bool valid() const noexcept { return base_ != nullptr; }
  std::byte* base() const noexcept { return static_cast<std::byte*>(base_); }
  size_t size() const noexcept { return size_; }
  /// The descriptor peers take (-1 once closed, and in a mapping that was adopted).
  int fd() const noexcept { return fd_.get(); }
  void close_fd() noexcept { fd_.reset(); }
  /// ThreadSanitizer builds: one address per memfd, shared by every mapping of it in
  /// this process (two ranks or endpoints of one process map it at two addresses, where
  /// ThreadSanitizer cannot see the shared counters order them): give it to
  /// sync_acquire and sync_release. Null otherwise.
  void* sync_key() const noexcept { return sync_key_; }

 private:
  static Result<SharedMemory> map(Fd fd, size_t bytes);
  Fd fd_;
  void* base_ = nullptr;
  size_t size_ = 0;
  void* sync_key_ = nullptr;
};

/// For ThreadSanitizer (no-ops otherwise): what this thread wrote to the memory before
/// sync_release(key) is seen by a thread after its sync_acquire(key).
void sync_acquire(void* key) noexcept;
void sync_release(void* key) noexcept;

/// The peer's descriptor `peer_fd` of process `pid`, taken with pidfd_open(2) and
/// pidfd_getfd(2) (close-on-exec). kUnsupported on kernels without them (before 5.6),
/// kAccessDenied where the kernel does not let this process take it (EPERM: ptrace
/// rules), kPeerFailed when the process is gone, else the errno.
Result<Fd> take_peer_fd(pid_t pid, int peer_fd);
/// The size of a memfd the peer handed over, once it is seen sealed against shrinking and
/// growing (so a mapping of it can never fault): kProtocol otherwise, naming `what`.
Result<uint64_t> sealed_memfd_size(int fd, std::string_view what);

}  // namespace remora::net
