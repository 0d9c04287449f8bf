// datapath/staging.h — device memory on the host data path: a chunk source and a chunk
// sink that move a transfer's bytes through pinned host bounce buffers, with the device
// copies of some chunks overlapping the network transfer of others.
//
// Sending (StagingSource): chunks are copied device → bounce buffer ahead of the
// stream, as many at once as the pool has free buffers; a chunk is announced only
// once its copy has ended (prepare() answers kInProgress before), and its buffer is
// reused as soon as the kernel has its last byte (chunk_sent). A failed copy fails the
// transfer there: what was announced before is intact, nothing after it goes out.
// Failover (docs/rails.md): a chunk whose stream broke before the peer had it whole is
// sent again. While its buffer is held (not all of it reached the kernel) that buffer
// goes again; once given back, prepare() copies the chunk out of the device again, into
// memory of its own rather than the pool's (the pool's buffers may all hold chunks
// staged ahead, which wait behind the one sent again).
//
// Receiving (StagingSink): each chunk is read into a bounce buffer of its own
// (begin_chunk stalls the stream while the pool has none free), copied bounce buffer →
// device when its last byte is in, and reported placed when that copy ends — in
// whatever order the copies end. A failed copy fails that chunk, hence its transfer. A
// message that came eager instead is placed by one copy (place_inline, bounce.h). A
// chunk cut short by a broken stream is read again from its start into the buffer it
// had (begin_chunk finds it open): the device sees only whole chunks.
//
// Copies end on the domain's threads; StagingCopies posts each end to the progress
// engine, and everything else here runs with the progress lock held. A source or sink
// may be destroyed while its copies are in flight (its operation failed): their buffers
// return to the pool when the copies end, never earlier.
//
// Registered device memory a peer reads or writes (a served GET or PUT) is reached
// through its RegionAccess: each device copy is one begin()/end() bracket, open from
// the copy's start to its end. Once the region is deregistered no copy starts: a
// source sends zeros in place of the rest and a sink drops what arrives, keeping the
// streams in step, and revoked() says so.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "datapath/bounce.h"
#include "datapath/chunk_io.h"
#include "datapath/chunk_scheduler.h"
#include "engine/progress.h"
#include "remora/memory.h"

namespace remora::detail {

/// Bounce buffers of one chunk each, mapped and prepared with one domain once
/// (MemoryDomain::prepare_staging: CUDA pins them) and reused for every transfer.
class StagingPool {
 public:
  /// kNoResource when the memory cannot be had; the domain's error when it refuses it.
  static Result<std::shared_ptr<StagingPool>> create(MemoryDomain& domain, size_t buffers, size_t buffer_bytes);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  /// A free buffer, or nullptr when all are in use.
  std::byte* acquire() noexcept;
  void release(std::byte* buffer) noexcept;
  size_t buffer_bytes() const noexcept { return buffer_bytes_; }
  size_t buffers() const noexcept { return count_; }
  size_t free_buffers() const noexcept { return free_.size(); }
  MemoryDomain& domain() const noexcept { return domain_; }

 private:
  StagingPool(MemoryDomain& domain, std::byte* base, size_t count, size_t buffer_bytes);
  MemoryDomain& domain_;
  std::byte* base_;
  size_t count_;
  size_t buffer_bytes_;
  std::vector<std::byte*> free_;
};

/// The endpoint side of staging: told, with the lock held, when a staged chunk is
/// placed and whenever staging can go on (a copy ended, a buffer came free), so that
/// it unstalls the scheduler's streams and schedules again.
class StagingHost {
 public:
  virtual ~StagingHost() = default;
  virtual void staged_chunk_placed(RxTransfer& t, uint64_t length, const Status& status) = 0;
  virtual void staging_progressed() = 0;
};

/// What the staging sources and sinks of one endpoint share.
struct StagingContext {
  std::shared_ptr<engine::ProgressEngine> engine;
  std::shared_ptr<StagingPool> pool;
  /// Expires with the host (the endpoint), which outlives its sources and sinks.
  std::weak_ptr<StagingHost*> host;
  uint64_t chunk_bytes = 0;  ///< the scheduler's chunk size; the pool's buffers are this big
};

/// Calls `done(status)` with the progress lock held, at the start of a progress round,
/// once `copy` has ended (whichever thread ends it). If the engine is gone by then,
/// `done` is dropped unrun, with what it holds. `first`, if given, runs on the thread
/// that ends the copy, before anything else (it closes a RegionAccess bracket: a
/// deregistration waiting for it must not wait for a progress round).
void when_copied(const std::shared_ptr<engine::ProgressEngine>& engine, std::unique_ptr<AsyncCopy> copy,
                 std::function<void(const Status&)> done, std::function<void()> first = {});

class StagingSource final : public ChunkSource {
 public:
  /// Sends [device, device + length) of `ctx.pool`'s domain; `access`, if given, is
  /// the registered region's (a served GET), bracketing each copy.
  StagingSource(StagingContext ctx, const std::byte* device, uint64_t length,
                std::shared_ptr<const RegionAccess> access = nullptr);
  /// The same for chunks sent before by another path (devmem TX) and sent again after
  /// their stream broke: nothing is staged ahead, each chunk prepare() is asked for is
  /// copied out of the device into memory of its own.
  static std::unique_ptr<StagingSource> for_resends(StagingContext ctx, const std::byte* device, uint64_t length,
                                                    std::shared_ptr<const RegionAccess> access);
  ~StagingSource() override;
  StagingSource(const StagingSource&) = delete;
  StagingSource& operator=(const StagingSource&) = delete;

