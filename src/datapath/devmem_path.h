// datapath/devmem_path.h — devmem TCP receive on a data stream: the stream's flow is
// steered to RX queues bound to a dmabuf (bind-rx), so its payload lands in that dmabuf
// and recvmsg(MSG_SOCK_DEVMEM) hands over fragments and tokens instead of bytes.
//
// DevmemReceiver is one data stream's receive loop: one recvmsg per call, the control
// data parsed (zerocopy/devmem_rx.h: truncation, foreign bindings, misrouted flows and
// linear data are errors, never silently accepted), the fragments placed at the
// destination by the memory's own domain (MemoryDomain::scatter for device memory: CUDA
// runs the unpack kernel; copy_to_host per fragment for host memory; linear bytes copied
// from the iov), and the tokens given back with SO_DEVMEM_DONTNEED (coalesced,
// zerocopy/token_return.h) only once those copies have ended. The recvmsg and the
// setsockopt are function objects: the real system calls by default, and in tests ones
// that hand out control data in the kernel's layouts (the kernel boundary, not the code
// under test).
//
// DevmemSink is the ChunkSink of one transfer on such streams (chunk_io.h): it reads
// through the stream's receiver and reports a chunk placed when its last copy ended and
// its tokens went back. Copies end on the domain's threads; their ends are posted to the
// progress engine as staging's are (staging.h, when_copied), and the endpoint hears of
// placed chunks through StagingHost.
//
// None of this has run on a NIC that delivers devmem (docs/device-memory.md): on this
// project's machines the kernel refuses bind-rx, and recvmsg(MSG_SOCK_DEVMEM) on an
// ordinary TCP socket returns the bytes with no devmem control message (a misrouted
// flow here) or, with no iov, EFAULT.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "datapath/bounce.h"
#include "datapath/chunk_io.h"
#include "datapath/chunk_scheduler.h"
#include "datapath/staging.h"
#include "engine/progress.h"
#include "net/io.h"
#include "net/socket.h"
#include "remora/memory.h"
#include "remora/status.h"
#include "zerocopy/devmem_rx.h"
#include "zerocopy/token_return.h"

namespace remora::detail {

/// One recvmsg: returns what ::recvmsg returns and sets errno as it does.
using RecvmsgFn = std::function<ssize_t(int fd, msghdr* msg, int flags)>;
/// ::recvmsg.
ssize_t system_recvmsg(int fd, msghdr* msg, int flags);

/// A dmabuf bound to RX queues, as the receive path sees it.
struct DevmemRxBinding {
  uint32_t id = 0;                  ///< bind-rx's binding id
  MemoryDomain* domain = nullptr;   ///< whose memory the dmabuf is (host for a udmabuf)
  const std::byte* base = nullptr;  ///< the domain address of the dmabuf's byte 0
  uint64_t size = 0;                ///< the dmabuf's bytes
  /// Accept SCM_DEVMEM_LINEAR data (header-split misses land in the iov). false: the
  /// iov is null, so the kernel refuses readable data with EFAULT and any linear data
  /// is an error.
  bool allow_linear = true;
  /// A real dmabuf of host memory mapped here: the CPU's reads of it are bracketed by
  /// DMA_BUF_IOCTL_SYNC (-1: none, as for a memfd).
  int cpu_sync_fd = -1;
};

/// Which zero-copy receive a receiver does.
enum class DataPathKind : uint8_t { kDevmem, kZcrx };

/// What one receive placed, and what it holds until the placement ends.
struct DevmemRead {
  uint64_t bytes = 0;
  std::vector<std::unique_ptr<AsyncCopy>> copies;  ///< placements in flight (may be empty)
  std::vector<uint32_t> tokens;                    ///< given back once `copies` ended (zcrx: the buffers' slots)
  std::shared_ptr<std::vector<std::byte>> linear;  ///< linear bytes `copies` read from
};

/// The receive loop of one devmem data stream. Not thread-safe (the progress lock).
/// ZcrxReceiver (datapath/zcrx_path.h) is the same loop with its fragments from io_uring
/// zcrx completions instead of recvmsg's control data, and the same placement.
class DevmemReceiver {
 public:
  /// Most fragments one recvmsg may describe (the control buffer is sized for them:
  /// 40 bytes each, zerocopy::devmem_control_bytes) and most bytes one recvmsg asks for.
  static constexpr size_t kMaxFragments = 2048;
  static constexpr size_t kMaxReadBytes = size_t{1} << 20;

