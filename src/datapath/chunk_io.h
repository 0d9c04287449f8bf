// datapath/chunk_io.h — where the bytes of a transfer come from (ChunkSource) and where
// they go (ChunkSink), and the host-memory kinds of each.
//
// The chunk scheduler (chunk_scheduler.h) moves chunks between the data streams and
// these interfaces and knows nothing else about memory. A new memory kind joins the
// data path by implementing them:
// - a source that is not ready at once answers prepare() with kInProgress until a
//   chunk's bytes are at hand (the staging source copies device memory into pinned
//   bounce buffers ahead of the stream, datapath/staging.h), and hears of each chunk
//   written through chunk_sent() so that its buffer can be reused;
// - a sink that needs room before it can read a chunk answers begin_chunk() with
//   false until it has some (the staging sink's bounce buffers), and one that places
//   chunks asynchronously answers chunk_arrived() with kInProgress and reports the end
//   through ChunkScheduler::chunk_placed, in any order, or with an error;
// - a devmem sink (datapath/devmem_path.h) reads with recvmsg(MSG_SOCK_DEVMEM), gets
//   dmabuf fragments and tokens instead of bytes, scatters them to the destination and
//   returns the tokens before it reports the chunk placed.
// Sinks read through the stream's StreamIn: recv(2) on an ordinary stream; on a stream
// steered to devmem RX queues every byte arrives in the bound buffer, so host-memory
// sinks read through its devmem receiver too (StreamIn::recv_some copies the fragments
// out and gives their tokens back before it returns).
// A stalled source or sink tells the scheduler's owner when it can go on (the owner
// then calls ChunkScheduler::unstall and schedules again).
//
// The operation that holds a source or sink (through a PathEnd, path_end.h) asks it the
// rest, whatever the path: an inline transfer's bytes for its frame (read_inline) or
// their placement (place_inline); copies of the memory in flight; a region revoked
// under it; zero-copy sends the NIC has not released. The defaults suit host memory.
// Every call runs with the progress lock held; none may block, but copy_inline (called
// without it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "mem/region_access.h"
#include "net/io.h"
#include "net/socket.h"
#include "remora/status.h"
#include "remora/types.h"

namespace remora::detail {

class DevmemReceiver;
struct RxTransfer;

/// One data stream as sinks read it. The default reads with recv(2).
class StreamIn {
 public:
  explicit StreamIn(int fd = -1) noexcept : fd_(fd) {}
  virtual ~StreamIn() = default;
  StreamIn(const StreamIn&) = delete;
  StreamIn& operator=(const StreamIn&) = delete;

  int fd() const noexcept { return fd_; }
  /// Up to `len` bytes of the stream into host memory at `dst` (one system call).
  /// kError: the stream cannot go on; take_failure() may say why better than the errno.
  virtual net::IoResult recv_some(std::byte* dst, size_t len);
  /// Bytes of the stream into the `count` buffers in order (one system call), setting
  /// `*asked` to what the call asked for (a read shorter than that drained the stream,
  /// where short_read_drains()). An ordinary stream reads them all (recvmsg); a stream
  /// that reads otherwise overrides recv_some and this, and may fill the first only.
  virtual net::IoResult recv_scattered(const iovec* buffers, int count, uint64_t* asked);
  /// Most bytes one read of a chunk asks for (0: the rest of the chunk). A TCP socket
  /// is read 32 KiB at a time (kSocketReadBytes); a devmem receiver or same-host pulls
  /// take the whole rest.
  virtual uint64_t read_limit() const noexcept { return kSocketReadBytes; }
  /// Across two network namespaces (veth) on a 2-vCPU VM, reads of 32 KiB moved 16 MiB
  /// puts at 1.34x and 1 MiB gets at 2.09x the rate of reads of 64 KiB, which were
  /// already 1.14-1.25x faster than reads of the whole 512 KiB chunk; 16 KiB gained a
  /// little more and 8 KiB lost (bench/results/rma.md). A long copy holds the socket
  /// while what arrives waits in its backlog; 32 KiB keeps most of the gain at half the
  /// system calls of 16 KiB.
  static constexpr uint64_t kSocketReadBytes = uint64_t{32} << 10;
  /// The receiver of a stream steered to devmem RX queues; null for an ordinary one.
  virtual DevmemReceiver* devmem() noexcept { return nullptr; }
  /// Does a read shorter than asked prove the socket drained? recv(2) of a TCP stream
  /// with MSG_DONTWAIT takes all it has, so yes. A devmem recvmsg also stops where the
  /// stream switches between linear and dmabuf data, and at the receiver's read limit:
  /// no (read on until EAGAIN, or the edge-triggered stream would stall).
  virtual bool short_read_drains() const noexcept { return true; }
  /// Why the last kError happened, when there is more to say than its errno.
  Status take_failure() noexcept { return std::exchange(failure_, Status::ok()); }
  /// Reads exactly data.size() bytes before `deadline` (a handshake's answer on a data
  /// stream): net::read_exact through recv_some, waiting with wait_readable.
  Status read_exact(std::span<std::byte> data, net::Clock::time_point deadline);
  /// Waits until recv_some may have something (or `deadline`: kTimeout): poll(POLLIN)
  /// on the socket, unless the bytes reach this side some other way.
  virtual Status wait_readable(net::Clock::time_point deadline);
  /// Streams whose bytes do not make the socket readable (io_uring zcrx takes them off
  /// it) call `fn` when they have something for recv_some; others never do.
  virtual void on_arrival(std::function<void()> fn) { (void)fn; }
  /// The stream is retired (failover) and read no more; `socket` is its descriptor,
  /// which closes when this returns unless the stream must keep it a while (a devmem
  /// stream, until the copies out of its pages ended: DevmemReceiver::retire).
  virtual void retire(net::Fd socket) { (void)socket; }
  /// Why the read that is about to report an error failed (a sink reading through the
  /// stream's own receiver says so too): the stream's failure names it.
  void set_failure(Status s) { failure_ = std::move(s); }

