// coll/reduce.cc — the element-wise reduction kernels declared in reduce.h.
//
// Every kernel is a plain loop template over (element type, op) with restrict-qualified
// pointers and no branch in its body, so the auto-vectoriser handles it. The templates
// are inlined (gnu::flatten) into two sets of entry points: one compiled for the
// baseline ISA, one with target("avx2,f16c"); the set is chosen once from the CPU.
// fp16/bf16 go through fp32 in blocks on the stack: convert, combine in fp32, round
// back. fp32 holds more than 2p+2 bits of either format, so the fp32 result rounded
// once more equals the correctly rounded fp16/bf16 result for sum, prod and avg's
// division (double rounding is innocuous there), and min/max are exact.
#include "coll/reduce.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <type_traits>

#include "coll/reduce_testing.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REMORA_REDUCE_X86 1
#include <immintrin.h>
#else
#define REMORA_REDUCE_X86 0
#endif

namespace remora::coll {
namespace {

// ---- scalar conversions (bit-exact; the reference the SIMD paths must match) --------

// Branch-free so the baseline loops vectorise too: every case is computed, one chosen.
inline uint32_t half_bits_to_float_bits(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  const uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
  // Inf stays inf; a NaN keeps its payload and is quietened (what F16C does too).
  const uint32_t special = 0x7F800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);
  // A subnormal half is mant * 2^-24, exact in fp32 (mant < 2^10); 0 gives +0.
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f);
  uint32_t mag = exp == 0 ? sub : normal;
  mag = exp == 31 ? special : mag;
  return sign | mag;
}

// Integer-only so the result does not depend on the MXCSR rounding mode, exactly like
// F16C with an explicit rounding immediate.
inline uint16_t float_bits_to_half_bits(uint32_t x) noexcept {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  // NaN: quiet, sign and top payload bits kept.
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x3FFu);
  // Normal half: rebias the exponent, round to nearest even at bit 13; a carry out of
  // the significand correctly bumps the exponent.
  const uint32_t r = a - (112u << 23);
  const uint32_t normal = (r + 0xFFFu + ((r >> 13) & 1u)) >> 13;
  // Subnormal half: the full significand shifted down to the 2^-24 quantum, nearest
  // even. Shifts of 25 or more give 0 already.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t s = std::min(126u - std::min(e, 125u), 31u);  // 1..31: shifts stay defined
  const uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  const uint32_t sub = q + ((rem > halfway ? 1u : 0u) | ((rem == halfway ? 1u : 0u) & q));
  uint32_t mag = a >= 0x38800000u ? normal : sub;  // 2^-14, the least normal half
  mag = a >= 0x477FF000u ? 0x7C00u : mag;         // 65520 = 65504 + half an ulp: ties go up
  mag = a > 0x7F800000u ? nan : mag;
  return static_cast<uint16_t>(sign | mag);
}

inline uint32_t bfloat_bits_to_float_bits(uint16_t b) noexcept {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  return (x & 0x7FFFFFFFu) > 0x7F800000u ? (x | 0x400000u) : x;
}

inline uint16_t float_bits_to_bfloat_bits(uint32_t x) noexcept {
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;  // carries into inf right
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

// ---- ops -------------------------------------------------------------------------

template <class T>
using FloatBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// Integer sum/prod go through the unsigned type: wrap-around without UB. uint8/int8
// promote to int, whose range holds any 8-bit product.
struct OpSum {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct OpProd {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
// Floats: NaN from either side wins (a's if both), and -0 < +0 so the result does not
// depend on operand order (IEEE 754-2019 minimum/maximum).
struct OpMin {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return b < a ? b : a;
    } else {
      using B = FloatBits<T>;
      T r = a < b ? a : b;
      r = a == b ? std::bit_cast<T>(static_cast<B>(std::bit_cast<B>(a) | std::bit_cast<B>(b))) : r;
      return a != a ? a : r;  // NOLINT(misc-redundant-expression): the NaN test
    }
  }
};
struct OpMax {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? b : a;
    } else {
      using B = FloatBits<T>;
      T r = a > b ? a : b;
      r = a == b ? std::bit_cast<T>(static_cast<B>(std::bit_cast<B>(a) & std::bit_cast<B>(b))) : r;
      return a != a ? a : r;  // NOLINT(misc-redundant-expression): the NaN test
    }
  }
};

