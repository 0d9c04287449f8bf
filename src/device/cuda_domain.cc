// device/cuda_domain.cc — the CUDA memory domain (cuda_domain.h): which memory it owns,
// the streams it keeps per context, copies, staging registration, dmabuf export and the
// scatter. How a copy ends is device/cuda_copy.cc's.
#include "device/cuda_domain.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/log.h"
#include "device/cuda_copy.h"
#include "device/cuda_unpack.h"

namespace remora::device {

namespace {

cu::CUdeviceptr device_address(const void* ptr) noexcept { return reinterpret_cast<uintptr_t>(ptr); }

enum StreamRole : size_t { kToHost = 0, kFromHost = 1, kScatter = 2, kStreamRoles = 3 };

std::string describe_memory_type(unsigned int type) {
  switch (type) {
    case 0: return "memory CUDA does not know";
    case cu::CU_MEMORYTYPE_HOST: return "page-locked host memory";
    case cu::CU_MEMORYTYPE_ARRAY: return "a CUDA array";
    case cu::CU_MEMORYTYPE_UNIFIED: return "unified memory";
    default: return fmt::format("CUDA memory of type {}", type);
  }
}

}  // namespace

/// One CUDA context's streams and unpack kernel. Created on first use, destroyed with
/// the domain.
struct CudaContextEntry {
  cu::CUcontext ctx = nullptr;
  cu::CUstream streams[kStreamRoles] = {};
  std::mutex stream_mu[kStreamRoles];  // keeps each copy's work and event together
  /// Where the host functions that report copies' ends run, one stream per role, each
  /// function behind its copy's event (cuStreamWaitEvent): a host function holds up the
  /// work of its stream until the driver has run it, and on the copy streams that held
  /// every next copy back by the driver's callback latency.
  cu::CUstream notify[kStreamRoles] = {};

