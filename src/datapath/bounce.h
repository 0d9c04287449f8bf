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
// the chunked sinks of device memory (StagingSink, DevmemSink) use too for a message
// that came eager: the frame's bytes are copied into a host buffer of their own (the
// control stream's buffer is reused at once) and from there to the device; the
// operation hears the copy's end with the progress lock held.
//
// A granted region's copy is one RegionAccess bracket, open from the copy's start to its
// end; once the region is deregistered no copy starts (revoked()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "datapath/chunk_io.h"
#include "engine/progress.h"
#include "remora/memory.h"

namespace remora::detail {

/// Inline bytes copied into device memory (see the top of this file).
class InlineCopyIn {
 public:
  /// Into `dst` of `device`'s memory; `region`, if given, is the granted region's.
  InlineCopyIn(std::shared_ptr<engine::ProgressEngine> engine, MemoryDomain& device, std::byte* dst,
               std::shared_ptr<const RegionAccess> region = nullptr);
  /// ChunkSink::place_inline's contract: ok for no bytes; kInProgress with `done` to
  /// come; the domain's refusal; kInvalidKey once the region is deregistered.
  Status place(std::span<const std::byte> bytes, ChunkSink::InlinePlaced done);
  size_t in_flight() const noexcept { return *copying_; }
  bool revoked() const noexcept { return revoked_; }

 private:
  std::shared_ptr<engine::ProgressEngine> engine_;
  MemoryDomain* device_;
  std::byte* dst_;
  std::shared_ptr<const RegionAccess> region_;
  std::shared_ptr<size_t> copying_ = std::make_shared<size_t>(0);  // decremented by copy ends while it lives
  bool revoked_ = false;
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
  size_t in_flight() const noexcept override { return *copying_; }
  bool revoked() const noexcept override { return revoked_; }

 private:
  std::shared_ptr<engine::ProgressEngine> engine_;
  MemoryDomain* device_;
  const std::byte* src_;
  uint64_t length_;
  std::shared_ptr<const RegionAccess> region_;
  std::vector<std::byte> bytes_;  // copy_inline's copy
  bool copied_ = false;
  std::shared_ptr<size_t> copying_ = std::make_shared<size_t>(0);
  bool revoked_ = false;
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