// ---- loops -----------------------------------------------------------------------

template <class T, class Op>
inline void loop_into(T* __restrict__ io, const T* __restrict__ in, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) io[i] = Op::apply(io[i], in[i]);
}
// io[i] = op(in[i], io[i]): reduce_to with out == b keeps a as the left operand.
template <class T, class Op>
inline void loop_into_rev(T* __restrict__ io, const T* __restrict__ in, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) io[i] = Op::apply(in[i], io[i]);
}
// io[i] = op(io[i], io[i]): reduce_into with identical pointers, which restrict forbids.
template <class T, class Op>
inline void loop_self(T* __restrict__ io, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) io[i] = Op::apply(io[i], io[i]);
}
template <class T, class Op>
inline void loop_to(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}
template <class T>
inline void loop_div(T* __restrict__ data, size_t n, T divisor) noexcept {
  for (size_t i = 0; i < n; ++i) data[i] = data[i] / divisor;
}

// ---- fp16 / bf16 through fp32 ----------------------------------------------------

struct Generic {};
struct Avx2 {};

struct Fp16 {};
struct Bf16 {};
template <class T>
inline constexpr bool kIs16 = std::is_same_v<T, Fp16> || std::is_same_v<T, Bf16>;

#if REMORA_REDUCE_X86
// _mm256_cvtps_ph with an explicit round-to-nearest immediate ignores MXCSR, as does
// the scalar tail; both quieten NaNs the same way (reduce_test checks every pattern).
[[gnu::target("avx2,f16c")]] inline void half_to_float_f16c(float* __restrict__ dst, const uint16_t* __restrict__ src,
                                                           size_t n) noexcept {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = std::bit_cast<float>(half_bits_to_float_bits(src[i]));
}
[[gnu::target("avx2,f16c")]] inline void float_to_half_f16c(uint16_t* __restrict__ dst, const float* __restrict__ src,
                                                           size_t n) noexcept {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = float_bits_to_half_bits(std::bit_cast<uint32_t>(src[i]));
}

