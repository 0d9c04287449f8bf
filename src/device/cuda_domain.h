// device/cuda_domain.h — the CUDA memory domain: device memory found through the
// driver's pointer attributes, asynchronous copies to and from host memory on streams
// the domain owns, page-locked staging buffers, dmabuf export, and the scatter
// ("unpack") that devmem TCP receive needs. The driver is loaded at run time
// (device/cuda_driver.h); without one every call reports why.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

#include "device/cuda_driver.h"
#include "device/unpack_layout.h"
#include "remora/memory.h"

namespace remora::device {

struct CudaDomainOptions {
  /// Scatter with the unpack kernel where it was built and the driver loads it; false:
  /// always one cuMemcpyDtoDAsync per entry (the fallback; tests compare both).
  bool use_unpack_kernel = true;
};

struct CudaContextEntry;  // a context's streams and loaded kernel (cuda_domain.cc)

/// A MemoryDomain for CUDA device memory. Thread-safe.
///
/// Which memory it owns: memory whose CU_POINTER_ATTRIBUTE_MEMORY_TYPE is DEVICE
/// (cuMemAlloc, cudaMalloc, the stream-ordered and virtual-memory allocators), within
/// one allocation (cuMemGetAddressRange). Page-locked host memory (cuMemHostAlloc,
/// cudaHostRegister) is host memory, for the host domain.
///
/// Copies run on non-blocking streams the domain creates in the context the memory
/// belongs to (CU_POINTER_ATTRIBUTE_CONTEXT, or the device's primary context for
/// memory that names none): one stream per direction and one for scatters, so copies
/// in one direction run in the order they were started. A copy's end is an event
/// recorded after it; a host function enqueued after the event ends the copy for
/// on_done, and because the driver never runs host functions after a context-wide
/// error, a thread (one per process, started with the first copy that needs it) polls
/// the events of copies with a pending on_done every 250 ms and ends those the driver
/// failed. wait() also asks the event at that interval. A wait given a timeout ≤ 0
/// (kDefaultTimeout included: a domain belongs to no context) only polls, like test().
class CudaDomain final : public MemoryDomain {
 public:
  /// A domain over `driver` (normally cuda_driver()); when that holds an error, every
  /// call reports it (owns() answers false).
  explicit CudaDomain(Result<const CudaDriver*> driver, CudaDomainOptions options = {});
  /// Waits for the domain's streams to drain, then destroys them, unloads the kernel,
  /// unregisters staging memory still prepared and releases the primary contexts it
  /// retained. Copies still held by callers remain valid to test and wait on.
  ~CudaDomain() override;
  CudaDomain(const CudaDomain&) = delete;
  CudaDomain& operator=(const CudaDomain&) = delete;

  MemoryKind kind() const noexcept override { return MemoryKind::kCuda; }
  std::string_view name() const noexcept override { return "cuda"; }

  /// ok when the driver is loaded, else the reason there is none (kUnsupported).
  Status available() const;

  bool owns(const void* ptr, size_t len) const override;

  /// Checks that [ptr, ptr+len) is device memory within one allocation and sets
  /// CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on it (so synchronous copies the application
  /// makes into it are complete when they return, before a NIC may read it). Device
  /// memory is always resident: `mode` changes nothing and the registration reports
  /// pinned. kInvalidArgument for memory that is not device memory or runs past its
  /// allocation.
  Result<DomainRegistration> register_range(void* ptr, size_t len, PinMode mode) override;
  void deregister_range(void* ptr, size_t len, const DomainRegistration& reg) noexcept override;

  /// cuMemcpyDtoHAsync / cuMemcpyHtoDAsync on the memory's context. The host side may
  /// be pageable (the driver then copies through its own buffers and the call returns
  /// later) or prepared with prepare_staging (truly asynchronous). kInvalidArgument
  /// when the device side is not device memory or runs past its allocation.
  Result<std::unique_ptr<AsyncCopy>> copy_to_host(void* host_dst, const void* src, size_t len) override;
  Result<std::unique_ptr<AsyncCopy>> copy_from_host(void* dst, const void* host_src, size_t len) override;

