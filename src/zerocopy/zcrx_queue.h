// zerocopy/zcrx_queue.h — io_uring zero-copy receive (zcrx) driven for real: one NIC RX
// queue registered with an io_uring of its own (IORING_REGISTER_ZCRX_IFQ, a host memory
// area and a refill ring), a multishot RECV_ZC armed on each TCP socket whose flow is
// steered to that queue, and the completions handed to the socket's reader as pieces of
// the area, in stream order. A piece's buffer goes back to the NIC through the refill
// ring once its reader says it is done with it (release), never before.
//
// Threads: zcrx needs a ring set up SINGLE_ISSUER | DEFER_TASKRUN | CQE32, which only the
// task that set it up may submit to and reap from, and whose completions are posted only
// when that task enters the kernel. So each queue has a thread of its own that sets the
// ring up, registers the queue, and then sleeps in io_uring_enter until completions come
// (or it is woken for work: a socket to arm or cancel, refills the ring had no room
// for). Readers take pieces and release them from any thread; the queue tells a stream's
// reader that pieces arrived through the stream's notify callback (an endpoint posts it
// to its progress engine: the socket itself no longer becomes readable to epoll once the
// kernel has moved its bytes into the area).
//
// The kernel calls are behind ZcrxKernel: the io_uring ones (make_io_uring_zcrx_kernel,
// which needs liburing at build time), or a test's stand-in NIC. On this project's
// machines the registration is refused on every interface (lo, veth, virtio_net: no
// queue-management API, no header split), so what has run here is the refusal and
// everything above the kernel boundary through the stand-in (docs/device-memory.md).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "net/io.h"
#include "net/socket.h"
#include "remora/status.h"
#include "zerocopy/kernel_error.h"
#include "zerocopy/uapi.h"
#include "zerocopy/zcrx_ring.h"

namespace remora::zerocopy {

/// One completion as the kernel posts it on a CQE32 ring.
struct ZcrxCompletion {
  uint64_t user_data = 0;
  int32_t res = 0;
  uint32_t flags = 0;
  uapi::ZcrxCqe extra{};
};

/// What IORING_REGISTER_ZCRX_IFQ set up: the area the NIC receives into, mapped here, and
/// the refill ring's memory, with the kernel's answers.
struct ZcrxRegistration {
  std::byte* area = nullptr;  ///< a host area, mapped here; null for a dmabuf area
  uint64_t area_bytes = 0;
  std::byte* refill = nullptr;
  uapi::ZcrxOffsets offsets{};
  uint32_t rq_entries = 0;
  uint64_t area_token = 0;  ///< OR'd into every refill entry's offset
  uint32_t zcrx_id = 0;     ///< the sqe's zcrx_ifq_idx for RECV_ZC
};

/// The kernel calls of one zcrx queue. All but wake() are made on the queue's thread
/// only, the one that created the object.
class ZcrxKernel {
 public:
  virtual ~ZcrxKernel() = default;
  /// Registers RX queue `rx_queue` of `ifindex` with an area of `area_bytes` (a multiple
  /// of the page size) and a refill ring of `rq_entries` (a power of two). The area is
  /// host memory of the kernel object's own, or with `dmabuf_fd` >= 0 that whole dmabuf
  /// (IORING_ZCRX_AREA_DMABUF, Linux 6.16: the kernel takes a whole dmabuf, never a range
  /// of one). The memory stays the kernel object's until it is destroyed.
  virtual Result<ZcrxRegistration> register_queue(uint32_t ifindex, uint32_t rx_queue, uint64_t area_bytes,
                                                  uint32_t rq_entries, int dmabuf_fd, KernelError* refusal) = 0;
  /// Registers a device-less queue (ZCRX_REG_NODEV, Linux 7.1+): no interface under
  /// it, a host area of `area_bytes` into which the kernel copies what RECV_ZC receives
  /// on any TCP socket. kUnsupported by default (a stand-in NIC has no such mode).
  virtual Result<ZcrxRegistration> register_device_less(uint64_t area_bytes, uint32_t rq_entries, KernelError* refusal);
  /// Has the kernel take the refill ring's entries back into the area now
  /// (ZCRX_CTRL_FLUSH_RQ). A device-less queue needs it: with no NIC's page pool
  /// reading the ring, refilled buffers stay unused until flushed. Default: nothing to do.
  virtual Status flush_refill() { return Status::ok(); }
  /// Arms a multishot RECV_ZC with no length limit on socket `fd`; its completions carry
  /// `user_data` (never 0).
  virtual Status arm(int fd, uint64_t user_data) = 0;
  /// Cancels the RECV_ZC of `user_data`: its last completion (-ECANCELED, or what it
  /// was ending with) follows.
  virtual Status cancel(uint64_t user_data) = 0;
  /// Blocks until there are completions or wake() was called, and appends the
  /// completions (none for a wake alone).
  virtual Status wait(std::vector<ZcrxCompletion>* out) = 0;
  /// Any thread: makes the current or next wait() return.
  virtual void wake() = 0;
  /// A test's stand-in rather than the kernel (said in the path's reason).
  virtual bool standin() const { return false; }
};

/// Makes a ZcrxKernel; called on the queue's thread.
using ZcrxKernelFactory = std::function<Result<std::unique_ptr<ZcrxKernel>>()>;
/// The real one: a ring with SINGLE_ISSUER | DEFER_TASKRUN | CQE32 and an eventfd for
/// wake(). kUnsupported when built without liburing, or the kernel's refusal (its errno
/// in `*refusal`).
Result<std::unique_ptr<ZcrxKernel>> make_io_uring_zcrx_kernel(KernelError* refusal = nullptr);
/// make_io_uring_zcrx_kernel as a factory for ZcrxQueue::open.
inline ZcrxKernelFactory io_uring_zcrx_kernels() {
  return [] { return make_io_uring_zcrx_kernel(); };
}

/// One registered queue and its thread. Thread-safe.
class ZcrxQueue : public std::enable_shared_from_this<ZcrxQueue> {
 public:
  struct Options {
    uint32_t ifindex = 0;
    uint32_t rx_queue = 0;
    uint64_t area_bytes = uint64_t{16} << 20;  ///< rounded up to pages; a dmabuf area's whole size
    /// >= 0: the area is this dmabuf (device memory: the NIC writes there), whole; the
    /// queue uses the descriptor while it is open (the caller keeps it open until then).
    int dmabuf_fd = -1;
    /// Device-less mode (ZCRX_REG_NODEV, Linux 7.1+): no interface or queue (ifindex and
    /// rx_queue are ignored), a host area, and any TCP socket can be added: the kernel
    /// copies its payload into the area (nothing is zero-copy), and the queue flushes the
    /// refill ring after handing buffers back. For machines without a zcrx-capable NIC.
    bool device_less = false;
  };

