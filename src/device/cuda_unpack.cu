// device/cuda_unpack.cu — the scatter ("unpack") kernel: one block per UnpackEntry,
// copying `length` bytes from src_base + src_offset to dst_base + dst_offset, each
// thread its share (device/unpack_copy.h, which the tests also run on the host).
//
// Compiled by CMake with `nvcc -fatbin` (sm_80, sm_90 and compute_90 PTX, which newer
// GPUs compile at load time) and embedded in libremora as bytes; loaded with
// cuModuleLoadData and launched with cuLaunchKernel (device/cuda_unpack.cc). No CUDA
// runtime: this file holds nothing but device code. The entries arrive in the launch's
// parameter block; __grid_constant__ lets the kernel read them there without a copy.
#include "device/unpack_copy.h"
#include "device/unpack_layout.h"

extern "C" __global__ void __launch_bounds__(remora::device::kUnpackThreadsPerBlock)
    remora_unpack(const __grid_constant__ remora::device::UnpackBatch batch) {
  if (blockIdx.x >= batch.count) return;
  const remora::device::UnpackEntry& entry = batch.entries[blockIdx.x];
  remora::device::unpack::copy_share(reinterpret_cast<unsigned char*>(batch.dst_base + entry.dst_offset),
                                     reinterpret_cast<const unsigned char*>(batch.src_base + entry.src_offset),
                                     entry.length, threadIdx.x, blockDim.x);
}
