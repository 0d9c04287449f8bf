// zerocopy/zcrx_queue.cc — see zcrx_queue.h.
#include "zerocopy/zcrx_queue.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "zerocopy/io_uring_probe.h"
#include "zerocopy/pages.h"

#if defined(REMORA_HAVE_LIBURING)
#include <liburing.h>
#endif

namespace remora::zerocopy {

// ---- the real kernel ----------------------------------------------------------------

#if defined(REMORA_HAVE_LIBURING)
namespace {

constexpr uint64_t kWakeTag = 0;               // the eventfd's multishot poll
constexpr uint64_t kCancelTag = ~uint64_t{0};  // completions of our cancels
constexpr unsigned kSqEntries = 64;
constexpr unsigned kCqEntries = 4096;

class IoUringZcrxKernel final : public ZcrxKernel {
 public:
  ~IoUringZcrxKernel() override {
    if (ring_up_) io_uring_queue_exit(&ring_);  // unregisters the queue, frees the area's pinning
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  Status setup(KernelError* refusal) {
    io_uring_params p{};
    p.flags =
        uapi::kIoringSetupSingleIssuer | uapi::kIoringSetupDeferTaskrun | uapi::kIoringSetupCqe32 | IORING_SETUP_CQSIZE;
    p.cq_entries = kCqEntries;
    if (const int rc = io_uring_queue_init_params(kSqEntries, &ring_, &p); rc < 0) {
      if (refusal != nullptr) refusal->err = -rc;
      return Status(
          rc == -EPERM ? StatusCode::kAccessDenied : StatusCode::kUnsupported,
          "no ring with the zcrx setup flags (io_uring_setup(SINGLE_ISSUER|DEFER_TASKRUN|CQE32)): " + errno_text(-rc));
    }
    ring_up_ = true;
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return Status(StatusCode::kNoResource, "eventfd: " + errno_text(errno));
    return arm_wake();
  }

  Result<ZcrxRegistration> register_queue(uint32_t ifindex, uint32_t rx_queue, uint64_t area_bytes, uint32_t rq_entries,
                                          int dmabuf_fd, KernelError* refusal) override {
    const std::string what = fmt::format("io_uring zcrx registration of ifindex {} RX queue {}{}", ifindex, rx_queue,
                                         dmabuf_fd >= 0 ? " with a dmabuf area" : "");
    uapi::ZcrxIfqReg reg{};
    reg.if_idx = ifindex;
    reg.if_rxq = rx_queue;
    return register_ifq(what, reg, area_bytes, rq_entries, dmabuf_fd, refusal);
  }

  Result<ZcrxRegistration> register_device_less(uint64_t area_bytes, uint32_t rq_entries,
                                                KernelError* refusal) override {
    uapi::ZcrxIfqReg reg{};
    reg.flags = uapi::kZcrxRegNodev;
    const std::string what = "io_uring zcrx device-less registration (ZCRX_REG_NODEV)";
    KernelError ke;
    auto out = register_ifq(what, reg, area_bytes, rq_entries, -1, &ke);
    if (refusal != nullptr) *refusal = ke;
    if (out || ke.err == 0) return out;
    // Not the NIC's hints of zcrx_register_refusal: there is no NIC here.
    const std::string hint = ke.err == EINVAL  ? " — a kernel before Linux 7.1 does not know ZCRX_REG_NODEV"
                             : ke.err == EPERM ? " — registering a zcrx queue needs CAP_NET_ADMIN"
                                               : "";
    return Status(out.status().code(), fmt::format("{}: the kernel refused: {}{}", what, errno_text(ke.err), hint));
  }

  Status flush_refill() override {
    uapi::ZcrxCtrl ctrl{};
    ctrl.zcrx_id = zcrx_id_;
    ctrl.op = uapi::kZcrxCtrlFlushRq;
    if (::syscall(__NR_io_uring_register, ring_.ring_fd, uapi::kIoringRegisterZcrxCtrl, &ctrl, 0) < 0) {
      return Status(StatusCode::kInternal,
                    fmt::format("io_uring zcrx {}: ZCRX_CTRL_FLUSH_RQ: {}", zcrx_id_, errno_text(errno)));
    }
    return Status::ok();
  }

  /// IORING_REGISTER_ZCRX_IFQ of `reg` (its interface fields and flags filled in) with
  /// an area and a refill ring of ours.
  Result<ZcrxRegistration> register_ifq(const std::string& what, uapi::ZcrxIfqReg reg, uint64_t area_bytes,
                                        uint32_t rq_entries, int dmabuf_fd, KernelError* refusal) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    // The refill ring: a header page, then the entries (the kernel's documented sizing).
    refill_ = MappedPages((rq_entries * sizeof(uapi::ZcrxRqe) + page + page - 1) / page * page);
    if (dmabuf_fd < 0) area_ = MappedPages(area_bytes);
    if (refill_.get() == nullptr || (dmabuf_fd < 0 && area_.get() == nullptr)) {
      return Status(StatusCode::kNoResource, fmt::format("{}: mmap of {} bytes failed", what, area_bytes));
    }
    uapi::ZcrxAreaReg area_reg{};
    area_reg.len = area_bytes;
    if (dmabuf_fd >= 0) {
      area_reg.flags = uapi::kIoringZcrxAreaDmabuf;  // addr stays 0: the whole dmabuf
      area_reg.dmabuf_fd = static_cast<uint32_t>(dmabuf_fd);
    } else {
      area_reg.addr = reinterpret_cast<uintptr_t>(area_.get());
    }
    uapi::RegionDesc region{};
    region.user_addr = reinterpret_cast<uintptr_t>(refill_.get());
    region.size = refill_.size();
    region.flags = uapi::kIoringMemRegionTypeUser;
    reg.rq_entries = rq_entries;
    reg.area_ptr = reinterpret_cast<uintptr_t>(&area_reg);
    reg.region_ptr = reinterpret_cast<uintptr_t>(&region);
    // liburing 2.3 predates zcrx: the raw system call with our structs (zerocopy/uapi.h).
    if (::syscall(__NR_io_uring_register, ring_.ring_fd, uapi::kIoringRegisterZcrxIfq, &reg, 1) < 0) {
      const int err = errno;
      if (refusal != nullptr) refusal->err = err;
      return zcrx_register_refusal(what, err);
    }
    ZcrxRegistration out;
    out.area = static_cast<std::byte*>(area_.get());  // null for a dmabuf area
    out.area_bytes = area_bytes;
    out.refill = static_cast<std::byte*>(refill_.get());
    out.offsets = reg.offsets;
    out.rq_entries = reg.rq_entries;  // the kernel may round it
    out.area_token = area_reg.rq_area_token;
    out.zcrx_id = reg.zcrx_id;
    zcrx_id_ = reg.zcrx_id;
    return out;
  }