  std::mutex kernel_mu;
  bool kernel_tried = false;
  Status kernel_status;
  UnpackKernel kernel;
};

struct CudaDomain::DevicePointer {
  cu::CUcontext ctx = nullptr;
  int ordinal = -1;
  cu::CUdeviceptr base = 0;  // the allocation that holds the pointer
  size_t size = 0;
};

CudaDomain::CudaDomain(Result<const CudaDriver*> driver, CudaDomainOptions options) : options_(options) {
  if (driver.is_ok()) {
    driver_ = *driver;
  } else {
    unavailable_ = driver.status();
  }
}

CudaDomain::~CudaDomain() {
  if (driver_ == nullptr) return;
  for (auto& [key, entry] : entries_) {
    ScopedContext scope(*driver_, entry->ctx);
    for (cu::CUstream stream : entry->streams) {
      if (stream == nullptr) continue;
      driver_->cuStreamSynchronize(stream);
      driver_->cuStreamDestroy(stream);
    }
    for (cu::CUstream stream : entry->notify) {  // last: their waits are for the copy streams' events
      if (stream == nullptr) continue;
      driver_->cuStreamSynchronize(stream);
      driver_->cuStreamDestroy(stream);
    }
    entry->kernel.unload(*driver_);
  }
  for (auto& [host, staging] : staging_) {
    if (!staging.owned) continue;
    ScopedContext scope(*driver_, staging.ctx);
    driver_->cuMemHostUnregister(const_cast<void*>(host));
  }
  // Each primary context is released when the last copy event made in it is destroyed
  // too (the process's watcher may hold some a little longer).
  std::lock_guard lock(primary_mu_);
  primary_.clear();
}

/// A primary context the domain retained, released when the domain and the copy events
/// made in it have all let go of it.
struct CudaDomain::PrimaryContext {
  const CudaDriver* driver;
  int ordinal;
  cu::CUcontext ctx;
  PrimaryContext(const CudaDriver* d, int o, cu::CUcontext c) : driver(d), ordinal(o), ctx(c) {}
  PrimaryContext(const PrimaryContext&) = delete;  // one release per retain
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext() {
    cu::CUdevice device = 0;
    if (driver->cuDeviceGet(&device, ordinal) == cu::CUDA_SUCCESS) driver->cuDevicePrimaryCtxRelease(device);
  }
};

std::shared_ptr<const void> CudaDomain::context_hold(cu::CUcontext ctx) const {
  std::lock_guard lock(primary_mu_);
  for (const auto& [ordinal, primary] : primary_) {
    if (primary->ctx == ctx) return primary;
  }
  return nullptr;  // the application's context: its lifetime is the application's
}

Status CudaDomain::available() const {
  if (driver_ != nullptr) return Status::ok();
  return unavailable_;
}

Result<cu::CUcontext> CudaDomain::primary_context(int ordinal) const {
  std::lock_guard lock(primary_mu_);
  if (auto it = primary_.find(ordinal); it != primary_.end()) return it->second->ctx;
  cu::CUdevice device = 0;
  cu::CUresult r = driver_->cuDeviceGet(&device, ordinal);
  if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuDeviceGet", fmt::format("CUDA device {}", ordinal));
  cu::CUcontext ctx = nullptr;
  r = driver_->cuDevicePrimaryCtxRetain(&ctx, device);
  if (r != cu::CUDA_SUCCESS) {
    return cuda_error(*driver_, r, "cuDevicePrimaryCtxRetain", fmt::format("CUDA device {}", ordinal));
  }
  primary_.emplace(ordinal, std::make_shared<PrimaryContext>(driver_, ordinal, ctx));
  return ctx;
}

Result<void*> CudaDomain::allocate(size_t bytes, int ordinal) {
  REMORA_RETURN_IF_ERROR(available());
  REMORA_ASSIGN_OR_RETURN(cu::CUcontext ctx, primary_context(ordinal));
  const std::string what = fmt::format("allocating {} bytes on CUDA device {}", bytes, ordinal);
  ScopedContext scope(*driver_, ctx);
  REMORA_RETURN_IF_ERROR(scope.status(what));
  cu::CUdeviceptr address = 0;
  const cu::CUresult r = driver_->cuMemAlloc(&address, std::max<size_t>(bytes, 1));
  if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuMemAlloc", what);
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

Status CudaDomain::deallocate(void* ptr) {
  REMORA_RETURN_IF_ERROR(available());
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(ptr, 1, "freeing CUDA memory"));
  if (where.base != device_address(ptr)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("freeing CUDA memory: {} is inside an allocation, not its start", ptr));
  }
  ScopedContext scope(*driver_, where.ctx);
  REMORA_RETURN_IF_ERROR(scope.status("freeing CUDA memory"));
  const cu::CUresult r = driver_->cuMemFree(where.base);
  if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuMemFree", fmt::format("freeing {}", ptr));
  return Status::ok();
}

Result<CudaDomain::DevicePointer> CudaDomain::locate(const void* ptr, size_t len, std::string_view what) const {
  if (ptr == nullptr) return Status(StatusCode::kInvalidArgument, fmt::format("{}: null pointer", what));
  const cu::CUdeviceptr address = device_address(ptr);
  if (address > UINT64_MAX - len) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} + {} bytes wraps around the address space", what, ptr, len));
  }
  unsigned int type = 0;
  DevicePointer out;
  cu::CUpointer_attribute attributes[] = {cu::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, cu::CU_POINTER_ATTRIBUTE_CONTEXT,
                                          cu::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* values[] = {&type, &out.ctx, &out.ordinal};
  cu::CUresult r = driver_->cuPointerGetAttributes(3, attributes, values, address);
  if (r != cu::CUDA_SUCCESS) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} is not CUDA device memory (cuPointerGetAttributes returned {})", what, ptr,
                              describe_cuda_result(driver_, r)));
  }
  if (type != cu::CU_MEMORYTYPE_DEVICE) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} is not CUDA device memory but {}", what, ptr, describe_memory_type(type)));
  }
  if (out.ctx == nullptr) {  // allocations of the virtual memory API name no context
    REMORA_ASSIGN_OR_RETURN(out.ctx, primary_context(out.ordinal));
  }
  ScopedContext scope(*driver_, out.ctx);
  REMORA_RETURN_IF_ERROR(scope.status(what));
  r = driver_->cuMemGetAddressRange(&out.base, &out.size, address);
  if (r != cu::CUDA_SUCCESS) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: {} is not in a CUDA allocation (cuMemGetAddressRange "
                                                            "returned {})",
                                                            what, ptr, describe_cuda_result(driver_, r)));
  }
  if (address < out.base || address - out.base > out.size || len > out.size - (address - out.base)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("{}: {} + {} bytes runs past the end of its CUDA allocation ({:#x} + {} bytes)", what,
                              ptr, len, out.base, out.size));
  }
  return out;
}