  /// `hold` keeps the dmabuf's mapping (and descriptor) alive while the receiver, or a
  /// placement holding it, may still read it.
  DevmemReceiver(int fd, DevmemRxBinding binding, RecvmsgFn recvmsg = system_recvmsg,
                 zerocopy::DontneedFn dontneed = zerocopy::devmem_dontneed, std::shared_ptr<const void> hold = nullptr);
  virtual ~DevmemReceiver() = default;
  DevmemReceiver(const DevmemReceiver&) = delete;
  DevmemReceiver& operator=(const DevmemReceiver&) = delete;

  /// One recvmsg(MSG_SOCK_DEVMEM | MSG_DONTWAIT) of up to `len` bytes, placed at `dst`
  /// (memory of `dst_domain`, or host memory when that is null or the host domain);
  /// `dst` null drops them (their tokens go back at once).
  /// Returns the IoResult (bytes, would-block, EOF, or the errno of a refused
  /// recvmsg); `*read` holds the placement. kProtocol / kTruncated from the parser, and
  /// kProtocol for a fragment outside the dmabuf: the bytes were taken off the stream
  /// (`read->bytes` says how many) but not placed, and their tokens already went back.
  /// EFAULT from the kernel (readable data where no iov is given: a misrouted flow)
  /// comes back as kProtocol saying so. The placement's errors (the domain refused a
  /// copy) are returned as such, the tokens given back.
  virtual Result<net::IoResult> receive(MemoryDomain* dst_domain, std::byte* dst, uint64_t len, DevmemRead* read);

  /// `read`'s copies have ended (whatever their status): gives its tokens back.
  virtual Status release(DevmemRead& read);

  /// The socket is gone (closed, or handed to the lingering close): tokens are freed
  /// with it, and release() only forgets them. Not while retire() keeps it.
  virtual void detach() noexcept {
    if (!kept_.valid()) fd_ = -1;
  }
  /// The stream is retired (failover, chunk_scheduler.h) and read no more; `socket` is
  /// its descriptor. With tokens still out (placements in flight read their pages) the
  /// socket is shut down but kept open until the last of them went back, and only then
  /// closed: the kernel frees a closed socket's tokens, and the NIC could write into
  /// pages a placement still reads while the peer sends those chunks again. With none
  /// out it closes now (as a zcrx receiver's always does: its buffers go back through
  /// the refill ring, whether or not the socket is open).
  void retire(net::Fd socket);
  /// Waits until receive() may have something (poll on the socket), or kTimeout.
  virtual Status wait_readable(net::Clock::time_point deadline);
  /// Receivers whose bytes leave the socket without making it readable call `fn` when
  /// receive() has something; a devmem one never does (epoll sees its socket).
  virtual void on_arrival(std::function<void()> fn) { (void)fn; }
  /// The path's name in reasons and counts ("devmem", "zcrx").
  virtual DataPathKind kind() const noexcept { return DataPathKind::kDevmem; }
  int fd() const noexcept { return fd_; }
  const zerocopy::TokenReturner::Stats& token_stats() const { return returner_.stats(); }
  /// Tokens taken and not yet given back.
  uint64_t outstanding_tokens() const noexcept { return outstanding_; }

 protected:
  /// For a receiver whose fragments come otherwise than by recvmsg: no control buffer,
  /// no iov, no token return.
  DevmemReceiver(int fd, DevmemRxBinding binding, std::shared_ptr<const void> hold);
  /// Places fragments_ (dmabuf kind: offsets into binding_'s buffer) at `dst`.
  Status place(MemoryDomain* dst_domain, std::byte* dst, DevmemRead* read);

  int fd_;
  DevmemRxBinding binding_;
  std::shared_ptr<const void> hold_;
  std::vector<zerocopy::DevmemFragment> fragments_;

 private:
  Status place_fragments(MemoryDomain* pool, MemoryDomain* dst_domain, bool host_dst, std::byte* dst, DevmemRead* read);
  void give_back(std::vector<uint32_t>& tokens);
  /// Closes the socket retire() kept once no token is out.
  void close_retired_when_done() noexcept;