  Status arm(int fd, uint64_t user_data) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return Status(StatusCode::kNoResource, "io_uring: no free submission entry");
    io_uring_prep_rw(uapi::kIoringOpRecvZc, sqe, fd, nullptr, 0, 0);  // len 0: no limit
    sqe->ioprio |= uapi::kIoringRecvMultishot;
    sqe->file_index = zcrx_id_;  // the union member zcrx_ifq_idx
    io_uring_sqe_set_data64(sqe, user_data);
    return submit("RECV_ZC");
  }

  Status cancel(uint64_t user_data) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return Status(StatusCode::kNoResource, "io_uring: no free submission entry");
    io_uring_prep_cancel64(sqe, user_data, 0);
    io_uring_sqe_set_data64(sqe, kCancelTag);
    return submit("ASYNC_CANCEL");
  }

  Status wait(std::vector<ZcrxCompletion>* out) override {
    // DEFER_TASKRUN: the kernel moves received bytes and posts completions only here.
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME) {
      return Status(StatusCode::kInternal, "io_uring_enter(GETEVENTS) on the zcrx ring: " + errno_text(-rc));
    }
    unsigned head;
    unsigned seen = 0;
    bool rearm_wake = false;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kWakeTag) {
        uint64_t n;
        while (::read(wake_fd_, &n, sizeof n) == static_cast<ssize_t>(sizeof n)) {
        }
        if ((cqe->flags & IORING_CQE_F_MORE) == 0) rearm_wake = true;
        continue;
      }
      if (tag == kCancelTag) continue;  // the cancelled request's own last completion follows
      ZcrxCompletion c;
      c.user_data = tag;
      c.res = cqe->res;
      c.flags = cqe->flags;
      std::memcpy(&c.extra, cqe->big_cqe, sizeof c.extra);
      out->push_back(c);
    }
    io_uring_cq_advance(&ring_, seen);
    if (rearm_wake) return arm_wake();
    return Status::ok();
  }

  void wake() override {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

 private:
  Status arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return Status(StatusCode::kNoResource, "io_uring: no free submission entry");
    io_uring_prep_poll_multishot(sqe, wake_fd_, POLLIN);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    return submit("POLL_ADD");
  }

  Status submit(const char* what) {
    const int rc = io_uring_submit(&ring_);
    if (rc < 0) return Status(StatusCode::kInternal, fmt::format("io_uring_submit({}): {}", what, errno_text(-rc)));
    return Status::ok();
  }

  io_uring ring_{};
  bool ring_up_ = false;
  int wake_fd_ = -1;
  uint32_t zcrx_id_ = 0;
  MappedPages area_;
  MappedPages refill_;
};

}  // namespace
#endif  // REMORA_HAVE_LIBURING

