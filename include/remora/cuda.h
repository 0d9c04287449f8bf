// remora/cuda.h — CUDA device memory: the process's CUDA memory domain, and a probe of
// the CUDA driver and devices for `remora doctor`.
//
// remora never links against CUDA: the driver (libcuda.so.1, or the file named by
// REMORA_CUDA_DRIVER) is loaded with dlopen the first time either function is called.
// Without a driver both still work and say why there is no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "remora/memory.h"
#include "remora/status.h"

namespace remora {

/// The process's CUDA memory domain (never destroyed), for registering device memory
/// (`MemoryRegistry::register_memory(ptr, len, access, *cuda_domain().value())`) and
/// copying it. kUnsupported with the reason when there is no usable driver, e.g.
/// "no CUDA driver: dlopen(libcuda.so.1): libcuda.so.1: cannot open shared object file: ..."
/// or "CUDA driver stub library (no GPU driver installed): cuInit returned 34 ...".
/// Thread-safe; the driver is loaded once per process, so the answer never changes.
Result<MemoryDomain*> cuda_domain();

/// `bytes` of device memory on CUDA device `ordinal` (cuMemAlloc in its primary
/// context), for programs without a CUDA runtime of their own (remora bench, tests).
/// The reason there is no CUDA (as cuda_domain()), or the driver's error.
Result<void*> cuda_allocate(size_t bytes, int ordinal = 0);
/// Frees what cuda_allocate returned; kInvalidArgument for anything else.
Status cuda_free(void* ptr);

/// One CUDA device as the driver describes it.
struct CudaDeviceInfo {
  int ordinal = -1;        ///< the driver's device number (after CUDA_VISIBLE_DEVICES)
  std::string name;        ///< "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;  ///< "0000:65:00.0"
  uint64_t total_memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  bool dmabuf_supported = false;  ///< CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: device memory can be exported as a dmabuf
  std::string error;              ///< non-empty when a query about this device failed: which and how
};

/// What the CUDA driver offers this process.
struct CudaProbe {
  bool driver_loaded = false;  ///< the driver was found and initialised (cuInit)
  std::string driver_path;     ///< what was loaded (libcuda.so.1 or REMORA_CUDA_DRIVER)
  std::string reason;          ///< why driver_loaded is false, or why `devices` is incomplete
  int driver_version = 0;      ///< cuDriverGetVersion: 1000 × major + 10 × minor (12040 = 12.4)
  std::vector<CudaDeviceInfo> devices;
  /// The scatter ("unpack") kernel for devmem receive was compiled into this library
  /// (CMake found nvcc). Without it scatters copy fragment by fragment.
  bool unpack_kernel_built = false;
};

/// Loads the driver if no call has yet, and reports it and its devices. Creates no CUDA
/// context (so it allocates no device memory). Thread-safe.
CudaProbe probe_cuda();

}  // namespace remora