// Op on eight fp32 lanes with exactly the scalar semantics above (min/max included), so
// the fused loops below give the scalar tail's bits.
template <class Op>
[[gnu::target("avx2,f16c")]] inline __m256 apply8(__m256 a, __m256 b) noexcept {
  if constexpr (std::is_same_v<Op, OpSum>) {
    return _mm256_add_ps(a, b);
  } else if constexpr (std::is_same_v<Op, OpProd>) {
    return _mm256_mul_ps(a, b);
  } else {
    constexpr bool kMax = std::is_same_v<Op, OpMax>;
    __m256 r = _mm256_blendv_ps(b, a, _mm256_cmp_ps(a, b, kMax ? _CMP_GT_OQ : _CMP_LT_OQ));
    const __m256 zeros = kMax ? _mm256_and_ps(a, b) : _mm256_or_ps(a, b);
    r = _mm256_blendv_ps(r, zeros, _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
}

// Eight 16-bit values to fp32 lanes and back, bit-identical to the scalar conversions.
template <class Fmt>
[[gnu::target("avx2,f16c")]] inline __m256 load8(const uint16_t* p) noexcept {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (std::is_same_v<Fmt, Fp16>) {
    return _mm256_cvtph_ps(raw);
  } else {
    const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    const __m256 quiet = _mm256_and_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q),
                                       _mm256_castsi256_ps(_mm256_set1_epi32(0x400000)));
    return _mm256_or_ps(f, quiet);
  }
}
template <class Fmt>
[[gnu::target("avx2,f16c")]] inline void store8(uint16_t* p, __m256 v) noexcept {
  __m128i packed;
  if constexpr (std::is_same_v<Fmt, Fp16>) {
    packed = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  } else {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i top = _mm256_srli_epi32(x, 16);
    const __m256i bias = _mm256_add_epi32(_mm256_and_si256(top, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7FFF));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    const __m256i nan = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
    const __m256i r = _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    // Every lane is below 2^16, so the saturating pack is a plain narrowing.
    packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
template <class Fmt>
inline float value16(uint16_t x) noexcept {
  if constexpr (std::is_same_v<Fmt, Fp16>) {
    return std::bit_cast<float>(half_bits_to_float_bits(x));
  } else {
    return std::bit_cast<float>(bfloat_bits_to_float_bits(x));
  }
}
template <class Fmt>
inline uint16_t round16(float f) noexcept {
  if constexpr (std::is_same_v<Fmt, Fp16>) {
    return float_bits_to_half_bits(std::bit_cast<uint32_t>(f));
  } else {
    return float_bits_to_bfloat_bits(std::bit_cast<uint32_t>(f));
  }
}

// Fused: convert, combine and round eight lanes in registers, no trip through a stack
// block. out may equal a or b (each group is loaded before it is stored).
template <class Fmt, class Op>
[[gnu::target("avx2,f16c")]] inline void to16_avx2(uint16_t* out, const uint16_t* a, const uint16_t* b,
                                                  size_t n) noexcept {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8<Fmt>(out + i, apply8<Op>(load8<Fmt>(a + i), load8<Fmt>(b + i)));
  for (; i < n; ++i) out[i] = round16<Fmt>(Op::apply(value16<Fmt>(a[i]), value16<Fmt>(b[i])));
}
template <class Fmt, class Op>
[[gnu::target("avx2,f16c")]] inline void acc16_avx2(float* __restrict__ acc, const uint16_t* __restrict__ in,
                                                   size_t n) noexcept {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_store_ps(acc + i, apply8<Op>(_mm256_load_ps(acc + i), load8<Fmt>(in + i)));
  for (; i < n; ++i) acc[i] = Op::apply(acc[i], value16<Fmt>(in[i]));
}
template <class Fmt>
[[gnu::target("avx2,f16c")]] inline void div16_avx2(uint16_t* data, size_t n, float divisor) noexcept {
  const __m256 d = _mm256_set1_ps(divisor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8<Fmt>(data + i, _mm256_div_ps(load8<Fmt>(data + i), d));
  for (; i < n; ++i) data[i] = round16<Fmt>(value16<Fmt>(data[i]) / divisor);
}
#endif

template <class Isa>
inline constexpr bool kFused16 = REMORA_REDUCE_X86 && std::is_same_v<Isa, Avx2>;

template <class Isa, class Fmt>
inline void load16(float* __restrict__ dst, const uint16_t* __restrict__ src, size_t n) noexcept {
  if constexpr (std::is_same_v<Fmt, Fp16>) {
#if REMORA_REDUCE_X86
    if constexpr (std::is_same_v<Isa, Avx2>) {
      half_to_float_f16c(dst, src, n);
      return;
    }
#endif
    for (size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(half_bits_to_float_bits(src[i]));
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(bfloat_bits_to_float_bits(src[i]));
  }
}

template <class Isa, class Fmt>
inline void store16(uint16_t* __restrict__ dst, const float* __restrict__ src, size_t n) noexcept {
  if constexpr (std::is_same_v<Fmt, Fp16>) {
#if REMORA_REDUCE_X86
    if constexpr (std::is_same_v<Isa, Avx2>) {
      float_to_half_f16c(dst, src, n);
      return;
    }
#endif
    for (size_t i = 0; i < n; ++i) dst[i] = float_bits_to_half_bits(std::bit_cast<uint32_t>(src[i]));
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = float_bits_to_bfloat_bits(std::bit_cast<uint32_t>(src[i]));
  }
}

// fp32 elements per stack block: 4 KiB, so the two blocks stay in L1.
constexpr size_t kBlock = 1024;

// out may equal a or b: each block is read in full before it is written.
template <class Isa, class Fmt, class Op>
inline void to16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) noexcept {
#if REMORA_REDUCE_X86
  if constexpr (kFused16<Isa>) {
    to16_avx2<Fmt, Op>(out, a, b, n);
    return;
  }
#endif
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    load16<Isa, Fmt>(fa, a + i, m);
    load16<Isa, Fmt>(fb, b + i, m);
    loop_into<float, Op>(fa, fb, m);
    store16<Isa, Fmt>(out + i, fa, m);
  }
}

template <class Isa, class Fmt, class Op>
inline void many16(uint16_t* out, std::span<const void* const> inputs, size_t n) noexcept {
  alignas(64) float acc[kBlock];
  alignas(64) float in[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    load16<Isa, Fmt>(acc, static_cast<const uint16_t*>(inputs[0]) + i, m);
    for (size_t k = 1; k < inputs.size(); ++k) {
#if REMORA_REDUCE_X86
      if constexpr (kFused16<Isa>) {
        acc16_avx2<Fmt, Op>(acc, static_cast<const uint16_t*>(inputs[k]) + i, m);
        continue;
      }
#endif
      load16<Isa, Fmt>(in, static_cast<const uint16_t*>(inputs[k]) + i, m);
      loop_into<float, Op>(acc, in, m);
    }
    store16<Isa, Fmt>(out + i, acc, m);
  }
}

template <class Isa, class Fmt>
inline void avg16(uint16_t* data, size_t n, float divisor) noexcept {
#if REMORA_REDUCE_X86
  if constexpr (kFused16<Isa>) {
    div16_avx2<Fmt>(data, n, divisor);
    return;
  }
#endif
  alignas(64) float f[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    load16<Isa, Fmt>(f, data + i, m);
    loop_div<float>(f, m, divisor);
    store16<Isa, Fmt>(data + i, f, m);
  }
}

// ---- native types ----------------------------------------------------------------

template <class T, class Op>
inline void into_native(T* io, const T* in, size_t n) noexcept {
  if (io == in) {
    loop_self<T, Op>(io, n);
  } else {
    loop_into<T, Op>(io, in, n);
  }
}

template <class T, class Op>
inline void to_native(T* out, const T* a, const T* b, size_t n) noexcept {
  if (out == a) {
    into_native<T, Op>(out, b, n);
  } else if (out == b) {
    loop_into_rev<T, Op>(out, a, n);
  } else {
    loop_to<T, Op>(out, a, b, n);
  }
}

// Block by block over all inputs so `out` stays in cache between them; the order of
// the operations is that of repeated reduce_to, so results match it bit for bit.
template <class T, class Op>
inline void many_native(T* out, std::span<const void* const> inputs, size_t n) noexcept {
  const auto* first = static_cast<const T*>(inputs[0]);
  if (inputs.size() == 1) {
    if (out != first) std::memmove(out, first, n * sizeof(T));
    return;
  }
  constexpr size_t kElems = kBlock * sizeof(float) / sizeof(T);
  for (size_t i = 0; i < n; i += kElems) {
    const size_t m = std::min(kElems, n - i);
    to_native<T, Op>(out + i, first + i, static_cast<const T*>(inputs[1]) + i, m);
    for (size_t k = 2; k < inputs.size(); ++k) loop_into<T, Op>(out + i, static_cast<const T*>(inputs[k]) + i, m);
  }
}

// ---- dispatch ----------------------------------------------------------------------

template <class T, class Fn>
inline void visit_op(ReduceOp op, Fn& fn) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // combined as a sum; finish_avg divides at the end
      return fn.template operator()<T, OpSum>();
    case ReduceOp::kProd:
      return fn.template operator()<T, OpProd>();
    case ReduceOp::kMin:
      return fn.template operator()<T, OpMin>();
    case ReduceOp::kMax:
      return fn.template operator()<T, OpMax>();
  }
}

