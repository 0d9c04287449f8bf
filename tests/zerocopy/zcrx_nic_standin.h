// tests/zerocopy/zcrx_nic_standin.h — a stand-in for the kernel and a NIC that can do
// io_uring zero-copy receive, for tests on machines where none can (the kernel boundary,
// not code under test; every interface here refuses IORING_REGISTER_ZCRX_IFQ). It plays
// ZcrxKernel: the area and the refill ring are memory of its own, laid out as the kernel
// lays them out; each armed socket's real bytes are read off the real socket into a free
// page of the area (written there as the NIC's DMA would) and reported as a RECV_ZC
// completion in the kernel's layout (length in res, area offset | area id in the CQE's
// second half, IORING_CQE_F_MORE while armed). A page is free again only when the
// application puts its {offset | area token, length} on the refill ring, which the
// stand-in takes from the ring's head as the kernel does; with no free page it stops
// reading (the NIC would drop, TCP holds back). Its end of stream is a completion of 0,
// a failed recv one of -errno, a cancel one of -ECANCELED. With a dmabuf area (device
// memory) it writes the bytes there through the test's write_area (its device's copy)
// and, as the kernel, takes only a whole dmabuf of exactly the area's size.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "zerocopy/io_uring_probe.h"
#include "zerocopy/pages.h"
#include "zerocopy/zcrx_queue.h"

namespace remora::zerocopy::test {

class ZcrxNicStandIn final : public ZcrxKernel {
 public:
  static constexpr size_t kPage = 4096;
  static constexpr uint64_t kAreaId = 1;  // the top 16 bits of offsets and of the area token
  static constexpr uint32_t kZcrxId = 3;

  /// What a test may set (before the queue opens) and read (any time).
  struct Shared {
    std::atomic<size_t> piece{kPage};     // bytes per completion at most (<= kPage)
    std::atomic<bool> refuse{false};      // refuse the registration with EOPNOTSUPP
    std::atomic<bool> outside{false};     // report the next completion past the area's end
    std::atomic<int> fail_recv_errno{0};  // end the next receive with -errno
    // > 0: once this many completions were made, the next receive ends with -ECONNRESET
    // (its connection reset), once.
    std::atomic<uint64_t> reset_after{0};
    std::atomic<uint64_t> completions{0};
    std::atomic<uint64_t> bytes{0};          // laid into the area
    std::atomic<uint64_t> refills{0};        // refill entries taken from the ring
    std::atomic<uint64_t> bad_refills{0};    // entries with a wrong token, offset or length
    std::atomic<uint64_t> starved_polls{0};  // waits that found no free page
    std::atomic<uint32_t> armed{0};
    std::atomic<uint32_t> cancels{0};
    std::atomic<uint32_t> registered_ifindex{0}, registered_queue{0};
    std::atomic<bool> registered_dmabuf{false};
    /// A dmabuf area (device memory): how the "NIC" writes `n` bytes at `offset` of it
    /// (the test's device copy). Set before the queue opens.
    std::function<void(uint64_t offset, const std::byte* data, size_t n)> write_area;
  };

