// device/unpack_layout.h — the layout of a scatter ("unpack") request, shared by the CUDA
// kernel (device/cuda_unpack.cu, compiled by nvcc into a fatbin) and the host code that
// launches it (device/cuda_unpack.cc). Plain structs and constants only: nvcc compiles
// this file for the device.
//
// Devmem TCP receive leaves payload as fragments in a dmabuf pool; an unpack copies each
// fragment to where it belongs. One UnpackEntry is one fragment: `length` bytes from
// source base + `src_offset` to destination base + `dst_offset`.
#pragma once

#include <cstdint>

namespace remora::device {

/// One piece of a scatter. 24 bytes, little-endian on every platform CUDA runs on.
struct UnpackEntry {
  uint64_t src_offset;  ///< from the source base (the fragment's offset in the pool)
  uint32_t length;      ///< bytes; 0 copies nothing
  uint32_t reserved;    ///< must be 0 (room for flags without a layout change)
  uint64_t dst_offset;  ///< from the destination base
};
static_assert(sizeof(UnpackEntry) == 24, "UnpackEntry is 24 bytes");

/// Entries per kernel launch. They travel in the launch's parameter block, which the
/// driver copies when the kernel is launched, so the caller's list may be reused as
/// soon as the launch returns and no device-side staging of the list is needed. The
/// whole block stays within the 4 KiB every CUDA version accepts.
inline constexpr uint32_t kUnpackEntriesPerLaunch = 168;

/// The kernel's only parameter.
struct UnpackBatch {
  uint64_t src_base;  ///< device address the entries' src_offset count from
  uint64_t dst_base;  ///< device address the entries' dst_offset count from
  uint32_t count;     ///< entries used, ≤ kUnpackEntriesPerLaunch; one block each
  uint32_t reserved;
  UnpackEntry entries[kUnpackEntriesPerLaunch];
};
static_assert(sizeof(UnpackBatch) <= 4096, "the parameter block of a launch is at most 4 KiB");

/// The kernel's (unmangled) name in the module, and its block size.
inline constexpr const char* kUnpackKernelName = "remora_unpack";
inline constexpr uint32_t kUnpackThreadsPerBlock = 256;

}  // namespace remora::device