 protected:
  /// recv_scattered for a stream that reads through recv_some: the first buffer only.
  net::IoResult recv_first(const iovec* buffers, int count, uint64_t* asked);

 private:
  int fd_;
  Status failure_;
};

/// Where the chunks of one outgoing transfer come from.
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  /// Writes up to `len` bytes of the transfer, from transfer offset `offset` on, to the
  /// non-blocking stream `fd` (one system call).
  virtual net::IoResult write(int fd, uint64_t offset, uint64_t len) = 0;
  /// May the chunk [offset, offset + len) be announced and written now? ok: yes.
  /// kInProgress: not yet (its bytes are being staged); the source's owner schedules
  /// again when they are. Any other status: the transfer failed there; nothing more of
  /// it is announced, and it ends once what was announced is written.
  virtual Status prepare(uint64_t /*offset*/, uint64_t /*len*/) { return Status::ok(); }
  /// As prepare(), for a chunk about to be sent again (failover, can_resend): written
  /// then by write_again.
  virtual Status prepare_again(uint64_t offset, uint64_t len) { return prepare(offset, len); }
  /// Every byte of the chunk [offset, offset + length) is in the kernel.
  virtual void chunk_sent(uint64_t /*offset*/, uint64_t /*length*/) {}
  /// The CRC-32C of the chunk [offset, offset + length), which prepare() said is ready
  /// (REMORA_CHECKSUM=crc32c: it travels in the chunk's CHUNK frame). nullopt: this
  /// source cannot read its bytes on the host (the transfer then fails, kUnsupported).
  virtual std::optional<uint32_t> checksum(uint64_t /*offset*/, uint64_t /*length*/) { return std::nullopt; }
  /// The transfer's bytes, when they are host memory that stays put and unchanged until
  /// the transfer is sent (a same-host peer may then read its chunks itself, with
  /// process_vm_readv: ChunkScheduler::enable_pull_tx); null otherwise.
  virtual const std::byte* host_bytes() const noexcept { return nullptr; }
  /// The transfer's bytes when write() is one plain send of them (host memory, no
  /// zero-copy), held readable until gather_end(): the scheduler may then send several
  /// queued chunks in one system call (ChunkScheduler::write), or hand the rest of a
  /// chunk to a send worker, which calls gather_end() on its own thread once it no
  /// longer reads them (stream_workers.h). Null otherwise, or when
  /// they cannot be held now (write() then says why), and gather_end() is not called.
  virtual const std::byte* gather_begin() noexcept { return nullptr; }
  virtual void gather_end() noexcept {}
  /// Failover: the bytes stay readable until the transfer is done, so any chunk can be
  /// written again (write_again) after the stream it went on broke.
  virtual bool can_resend() const noexcept { return false; }
  /// Writes a chunk's bytes again, as write(); kError with EKEYREVOKED where they can no
  /// longer be read (a deregistered region: sending zeros instead would corrupt).
  virtual net::IoResult write_again(int fd, uint64_t offset, uint64_t len) { return write(fd, offset, len); }

