// net/same_host.h — reading a peer process's memory on the same host with
// process_vm_readv(2) (cross-memory attach), the way Open MPI's and UCX's shared-memory
// transports move large messages between processes of one node: one copy, made by the
// reader, with no socket and no kernel buffer in between.
//
// The kernel allows it where ptrace would be allowed (same user, Yama's ptrace_scope,
// no PR_SET_DUMPABLE 0, CAP_SYS_PTRACE otherwise): this side proves it can read the
// peer by reading the peer's probe word (a random value at an address the peer names)
// before it ever reads anything else.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "net/io.h"
#include "remora/status.h"

namespace remora::net {

/// Who this process is on its host.
struct HostIdentity {
  uint32_t pid = 0;
  std::array<std::byte, 16> boot_id{};  ///< all zero when unreadable (then never the same host)
  uint64_t netns = 0;                   ///< inode of /proc/self/ns/net; 0 when unreadable
  uint64_t probe_address = 0;           ///< address of this process's probe word
  uint64_t probe_value = 0;             ///< random, nonzero, fixed for the process
};

/// This process's identity (computed once; the pid is read each call, for forks).
HostIdentity this_host();

/// Why a peer claiming `peer` cannot be read from here, or "" when it can: another
/// host (boot id), another network namespace (remora treats one as another host: the
/// tests' network namespaces are), or a probe the kernel refuses or that reads
/// another value (another pid namespace, another process). Reads only the probe word.
std::string same_host_refusal(const HostIdentity& peer);

/// Reads `len` bytes at `remote` in process `pid` into `dst` (one process_vm_readv;
/// EINTR retried). kBytes with fewer bytes than asked when the range ends in memory the
/// peer has not mapped; kError with the errno (ESRCH: the process is gone; EFAULT: the
/// first byte is unmapped; EPERM: not allowed).
IoResult read_peer(pid_t pid, std::byte* dst, uint64_t remote, size_t len) noexcept;

}  // namespace remora::net