Result<std::unique_ptr<ZcrxKernel>> make_io_uring_zcrx_kernel(KernelError* refusal) {
#if defined(REMORA_HAVE_LIBURING)
  auto k = std::make_unique<IoUringZcrxKernel>();
  REMORA_RETURN_IF_ERROR(k->setup(refusal));
  return std::unique_ptr<ZcrxKernel>(std::move(k));
#else
  (void)refusal;
  return Status(StatusCode::kUnsupported,
                "built without io_uring (liburing was not found at build time, or REMORA_WITH_IO_URING=OFF)");
#endif
}

Result<ZcrxRegistration> ZcrxKernel::register_device_less(uint64_t /*area_bytes*/, uint32_t /*rq_entries*/,
                                                          KernelError* /*refusal*/) {
  return Status(StatusCode::kUnsupported, "this zcrx kernel has no device-less mode");
}

// ---- the queue ----------------------------------------------------------------------

Result<std::shared_ptr<ZcrxQueue>> ZcrxQueue::open(const Options& options, ZcrxKernelFactory kernel,
                                                   KernelError* refusal) {
  std::shared_ptr<ZcrxQueue> q(new ZcrxQueue(options));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (options.dmabuf_fd < 0) {
    q->options_.area_bytes = std::max<uint64_t>(page, (options.area_bytes + page - 1) / page * page);
  } else if (options.area_bytes == 0 || options.area_bytes % page != 0) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("zcrx: a dmabuf area of {} bytes (a whole number of pages is needed)", options.area_bytes));
  }
  std::promise<Status> ready;
  auto registered = ready.get_future();
  KernelError ke;
  q->thread_ = std::thread([raw = q.get(), kernel = std::move(kernel), &ready, &ke] { raw->run(kernel, &ready, &ke); });
  Status s = registered.get();
  if (refusal != nullptr) *refusal = ke;
  if (!s.is_ok()) {
    q->thread_.join();  // it has ended
    return s;
  }
  return q;
}

ZcrxQueue::~ZcrxQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  // A stream's notify must not drop the last reference to its stream (that would end the
  // queue on its own thread).
  if (thread_.joinable()) {
    if (kernel_ != nullptr) kernel_->wake();
    thread_.join();
  }
}

