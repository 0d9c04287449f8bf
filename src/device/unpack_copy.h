// device/unpack_copy.h — how one thread of a block copies its share of one unpack entry.
// The CUDA kernel (device/cuda_unpack.cu) runs it on the GPU; the emulated driver of the
// tests (tests/device/emulated_cuda/) runs it on the host for every thread of the block
// in turn, so the arithmetic that splits an entry into an unaligned head, whole words
// and a tail is tested on machines without a GPU. Header-only, C++17, device-safe.
//
// Fragments land at any byte offset, so the copy takes the widest word (16, 8, 4 bytes,
// else single bytes) for which source and destination share an alignment: a head of
// single bytes up to the destination's word boundary, whole words, then a tail; thread t
// of n takes elements t, t + n, t + 2n, ... of each part (neighbouring threads touch
// neighbouring memory). Indices are 64-bit: with 32-bit ones, i + n would wrap for a
// length within n of 2^32 and never reach it.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define REMORA_UNPACK_FN __host__ __device__ inline
#else
#define REMORA_UNPACK_FN inline
#endif

namespace remora::device::unpack {

/// 16 bytes moved as one (a 128-bit load and store on the GPU).
struct alignas(16) Bytes16 {
  uint64_t lo;
  uint64_t hi;
};

template <typename Word>
REMORA_UNPACK_FN void copy_word(unsigned char* dst, const unsigned char* src) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Word*>(dst) = *reinterpret_cast<const Word*>(src);
#else
  std::memcpy(dst, src, sizeof(Word));  // the host has no aliasing licence for the cast
#endif
}

/// dst and src are equally aligned modulo sizeof(Word).
template <typename Word>
REMORA_UNPACK_FN void copy_words(unsigned char* dst, const unsigned char* src, uint64_t length, uint32_t thread,
                                 uint32_t threads) {
  const uint64_t misalignment = reinterpret_cast<uintptr_t>(dst) % sizeof(Word);
  uint64_t head = misalignment == 0 ? 0 : sizeof(Word) - misalignment;
  if (head > length) head = length;
  for (uint64_t i = thread; i < head; i += threads) dst[i] = src[i];
  const uint64_t words = (length - head) / sizeof(Word);
  for (uint64_t i = thread; i < words; i += threads) {
    copy_word<Word>(dst + head + i * sizeof(Word), src + head + i * sizeof(Word));
  }
  for (uint64_t i = head + words * sizeof(Word) + thread; i < length; i += threads) dst[i] = src[i];
}

/// Thread `thread` of `threads` copies its share of [src, src+length) to dst.
REMORA_UNPACK_FN void copy_share(unsigned char* dst, const unsigned char* src, uint64_t length, uint32_t thread,
                                 uint32_t threads) {
  const uintptr_t shared = reinterpret_cast<uintptr_t>(src) ^ reinterpret_cast<uintptr_t>(dst);
  if (shared % 16 == 0) {
    copy_words<Bytes16>(dst, src, length, thread, threads);
  } else if (shared % 8 == 0) {
    copy_words<uint64_t>(dst, src, length, thread, threads);
  } else if (shared % 4 == 0) {
    copy_words<uint32_t>(dst, src, length, thread, threads);
  } else {
    copy_words<unsigned char>(dst, src, length, thread, threads);
  }
}

}  // namespace remora::device::unpack