Result<CudaContextEntry*> CudaDomain::context_entry(cu::CUcontext ctx) {
  // A context's id is unique for the life of the process; its handle may be reused
  // after the application destroys it.
  uint64_t key = reinterpret_cast<uintptr_t>(ctx);
  if (driver_->cuCtxGetId != nullptr) {
    unsigned long long id = 0;
    const cu::CUresult r = driver_->cuCtxGetId(ctx, &id);
    if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuCtxGetId", "CUDA context of the memory");
    key = id;
  }
  std::lock_guard lock(entries_mu_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.get();
  auto entry = std::make_unique<CudaContextEntry>();
  entry->ctx = ctx;
  ScopedContext scope(*driver_, ctx);
  REMORA_RETURN_IF_ERROR(scope.status("creating the CUDA domain's streams"));
  std::vector<cu::CUstream*> to_make;
  for (cu::CUstream& stream : entry->streams) to_make.push_back(&stream);
  for (cu::CUstream& stream : entry->notify) to_make.push_back(&stream);
  for (cu::CUstream* stream : to_make) {
    const cu::CUresult r = driver_->cuStreamCreate(stream, cu::CU_STREAM_NON_BLOCKING);
    if (r != cu::CUDA_SUCCESS) {
      Status s = cuda_error(*driver_, r, "cuStreamCreate", "creating the CUDA domain's streams");
      for (cu::CUstream* made : to_make) {
        if (*made != nullptr) driver_->cuStreamDestroy(*made);
      }
      return s;
    }
  }
  CudaContextEntry* raw = entry.get();
  entries_.emplace(key, std::move(entry));
  return raw;
}

namespace {

/// Enqueues `work` on `stream` (in `entry`'s context, which the caller made current),
/// then what tracks its end. If any of it fails, waits for what was enqueued, so nothing
/// writes into the caller's memory after the error is returned.
/// Copies (and scatters) of up to this many bytes are polled for briefly when their
/// end is asked for, rather than left to the driver's host function, which comes tens
/// to hundreds of µs after a copy of a few µs.
constexpr size_t kPolledCopyBytes = 256 * 1024;
constexpr std::chrono::microseconds kPolledCopySpin{50};

std::chrono::microseconds spin_for(size_t bytes) {
  return bytes <= kPolledCopyBytes ? kPolledCopySpin : std::chrono::microseconds(0);
}

template <typename Work>
Result<std::unique_ptr<AsyncCopy>> enqueue(const CudaDriver& driver, CudaContextEntry& entry,
                                           std::shared_ptr<const void> context_hold, StreamRole role,
                                           std::string what, size_t bytes, Work&& work) {
  const cu::CUstream stream = entry.streams[role];
  std::lock_guard lock(entry.stream_mu[role]);
  Status s = work(stream);
  if (s.is_ok()) {
    auto copy = track_copy_end(driver, entry.ctx, stream, entry.notify[role], std::move(what), std::move(context_hold),
                               spin_for(bytes));
    if (copy.is_ok()) return copy;
    s = copy.status();
  }
  driver.cuStreamSynchronize(stream);
  return s;
}

}  // namespace

bool CudaDomain::owns(const void* ptr, size_t len) const {
  if (driver_ == nullptr) return false;
  return locate(ptr, len, "owns").is_ok();
}

Result<DomainRegistration> CudaDomain::register_range(void* ptr, size_t len, PinMode /*mode*/) {
  REMORA_RETURN_IF_ERROR(available());
  if (len == 0) return Status(StatusCode::kInvalidArgument, "cannot register an empty range (length 0)");
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(ptr, len, "register CUDA memory"));
  ScopedContext scope(*driver_, where.ctx);
  REMORA_RETURN_IF_ERROR(scope.status("register CUDA memory"));
  const unsigned int on = 1;
  const cu::CUresult r = driver_->cuPointerSetAttribute(&on, cu::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, device_address(ptr));
  if (r != cu::CUDA_SUCCESS) {
    // The virtual memory API's allocations refuse it; remora's own copies are ordered
    // by their streams and events either way.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      REMORA_LOG(kInfo, "cannot set CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on registered CUDA memory at {}: {} (logged once)",
                 ptr, describe_cuda_result(driver_, r));
    }
  }
  DomainRegistration reg;
  reg.pinned = true;  // device memory is resident: the device equivalent of locked pages
  reg.cookie = static_cast<uint64_t>(where.ordinal);
  return reg;
}