void ZcrxQueue::run(ZcrxKernelFactory make_kernel, std::promise<Status>* ready, KernelError* refusal) {
  auto made = make_kernel();
  if (!made) {
    ready->set_value(made.status());
    return;
  }
  kernel_ = std::move(*made);
  standin_ = kernel_->standin();
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  // One refill entry per buffer at most: as many as the area has pages, a power of two,
  // within the kernel's bounds.
  const uint32_t entries =
      std::bit_ceil(static_cast<uint32_t>(std::clamp<uint64_t>(options_.area_bytes / page, 64, 32768)));
  auto reg = options_.device_less ? kernel_->register_device_less(options_.area_bytes, entries, refusal)
                                  : kernel_->register_queue(options_.ifindex, options_.rx_queue, options_.area_bytes,
                                                            entries, options_.dmabuf_fd, refusal);
  if (!reg) {
    kernel_.reset();
    ready->set_value(reg.status());
    return;
  }
  reg_ = *reg;
  refill_.emplace(reg_.refill, reg_.offsets, reg_.rq_entries, reg_.area_token);
  ready->set_value(Status::ok());  // `ready` and `refusal` are gone from here on

  std::vector<ZcrxCompletion> completions;
  std::vector<std::pair<Command, uint64_t>> commands;
  std::vector<std::function<void()>> notify;
  for (;;) {
    bool flush = false;
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
      commands.swap(commands_);
      flush_backlog_locked();
      flush = need_flush_;
      need_flush_ = false;
    }
    // Device-less: the buffers handed back since the last time go back into the area
    // before any receive is armed again (a starved one needs them).
    if (flush) {
      const Status flushed = kernel_->flush_refill();
      {
        std::lock_guard lock(mu_);
        ++stats_.flushes;
        if (!flushed.is_ok()) fail_all_locked(flushed, &notify);
      }
      if (!flushed.is_ok()) {
        arrived_.notify_all();
        for (auto& fn : notify) fn();
        break;
      }
    }
    for (const auto& [command, id] : commands) {
      Status s;
      int fd = -1;
      {
        std::lock_guard lock(mu_);
        auto it = streams_.find(id);
        if (it == streams_.end()) continue;
        if (command == Command::kArm && (it->second.closed || it->second.armed || it->second.err != 0)) continue;
        fd = it->second.fd;
        if (command == Command::kArm) it->second.armed = true;
      }
      s = command == Command::kArm ? kernel_->arm(fd, id) : kernel_->cancel(id);
      if (command == Command::kCancel) {
        std::lock_guard lock(mu_);
        if (auto it = streams_.find(id); it != streams_.end()) it->second.cancelled = true;
        cancelled_.notify_all();
      }
      if (!s.is_ok()) {
        std::lock_guard lock(mu_);
        auto it = streams_.find(id);
        if (it != streams_.end() && command == Command::kArm) {
          it->second.armed = false;
          it->second.err = EIO;
          it->second.why = s;
          if (it->second.notify) notify.push_back(it->second.notify);
          if (it->second.closed) streams_.erase(it);
        }
      }
      if (!s.is_ok()) arrived_.notify_all();
    }
    commands.clear();
    for (auto& fn : notify) fn();
    notify.clear();

    completions.clear();
    Status waited = kernel_->wait(&completions);
    {
      std::lock_guard lock(mu_);
      for (const ZcrxCompletion& c : completions) handle(c, &notify);
      if (!waited.is_ok()) fail_all_locked(waited, &notify);
    }
    if (!completions.empty() || !waited.is_ok()) {
      arrived_.notify_all();
      cancelled_.notify_all();  // a closed stream's last completion may have ended it before its cancel
    }
    for (auto& fn : notify) fn();
    notify.clear();
    if (!waited.is_ok()) break;
  }
  {
    std::lock_guard lock(mu_);
    if (broken_.is_ok()) broken_ = Status(StatusCode::kAborted, "zcrx queue: closing");
  }
  cancelled_.notify_all();  // closers waiting for a cancel: the thread no longer uses any socket
  // The ring stays open (its area mapped, its refill ring written by late releases)
  // until the queue is destroyed; closing it then unregisters the queue.
}

void ZcrxQueue::fail_all_locked(const Status& why, std::vector<std::function<void()>>* notify) {
  broken_ = why;
  for (auto& [id, s] : streams_) {
    s.armed = false;
    if (s.err == 0) {
      s.err = EIO;
      s.why = why;
    }
    if (s.notify) notify->push_back(s.notify);
  }
}

