// net/same_host.cc — see same_host.h.
#include "net/same_host.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace remora::net {
namespace {

/// The word a peer reads to prove it can read this process; never changes once set.
volatile uint64_t g_probe = 0;

std::array<std::byte, 16> read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string text, hex;
  if (!(in >> text)) return {};
  for (char c : text) {
    if (c != '-') hex += c;
  }
  std::array<std::byte, 16> id{};
  if (hex.size() != 2 * id.size()) return {};
  for (size_t i = 0; i < id.size(); ++i) {
    const std::string pair = hex.substr(2 * i, 2);
    char* end = nullptr;
    const unsigned long v = std::strtoul(pair.c_str(), &end, 16);
    if (end != pair.c_str() + 2) return {};
    id[i] = static_cast<std::byte>(v);
  }
  return id;
}

HostIdentity compute() {
  HostIdentity id;
  id.boot_id = read_boot_id();
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) == 0) id.netns = st.st_ino;
  uint64_t value = 0;
  while (value == 0) {
    if (::getrandom(&value, sizeof value, 0) != static_cast<ssize_t>(sizeof value)) {
      value = static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^ reinterpret_cast<uintptr_t>(&id);
    }
  }
  g_probe = value;
  id.probe_address = reinterpret_cast<uintptr_t>(&g_probe);
  id.probe_value = value;
  return id;
}

}  // namespace

HostIdentity this_host() {
  static const HostIdentity kOnce = compute();
  HostIdentity id = kOnce;
  id.pid = static_cast<uint32_t>(::getpid());
  return id;
}

std::string same_host_refusal(const HostIdentity& peer) {
  const HostIdentity me = this_host();
  static constexpr std::array<std::byte, 16> kNone{};
  if (me.boot_id == kNone || peer.boot_id != me.boot_id) return "the peer runs on another host (boot id)";
  if (me.netns == 0 || peer.netns != me.netns) return "the peer is in another network namespace";
  if (peer.pid == 0 || peer.probe_value == 0) return "the peer named no probe";
  uint64_t got = 0;
  const IoResult r =
      read_peer(static_cast<pid_t>(peer.pid), reinterpret_cast<std::byte*>(&got), peer.probe_address, sizeof got);
  if (r.error()) {
    return fmt::format("process_vm_readv of the peer's probe (pid {}) failed: {}{}", peer.pid, std::strerror(r.err),
                       r.err == EPERM ? " (Yama ptrace_scope, or the peer is not dumpable)" : "");
  }
  if (r.bytes != sizeof got || got != peer.probe_value) {
    return fmt::format("pid {} here is not the peer (its probe word differs: another pid namespace)", peer.pid);
  }
  return {};
}

IoResult read_peer(pid_t pid, std::byte* dst, uint64_t remote, size_t len) noexcept {
  const iovec local{dst, len};
  const iovec far{reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), len};
  while (true) {
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &far, 1, 0);
    if (n >= 0) return IoResult{IoResult::Kind::kBytes, static_cast<size_t>(n), 0};
    if (errno == EINTR) continue;
    return IoResult{IoResult::Kind::kError, 0, errno};
  }
}

void HugePagePromoter::announced(uint64_t address, uint64_t length) {
  if (length == 0) return;
  const uint64_t end = address + length;
  for (uint64_t frame = address & ~(kFrameBytes - 1); frame < end; frame += kFrameBytes) {
    auto it = frames_.find(frame);
    if (it == frames_.end()) {
      if (frames_.size() >= kMaxFrames) frames_.clear();
      it = frames_.emplace(frame, Frame{}).first;
    }
    Frame& f = it->second;
    if (f.done) continue;
    // The frame's pages the range touches (a page partly in it is mapped memory in use).
    const uint64_t first = (std::max(address, frame) - frame) / kPageBytes;
    const uint64_t last = (std::min(end, frame + kFrameBytes) - 1 - frame) / kPageBytes;
    // The range comes back to pages of this pass: the pass ended before it. Only the
    // pages the range covers whole say so (chunks that end inside a page share it).
    const uint64_t whole_from = (std::max(address, frame) - frame + kPageBytes - 1) / kPageBytes;
    const uint64_t whole_to = (std::min(end, frame + kFrameBytes) - frame) / kPageBytes;  // exclusive
    bool again = false;
    for (uint64_t page = whole_from; page < whole_to && !again; ++page) again = f.seen.test(page);
    if (again && end_pass(frame, f)) continue;
    for (uint64_t page = first; page <= last; ++page) f.seen.set(page);
    if (f.seen.all()) end_pass(frame, f);
  }
}

bool HugePagePromoter::end_pass(uint64_t frame, Frame& f) {
  // A pass that used less than kMinShare of the frame does not count (nor does it
  // break the count): collapsing would allocate the rest of the frame for little.
  if (f.seen.count() >= kFramePages * kMinShareNum / kMinShareDen) {
    if (f.passes < kPasses) ++f.passes;
    if (f.passes == kPasses) try_collapse(frame, f);
  }
  f.seen.reset();
  return f.done;
}

void HugePagePromoter::try_collapse(uint64_t frame, Frame& f) {
#ifndef MADV_COLLAPSE
  constexpr int MADV_COLLAPSE = 25;  // Linux 6.1; older headers lack it
#endif
  if (::madvise(reinterpret_cast<void*>(frame), kFrameBytes, MADV_COLLAPSE) == 0) {
    ++promoted_;
    f.done = true;
    return;
  }
  ++refused_;
  // EINVAL: the kernel has no MADV_COLLAPSE, THP is off, or the memory is not of a kind
  // it collapses; none of that changes. EAGAIN, ENOMEM, EBUSY: maybe at a later pass.
  if (errno == EINVAL || ++f.attempts >= kAttempts) f.done = true;
}

}  // namespace remora::net