void CudaDomain::deregister_range(void* /*ptr*/, size_t /*len*/, const DomainRegistration& /*reg*/) noexcept {
  // Nothing to undo: SYNC_MEMOPS stays with the allocation and costs nothing.
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::copy(bool to_host, void* dst, const void* src, size_t len) {
  REMORA_RETURN_IF_ERROR(available());
  const char* direction = to_host ? "copy_to_host" : "copy_from_host";
  if (len == 0) return completed_copy();
  if (dst == nullptr || src == nullptr) {
    return Status(StatusCode::kInvalidArgument, fmt::format("{}: null pointer", direction));
  }
  const void* device_side = to_host ? src : dst;
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(device_side, len, direction));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * entry, context_entry(where.ctx));
  ScopedContext scope(*driver_, entry->ctx);
  REMORA_RETURN_IF_ERROR(scope.status(direction));
  std::string what = fmt::format("CUDA {} of {} bytes ({} {})", direction, len, to_host ? "from" : "to", device_side);
  const cu::CUdeviceptr device = device_address(device_side);
  const CudaDriver& driver = *driver_;
  return enqueue(driver, *entry, context_hold(entry->ctx), to_host ? kToHost : kFromHost, std::move(what), len,
                 [&](cu::CUstream stream) {
    const cu::CUresult r = to_host ? driver.cuMemcpyDtoHAsync(dst, device, len, stream)
                                   : driver.cuMemcpyHtoDAsync(device, src, len, stream);
    if (r == cu::CUDA_SUCCESS) return Status::ok();
    return cuda_error(driver, r, to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync", direction);
  });
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::copy_to_host(void* host_dst, const void* src, size_t len) {
  return copy(true, host_dst, src, len);
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::copy_from_host(void* dst, const void* host_src, size_t len) {
  return copy(false, dst, host_src, len);
}

Status CudaDomain::prepare_staging(void* host, size_t len) {
  REMORA_RETURN_IF_ERROR(available());
  if (host == nullptr || len == 0) {
    return Status(StatusCode::kInvalidArgument, "prepare_staging: null pointer or empty range");
  }
  std::lock_guard lock(staging_mu_);
  if (auto it = staging_.find(host); it != staging_.end()) {
    if (it->second.len != len) {
      return Status(
          StatusCode::kInvalidArgument,
          fmt::format("prepare_staging: {} is already prepared with {} bytes, not {}", host, it->second.len, len));
    }
    ++it->second.count;
    return Status::ok();
  }
  cu::CUcontext ctx = nullptr;
  if (driver_->cuCtxGetCurrent(&ctx) != cu::CUDA_SUCCESS || ctx == nullptr) {
    REMORA_ASSIGN_OR_RETURN(ctx, primary_context(0));
  }
  ScopedContext scope(*driver_, ctx);
  REMORA_RETURN_IF_ERROR(scope.status("prepare_staging"));
  const cu::CUresult r = driver_->cuMemHostRegister(host, len, cu::CU_MEMHOSTREGISTER_PORTABLE);
  if (r != cu::CUDA_SUCCESS && r != cu::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    return cuda_error(*driver_, r, "cuMemHostRegister",
                      fmt::format("prepare_staging: page-locking {} bytes at {} for CUDA copies", len, host));
  }
  staging_.emplace(host, Staging{.len = len, .ctx = ctx, .owned = r == cu::CUDA_SUCCESS, .count = 1});
  return Status::ok();
}

void CudaDomain::release_staging(void* host, size_t /*len*/) noexcept {
  if (driver_ == nullptr) return;
  std::lock_guard lock(staging_mu_);
  auto it = staging_.find(host);
  if (it == staging_.end()) return;
  if (--it->second.count > 0) return;
  if (it->second.owned) {
    ScopedContext scope(*driver_, it->second.ctx);
    const cu::CUresult r = driver_->cuMemHostUnregister(host);
    if (r != cu::CUDA_SUCCESS) {
      REMORA_LOG(kWarn, "release_staging: cuMemHostUnregister({}) returned {}", host, describe_cuda_result(driver_, r));
    }
  }
  staging_.erase(it);
}

Result<DmabufExport> CudaDomain::export_dmabuf(const void* ptr, size_t len) {
  REMORA_RETURN_IF_ERROR(available());
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (len == 0 || reinterpret_cast<uintptr_t>(ptr) % page != 0 || len % page != 0) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("export_dmabuf: {} + {} bytes is not a whole number of pages (start and length must be "
                              "non-zero multiples of {}): the driver exports whole pages",
                              ptr, len, page));
  }
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(ptr, len, "export_dmabuf"));
  if (driver_->cuMemGetHandleForAddressRange == nullptr) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("export_dmabuf: the CUDA driver {} has no cuMemGetHandleForAddressRange (CUDA 11.7)",
                              driver_->path));
  }
  cu::CUdevice device = 0;
  cu::CUresult r = driver_->cuDeviceGet(&device, where.ordinal);
  if (r != cu::CUDA_SUCCESS) return cuda_error(*driver_, r, "cuDeviceGet", "export_dmabuf");
  int supported = 0;
  r = driver_->cuDeviceGetAttribute(&supported, cu::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device);
  if (r != cu::CUDA_SUCCESS) {
    return cuda_error(*driver_, r, "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)", "export_dmabuf");
  }
  if (supported == 0) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("export_dmabuf: CUDA device {} cannot export dmabufs "
                              "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 with driver {}.{})",
                              where.ordinal, driver_->version / 1000, (driver_->version % 1000) / 10));
  }
  ScopedContext scope(*driver_, where.ctx);
  REMORA_RETURN_IF_ERROR(scope.status("export_dmabuf"));
  int fd = -1;
  r = driver_->cuMemGetHandleForAddressRange(&fd, device_address(ptr), len, cu::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != cu::CUDA_SUCCESS) {
    return cuda_error(*driver_, r, "cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)",
                      fmt::format("export_dmabuf of {} + {} bytes", ptr, len));
  }
  return DmabufExport{.fd = fd, .offset = 0, .length = len};
}