template <class Fn>
inline void visit(DataType type, ReduceOp op, Fn&& fn) {
  switch (type) {
    case DataType::kInt8: return visit_op<int8_t>(op, fn);
    case DataType::kUint8: return visit_op<uint8_t>(op, fn);
    case DataType::kInt32: return visit_op<int32_t>(op, fn);
    case DataType::kUint32: return visit_op<uint32_t>(op, fn);
    case DataType::kInt64: return visit_op<int64_t>(op, fn);
    case DataType::kUint64: return visit_op<uint64_t>(op, fn);
    case DataType::kFloat16: return visit_op<Fp16>(op, fn);
    case DataType::kBFloat16: return visit_op<Bf16>(op, fn);
    case DataType::kFloat32: return visit_op<float>(op, fn);
    case DataType::kFloat64: return visit_op<double>(op, fn);
  }
}

template <class Isa>
inline void to_impl(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t n) noexcept {
  visit(type, op, [&]<class T, class Op>() {
    if constexpr (kIs16<T>) {
      to16<Isa, T, Op>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b),
                       n);
    } else {
      to_native<T, Op>(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
    }
  });
}

template <class Isa>
inline void into_impl(DataType type, ReduceOp op, void* io, const void* in, size_t n) noexcept {
  visit(type, op, [&]<class T, class Op>() {
    if constexpr (kIs16<T>) {
      auto* p = static_cast<uint16_t*>(io);
      to16<Isa, T, Op>(p, p, static_cast<const uint16_t*>(in), n);
    } else {
      into_native<T, Op>(static_cast<T*>(io), static_cast<const T*>(in), n);
    }
  });
}

