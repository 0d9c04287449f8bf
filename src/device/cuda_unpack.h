// device/cuda_unpack.h — the scatter ("unpack") of device memory: the kernel embedded in
// the library (device/cuda_unpack.cu, present when remora was built with a CUDA
// toolkit), loaded into a context and launched through the driver; and the fallback
// of one cuMemcpyDtoDAsync per entry. CudaDomain::scatter (device/cuda_domain.h) picks
// one and checks the entries; the functions here trust what they are given.
#pragma once

#include <span>

#include "device/cuda_driver.h"
#include "device/unpack_layout.h"
#include "remora/status.h"

namespace remora::device {

/// The unpack kernel as nvcc compiled it when remora was built (a fatbin: sm_80, sm_90
/// and compute_90 PTX); empty when the build had no CUDA toolkit.
std::span<const unsigned char> unpack_fatbin() noexcept;

/// The unpack kernel loaded into one CUDA context. Move-only; unload() before the
/// context goes away (the destructor does not call the driver).
class UnpackKernel {
 public:
  UnpackKernel() = default;
  UnpackKernel(UnpackKernel&& other) noexcept;
  UnpackKernel& operator=(UnpackKernel&& other) noexcept;
  UnpackKernel(const UnpackKernel&) = delete;
  UnpackKernel& operator=(const UnpackKernel&) = delete;
  ~UnpackKernel() = default;

  /// Loads the embedded fatbin into the current context. kUnsupported with the reason
  /// when the kernel was not built or the driver cannot load it for this GPU (a driver
  /// older than the toolkit that compiled the PTX, a GPU older than sm_80).
  static Result<UnpackKernel> load(const CudaDriver& driver);

  /// Enqueues the copies of `entries` on `stream`: one launch per
  /// kUnpackEntriesPerLaunch entries, a block per entry. The entries travel in the
  /// launch parameters, so `entries` may be reused when this returns. On an error part
  /// of the entries may already be enqueued.
  Status launch(const CudaDriver& driver, cu::CUstream stream, cu::CUdeviceptr dst_base, cu::CUdeviceptr src_base,
                std::span<const UnpackEntry> entries) const;

  /// Unloads the module (its context must be current or alive). Idempotent.
  void unload(const CudaDriver& driver) noexcept;

  bool loaded() const noexcept { return function_ != nullptr; }

 private:
  cu::CUmodule module_ = nullptr;
  cu::CUfunction function_ = nullptr;
};

/// The fallback scatter: one cuMemcpyDtoDAsync per non-empty entry, on `stream`. On an
/// error part of the entries may already be enqueued.
Status scatter_by_copies(const CudaDriver& driver, cu::CUstream stream, cu::CUdeviceptr dst_base,
                         cu::CUdeviceptr src_base, std::span<const UnpackEntry> entries);

}  // namespace remora::device