  RecvmsgFn recvmsg_;
  zerocopy::TokenReturner returner_;
  std::vector<std::byte> linear_;   // the iov (allow_linear)
  std::vector<std::byte> control_;  // the control buffer
  uint64_t outstanding_ = 0;
  net::Fd kept_;  // a retired stream's socket, until its tokens went back
};

/// A data stream steered to devmem RX queues, as sinks read it: every byte of it
/// arrives in the bound buffer, host transfers' too, so recv_some reads through the
/// receiver. From a host buffer (a udmabuf, the system heap, or rxq's stand-in memfd,
/// mapped here) fragments are memcpy'd out; from device memory (an endpoint's own
/// receive area) by the domain's copies to the host, which recv_some waits for (at most
/// kDeviceReadBound). Either way the tokens go back before it returns. A refused read
/// (misrouted flow, foreign binding, truncation) or a failed copy fails the stream: its
/// bytes are gone, and a host sink cannot fail just its chunk.
class DevmemStreamIn final : public StreamIn {
 public:
  static constexpr Duration kDeviceReadBound = std::chrono::seconds(30);
  explicit DevmemStreamIn(std::shared_ptr<DevmemReceiver> receiver);
  ~DevmemStreamIn() override;
  net::IoResult recv_some(std::byte* dst, size_t len) override;
  net::IoResult recv_scattered(const iovec* buffers, int count, uint64_t* asked) override {
    return recv_first(buffers, count, asked);
  }
  DevmemReceiver* devmem() noexcept override { return receiver_.get(); }
  uint64_t read_limit() const noexcept override { return 0; }
  bool short_read_drains() const noexcept override { return false; }
  Status wait_readable(net::Clock::time_point deadline) override { return receiver_->wait_readable(deadline); }
  void on_arrival(std::function<void()> fn) override { receiver_->on_arrival(std::move(fn)); }
  void retire(net::Fd socket) override { receiver_->retire(std::move(socket)); }
  const std::shared_ptr<DevmemReceiver>& receiver() const noexcept { return receiver_; }

 private:
  std::shared_ptr<DevmemReceiver> receiver_;
};

/// What the devmem sinks of one endpoint share: the engine copies end on, and the
/// endpoint that hears of placed chunks.
struct DevmemRxContext {
  std::shared_ptr<engine::ProgressEngine> engine;
  std::weak_ptr<StagingHost*> host;
  DataPathKind kind = DataPathKind::kDevmem;  ///< what the streams are read by (for the counts)
};

/// One transfer's chunks read off devmem streams (their StreamIn's devmem receiver)
/// into memory of `domain` at `dst`. A message that came eager instead (its bytes in a
/// frame on the control stream) is placed by one copy (place_inline, bounce.h).
///
/// After a data stream broke (failover), a chunk that was not read whole is read again
/// from its start on another stream: its new placements land at the same offsets with
/// the same bytes as any of the broken stream's still in flight, and the chunk is placed
/// once all of them ended. A stream connected again after a break is not steered (rxq
/// steered the first connect's flows): chunks on it are read into host memory and copied
/// to `domain` from there.
class DevmemSink final : public PlacingSink {
 public:
  /// `ctx` outlives the sink; `t` (or the transfer attach() names) is the transfer it
  /// receives. `access`, if given, is the registered region's (a served put): each
  /// read's placement is bracketed by it, and once the region is deregistered the rest
  /// is dropped (revoked()).
  DevmemSink(std::shared_ptr<DevmemRxContext> ctx, MemoryDomain* domain, std::byte* dst, RxTransfer* t,
             std::shared_ptr<const RegionAccess> access = nullptr);
  ~DevmemSink() override;
  DevmemSink(const DevmemSink&) = delete;
  DevmemSink& operator=(const DevmemSink&) = delete;

  bool begin_chunk(uint64_t offset, uint64_t length) override;
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  Status chunk_arrived(uint64_t offset, uint64_t length) override;
  bool can_reread() const noexcept override { return true; }

 private:
  struct Chunk {
    uint64_t offset, length;
    size_t pending = 0;  // placements of its reads not yet ended
    bool arrived = false;
    Status status;
  };
  Chunk* chunk(uint64_t offset);
  /// A stream not steered: bytes into host memory, then one copy to the destination.
  net::IoResult read_unsteered(StreamIn& in, Chunk* c, uint64_t offset, uint64_t len);
  /// Opens a served put's bracket for one read's placement: the bracket to close once
  /// the placement ended (null without a region, or once it is revoked()).
  std::shared_ptr<const RegionAccess> open_bracket();
  /// `copies`, one read's placement into chunk `c`, are in flight: once the last ended,
  /// `ended` runs (it gives what the read held back: an error to report, or ok), the
  /// chunk hears of it and the endpoint of progress. `bracket` closes on the thread that
  /// ends the last copy.
  void track(Chunk& c, std::vector<std::unique_ptr<AsyncCopy>> copies, std::shared_ptr<const RegionAccess> bracket,
             std::function<Status()> ended);
  void placement_ended(uint64_t chunk_offset, const Status& status);

  std::shared_ptr<DevmemRxContext> ctx_;
  MemoryDomain* domain_;
  std::byte* dst_;
  std::shared_ptr<const RegionAccess> access_;
  std::vector<Chunk> chunks_;
  std::shared_ptr<DevmemSink*> self_;
};

}  // namespace remora::detail
