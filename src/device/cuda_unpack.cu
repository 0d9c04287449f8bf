// device/cuda_unpack.cu — the scatter ("unpack") kernel: one block per UnpackEntry,
// copying `length` bytes from src_base + src_offset to dst_base + dst_offset.
//
// Compiled by CMake with `nvcc -fatbin` (sm_80, sm_90 and compute_90 PTX, which newer
// GPUs compile at load time) and embedded in libremora as bytes; loaded with
// cuModuleLoadData and launched with cuLaunchKernel (device/cuda_unpack.cc). No CUDA
// runtime: this file uses nothing but device code.
//
// Fragments land at any byte offset, so the copy takes the widest word that the source
// and destination share an alignment for (16, 8, 4 bytes, else single bytes): a head of
// single bytes up to the destination's word boundary, whole words, then a tail.
#include "device/unpack_layout.h"

namespace {

template <typename Word>
__device__ void copy_words(unsigned char* dst, const unsigned char* src, uint32_t length) {
  // dst and src are equally aligned modulo sizeof(Word).
  const uint32_t misalignment = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(dst) % sizeof(Word));
  uint32_t head = misalignment == 0 ? 0 : static_cast<uint32_t>(sizeof(Word)) - misalignment;
  if (head > length) head = length;
  for (uint32_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];

  const uint32_t words = (length - head) / static_cast<uint32_t>(sizeof(Word));
  const Word* src_words = reinterpret_cast<const Word*>(src + head);
  Word* dst_words = reinterpret_cast<Word*>(dst + head);
  for (uint32_t i = threadIdx.x; i < words; i += blockDim.x) dst_words[i] = src_words[i];

  const uint32_t tail = head + words * static_cast<uint32_t>(sizeof(Word));
  for (uint32_t i = tail + threadIdx.x; i < length; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

extern "C" __global__ void __launch_bounds__(remora::device::kUnpackThreadsPerBlock)
    remora_unpack(const __grid_constant__ remora::device::UnpackBatch batch) {
  if (blockIdx.x >= batch.count) return;
  const remora::device::UnpackEntry& entry = batch.entries[blockIdx.x];
  const auto* src = reinterpret_cast<const unsigned char*>(batch.src_base + entry.src_offset);
  auto* dst = reinterpret_cast<unsigned char*>(batch.dst_base + entry.dst_offset);
  const uintptr_t shared = reinterpret_cast<uintptr_t>(src) ^ reinterpret_cast<uintptr_t>(dst);
  if (shared % 16 == 0) {
    copy_words<uint4>(dst, src, entry.length);
  } else if (shared % 8 == 0) {
    copy_words<uint2>(dst, src, entry.length);
  } else if (shared % 4 == 0) {
    copy_words<unsigned int>(dst, src, entry.length);
  } else {
    copy_words<unsigned char>(dst, src, entry.length);
  }
}
