// tests/coll/reference.h — the sequential reference that collective tests check
// against, shared by the in-process tests (tests/coll/) and the multi-process check
// program (tests/integration/coll_check_main.cc), so both judge results the same way.
//
// Reductions: rank r's element i is a small exact integer (input()), so every partial
// result is exact in every type and the reference — the integers combined in rank
// order, then encoded — matches bit for bit whatever order an algorithm combines in;
// integer overflow (int8 products) wraps identically on both sides.
// Data movement: pattern() gives deterministic bytes per (salt, index); uneven() and
// scattered_layout() give v-form counts with zeros and displacements with gaps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "remora/communicator.h"

namespace remora::test {

inline constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,  DataType::kInt32,   DataType::kUint32,
                                         DataType::kInt64,   DataType::kUint64, DataType::kFloat16, DataType::kBFloat16,
                                         DataType::kFloat32, DataType::kFloat64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

inline bool is_unsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
}
/// Whether the library accepts `op` on `t` for allreduce/reduce/reduce_scatter.
inline bool valid(DataType t, ReduceOp op) { return op != ReduceOp::kAvg || is_floating(t); }

/// Rank r's element i, as an exact integer; `n` is the communicator size (for kAvg,
/// whose inputs are chosen so that the average is an integer too).
inline int64_t input(int r, size_t i, DataType t, ReduceOp op, int n) {
  const int64_t k = static_cast<int64_t>(i % 1000003);
  switch (op) {
    case ReduceOp::kProd: {
      // Mostly ones, some twos and minus ones: products stay exact in every type.
      const int64_t h = (k * 7 + r * 3) % 11;
      if (h == 0) return 2;
      if (h == 1 && !is_unsigned(t)) return -1;
      return 1;
    }
    case ReduceOp::kAvg: return ((k + 2 * r) % 7 - 3) * n;
    default: return is_unsigned(t) ? (k * 5 + r * 3) % 16 : (k * 5 + r * 3) % 17 - 8;
  }
}

inline int64_t combine(ReduceOp op, int64_t a, int64_t b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
  }
  return 0;
}

/// IEEE half of an integer with |v| <= 2048 (exact).
inline uint16_t half_of(int64_t v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  const uint64_t a = static_cast<uint64_t>(v < 0 ? -v : v);
  const int e = 63 - __builtin_clzll(a);
  const uint64_t mant = (a << (10 - e)) & 1023;
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mant);
}

/// Writes integer v as one element of type t (wrapping for integer types).
inline void encode(DataType t, int64_t v, std::byte* out) {
  auto put = [out](auto x) { std::memcpy(out, &x, sizeof x); };
  switch (t) {
    case DataType::kInt8: put(static_cast<int8_t>(v)); break;
    case DataType::kUint8: put(static_cast<uint8_t>(v)); break;
    case DataType::kInt32: put(static_cast<int32_t>(v)); break;
    case DataType::kUint32: put(static_cast<uint32_t>(v)); break;
    case DataType::kInt64: put(static_cast<int64_t>(v)); break;
    case DataType::kUint64: put(static_cast<uint64_t>(v)); break;
    case DataType::kFloat16: put(half_of(v)); break;
    case DataType::kBFloat16: {
      // Integers with |v| <= 256 are exact in bfloat16: the top half of the float's bits.
      const float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      put(static_cast<uint16_t>(u >> 16));
      break;
    }
    case DataType::kFloat32: put(static_cast<float>(v)); break;
    case DataType::kFloat64: put(static_cast<double>(v)); break;
  }
}

/// Rank r's `count` elements, starting at element `offset` of its input.
inline std::vector<std::byte> rank_input(int r, size_t count, DataType t, ReduceOp op, int n, size_t offset = 0) {
  const size_t es = size_of(t);
  std::vector<std::byte> v(count * es);
  for (size_t i = 0; i < count; ++i) encode(t, input(r, offset + i, t, op, n), v.data() + i * es);
  return v;
}

/// op over ranks [first, last] of elements offset..offset+count-1, encoded; kAvg
/// divides by n (the size).
inline std::vector<std::byte> reference(int first, int last, size_t offset, size_t count, DataType t, ReduceOp op,
                                        int n) {
  const size_t es = size_of(t);
  std::vector<std::byte> v(count * es);
  for (size_t i = 0; i < count; ++i) {
    int64_t acc = input(first, offset + i, t, op, n);
    for (int r = first + 1; r <= last; ++r) acc = combine(op, acc, input(r, offset + i, t, op, n));
    if (op == ReduceOp::kAvg) acc /= n;
    encode(t, acc, v.data() + i * es);
  }
  return v;
}

/// First element (of `es` bytes) where a and b differ, or -1.
inline long first_diff(const std::vector<std::byte>& a, const std::byte* b, size_t bytes, size_t es) {
  for (size_t i = 0; i < bytes; ++i) {
    if (a[i] != b[i]) return static_cast<long>(i / es);
  }
  return -1;
}

// --- data movement -------------------------------------------------------------------

/// Byte i of what contributor `salt` (a rank, or a (from, to) pair folded into one int)
/// sends: differs between neighbouring salts and repeats only after a long period.
inline uint8_t pat(int salt, size_t i) { return static_cast<uint8_t>(salt * 37 + i * 7 + i / 251 + 1); }
inline std::vector<uint8_t> pattern(int salt, size_t bytes) {
  std::vector<uint8_t> b(bytes);
  for (size_t i = 0; i < bytes; ++i) b[i] = pat(salt, i);
  return b;
}

/// Uneven counts with zeros (every third rank contributes nothing), from a base count.
inline size_t uneven(size_t base, int who) {
  return base == 0 || who % 3 == 1 ? 0 : base + static_cast<size_t>(who) * 3;
}

/// Displacements for `counts` laid out in reverse rank order with gaps between the
/// blocks; returns the total length (elements) the layout needs.
inline size_t scattered_layout(const std::vector<size_t>& counts, std::vector<size_t>* displs) {
  displs->assign(counts.size(), 0);
  size_t at = 2;
  for (size_t i = counts.size(); i-- > 0;) {
    (*displs)[i] = at;
    at += counts[i] + 5;
  }
  return at + 3;
}

}  // namespace remora::test
