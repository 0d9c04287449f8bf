// tests/zerocopy/devmem_nic_standin.h — a stand-in for the kernel and a devmem NIC on
// the receive side, for tests on machines where no NIC can do devmem TCP (the kernel
// boundary, not code under test): it reads real bytes off a real socket and hands them
// over as recvmsg(MSG_SOCK_DEVMEM) would, each page-sized piece laid into a free page of
// the "dmabuf" (written there as the NIC's DMA would) and described by an
// SCM_DEVMEM_DMABUF control message with a fresh token, in the kernel's layouts; a page
// comes back only with SO_DEVMEM_DONTNEED of its token. Thread-safe (an endpoint reads
// its streams on the progress thread, and a connecting one its handshake on the caller's).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "datapath/devmem_path.h"
#include "remora/memory.h"
#include "zerocopy/token_return.h"
#include "zerocopy/uapi.h"

namespace remora::zerocopy::test {

struct NicStandIn {
  static constexpr size_t kPage = 4096;

  MemoryDomain* dev = nullptr;  // the dmabuf is this device's memory (written by its copies); null: host memory
  std::byte* dmabuf = nullptr;  // where its pages are (dev's memory when dev is set)
  uint64_t frag_base = 0;       // the dmabuf offset of `dmabuf`'s byte 0 (fragments are reported from there)
  size_t pages = 0;
  uint32_t binding = 7;
  size_t piece = kPage;
  int linear_every = 0;               // > 0: every n-th piece is linear (a header-split miss)
  bool truncate = false;              // report MSG_CTRUNC
  bool outside = false;               // hand out one fragment past the dmabuf's end
  std::atomic<bool> misroute{false};  // hand the bytes over with no control message at all
  // > 0: at most this many bytes per recvmsg however many are queued, as the kernel's
  // recvmsg stops where linear and dmabuf data meet.
  size_t max_read = 0;

  std::mutex mu;  // guards what follows
  std::set<size_t> free_pages;
  std::map<uint32_t, size_t> outstanding;  // token -> page
  uint32_t next_token = 1;
  int pieces = 0;
  uint64_t bytes = 0;  // handed over as dmabuf fragments
  std::vector<std::vector<uapi::DmabufToken>> dontneed_calls;
  std::function<void()> on_dontneed;  // runs at each SO_DEVMEM_DONTNEED
  std::function<void()> after_dma;    // runs when a recvmsg has laid its bytes into the dmabuf

  void init(size_t n) {
    std::lock_guard lock(mu);
    pages = n;
    for (size_t i = 0; i < n; ++i) free_pages.insert(i);
  }

  ssize_t recvmsg(int fd, msghdr* msg, int flags) {
    EXPECT_NE(flags & uapi::kMsgSockDevmem, 0);
    if (misroute) {
      // What this kernel does for a flow no rule steered: the bytes, no devmem cmsg.
      const ssize_t n = ::recv(fd, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, MSG_DONTWAIT);
      msg->msg_controllen = 0;
      msg->msg_flags = 0;
      return n;
    }
    std::unique_lock lock(mu);
    const size_t want = msg->msg_iov[0].iov_len;
    std::vector<std::byte> got(std::min({want, free_pages.size() * piece, max_read > 0 ? max_read : want}));
    if (got.empty()) {
      errno = EAGAIN;
      return -1;
    }
    const ssize_t n = ::recv(fd, got.data(), got.size(), MSG_DONTWAIT);
    if (n <= 0) return n;
    auto* control = static_cast<std::byte*>(msg->msg_control);
    size_t control_used = 0, linear_used = 0;
    for (size_t at = 0; at < static_cast<size_t>(n);) {
      const size_t len = std::min(piece, static_cast<size_t>(n) - at);
      uapi::DmabufCmsg c{};
      cmsghdr h{};
      h.cmsg_len = CMSG_LEN(sizeof c);
      h.cmsg_level = SOL_SOCKET;
      ++pieces;
      if (linear_every > 0 && pieces % linear_every == 0) {
        h.cmsg_type = uapi::kScmDevmemLinear;
        std::memcpy(static_cast<std::byte*>(msg->msg_iov[0].iov_base) + linear_used, got.data() + at, len);
        linear_used += len;
      } else {
        const size_t page = *free_pages.begin();
        free_pages.erase(free_pages.begin());
        if (dev != nullptr) {
          auto copy = dev->copy_from_host(dmabuf + page * kPage, got.data() + at, len);
          EXPECT_TRUE(copy.is_ok() && (*copy)->wait(std::chrono::seconds(30)).is_ok());
        } else {
          std::memcpy(dmabuf + page * kPage, got.data() + at, len);
        }
        h.cmsg_type = uapi::kScmDevmemDmabuf;
        c.frag_offset = frag_base + (outside ? pages * kPage : page * kPage);
        c.frag_token = next_token++;
        c.dmabuf_id = binding;
        outstanding[c.frag_token] = page;
        bytes += len;
      }
      c.frag_size = static_cast<uint32_t>(len);
      if (control_used + CMSG_SPACE(sizeof c) > msg->msg_controllen) {
        ADD_FAILURE() << "control buffer too small";
        break;
      }
      std::memcpy(control + control_used, &h, sizeof h);
      std::memcpy(control + control_used + CMSG_LEN(0), &c, sizeof c);
      control_used += CMSG_SPACE(sizeof c);
      at += len;
    }
    msg->msg_controllen = control_used;
    msg->msg_flags = truncate ? MSG_CTRUNC : 0;
    lock.unlock();
    if (after_dma) after_dma();
    return n;
  }

  Result<uint32_t> dontneed(int /*fd*/, std::span<const uapi::DmabufToken> ranges) {
    if (on_dontneed) on_dontneed();
    std::lock_guard lock(mu);
    dontneed_calls.emplace_back(ranges.begin(), ranges.end());
    uint32_t freed = 0;
    for (const auto& r : ranges) {
      for (uint32_t t = r.token_start; t != r.token_start + r.token_count; ++t) {
        auto it = outstanding.find(t);
        if (it == outstanding.end()) continue;
        free_pages.insert(it->second);
        outstanding.erase(it);
        ++freed;
      }
    }
    return freed;
  }

  size_t tokens_out() {
    std::lock_guard lock(mu);
    return outstanding.size();
  }

  detail::RecvmsgFn recvmsg_fn() {
    return [this](int fd, msghdr* m, int f) { return recvmsg(fd, m, f); };
  }
  DontneedFn dontneed_fn() {
    return [this](int fd, std::span<const uapi::DmabufToken> r) { return dontneed(fd, r); };
  }
};

}  // namespace remora::zerocopy::test