void ZcrxQueue::handle(const ZcrxCompletion& c, std::vector<std::function<void()>>* notify) {
  auto it = streams_.find(c.user_data);
  auto fragment = parse_zcrx_completion(c.res, c.flags, c.extra, reg_.area_bytes);
  if (it == streams_.end()) {
    // A stream that is gone: its buffer goes straight back.
    if (fragment && fragment->length > 0) {
      ++stats_.completions;
      stats_.bytes += fragment->length;
      refill_locked(fragment->area_offset, fragment->length);
    }
    return;
  }
  StreamState& s = it->second;
  const bool more = (c.flags & kIoringCqeFMore) != 0;
  if (!more) s.armed = false;
  if (!fragment) {
    if (s.closed) {
      if (!s.armed) streams_.erase(it);
      return;
    }
    if (c.res == -ENOBUFS || c.res == -ENOMEM) {
      // The area ran dry: the receive goes on once buffers come back. Device-less, when
      // the reader already gave every buffer back before this completion was seen, no
      // release is left to re-arm it: arm it now (the loop flushes the refill ring
      // first), or the stream would stop with its bytes waiting in the socket.
      if (!more && options_.device_less && stats_.held == 0) {
        commands_.emplace_back(Command::kArm, c.user_data);
      } else if (!more) {
        starved_.push_back(c.user_data);
      }
    } else if (s.err == 0) {
      s.err = c.res < 0 ? -c.res : EPROTO;
      s.why = fragment.status();
    }
    if (s.notify) notify->push_back(s.notify);
    return;
  }
  if (fragment->length == 0) {
    if (!more) s.eof = true;
  } else {
    ++stats_.completions;
    stats_.bytes += fragment->length;
    if (s.closed) {
      refill_locked(fragment->area_offset, fragment->length);
    } else {
      uint32_t slot;
      if (!free_slots_.empty()) {
        slot = free_slots_.back();
        free_slots_.pop_back();
      } else {
        slot = static_cast<uint32_t>(slots_.size());
        slots_.emplace_back();
      }
      slots_[slot] = Slot{
          .area_offset = fragment->area_offset, .length = fragment->length, .refs = 0, .queued = true, .live = true};
      ++stats_.held;
      s.arrivals.push_back(Arrival{.slot = slot, .taken = 0});
    }
    // A multishot that ended with neither an error nor the stream's end (the kernel's
    // completion queue overflowed, say): arm it again.
    if (!more && !s.closed && s.err == 0) commands_.emplace_back(Command::kArm, c.user_data);
  }
  if (s.closed) {
    if (!s.armed) streams_.erase(it);
    return;
  }
  if (s.notify) notify->push_back(s.notify);
}

void ZcrxQueue::refill_locked(uint64_t area_offset, uint32_t length) {
  if (!backlog_.empty() || !refill_->refill(area_offset, length)) {
    backlog_.emplace_back(area_offset, length);
    return;
  }
  ++stats_.refilled;
  need_flush_ = options_.device_less;
}

void ZcrxQueue::flush_backlog_locked() {
  while (!backlog_.empty() && refill_->refill(backlog_.front().first, backlog_.front().second)) {
    backlog_.pop_front();
    ++stats_.refilled;
    need_flush_ = options_.device_less;
  }
}

void ZcrxQueue::give_back_locked(uint32_t slot) {
  Slot& sl = slots_[slot];
  refill_locked(sl.area_offset, sl.length);
  sl = Slot{};
  free_slots_.push_back(slot);
  --stats_.held;
  if (starved_.empty()) {
    if (options_.device_less) kernel_->wake();  // the queue's thread flushes the refill ring
    return;
  }
  for (const uint64_t id : starved_) commands_.emplace_back(Command::kArm, id);
  starved_.clear();
  kernel_->wake();
}

Result<std::unique_ptr<ZcrxQueue::Stream>> ZcrxQueue::add_stream(int fd) {
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    if (!broken_.is_ok()) return broken_.with_context("zcrx queue");
    if (stopping_) return Status(StatusCode::kAborted, "zcrx queue: closing");
    id = next_id_++;
    StreamState& s = streams_[id];
    s.fd = fd;
    commands_.emplace_back(Command::kArm, id);
  }
  kernel_->wake();
  return std::unique_ptr<Stream>(new Stream(shared_from_this(), id));
}

net::IoResult ZcrxQueue::stream_take(uint64_t id, uint64_t len, std::vector<Stream::Piece>* pieces, Status* why) {
  std::lock_guard lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return net::IoResult{.kind = net::IoResult::Kind::kError, .err = EBADF};
  StreamState& s = it->second;
  uint64_t got = 0;
  while (got < len && !s.arrivals.empty()) {
    Arrival& a = s.arrivals.front();
    Slot& sl = slots_[a.slot];
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(len - got, sl.length - a.taken));
    pieces->push_back(Stream::Piece{.area_offset = sl.area_offset + a.taken, .length = n, .slot = a.slot});
    ++sl.refs;
    a.taken += n;
    got += n;
    if (a.taken == sl.length) {
      sl.queued = false;
      s.arrivals.pop_front();
    }
  }
  if (got > 0) return net::IoResult{.kind = net::IoResult::Kind::kBytes, .bytes = got};
  if (s.err != 0) {
    if (why != nullptr) *why = s.why;
    return net::IoResult{.kind = net::IoResult::Kind::kError, .err = s.err};
  }
  if (s.eof) return net::IoResult{.kind = net::IoResult::Kind::kEof};
  return net::IoResult{.kind = net::IoResult::Kind::kWouldBlock};
}

