// datapath/bounce.h — device memory whose transfer travels inline, in a frame on the
// control stream (an EAGER message, a PUT of at most the eager limit, a GET's inline
// RESP): its bytes go through one host copy of their own, the bounce.
//
// BounceSource is the source of an inline send out of device memory. An initiator's
// inline put copies its bytes to host memory before it is posted, without the progress
// lock and waiting for the copy (copy_inline); a served inline get copies them
// asynchronously and answers once the copy ended (read_inline: kInProgress).
//
// BounceSink is the sink of an inline receive into device memory (an inline get's reply,
// a peer's inline put into a region of device memory). InlineCopyIn is its copy, which
// the chunked sinks of device memory (StagingSink, DevmemSink: PlacingSink is what they
// share) use too for a message that came eager: the frame's bytes are copied into a host
// buffer of their own (the control stream's buffer is reused at once) and from there to
// the device; the operation hears the copy's end with the progress lock held.
//
// A granted region's copy is one RegionAccess bracket, open from the copy's start to its
// end; once the region is deregistered no copy starts (revoked()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "datapath/chunk_io.h"
#include "engine/progress.h"
#include "remora/memory.h"

namespace remora::detail {

/// The inline copies of one end of device memory: each one counted while in flight, and
/// bracketed by a granted region's access from its start to its end.
class InlineCopies {
 public:
  InlineCopies(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device,
               std::shared_ptr<const RegionAccess> region)
      : engine_(std::move(engine)), device_(&device), region_(std::move(region)) {}
  MemoryDomain& device() const noexcept { return *device_; }
  /// Opens the region's bracket (true without a region); false once the region is
  /// deregistered (revoked() from then on): touch nothing.
  bool open();
  /// Closes a bracket open() opened, when no copy took it.
  void close() noexcept;
  /// `copy`, started inside an open bracket, is tracked: kInProgress, and `done(status)`
  /// runs with the progress lock held once it ended (the bracket closed on the copy's
  /// thread first). A copy that did not start closes the bracket and is its error.
  Status track(Result<std::unique_ptr<AsyncCopy>> copy, std::function<void(const Status&)> done);
  size_t in_flight() const noexcept { return *copying_; }
  bool revoked() const noexcept { return revoked_; }

 private:
  std::shared_ptr<engine::ProgressEngine> engine_;
  MemoryDomain* device_;
  std::shared_ptr<const RegionAccess> region_;
  std::shared_ptr<size_t> copying_ = std::make_shared<size_t>(0);  // decremented by copy ends while it lives
  bool revoked_ = false;
};

/// Inline bytes copied into device memory (see the top of this file).
class InlineCopyIn {
 public:
  /// Into `dst` of `device`'s memory; `region`, if given, is the granted region's.
  InlineCopyIn(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, std::byte* dst,
               std::shared_ptr<const RegionAccess> region = nullptr)
      : copies_(std::move(engine), device, std::move(region)), dst_(dst) {}
  /// ChunkSink::place_inline's contract: ok for no bytes; kInProgress with `done` to
  /// come; the domain's refusal; kInvalidKey once the region is deregistered.
  Status place(std::span<const std::byte> bytes, ChunkSink::InlinePlaced done);
  size_t in_flight() const noexcept { return copies_.in_flight(); }
  bool revoked() const noexcept { return copies_.revoked(); }

 private:
  InlineCopies copies_;
  std::byte* dst_;
};

/// A sink of device memory that places chunks asynchronously (StagingSink's copies,
/// DevmemSink's scatter) and takes a message that came eager by one copy: what they
/// share. An operation that fails completes only once none of its placements is in
/// flight, so nothing writes to its memory after it completed.
class PlacingSink : public ChunkSink {
 public:
  /// Into `dst` of `device`'s memory, reporting the chunks of `t` (or the transfer
  /// attach() names) placed; `region`, if given, is the granted region's.
  PlacingSink(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, std::byte* dst, RxTransfer* t,
              std::shared_ptr<const RegionAccess> region)
      : t_(t), inline_(std::move(engine), device, dst, std::move(region)) {}
  void attach(RxTransfer& t) override { t_ = &t; }
  /// Placements started and not ended, chunks' and an inline message's.
  size_t in_flight() const noexcept override { return in_flight_ + inline_.in_flight(); }
  /// The region was deregistered: some bytes were dropped instead of placed.
  bool revoked() const noexcept override { return revoked_ || inline_.revoked(); }
  /// A message that came inline: one copy into the device.
  Status place_inline(std::span<const std::byte> bytes, InlinePlaced done) override {
    return inline_.place(bytes, std::move(done));
  }

 protected:
  RxTransfer* t_;
  size_t in_flight_ = 0;  // chunks' placements in flight
  bool revoked_ = false;

 private:
  InlineCopyIn inline_;
};

/// The source of an inline send out of device memory.
class BounceSource final : public ChunkSource {
 public:
  /// Reads [src, src + length) of `device`'s memory; `region`, if given, is the granted
  /// region's (a served get).
  BounceSource(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, const std::byte* src,
               uint64_t length, std::shared_ptr<const RegionAccess> region = nullptr);
  ~BounceSource() override;
  BounceSource(const BounceSource&) = delete;
  BounceSource& operator=(const BounceSource&) = delete;

  /// From the host copy (an inline end is never scheduled; this keeps the interface whole).
  net::IoResult write(int fd, uint64_t offset, uint64_t len) override;
  bool inline_ready() const noexcept override { return copied_ || length_ == 0; }
  /// Copies the bytes to host memory, waiting at most `timeout` (no lock held).
  Status copy_inline(Duration timeout) override;
  /// At once when copy_inline() ran (or there are no bytes); else the asynchronous copy.
  Status read_inline(uint64_t length, const InlineNow& now, InlineLater later) override;
  size_t in_flight() const noexcept override { return copies_.in_flight(); }
  bool revoked() const noexcept override { return copies_.revoked(); }

 private:
  InlineCopies copies_;
  const std::byte* src_;
  uint64_t length_;
  std::vector<std::byte> bytes_;  // copy_inline's copy
  bool copied_ = false;
};

/// The sink of an inline receive into device memory.
class BounceSink final : public ChunkSink {
 public:
  BounceSink(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, std::byte* dst,
             std::shared_ptr<const RegionAccess> region = nullptr)
      : copy_(std::move(engine), device, dst, std::move(region)) {}
  /// Never called: an inline end is never scheduled. Fails the stream if it were.
  net::IoResult read(StreamIn& in, uint64_t offset, uint64_t len, uint64_t* asked) override;
  Status place_inline(std::span<const std::byte> bytes, InlinePlaced done) override {
    return copy_.place(bytes, std::move(done));
  }
  size_t in_flight() const noexcept override { return copy_.in_flight(); }
  bool revoked() const noexcept override { return copy_.revoked(); }

 private:
  InlineCopyIn copy_;
};

}  // namespace remora::detail