  /// cuMemHostRegister(PORTABLE) in the calling thread's current context, or device
  /// 0's primary context when none is current. Counted: preparing the same address
  /// again only counts, and memory the application registered itself is left as it is
  /// (and left registered by release_staging).
  Status prepare_staging(void* host, size_t len) override;
  void release_staging(void* host, size_t len) noexcept override;

  /// cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) for a range
  /// whose start and length are multiples of the host page size. kUnsupported, with
  /// the reason, where the device or driver cannot (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
  /// is 0, or the driver predates CUDA 11.7).
  Result<DmabufExport> export_dmabuf(const void* ptr, size_t len) override;

  /// The devmem receive "unpack": for each entry, copies `length` bytes from
  /// src_base + src_offset to dst_base + dst_offset, asynchronously, on the scatter
  /// stream of dst_base's context; with the unpack kernel when it was built and loads
  /// (unpack_kernel_status), else one cuMemcpyDtoDAsync per entry. Both bases must be
  /// device memory of one context and every entry must lie within the allocations the
  /// bases point into (kOutOfRange names the first that does not; nothing is copied);
  /// reserved fields must be 0. Destination ranges must not overlap each other or any
  /// source range. `entries` may be reused as soon as this returns.
  Result<std::unique_ptr<AsyncCopy>> scatter(void* dst_base, const void* src_base,
                                             std::span<const UnpackEntry> entries);
  /// MemoryDomain::scatter: the same, pieces longer than 2 GiB split into entries.
  Result<std::unique_ptr<AsyncCopy>> scatter(void* dst_base, const void* src_base,
                                             std::span<const ScatterEntry> entries) override;

  /// ok when scatters into the context of `device_ptr` use the unpack kernel (loading
  /// it there if it was not yet); else why they copy entry by entry.
  Status unpack_kernel_status(const void* device_ptr);

  /// `bytes` (at least 1) of device memory on device `ordinal`, in its primary context
  /// (cuMemAlloc), for applications with no CUDA runtime of their own (remora bench).
  Result<void*> allocate(size_t bytes, int ordinal = 0);
  /// Frees what allocate() returned (cuMemFree in the allocation's context).
  /// kInvalidArgument for anything else.
  Status deallocate(void* ptr);
  /// allocate() on device 0 (the GPU devmem receive areas live on), deallocate().
  Result<void*> allocate_area(size_t len) override { return allocate(len, 0); }
  void free_area(void* ptr) noexcept override { (void)deallocate(ptr); }

 private:
  struct DevicePointer;
  Result<DevicePointer> locate(const void* ptr, size_t len, std::string_view what) const;
  Result<cu::CUcontext> primary_context(int ordinal) const;
  Result<CudaContextEntry*> context_entry(cu::CUcontext ctx);
  Status ensure_kernel(CudaContextEntry& entry);
  Result<std::unique_ptr<AsyncCopy>> copy(bool to_host, void* dst, const void* src, size_t len);

  struct Staging {
    size_t len = 0;
    cu::CUcontext ctx = nullptr;
    bool owned = false;  ///< registered by us (else the application had registered it)
    uint32_t count = 0;
  };

  const CudaDriver* driver_ = nullptr;
  Status unavailable_;
  CudaDomainOptions options_;

  struct PrimaryContext;
  /// What keeps `ctx` alive for a copy event made in it: our retain where it is a primary
  /// context we retained, else nothing.
  std::shared_ptr<const void> context_hold(cu::CUcontext ctx) const;

  mutable std::mutex primary_mu_;
  mutable std::map<int, std::shared_ptr<PrimaryContext>> primary_;  // device ordinal -> our retain of its primary context

  std::mutex entries_mu_;
  std::map<uint64_t, std::unique_ptr<CudaContextEntry>> entries_;  // by context id; never erased before ~CudaDomain

  std::mutex staging_mu_;
  std::map<const void*, Staging> staging_;
};

}  // namespace remora::device