void ZcrxQueue::stream_release(uint32_t slot) {
  std::lock_guard lock(mu_);
  if (slot >= slots_.size() || !slots_[slot].live || slots_[slot].refs == 0) return;
  Slot& sl = slots_[slot];
  if (--sl.refs == 0 && !sl.queued) give_back_locked(slot);
}

Status ZcrxQueue::stream_wait(uint64_t id, net::Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const bool ready = arrived_.wait_until(lock, deadline, [&] {
    auto it = streams_.find(id);
    return it == streams_.end() || !it->second.arrivals.empty() || it->second.err != 0 || it->second.eof;
  });
  if (!ready) return Status(StatusCode::kTimeout, "io_uring zcrx: nothing arrived before the deadline");
  return Status::ok();
}

void ZcrxQueue::stream_set_notify(uint64_t id, std::function<void()> notify) {
  std::lock_guard lock(mu_);
  if (auto it = streams_.find(id); it != streams_.end()) it->second.notify = std::move(notify);
}

void ZcrxQueue::stream_close(uint64_t id) {
  bool cancel = false;
  {
    std::lock_guard lock(mu_);
    auto it = streams_.find(id);
    if (it == streams_.end() || it->second.closed) return;
    StreamState& s = it->second;
    s.closed = true;
    s.notify = nullptr;
    for (const Arrival& a : s.arrivals) {
      Slot& sl = slots_[a.slot];
      sl.queued = false;
      if (sl.refs == 0) give_back_locked(a.slot);
    }
    s.arrivals.clear();
    if (s.armed && !stopping_ && broken_.is_ok()) {
      commands_.emplace_back(Command::kCancel, id);
      cancel = true;
    } else {
      streams_.erase(it);
    }
  }
  if (!cancel) return;
  kernel_->wake();
  // Until the cancel is in the kernel the queue's thread may still hand the socket to it.
  // The thread is woken for it at once; the bound is for a thread stuck in the kernel.
  std::unique_lock lock(mu_);
  (void)cancelled_.wait_for(lock, std::chrono::seconds(30), [&] {
    auto it = streams_.find(id);
    return it == streams_.end() || it->second.cancelled || !broken_.is_ok() || stopping_;
  });
}

std::string ZcrxQueue::describe() const {
  if (options_.device_less) {
    return fmt::format(
        "io_uring zcrx in device-less mode (ZCRX_REG_NODEV: no NIC, the kernel copies every byte into the area; "
        "zcrx id {}, {}-byte host area, {} refill entries)",
        reg_.zcrx_id, reg_.area_bytes, reg_.rq_entries);
  }
  return fmt::format("io_uring zcrx{} on ifindex {} RX queue {} (zcrx id {}, {}-byte {} area, {} refill entries)",
                     standin_ ? " (a test's stand-in NIC)" : "", options_.ifindex, options_.rx_queue, reg_.zcrx_id,
                     reg_.area_bytes, options_.dmabuf_fd >= 0 ? "dmabuf" : "host", reg_.rq_entries);
}

ZcrxQueue::Stats ZcrxQueue::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// ---- a stream -----------------------------------------------------------------------

net::IoResult ZcrxQueue::Stream::take(uint64_t len, std::vector<Piece>* pieces, Status* why) {
  return queue_->stream_take(id_, len, pieces, why);
}
void ZcrxQueue::Stream::release(uint32_t slot) { queue_->stream_release(slot); }
Status ZcrxQueue::Stream::wait(net::Clock::time_point deadline) { return queue_->stream_wait(id_, deadline); }
void ZcrxQueue::Stream::set_notify(std::function<void()> notify) { queue_->stream_set_notify(id_, std::move(notify)); }
void ZcrxQueue::Stream::close() { queue_->stream_close(id_); }
ZcrxQueue::Stream::~Stream() { close(); }

}  // namespace remora::zerocopy