Status CudaDomain::ensure_kernel(CudaContextEntry& entry) {
  std::lock_guard lock(entry.kernel_mu);
  if (entry.kernel_tried) return entry.kernel_status;
  entry.kernel_tried = true;
  if (!options_.use_unpack_kernel) {
    entry.kernel_status = Status(StatusCode::kUnsupported, "the unpack kernel is off (CudaDomainOptions)");
    return entry.kernel_status;
  }
  ScopedContext scope(*driver_, entry.ctx);
  entry.kernel_status = scope.status("loading the unpack kernel");
  if (!entry.kernel_status.is_ok()) return entry.kernel_status;
  auto kernel = UnpackKernel::load(*driver_);
  if (kernel.is_ok()) {
    entry.kernel = std::move(kernel).value();
  } else {
    entry.kernel_status = kernel.status();
    REMORA_LOG(kInfo, "CUDA scatter copies entry by entry (cuMemcpyDtoDAsync): {}", entry.kernel_status.message());
  }
  return entry.kernel_status;
}

Status CudaDomain::unpack_kernel_status(const void* device_ptr) {
  REMORA_RETURN_IF_ERROR(available());
  REMORA_ASSIGN_OR_RETURN(DevicePointer where, locate(device_ptr, 0, "unpack_kernel_status"));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * entry, context_entry(where.ctx));
  return ensure_kernel(*entry);
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::scatter(void* dst_base, const void* src_base,
                                                       std::span<const ScatterEntry> entries) {
  // The unpack layout takes 32-bit lengths: a longer piece becomes several entries.
  std::vector<UnpackEntry> unpack;
  unpack.reserve(entries.size());
  constexpr uint64_t kMaxPiece = uint64_t{1} << 31;
  for (const ScatterEntry& e : entries) {
    for (uint64_t done = 0; done < e.length; done += kMaxPiece) {
      const uint64_t n = std::min(kMaxPiece, e.length - done);
      unpack.push_back(UnpackEntry{.src_offset = e.src_offset + done,
                                   .length = static_cast<uint32_t>(n),
                                   .reserved = 0,
                                   .dst_offset = e.dst_offset + done});
    }
  }
  return scatter(dst_base, src_base, std::span<const UnpackEntry>(unpack));
}