template <class Isa>
inline void many_impl(DataType type, ReduceOp op, void* out, std::span<const void* const> inputs, size_t n) noexcept {
  visit(type, op, [&]<class T, class Op>() {
    if constexpr (kIs16<T>) {
      many16<Isa, T, Op>(static_cast<uint16_t*>(out), inputs, n);
    } else {
      many_native<T, Op>(static_cast<T*>(out), inputs, n);
    }
  });
}

template <class Isa>
inline void avg_impl(DataType type, void* data, size_t n, int ranks) noexcept {
  switch (type) {
    case DataType::kFloat16: return avg16<Isa, Fp16>(static_cast<uint16_t*>(data), n, static_cast<float>(ranks));
    case DataType::kBFloat16: return avg16<Isa, Bf16>(static_cast<uint16_t*>(data), n, static_cast<float>(ranks));
    case DataType::kFloat32: return loop_div<float>(static_cast<float*>(data), n, static_cast<float>(ranks));
    case DataType::kFloat64: return loop_div<double>(static_cast<double*>(data), n, static_cast<double>(ranks));
    default: return;
  }
}

struct Entries {
  void (*into)(DataType, ReduceOp, void*, const void*, size_t) noexcept;
  void (*to)(DataType, ReduceOp, void*, const void*, const void*, size_t) noexcept;
  void (*many)(DataType, ReduceOp, void*, std::span<const void* const>, size_t) noexcept;
  void (*avg)(DataType, void*, size_t, int) noexcept;
};

// flatten inlines the whole template tree, so each set is compiled for its own ISA.
[[gnu::flatten]] void into_generic(DataType t, ReduceOp op, void* io, const void* in, size_t n) noexcept {
  into_impl<Generic>(t, op, io, in, n);
}
[[gnu::flatten]] void to_generic(DataType t, ReduceOp op, void* out, const void* a, const void* b, size_t n) noexcept {
  to_impl<Generic>(t, op, out, a, b, n);
}
[[gnu::flatten]] void many_generic(DataType t, ReduceOp op, void* out, std::span<const void* const> in,
                                   size_t n) noexcept {
  many_impl<Generic>(t, op, out, in, n);
}
[[gnu::flatten]] void avg_generic(DataType t, void* data, size_t n, int ranks) noexcept {
  avg_impl<Generic>(t, data, n, ranks);
}
constexpr Entries kGenericEntries{into_generic, to_generic, many_generic, avg_generic};