  explicit ZcrxNicStandIn(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  ~ZcrxNicStandIn() override { ::close(wake_fd_); }

  /// A factory for ZcrxQueue::open sharing `shared`.
  static ZcrxKernelFactory factory(std::shared_ptr<Shared> shared) {
    return [shared]() -> Result<std::unique_ptr<ZcrxKernel>> {
      return std::unique_ptr<ZcrxKernel>(std::make_unique<ZcrxNicStandIn>(shared));
    };
  }

  bool standin() const override { return true; }

  Result<ZcrxRegistration> register_queue(uint32_t ifindex, uint32_t rx_queue, uint64_t area_bytes, uint32_t rq_entries,
                                          int dmabuf_fd, KernelError* refusal) override {
    auto refuse = [&](int err) -> Status {
      if (refusal != nullptr) refusal->err = err;
      return zcrx_register_refusal("stand-in zcrx registration", err);
    };
    if (shared_->refuse) return refuse(EOPNOTSUPP);
    if (dmabuf_fd >= 0) {
      // As the kernel: the whole dmabuf is the area, its size exactly the area's.
      const off_t size = ::lseek(dmabuf_fd, 0, SEEK_END);
      if (size < 0) return refuse(EBADF);
      if (static_cast<uint64_t>(size) != area_bytes || !shared_->write_area) return refuse(EINVAL);
      shared_->registered_dmabuf = true;
      bounce_.resize(kPage);
    } else {
      area_ = MappedPages(area_bytes);
    }
    area_bytes_ = area_bytes;
    shared_->registered_ifindex = ifindex;
    shared_->registered_queue = rx_queue;
    entries_ = rq_entries;
    refill_ = MappedPages(kRqes + rq_entries * sizeof(uapi::ZcrxRqe));
    for (size_t p = 0; p < area_bytes / kPage; ++p) free_.insert(p);
    ZcrxRegistration r;
    r.area = static_cast<std::byte*>(area_.get());  // null for a dmabuf area
    r.area_bytes = area_bytes;
    r.refill = static_cast<std::byte*>(refill_.get());
    r.offsets = uapi::ZcrxOffsets{.head = kHead, .tail = kTail, .rqes = kRqes, .resv2 = 0, .resv = {0, 0}};
    r.rq_entries = rq_entries;
    r.area_token = kAreaId << uapi::kIoringZcrxAreaShift;
    r.zcrx_id = kZcrxId;
    return r;
  }

  Status arm(int fd, uint64_t user_data) override {
    armed_[user_data] = fd;
    ++shared_->armed;
    return Status::ok();
  }

  Status cancel(uint64_t user_data) override {
    ++shared_->cancels;
    if (armed_.erase(user_data) > 0) pending_.push_back(ZcrxCompletion{.user_data = user_data, .res = -ECANCELED});
    return Status::ok();
  }

  Status wait(std::vector<ZcrxCompletion>* out) override {
    for (;;) {
      take_refills();
      out->insert(out->end(), pending_.begin(), pending_.end());
      pending_.clear();
      receive(out);
      if (!out->empty()) return Status::ok();
      std::vector<pollfd> fds{{wake_fd_, POLLIN, 0}};
      if (!free_.empty()) {
        for (const auto& [id, fd] : armed_) fds.push_back({fd, POLLIN, 0});
      } else {
        ++shared_->starved_polls;
      }
      // With no free page the refill ring is looked at again every millisecond, as a
      // NIC's page pool takes refills when it needs them (no wake-up comes for them).
      const int rc = ::poll(fds.data(), fds.size(), free_.empty() ? 1 : -1);
      if (rc < 0 && errno != EINTR) return Status(StatusCode::kInternal, "stand-in poll failed");
      if (fds[0].revents & POLLIN) {
        uint64_t n;
        (void)!::read(wake_fd_, &n, sizeof n);
        return Status::ok();
      }
    }
  }

  void wake() override {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

 private:
  static constexpr uint32_t kHead = 0, kTail = 64, kRqes = 128;

  std::atomic_ref<uint32_t> word(uint32_t at) {
    return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(static_cast<std::byte*>(refill_.get()) + at));
  }

  void take_refills() {
    uint32_t head = word(kHead).load(std::memory_order_relaxed);
    const uint32_t tail = word(kTail).load(std::memory_order_acquire);
    for (; head != tail; ++head) {
      uapi::ZcrxRqe e;
      std::memcpy(&e, static_cast<std::byte*>(refill_.get()) + kRqes + (head & (entries_ - 1)) * sizeof e, sizeof e);
      const uint64_t off = e.off & ~kZcrxAreaMask;
      const size_t page = off / kPage;
      auto lent = lent_.find(page);
      if ((e.off & kZcrxAreaMask) != (kAreaId << uapi::kIoringZcrxAreaShift) || lent == lent_.end() ||
          lent->second != e.len || off % kPage != 0) {
        ++shared_->bad_refills;
        continue;
      }
      lent_.erase(lent);
      free_.insert(page);
      ++shared_->refills;
    }
    word(kHead).store(head, std::memory_order_release);
  }

  void receive(std::vector<ZcrxCompletion>* out) {
    for (auto it = armed_.begin(); it != armed_.end() && !free_.empty();) {
      const auto [id, fd] = *it;
      const size_t page = *free_.begin();
      std::byte* at = area_.get() != nullptr ? static_cast<std::byte*>(area_.get()) + page * kPage : bounce_.data();
      int err = shared_->fail_recv_errno.exchange(0);
      if (const uint64_t after = shared_->reset_after.load(); err == 0 && after != 0 && shared_->completions >= after) {
        shared_->reset_after = 0;
        err = ECONNRESET;
      }
      if (err != 0) {
        out->push_back(ZcrxCompletion{.user_data = id, .res = -err});
        it = armed_.erase(it);
        continue;
      }
      const ssize_t n = ::recv(fd, at, std::min<size_t>(shared_->piece, kPage), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        ++it;
        continue;
      }
      ZcrxCompletion c{.user_data = id, .res = n < 0 ? -errno : static_cast<int32_t>(n)};
      if (n > 0) {
        if (area_.get() == nullptr) shared_->write_area(page * kPage, at, static_cast<size_t>(n));  // the NIC's DMA
        free_.erase(free_.begin());
        lent_[page] = static_cast<uint32_t>(n);
        c.flags = kIoringCqeFMore;
        uint64_t off = page * kPage;
        if (shared_->outside.exchange(false)) off = area_bytes_ + kPage;
        c.extra.off = (kAreaId << uapi::kIoringZcrxAreaShift) | off;
        ++shared_->completions;
        shared_->bytes += static_cast<uint64_t>(n);
        out->push_back(c);
        ++it;
        continue;
      }
      out->push_back(c);  // the end of the stream, or its error: the multishot ends
      it = armed_.erase(it);
    }
  }

  std::shared_ptr<Shared> shared_;
  int wake_fd_ = -1;
  MappedPages area_;  // a host area (none for a dmabuf area)
  uint64_t area_bytes_ = 0;
  std::vector<std::byte> bounce_;  // a dmabuf area: a page read off the socket on its way there
  MappedPages refill_;
  uint32_t entries_ = 0;
  std::set<size_t> free_;            // pages the NIC may fill
  std::map<size_t, uint32_t> lent_;  // page -> bytes handed to the application
  std::map<uint64_t, int> armed_;    // user_data -> socket
  std::vector<ZcrxCompletion> pending_;
};

}  // namespace remora::zerocopy::test
