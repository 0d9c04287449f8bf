// remora/testing/test_device.h — a test double of an accelerator's memory, for machines
// without one.
//
// TestDeviceDomain is a MemoryDomain (of its own kind, kTestDeviceKind) whose memory this
// process cannot touch: it is mapped without any access rights, so a code path that
// reads or writes it directly instead of going through the domain's copies faults at
// once. Copies run asynchronously on copy-engine threads (one per direction, like a
// GPU's copy engines), at a rate you set, complete out of order when asked to, and fail
// on demand. The staging path's tests, `remora bench p2p --memory test-device` and
// `remora bench staging` use it; it proves nothing about real device drivers, and
// nothing that uses it says otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "remora/memory.h"
#include "remora/status.h"

namespace remora::testing {

/// The kind of memory TestDeviceDomain reports: none of MemoryKind's named kinds (it is
/// no real device), device memory to the library, "test-device" in its messages.
inline constexpr MemoryKind kTestDeviceKind = static_cast<MemoryKind>(3);

struct TestDeviceOptions {
  /// Device memory reserved (address space; pages are allocated on first copy).
  size_t capacity = size_t{1} << 30;
  /// Bytes per second each copy engine moves; 0: as fast as memcpy.
  double copy_bytes_per_second = 0;
  /// Each engine takes the newest queued copy first, so copies queued together end in
  /// the reverse order (tests of out-of-order completion). Off: oldest first.
  bool newest_first = false;
  /// export_dmabuf hands out the memfd behind this memory (a duplicate descriptor and the
  /// range's offset in it) as a stand-in for a dmabuf: not a dmabuf (a real bind-tx
  /// refuses it), for tests of the devmem paths with a stand-in of the kernel and NIC.
  /// Off: export_dmabuf is refused, as the default MemoryDomain's is.
  bool export_memfd = false;
  /// With export_memfd: each area from allocate_area is backed by a memfd of its own,
  /// which export_dmabuf hands out for memory inside it (as a GPU driver exports an
  /// allocation as a dmabuf of its own): io_uring zcrx takes only a whole dmabuf as its
  /// area. Off: areas are part of the device's one memfd.
  bool export_areas_alone = false;
};

class TestDeviceDomain final : public MemoryDomain {
 public:
  static Result<std::unique_ptr<TestDeviceDomain>> create(const TestDeviceOptions& options = {});
  /// Waits for the copies in flight, then unmaps the memory.
  ~TestDeviceDomain() override;
  TestDeviceDomain(const TestDeviceDomain&) = delete;
  TestDeviceDomain& operator=(const TestDeviceDomain&) = delete;

  /// `len` bytes of device memory (page-aligned; kNoResource when the capacity is used up).
  Result<std::byte*> allocate(size_t len);
  /// Every copy touching [ptr, ptr+len) from now on fails (StatusCode::kDeviceFailed,
  /// "injected"), until clear_failures().
  void fail_copies(const void* ptr, size_t len);
  void clear_failures();
  /// While held, copies queue and none starts; releasing starts them (newest first, if
  /// so made). Tests make an order of completion certain with it.
  void hold_copies(bool held);
  /// Changes the copy rate (bytes per second per engine; 0: unlimited).
  void set_copy_rate(double bytes_per_second);
  /// Copies started so far (both directions), and those that failed.
  uint64_t copies() const noexcept;
  uint64_t failed_copies() const noexcept;

  /// Synchronous conveniences for tests: copy and wait (up to 60 s).
  Status write(void* device_dst, const void* host_src, size_t len);
  Status read(void* host_dst, const void* device_src, size_t len);

  // MemoryDomain
  MemoryKind kind() const noexcept override { return kTestDeviceKind; }
  std::string_view name() const noexcept override { return "test-device"; }
  bool owns(const void* ptr, size_t len) const override;
  Result<DomainRegistration> register_range(void* ptr, size_t len, PinMode mode) override;
  void deregister_range(void* ptr, size_t len, const DomainRegistration& reg) noexcept override;
  Result<std::unique_ptr<AsyncCopy>> copy_to_host(void* host_dst, const void* src, size_t len) override;
  Result<std::unique_ptr<AsyncCopy>> copy_from_host(void* dst, const void* host_src, size_t len) override;
  Status prepare_staging(void* host, size_t len) override;
  /// Device-to-device, on the from-host engine (held, rated and failed like a copy): the
  /// devmem receive tests scatter fragments of a "dmabuf" in this memory with it.
  Result<std::unique_ptr<AsyncCopy>> scatter(void* dst_base, const void* src_base,
                                             std::span<const ScatterEntry> entries) override;
  void release_staging(void* host, size_t len) noexcept override;
  /// With TestDeviceOptions::export_memfd: the memfd, and the range's offset in it.
  Result<DmabufExport> export_dmabuf(const void* ptr, size_t len) override;
  /// allocate(); free_area gives nothing back (the capacity is used up once).
  Result<void*> allocate_area(size_t len) override;
  /// Staging buffers prepared and not yet released (tests check the pool's reuse).
  uint64_t prepared_staging() const noexcept;

  struct State;

 private:
  explicit TestDeviceDomain(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace remora::testing