#if REMORA_REDUCE_X86
[[gnu::flatten, gnu::target("avx2,f16c")]] void into_avx2(DataType t, ReduceOp op, void* io, const void* in,
                                                         size_t n) noexcept {
  into_impl<Avx2>(t, op, io, in, n);
}
[[gnu::flatten, gnu::target("avx2,f16c")]] void to_avx2(DataType t, ReduceOp op, void* out, const void* a,
                                                       const void* b, size_t n) noexcept {
  to_impl<Avx2>(t, op, out, a, b, n);
}
[[gnu::flatten, gnu::target("avx2,f16c")]] void many_avx2(DataType t, ReduceOp op, void* out,
                                                         std::span<const void* const> in, size_t n) noexcept {
  many_impl<Avx2>(t, op, out, in, n);
}
[[gnu::flatten, gnu::target("avx2,f16c")]] void avg_avx2(DataType t, void* data, size_t n, int ranks) noexcept {
  avg_impl<Avx2>(t, data, n, ranks);
}
constexpr Entries kAvx2Entries{into_avx2, to_avx2, many_avx2, avg_avx2};
#endif

bool cpu_has(ReduceIsa isa) noexcept {
  switch (isa) {
    case ReduceIsa::kGeneric: return true;
    case ReduceIsa::kAvx2:
#if REMORA_REDUCE_X86
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
      return false;
#endif
  }
  return false;
}

const Entries* entries_for(ReduceIsa isa) noexcept {
#if REMORA_REDUCE_X86
  if (isa == ReduceIsa::kAvx2) return &kAvx2Entries;
#endif
  (void)isa;
  return &kGenericEntries;
}

std::atomic<const Entries*>& current() noexcept {
  static std::atomic<const Entries*> entries{
      entries_for(cpu_has(ReduceIsa::kAvx2) ? ReduceIsa::kAvx2 : ReduceIsa::kGeneric)};
  return entries;
}

const Entries& kernels() noexcept { return *current().load(std::memory_order_relaxed); }

}  // namespace

void reduce_into(DataType type, ReduceOp op, void* inout, const void* in, size_t count) noexcept {
  if (count == 0) return;
  kernels().into(type, op, inout, in, count);
}

void reduce_to(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) noexcept {
  if (count == 0) return;
  kernels().to(type, op, out, a, b, count);
}

void reduce_many(DataType type, ReduceOp op, void* out, std::span<const void* const> inputs, size_t count) noexcept {
  if (count == 0 || inputs.empty()) return;
  kernels().many(type, op, out, inputs, count);
}

void finish_avg(DataType type, void* data, size_t count, int n) noexcept {
  if (count == 0 || n <= 1) return;
  kernels().avg(type, data, count, n);
}

bool supported(DataType type, ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kMax: break;
    case ReduceOp::kAvg: return is_floating(type);
    default: return false;
  }
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64: return true;
  }
  return false;
}

float half_to_float(uint16_t h) noexcept { return std::bit_cast<float>(half_bits_to_float_bits(h)); }
uint16_t float_to_half(float f) noexcept { return float_bits_to_half_bits(std::bit_cast<uint32_t>(f)); }
float bfloat_to_float(uint16_t b) noexcept { return std::bit_cast<float>(bfloat_bits_to_float_bits(b)); }
uint16_t float_to_bfloat(float f) noexcept { return float_bits_to_bfloat_bits(std::bit_cast<uint32_t>(f)); }

ReduceIsa reduce_isa() noexcept {
#if REMORA_REDUCE_X86
  if (current().load(std::memory_order_relaxed) == &kAvx2Entries) return ReduceIsa::kAvx2;
#endif
  return ReduceIsa::kGeneric;
}

bool set_reduce_isa_for_testing(ReduceIsa isa) noexcept {
  if (!cpu_has(isa)) return false;
  current().store(entries_for(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace remora::coll