Result<std::unique_ptr<AsyncCopy>> CudaDomain::scatter(void* dst_base, const void* src_base,
                                                       std::span<const UnpackEntry> entries) {
  REMORA_RETURN_IF_ERROR(available());
  if (entries.empty()) return completed_copy();
  REMORA_ASSIGN_OR_RETURN(DevicePointer dst, locate(dst_base, 0, "scatter destination"));
  REMORA_ASSIGN_OR_RETURN(DevicePointer src, locate(src_base, 0, "scatter source"));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * entry, context_entry(dst.ctx));
  REMORA_ASSIGN_OR_RETURN(CudaContextEntry * src_entry, context_entry(src.ctx));
  if (entry != src_entry) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("scatter: source {} (device {}) and destination {} (device {}) are in different CUDA "
                              "contexts",
                              src_base, src.ordinal, dst_base, dst.ordinal));
  }
  // Room from each base to the end of its allocation; every entry must fit in it.
  const uint64_t dst_room = dst.base + dst.size - device_address(dst_base);
  const uint64_t src_room = src.base + src.size - device_address(src_base);
  uint64_t total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const UnpackEntry& e = entries[i];
    if (e.reserved != 0) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("scatter: entry {} has reserved = {}; it must be 0", i, e.reserved));
    }
    if (e.src_offset > src_room || e.length > src_room - e.src_offset) {
      return Status(StatusCode::kOutOfRange,
                    fmt::format("scatter: entry {} (source offset {}, {} bytes) runs past the source allocation ({} "
                                "bytes from the base)",
                                i, e.src_offset, e.length, src_room));
    }
    if (e.dst_offset > dst_room || e.length > dst_room - e.dst_offset) {
      return Status(StatusCode::kOutOfRange,
                    fmt::format("scatter: entry {} (destination offset {}, {} bytes) runs past the destination "
                                "allocation ({} bytes from the base)",
                                i, e.dst_offset, e.length, dst_room));
    }
    total += e.length;
  }
  const bool use_kernel = ensure_kernel(*entry).is_ok();
  ScopedContext scope(*driver_, entry->ctx);
  REMORA_RETURN_IF_ERROR(scope.status("scatter"));
  std::string what = fmt::format("CUDA scatter of {} entries, {} bytes ({})", entries.size(), total,
                                 use_kernel ? "unpack kernel" : "a copy per entry");
  const cu::CUdeviceptr dst_address = device_address(dst_base);
  const cu::CUdeviceptr src_address = device_address(src_base);
  const CudaDriver& driver = *driver_;
  return enqueue(driver, *entry, context_hold(entry->ctx), kScatter, std::move(what), total,
                 [&](cu::CUstream stream) {
    if (use_kernel) return entry->kernel.launch(driver, stream, dst_address, src_address, entries);
    return scatter_by_copies(driver, stream, dst_address, src_address, entries);
  });
}

}  // namespace remora::device
