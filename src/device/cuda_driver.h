// device/cuda_driver.h — the CUDA driver, loaded at run time: dlopen("libcuda.so.1") (or
// REMORA_CUDA_DRIVER), cuInit, and a table of the entry points remora calls. Nothing in
// remora links against CUDA; a machine without the driver (or with only the toolkit's
// stub library) gets a Status saying so from every CUDA entry point.
#pragma once

#include <string>
#include <string_view>

#include "device/cuda_api.h"
#include "remora/status.h"

// cuda.h renames most driver functions with macros (cuMemAlloc -> cuMemAlloc_v2), which
// would rename this file's members too.
#if defined(__cuda_cuda_h__)
#error "include device/cuda_driver.h before <cuda.h>"
#endif

namespace remora::device {
namespace cu {

/// The loaded driver: where it came from, its version, and one pointer per function of
/// REMORA_CUDA_DRIVER_FUNCTIONS (null only for a missing optional one). Immutable once
/// loaded and never unloaded, so it may be used from any thread. (Declared among the
/// driver's types, so the function list reads as in cuda.h; remora::device::CudaDriver.)
struct CudaDriver {
  std::string path;           ///< what was passed to dlopen
  int version = 0;            ///< cuDriverGetVersion: 1000 × major + 10 × minor
  bool proc_address = false;  ///< every entry point came from cuGetProcAddress_v2 (else some from dlsym)

  // name##_fn is the type of member `name` (a pasted name, which cuda.h's renaming
  // macros cannot touch: device/cuda_api_check.cc compares it with cuda.h's).
#define REMORA_CUDA_DRIVER_MEMBER(name, suffix, abi_version, required, params) \
  using name##_fn = CUresult(*) params;                                        \
  name##_fn name = nullptr;
  REMORA_CUDA_DRIVER_FUNCTIONS(REMORA_CUDA_DRIVER_MEMBER)
#undef REMORA_CUDA_DRIVER_MEMBER
};

}  // namespace cu

using cu::CudaDriver;

/// The process's CUDA driver, loaded on the first call (thread-safe; later calls return
/// the same answer, failure included). kUnsupported with the reason when there is none:
///   "no CUDA driver: dlopen(libcuda.so.1): <dlerror>"
///   "CUDA driver stub library (no GPU driver installed): cuInit returned 34 CUDA_ERROR_STUB_LIBRARY ..."
///   "CUDA driver <path> failed to initialise: cuInit returned 100 CUDA_ERROR_NO_DEVICE ..."
///   "CUDA driver <path> (version 11.4) lacks cuLaunchHostFunc ..."
/// REMORA_CUDA_DRIVER=<path> loads that file instead of libcuda.so.1.
Result<const CudaDriver*> cuda_driver();

/// "<code> <NAME>: <description>" for a driver result, e.g.
/// "700 CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered". `driver`
/// may be null (then only the names remora knows are used).
std::string describe_cuda_result(const CudaDriver* driver, cu::CUresult result);

/// A Status for a failed driver call: "<what>: <call> returned <describe_cuda_result>",
/// with a code chosen from the result (out of memory: kNoResource; invalid value:
/// kInvalidArgument; not supported or permitted: kUnsupported; the rest, a device
/// failure: kDeviceFailed).
Status cuda_error(const CudaDriver& driver, cu::CUresult result, std::string_view call, std::string_view what);

/// Makes `ctx` current on this thread for a scope (cuCtxPushCurrent / cuCtxPopCurrent).
class ScopedContext {
 public:
  ScopedContext(const CudaDriver& driver, cu::CUcontext ctx) : driver_(driver), result_(driver.cuCtxPushCurrent(ctx)) {}
  ~ScopedContext() {
    if (result_ != cu::CUDA_SUCCESS) return;
    cu::CUcontext popped = nullptr;
    driver_.cuCtxPopCurrent(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  Status status(std::string_view what) const {
    if (result_ == cu::CUDA_SUCCESS) return Status::ok();
    return cuda_error(driver_, result_, "cuCtxPushCurrent", what);
  }

 private:
  const CudaDriver& driver_;
  cu::CUresult result_;
};

}  // namespace remora::device