  // --- what the operation holding the source asks (path_end.h) -----------------------
  /// Copies out of the memory started and not ended (staged ahead of a chunk that
  /// failed, say): the memory is still read until they end.
  virtual size_t in_flight() const noexcept { return 0; }
  /// A granted region was deregistered while it was sent: zeros went in place of some
  /// of its bytes.
  virtual bool revoked() const noexcept { return false; }
  /// Zero-copy sends (devmem TX): the NIC reads the memory after write() returned, and
  /// the kernel reports each sendmsg done; unreleased() counts those not reported yet,
  /// released() one report.
  virtual bool zero_copy() const noexcept { return false; }
  virtual uint64_t unreleased() const noexcept { return 0; }
  virtual void released() noexcept {}
  /// An inline send's bytes can be read at once (read_inline answers ok); else
  /// copy_inline() copies them to host memory first.
  virtual bool inline_ready() const noexcept { return true; }
  /// Copies an inline send's bytes to host memory now, waiting at most `timeout`;
  /// called without the progress lock.
  virtual Status copy_inline(Duration /*timeout*/) { return Status::ok(); }
  using InlineNow = std::function<void(std::span<const std::byte>)>;
  using InlineLater = std::function<void(std::span<const std::byte>, const Status&)>;
  /// The `length` bytes of an inline send, for its frame: PathEnd::read_inline's
  /// contract. The host kinds below are read in place by PathEnd; this default serves a
  /// source that only sends chunks and answers kInternal.
  virtual Status read_inline(uint64_t length, const InlineNow& now, InlineLater later);
};

/// Where the chunks of one incoming transfer go.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  /// Reads up to `len` bytes of the transfer, at transfer offset `offset`, from the
  /// non-blocking stream `in` (one system call). `*asked` is set to the byte count the
  /// call asked the kernel for: a read shorter than that drained the socket.
  virtual net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) = 0;
  /// The chunk [offset, offset + length) is next on its stream, before its first byte
  /// is read. false: no room for it now; the stream is not read until the sink's owner
  /// calls ChunkScheduler::unstall.
  virtual bool begin_chunk(uint64_t /*offset*/, uint64_t /*length*/) { return true; }
  /// Every byte of the chunk [offset, offset + length) is off the stream. ok: the chunk
  /// is in place. kInProgress: it will be, and the sink says so later through
  /// ChunkScheduler::chunk_placed. Any other status: the chunk failed, and the whole
  /// transfer completes with that status (the stream stays in step either way).
  virtual Status chunk_arrived(uint64_t /*offset*/, uint64_t /*length*/) { return Status::ok(); }
  /// The CRC-32C of the chunk [offset, offset + length) as it arrived, asked after its
  /// last byte is read and before chunk_arrived (REMORA_CHECKSUM=crc32c). nullopt: the
  /// bytes are not kept (drained, or the region is gone), so there is nothing to check.
  virtual std::optional<uint32_t> checksum(uint64_t /*offset*/, uint64_t /*length*/) { return std::nullopt; }
  /// Failover: a chunk read in part can be read again from its start, at the same
  /// offsets (placements of the first reading still in flight place the same bytes).
  virtual bool can_reread() const noexcept { return false; }
  /// Host memory where read() would put the transfer's byte `offset`, which stays
  /// valid without the progress lock until the chunk is finished or its transfer is
  /// redirected (a receive worker may then take the bytes there: stream_workers.h); null
  /// where read() must do it. A non-null answer holds the memory until
  /// release_destination(), which the worker calls on its own thread once it no longer
  /// touches it (a registered region's bracket: its deregistration waits for that).
  virtual std::byte* host_destination(uint64_t /*offset*/) noexcept { return nullptr; }
  virtual void release_destination() noexcept {}

  // --- what the operation holding the sink asks (path_end.h) -------------------------
  /// The transfer this sink receives: a sink that places chunks asynchronously reports
  /// them placed against it (StagingHost::staged_chunk_placed).
  virtual void attach(RxTransfer& /*t*/) {}
  /// Placements into the memory started and not ended (staging's copies, devmem
  /// receive's scatter, an inline copy): an operation that fails completes only once
  /// none is in flight, so nothing writes to its memory after it completed.
  virtual size_t in_flight() const noexcept { return 0; }
  /// A served put's region was deregistered mid-transfer: the rest was drained.
  virtual bool revoked() const noexcept { return false; }
  using InlinePlaced = std::function<void(const Status&)>;
  /// Places an inline receive's bytes at the start of the memory: PathEnd::place_inline's
  /// contract, `done` already made. The host kinds below are placed in place by
  /// PathEnd; this default serves a sink that only receives chunks and answers kInternal.
  virtual Status place_inline(std::span<const std::byte> bytes, InlinePlaced done);
};

/// Host memory that nothing can take away: a message's send buffer, an initiator's put.
class HostSource final : public ChunkSource {
 public:
  explicit HostSource(const std::byte* data = nullptr) noexcept : data_(data) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;
  const std::byte* host_bytes() const noexcept override { return data_; }
  const std::byte* gather_begin() noexcept override { return data_; }
  bool can_resend() const noexcept override { return true; }

 private:
  const std::byte* data_;
};