  /// One socket's RECV_ZC: what arrived for it, in stream order.
  class Stream {
   public:
    /// A piece of the area: `length` bytes of the stream at `area_offset`; its buffer is
    /// held until release(slot) (once per piece).
    struct Piece {
      uint64_t area_offset = 0;
      uint32_t length = 0;
      uint32_t slot = 0;
    };
    /// Takes up to `len` bytes of what arrived (a completion longer than what is asked
    /// for is split: the rest comes next time). kWouldBlock when nothing has arrived,
    /// kEof after the peer's end once everything before it was taken, and the kernel's
    /// end of the RECV_ZC otherwise (kError with its errno; `why` says more).
    net::IoResult take(uint64_t len, std::vector<Piece>* pieces, Status* why = nullptr);
    /// The reader is done with a piece of `slot` (placed, or dropped).
    void release(uint32_t slot);
    /// Blocks until take() has something to say (pieces, the end, an error) or
    /// `deadline` (kTimeout).
    Status wait(net::Clock::time_point deadline);
    /// Called (on the queue's thread, no lock held) after pieces, the end of the stream
    /// or an error arrived for it.
    void set_notify(std::function<void()> notify);
    /// Stops receiving: the RECV_ZC is cancelled and what arrived and was not taken goes
    /// back to the NIC. Pieces taken still need their release. Returns once the queue's
    /// thread no longer uses the socket (the cancel is in the kernel, which holds its own
    /// reference to the file), so the socket may be closed then. Idempotent; the
    /// destructor does it.
    void close();
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    uint64_t id() const noexcept { return id_; }

   private:
    friend class ZcrxQueue;
    Stream(std::shared_ptr<ZcrxQueue> queue, uint64_t id) : queue_(std::move(queue)), id_(id) {}
    std::shared_ptr<ZcrxQueue> queue_;
    uint64_t id_;
  };

