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
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

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

/// Collapses the memory a same-host peer pulls again and again into transparent huge
/// pages. The reader's kernel pins and walks every page it reads out of: here
/// process_vm_readv reads 6.4 GB/s out of 4 KiB pages and 17 GB/s out of 2 MiB ones.
/// Buffers that are sent every step (a training loop's gradient buckets, a KV cache's
/// blocks) therefore gain from being collapsed once, with madvise(MADV_COLLAPSE)
/// (Linux 6.1), which PyTorch's own huge-page allocator would have given them.
///
/// It watches the 2 MiB frames that the chunks this side announces for pulling touch,
/// and collapses a frame once at least half of its pages were announced, then announced
/// again, twice over (two passes; a pass ends when every page of the frame was announced
/// or when an announcement comes back to a page of the pass): memory in use, and used
/// again, so the collapse allocates at most the frame's other half (a 1 MiB buffer
/// sent again and again inside a larger allocation) and its cost (about 0.6 ms per
/// frame) is paid once. The contents never change (the kernel
/// copies the pages under its own locks); a frame the kernel will not collapse (pages
/// pinned at that moment, no huge page free, THP "never", memory it cannot collapse)
/// is tried again at later passes, at most kAttempts times. A frame collapsed or given
/// up is not watched again, even where its memory is unmapped and the address reused,
/// until kMaxFrames frames have been seen. Config::pull_huge_pages.
class HugePagePromoter {
 public:
  static constexpr uint64_t kFrameBytes = uint64_t{2} << 20;
  static constexpr uint64_t kPageBytes = 4096;
  static constexpr int kPasses = 2;
  static constexpr int kAttempts = 4;
  static constexpr uint64_t kFramePages = kFrameBytes / kPageBytes;
  /// The least share of a frame's pages a pass must announce to count: one half.
  static constexpr uint64_t kMinShareNum = 1, kMinShareDen = 2;
  /// Frames watched at most (32 GiB of memory); beyond that it starts afresh.
  static constexpr size_t kMaxFrames = 16384;

  /// [address, address + length) of this process was announced for a peer to pull.
  void announced(uint64_t address, uint64_t length);
  /// Frames collapsed, and collapses the kernel refused.
  uint64_t promoted() const noexcept { return promoted_; }
  uint64_t refused() const noexcept { return refused_; }

 private:
  struct Frame {
    std::bitset<kFrameBytes / kPageBytes> seen;  // pages announced in this pass
    uint8_t passes = 0;
    uint8_t attempts = 0;
    bool done = false;  // collapsed, or given up
  };
  /// Ends the frame's pass, counting it if it used enough of the frame and collapsing
  /// the frame after kPasses; true when the frame is done with.
  bool end_pass(uint64_t frame, Frame& f);
  void try_collapse(uint64_t frame, Frame& f);

  std::unordered_map<uint64_t, Frame> frames_;
  uint64_t promoted_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace remora::net
