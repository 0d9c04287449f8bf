// device/cuda_unpack.cc — loading and launching the unpack kernel, and the fallback
// scatter by copies (cuda_unpack.h).
#include "device/cuda_unpack.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace remora::device {

#ifndef REMORA_CUDA_UNPACK_KERNEL
// Built without a CUDA toolkit: no kernel (with one, the build generates this function
// from the fatbin: cmake/RemoraEmbed.cmake).
std::span<const unsigned char> unpack_fatbin() noexcept { return {}; }
#endif

UnpackKernel::UnpackKernel(UnpackKernel&& other) noexcept
    : module_(std::exchange(other.module_, nullptr)), function_(std::exchange(other.function_, nullptr)) {}

UnpackKernel& UnpackKernel::operator=(UnpackKernel&& other) noexcept {
  module_ = std::exchange(other.module_, nullptr);
  function_ = std::exchange(other.function_, nullptr);
  return *this;
}

Result<UnpackKernel> UnpackKernel::load(const CudaDriver& driver) {
  const std::span<const unsigned char> image = unpack_fatbin();
  if (image.empty()) {
    return Status(StatusCode::kUnsupported,
                  "the CUDA unpack kernel was not built (no CUDA toolkit when remora was compiled)");
  }
  UnpackKernel kernel;
  cu::CUresult r = driver.cuModuleLoadData(&kernel.module_, image.data());
  if (r != cu::CUDA_SUCCESS) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("the driver cannot load the CUDA unpack kernel for this GPU: cuModuleLoadData "
                              "returned {}",
                              describe_cuda_result(&driver, r)));
  }
  r = driver.cuModuleGetFunction(&kernel.function_, kernel.module_, kUnpackKernelName);
  if (r != cu::CUDA_SUCCESS) {
    Status s =
        cuda_error(driver, r, "cuModuleGetFunction", fmt::format("the unpack module has no {}", kUnpackKernelName));
    kernel.unload(driver);
    return s;
  }
  return kernel;
}

Status UnpackKernel::launch(const CudaDriver& driver, cu::CUstream stream, cu::CUdeviceptr dst_base,
                            cu::CUdeviceptr src_base, std::span<const UnpackEntry> entries) const {
  UnpackBatch batch{};
  batch.src_base = src_base;
  batch.dst_base = dst_base;
  void* params[] = {&batch};
  while (!entries.empty()) {
    const size_t count = std::min<size_t>(entries.size(), kUnpackEntriesPerLaunch);
    std::copy_n(entries.begin(), count, batch.entries);
    batch.count = static_cast<uint32_t>(count);
    const cu::CUresult r =
        driver.cuLaunchKernel(function_, batch.count, 1, 1, kUnpackThreadsPerBlock, 1, 1, 0, stream, params, nullptr);
    if (r != cu::CUDA_SUCCESS) return cuda_error(driver, r, "cuLaunchKernel", "scatter (unpack kernel)");
    entries = entries.subspan(count);
  }
  return Status::ok();
}

void UnpackKernel::unload(const CudaDriver& driver) noexcept {
  if (module_ != nullptr) driver.cuModuleUnload(module_);
  module_ = nullptr;
  function_ = nullptr;
}

Status scatter_by_copies(const CudaDriver& driver, cu::CUstream stream, cu::CUdeviceptr dst_base,
                         cu::CUdeviceptr src_base, std::span<const UnpackEntry> entries) {
  for (const UnpackEntry& e : entries) {
    if (e.length == 0) continue;
    const cu::CUresult r = driver.cuMemcpyDtoDAsync(dst_base + e.dst_offset, src_base + e.src_offset, e.length, stream);
    if (r != cu::CUDA_SUCCESS) return cuda_error(driver, r, "cuMemcpyDtoDAsync", "scatter (one copy per entry)");
  }
  return Status::ok();
}

}  // namespace remora::device