  Status prepare(uint64_t offset, uint64_t len) override;
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  void chunk_sent(uint64_t offset, uint64_t length) override;
  /// Failover: a chunk sent before is prepared (staged again where its buffer went back)
  /// and written again like any other.
  bool can_resend() const noexcept override { return true; }
  /// Of the staged host bytes (what goes on the wire), once prepare() said ready.
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;
  /// The region was deregistered: zeros went in place of some of its bytes.
  bool revoked() const noexcept override { return revoked_; }
  /// Copies out of the device memory started and not ended (staged ahead of a chunk
  /// that failed, say): the memory is still read until they end.
  size_t in_flight() const noexcept override {
    return static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.copied; }));
  }

 private:
  struct Slot {
    uint64_t index;  // offset / chunk_bytes
    std::byte* buffer;
    bool copied = false;
    Status status;
    /// A chunk staged again (failover) is in memory of its own, not a pool buffer.
    std::shared_ptr<std::vector<std::byte>> own;
  };
  void stage_ahead();
  /// Copies chunk `index`, sent before and its buffer given back, out of the device again.
  void restage(uint64_t index);
  /// Starts copying [at, at + len) of the device into `buffer`, chunk `index`'s (`own`:
  /// memory of its own, else a pool buffer), its region access begun by the caller; false
  /// when the copy could not start (its slot holds why).
  bool copy_out(uint64_t index, std::byte* buffer, uint64_t at, uint64_t len,
                std::shared_ptr<std::vector<std::byte>> own);
  /// Gives a slot's buffer back: to the pool, or frees its own memory.
  void give_back(const Slot& s);
  void copied(uint64_t index, const Status& status);
  Slot* slot(uint64_t index);

  StagingContext ctx_;
  const std::byte* device_;
  uint64_t length_;
  std::shared_ptr<const RegionAccess> access_;
  bool revoked_ = false;
  uint64_t next_ = 0;  // the next byte to stage
  std::vector<Slot> slots_;
  std::shared_ptr<StagingSource*> self_;
};

class StagingSink final : public PlacingSink {
 public:
  /// Receives `t` (or the transfer attach() names) into [device, device + t.length) of
  /// `ctx.pool`'s domain; `access`, if given, is the registered region's (a served
  /// PUT), bracketing each copy.
  StagingSink(StagingContext ctx, std::byte* device, RxTransfer* t,
              std::shared_ptr<const RegionAccess> access = nullptr);
  ~StagingSink() override;
  StagingSink(const StagingSink&) = delete;
  StagingSink& operator=(const StagingSink&) = delete;

  /// A chunk already open at `offset` (its stream broke midway: failover) is read again
  /// into the buffer it has.
  bool begin_chunk(uint64_t offset, uint64_t length) override;
  bool can_reread() const noexcept override { return true; }
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  Status chunk_arrived(uint64_t offset, uint64_t length) override;
  /// Of the bounce buffer's bytes, before they are copied to the device.
  std::optional<uint32_t> checksum(uint64_t offset, uint64_t length) override;

 private:
  struct Open {
    uint64_t offset, length;
    std::byte* buffer;
    /// A chunk longer than the pool's buffers (the sender's REMORA_CHUNK_SIZE is larger
    /// than ours) is read into memory of its own instead; `buffer` points into it.
    std::shared_ptr<std::vector<std::byte>> oversized;
  };
  Open* open(uint64_t offset);

  StagingContext ctx_;
  std::byte* device_;
  std::shared_ptr<const RegionAccess> access_;
  std::vector<Open> open_;  // chunks being read, at most one per data stream
  std::shared_ptr<StagingSink*> self_;
};

}  // namespace remora::detail
