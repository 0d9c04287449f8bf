// tools/perf/memory.h — the device memory a benchmark side's message buffers can be
// of: one DeviceMemory per kind (the test device; CUDA once it is built in), opened on
// demand, its domain added to the side's context, and its blocks reused (the test
// device cannot free). Private to tools/perf; the kinds and their parsing are in perf.h.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "remora/remora.h"

namespace remora::perf::internal {

class DeviceMemory;

/// A block of device memory; back to its DeviceMemory for reuse when destroyed.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  DeviceBlock(DeviceMemory* owner, std::byte* data, size_t size) noexcept : owner_(owner), data_(data), size_(size) {}
  DeviceBlock(DeviceBlock&& other) noexcept;
  DeviceBlock& operator=(DeviceBlock&& other) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  ~DeviceBlock();

  DeviceMemory* owner() const noexcept { return owner_; }
  std::byte* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }

 private:
  void give_back() noexcept;
  DeviceMemory* owner_ = nullptr;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

/// One kind of device memory as a benchmark side uses it. Not thread-safe (a side's
/// loops run on one thread); the domain's copies are.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual MemoryKind kind() const noexcept = 0;
  virtual MemoryDomain& domain() noexcept = 0;
  /// Holds each copy engine to `bytes_per_second` (0: unlimited). Only a test device
  /// has a rate to set; a real device's copies run at the hardware's rate, so it
  /// accepts 0 only.
  virtual Status set_copy_rate(double bytes_per_second) = 0;

  /// At least `len` bytes (at least 1), reusing a block given back before when one fits.
  Result<DeviceBlock> allocate(size_t len);
  /// Copies through the domain, waited for (bounded by kOpTimeout).
  Status write(std::byte* device_dst, std::span<const std::byte> host_src);
  Status read(std::span<std::byte> host_dst, const std::byte* device_src);

 protected:
  /// A new block of at least `len` bytes; the DeviceMemory keeps it for reuse.
  virtual Result<std::byte*> allocate_new(size_t len) = 0;

 private:
  friend class DeviceBlock;
  void give_back(std::byte* data, size_t size) noexcept { free_.emplace(size, data); }
  std::multimap<size_t, std::byte*> free_;  ///< blocks given back, by size
};

/// Whether device memory of `kind` can be opened in this process (host: always),
/// without opening it: a refusal says why.
Status memory_available(MemoryKind kind);

/// The device memory one side of a run has opened. Declare it before the side's
/// Context: a domain must outlive every context it was added to.
class DeviceSet {
 public:
  DeviceSet() = default;
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;

  /// The device memory of `kind`, opened the first time (and added to the attached
  /// context, if any); nullptr for host memory. kUnsupported where there is none.
  Result<DeviceMemory*> open(MemoryKind kind);
  /// Adds the domain of every memory opened so far, and of each one opened later, to
  /// `ctx`, which this set must outlive.
  Status attach(Context& ctx);
  /// Every opened device's copy rate (set_copy_rate).
  Status set_copy_rate(double bytes_per_second);

 private:
  std::vector<std::unique_ptr<DeviceMemory>> opened_;
  Context* ctx_ = nullptr;
};

}  // namespace remora::perf::internal