/// Host memory the caller posted: a receive buffer, a get's destination.
class HostSink final : public ChunkSink {
 public:
  explicit HostSink(std::byte* data = nullptr) noexcept : data_(data) {}
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;
  bool can_reread() const noexcept override { return true; }
  std::byte* host_destination(uint64_t offset) noexcept override { return data_ + offset; }
  /// An inline receive's bytes, copied in.
  void place(std::span<const std::byte> bytes) noexcept {
    if (!bytes.empty()) std::memcpy(data_, bytes.data(), bytes.size());
  }

 private:
  std::byte* data_;
};

/// Reads and drops: the bytes of a refused put, of a revoked region, of a transfer
/// whose operation is gone. One scratch buffer per endpoint, allocated on first use.
class DiscardSink final : public ChunkSink {
 public:
  static constexpr size_t kScratchBytes = size_t{64} << 10;
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  bool can_reread() const noexcept override { return true; }
  std::byte* scratch();

 private:
  std::vector<std::byte> scratch_;
};

/// Zeros, sent in place of a revoked region's bytes (DiscardSink::kScratchBytes of them).
std::span<const std::byte> zeros();

/// The CRC-32C of `length` zeros (what a revoked region's source sends instead).
uint32_t zeros_checksum(uint64_t length);

/// What reading or placing a deregistered region's bytes answers (kInvalidKey).
Status revoked_status();

/// A registered region a peer reads (a served get): every write is bracketed by the
/// region's RegionAccess. Once the region is deregistered it never reads the memory
/// again and sends zeros instead, keeping the stream in step; revoked() then says so.
class RegionSource final : public ChunkSource {
 public:
  RegionSource() noexcept = default;
  explicit RegionSource(const RegionAccess* access) noexcept : access_(access) {}
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  /// Of the region's bytes (bracketed); of zeros once it is revoked, as write sends.
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;
  /// Once a chunk was lent to a same-host peer (host_bytes()), any deregistration
  /// before the reply counts: the peer's reads are not bracketed.
  bool revoked() const noexcept override { return revoked_ || (lent_ && access_->revoked()); }
  /// Host memory still registered: a same-host peer may read its chunks itself. The
  /// deregistration does not wait for those reads (the peer's, not bracketed); the
  /// reply then says revoked (revoked()), and a read of memory unmapped meanwhile fails
  /// only the get (ChunkScheduler::read).
  const std::byte* host_bytes() const noexcept override {
    if (revoked_ || access_->device() != nullptr || access_->revoked()) return nullptr;
    lent_ = true;
    return access_->address();
  }
  bool can_resend() const noexcept override { return true; }
  /// Host memory still registered, bracketed (RegionAccess::begin) until gather_end: the
  /// chunks of served gets, several per sendmsg.
  const std::byte* gather_begin() noexcept override {
    if (revoked_ || access_->device() != nullptr || !access_->begin()) return nullptr;
    return access_->address();
  }
  void gather_end() noexcept override { access_->end(); }
  /// Never zeros: a region deregistered since answers EKEYREVOKED.
  net::IoResult write_again(int fd, uint64_t offset, uint64_t len) override;
  /// An inline send's first `length` bytes: `now(bytes)` inside one bracket, ok; or
  /// kInvalidKey once the region is deregistered (revoked()).
  template <typename Now>
  Status read_bracketed(uint64_t length, Now&& now) {
    if (revoked_ || !access_->begin()) {
      revoked_ = true;
      return revoked_status();
    }
    now(std::span<const std::byte>(access_->address(), length));
    access_->end();
    return Status::ok();
  }

 private:
  const RegionAccess* access_ = nullptr;
  bool revoked_ = false;
  mutable bool lent_ = false;  // host_bytes() handed the memory out for a peer to read
};

/// A registered region a peer writes (a served put): every read is bracketed. Once the
/// region is deregistered the rest is drained through `discard`; revoked() says so.
class RegionSink final : public ChunkSink {
 public:
  RegionSink() noexcept = default;
  RegionSink(const RegionAccess* access, DiscardSink* discard) noexcept : access_(access), discard_(discard) {}
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  /// Of the region's bytes (bracketed); nullopt once revoked (the reply says so anyway).
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;
  bool revoked() const noexcept override { return revoked_; }
  bool can_reread() const noexcept override { return true; }
  /// Inside a bracket taken here (null once revoked: read() then drains).
  std::byte* host_destination(uint64_t offset) noexcept override {
    return !revoked_ && access_->begin() ? access_->address() + offset : nullptr;
  }
  void release_destination() noexcept override { access_->end(); }
  /// An inline receive's bytes, copied in inside one bracket: ok (nothing to do for
  /// none), or kInvalidKey once the region is deregistered (revoked()).
  Status place(std::span<const std::byte> bytes);

 private:
  const RegionAccess* access_ = nullptr;
  DiscardSink* discard_ = nullptr;
  bool revoked_ = false;
};

}  // namespace remora::detail