  /// Starts the queue's thread, which makes the kernel object with `kernel` and
  /// registers the queue: the registration's refusal (errno in `*refusal`), or the
  /// running queue.
  static Result<std::shared_ptr<ZcrxQueue>> open(const Options& options, ZcrxKernelFactory kernel,
                                                 KernelError* refusal = nullptr);
  ~ZcrxQueue();
  ZcrxQueue(const ZcrxQueue&) = delete;
  ZcrxQueue& operator=(const ZcrxQueue&) = delete;

  /// Arms RECV_ZC on the connected TCP socket `fd` (whose flow must be steered to this
  /// queue before its first payload arrives). `fd` must stay open until the stream is
  /// closed.
  Result<std::unique_ptr<Stream>> add_stream(int fd);

  const ZcrxRegistration& registration() const noexcept { return reg_; }
  uint32_t rx_queue() const noexcept { return options_.rx_queue; }
  bool device_less() const noexcept { return options_.device_less; }
  bool standin() const noexcept { return standin_; }
  std::string describe() const;

  struct Stats {
    uint64_t completions = 0;  ///< completions that delivered a buffer
    uint64_t bytes = 0;        ///< delivered into the area
    uint64_t refilled = 0;     ///< buffers handed back through the refill ring
    uint64_t held = 0;         ///< buffers delivered and not yet handed back
    uint64_t flushes = 0;      ///< device-less: refill-ring flushes asked of the kernel
  };
  Stats stats() const;

 private:
  explicit ZcrxQueue(const Options& options) : options_(options) {}
  void run(ZcrxKernelFactory kernel, std::promise<Status>* ready, KernelError* refusal);
  void handle(const ZcrxCompletion& c, std::vector<std::function<void()>>* notify);
  /// Hands a slot's buffer back to the NIC and frees the slot. mu_ held.
  void give_back_locked(uint32_t slot);
  /// Puts [area_offset, +length) on the refill ring, or on the backlog when it is full. mu_ held.
  void refill_locked(uint64_t area_offset, uint32_t length);
  void flush_backlog_locked();
  /// Fails every stream with `why` (the ring broke). mu_ held.
  void fail_all_locked(const Status& why, std::vector<std::function<void()>>* notify);
  void stream_close(uint64_t id);
  net::IoResult stream_take(uint64_t id, uint64_t len, std::vector<Stream::Piece>* pieces, Status* why);
  void stream_release(uint32_t slot);
  void stream_set_notify(uint64_t id, std::function<void()> notify);
  Status stream_wait(uint64_t id, net::Clock::time_point deadline);

  struct Slot {
    uint64_t area_offset = 0;
    uint32_t length = 0;
    uint32_t refs = 0;    // pieces handed out and not released
    bool queued = false;  // still (partly) in a stream's arrivals
    bool live = false;
  };
  struct Arrival {
    uint32_t slot;
    uint32_t taken;  // bytes of it handed out
  };
  struct StreamState {
    int fd = -1;
    std::deque<Arrival> arrivals;
    bool armed = false;      // a RECV_ZC is in the kernel for it
    bool closed = false;     // the reader went: drop what comes
    bool cancelled = false;  // the queue's thread has submitted its cancel
    bool eof = false;
    int err = 0;
    Status why;
    std::function<void()> notify;
  };
  enum class Command : uint8_t { kArm, kCancel };

  Options options_;
  ZcrxRegistration reg_;
  bool standin_ = false;
  std::unique_ptr<ZcrxKernel> kernel_;  // the queue thread's
  std::optional<ZcrxRefillRing> refill_;

  mutable std::mutex mu_;
  std::condition_variable arrived_;    // something for a stream's take(), or the ring broke
  std::condition_variable cancelled_;  // a stream's cancel was submitted (or the thread ended)
  std::map<uint64_t, StreamState> streams_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::deque<std::pair<uint64_t, uint32_t>> backlog_;  // buffers waiting for room in the refill ring
  std::vector<uint64_t> starved_;  // streams whose RECV_ZC ended for want of buffers: re-armed at the next refill
  std::vector<std::pair<Command, uint64_t>> commands_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  bool need_flush_ = false;  // device-less: buffers were refilled since the last flush
  Status broken_;            // the ring failed: no stream can be added
  Stats stats_;
  std::thread thread_;
};

}  // namespace remora::zerocopy
