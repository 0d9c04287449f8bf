// tests/coll/reduce_test.cc — the reduction kernels against an independent scalar
// reference: every type × op × size (0 up to past a block boundary) × pointer offset ×
// aliasing form, on every instruction-set path the CPU has (the paths must agree bit
// for bit); integer wrap-around; NaN/inf/-0; fp16/bf16 conversions for all 65536 bit
// patterns and a sweep of floats (ties, subnormals, overflow); reduce_many against
// repeated reduce_to, and its fp32 accumulation of fp16/bf16; finish_avg.
//
// The reference decodes fp16/bf16 with ldexp, computes in double and rounds by searching
// the table of representable values: nothing is shared with the bit tricks under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "coll/reduce.h"
#include "coll/reduce_testing.h"

namespace remora::coll {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,   DataType::kUint32,
                                  DataType::kInt64,   DataType::kUint64,   DataType::kFloat16, DataType::kBFloat16,
                                  DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
constexpr size_t kSizes[] = {0, 1, 7, 31, 32, 33, 1000, 4099};

// Every path this CPU can run; restores the automatic choice when done.
class IsaScope {
 public:
  IsaScope() : saved_(reduce_isa()) {}
  ~IsaScope() { (void)set_reduce_isa_for_testing(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  ReduceIsa saved_;
};

std::vector<ReduceIsa> available_isas() {
  IsaScope scope;
  std::vector<ReduceIsa> isas{ReduceIsa::kGeneric};
  if (set_reduce_isa_for_testing(ReduceIsa::kAvx2)) isas.push_back(ReduceIsa::kAvx2);
  return isas;
}

const char* isa_name(ReduceIsa isa) { return isa == ReduceIsa::kAvx2 ? "avx2" : "generic"; }

// ---- reference fp16 / bf16 --------------------------------------------------------

double ref_half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  double v;
  if (e == 0) {
    v = std::ldexp(m, -24);
  } else if (e == 31) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(m + 1024, e - 25);
  }
  return (h & 0x8000) != 0 ? -v : v;
}

double ref_bfloat_value(uint16_t b) {
  const int e = (b >> 7) & 0xFF;
  const int m = b & 0x7F;
  double v;
  if (e == 0) {
    v = std::ldexp(m, -133);
  } else if (e == 255) {
    v = m != 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(m + 128, e - 134);
  }
  return (b & 0x8000) != 0 ? -v : v;
}

// Positive values in bit order, the infinity pattern standing for the next power of two
// (where rounding to nearest places the overflow threshold).
struct Ladder {
  std::vector<double> values;  // index = bit pattern, 0 .. inf pattern
  uint16_t inf_bits;
  uint16_t quiet_nan;
};

const Ladder& half_ladder() {
  static const Ladder ladder = [] {
    Ladder l{{}, 0x7C00, 0x7E00};
    for (uint32_t h = 0; h < 0x7C00; ++h) l.values.push_back(ref_half_value(static_cast<uint16_t>(h)));
    l.values.push_back(65536.0);
    return l;
  }();
  return ladder;
}

const Ladder& bfloat_ladder() {
  static const Ladder ladder = [] {
    Ladder l{{}, 0x7F80, 0x7FC0};
    for (uint32_t b = 0; b < 0x7F80; ++b) l.values.push_back(ref_bfloat_value(static_cast<uint16_t>(b)));
    l.values.push_back(std::ldexp(1.0, 128));
    return l;
  }();
  return ladder;
}

// Nearest representable value, ties to the even bit pattern. NaN gives the canonical
// quiet NaN (callers compare NaN-ness only).
uint16_t ref_round(const Ladder& l, double v) {
  if (std::isnan(v)) return l.quiet_nan;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double x = std::fabs(v);
  if (x >= l.values.back()) return sign | l.inf_bits;
  // Largest lo with values[lo] <= x.
  const auto it = std::upper_bound(l.values.begin(), l.values.end(), x);
  const auto lo = static_cast<uint16_t>(it - l.values.begin() - 1);
  const auto hi = static_cast<uint16_t>(lo + 1);
  const double dlo = x - l.values[lo];
  const double dhi = l.values[hi] - x;
  uint16_t r;
  if (dlo < dhi) {
    r = lo;
  } else if (dhi < dlo) {
    r = hi;
  } else {
    r = (lo & 1) == 0 ? lo : hi;
  }
  return sign | r;
}

uint16_t ref_float_to_half(double v) { return ref_round(half_ladder(), v); }
uint16_t ref_float_to_bfloat(double v) { return ref_round(bfloat_ladder(), v); }

bool half_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool bfloat_is_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- conversions ------------------------------------------------------------------

TEST(ReduceConversion, HalfToFloatAndBackForEveryPattern) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = half_to_float(h);
    if (half_is_nan(h)) {
      // Quiet NaN, sign and payload kept; back to half it is the quietened pattern.
      const uint32_t want = (static_cast<uint32_t>(h & 0x8000) << 16) | 0x7FC00000u |
                            (static_cast<uint32_t>(h & 0x3FF) << 13);
      ASSERT_EQ(bits(f), want) << std::hex << h;
      ASSERT_EQ(float_to_half(f), h | 0x200) << std::hex << h;
    } else {
      const double want = ref_half_value(h);
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), std::signbit(want)) << std::hex << h;
      ASSERT_EQ(float_to_half(f), h) << std::hex << h;
    }
  }
}

TEST(ReduceConversion, BfloatToFloatAndBackForEveryPattern) {
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = bfloat_to_float(b);
    if (bfloat_is_nan(b)) {
      ASSERT_EQ(bits(f), (i << 16) | 0x400000u) << std::hex << b;
      ASSERT_EQ(float_to_bfloat(f), b | 0x40) << std::hex << b;
    } else {
      const double want = ref_bfloat_value(b);
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
      ASSERT_EQ(std::signbit(f), std::signbit(want)) << std::hex << b;
      ASSERT_EQ(float_to_bfloat(f), b) << std::hex << b;
    }
  }
}

// Floats that matter for rounding to a 16-bit format: every combination of sign,
// exponent and top significand bits with the low `low_bits` set to patterns around the
// tie (exact tie, one above, one below, zero, all ones), plus the midpoints between
// every pair of neighbouring values and the floats either side of them (the ties of the
// subnormal range sit at other bit positions), plus random floats.
template <class Check>
void sweep_floats(int low_bits, const Ladder& ladder, Check check) {
  const uint32_t tie = 1u << (low_bits - 1);
  const uint32_t lows[] = {0, 1, tie - 1, tie, tie + 1, (1u << low_bits) - 1};
  for (uint32_t top = 0; top < (1u << (32 - low_bits)); ++top) {
    for (const uint32_t low : lows) check(std::bit_cast<float>((top << low_bits) | low));
  }
  for (size_t k = 0; k + 1 < ladder.values.size(); ++k) {
    const auto mid = static_cast<float>((ladder.values[k] + ladder.values[k + 1]) / 2);
    for (const float sign : {1.0f, -1.0f}) {
      const float m = sign * mid;
      check(m);
      check(std::nextafter(m, std::numeric_limits<float>::infinity()));
      check(std::nextafter(m, -std::numeric_limits<float>::infinity()));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
}

TEST(ReduceConversion, FloatToHalfRoundsToNearestEven) {
  sweep_floats(13, half_ladder(), [](float f) {
    const uint16_t got = float_to_half(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got, ((bits(f) >> 16) & 0x8000) | 0x7E00 | ((bits(f) >> 13) & 0x3FF)) << std::hex << bits(f);
    } else {
      ASSERT_EQ(got, ref_float_to_half(f)) << std::hex << bits(f) << " " << f;
    }
  });
  // Spot values that are easy to get wrong.
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // the tie goes to even: infinity
  EXPECT_EQ(float_to_half(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);             // tie with 0: even
  EXPECT_EQ(float_to_half(0x1.8p-24f), 0x0002);           // tie between 1 and 2: even
  EXPECT_EQ(float_to_half(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(0x1.ff8p-15f), 0x03FF);         // largest subnormal
  EXPECT_EQ(float_to_half(0x1.ffcp-15f), 0x0400);         // tie: even, into the normals
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3C00);      // tie: even
  EXPECT_EQ(float_to_half(1.0f + 0x1.8p-10f), 0x3C02);    // tie: even (up)
}

TEST(ReduceConversion, FloatToBfloatRoundsToNearestEven) {
  sweep_floats(16, bfloat_ladder(), [](float f) {
    const uint16_t got = float_to_bfloat(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got, (bits(f) >> 16) | 0x40) << std::hex << bits(f);
    } else {
      ASSERT_EQ(got, ref_float_to_bfloat(f)) << std::hex << bits(f) << " " << f;
    }
  });
  EXPECT_EQ(float_to_bfloat(std::numeric_limits<float>::max()), 0x7F80);  // overflows to inf
  EXPECT_EQ(float_to_bfloat(1.0f + 0x1p-8f), 0x3F80);                     // tie: even
  EXPECT_EQ(float_to_bfloat(std::numeric_limits<float>::denorm_min()), 0x0000);
}

// ---- the element models ------------------------------------------------------------

// Type-erased element handling for the reference side.
struct Model {
  size_t size;
  std::function<void(std::mt19937_64&, void*)> gen;
  std::function<void(ReduceOp, const void*, const void*, void*)> ref;  // out = op(a, b)
  std::function<bool(const void*, const void*)> same;
  std::function<std::string(const void*)> show;
};

template <class T>
T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
void store(void* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <class T>
Model integer_model() {
  Model m;
  m.size = sizeof(T);
  m.gen = [](std::mt19937_64& rng, void* out) {
    // Mostly full-range bits (so sums and products wrap), sometimes small values.
    const uint64_t r = rng();
    const uint64_t v = (r & 3) == 0 ? (r >> 8) % 7 : r >> 2;
    store(out, static_cast<T>(v));
  };
  m.ref = [](ReduceOp op, const void* pa, const void* pb, void* out) {
    const T a = load<T>(pa);
    const T b = load<T>(pb);
    // Modulo 2^64 then truncated: two's complement wrap-around at T's width.
    const auto ua = static_cast<uint64_t>(a);
    const auto ub = static_cast<uint64_t>(b);
    T r{};
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: r = static_cast<T>(ua + ub); break;
      case ReduceOp::kProd: r = static_cast<T>(ua * ub); break;
      case ReduceOp::kMin: r = std::min(a, b); break;
      case ReduceOp::kMax: r = std::max(a, b); break;
    }
    store(out, r);
  };
  m.same = [](const void* x, const void* y) { return load<T>(x) == load<T>(y); };
  m.show = [](const void* p) { return std::to_string(load<T>(p)); };
  return m;
}

// min/max as the kernels define them: NaN from either side, -0 < +0.
template <class F>
F ref_min_max(bool is_max, F a, F b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b) {
    if (a != 0) return a;
    const bool negative = is_max ? (std::signbit(a) && std::signbit(b)) : (std::signbit(a) || std::signbit(b));
    return negative ? F(-0.0) : F(0.0);
  }
  return is_max ? (a > b ? a : b) : (a < b ? a : b);
}

template <class F>
F ref_float_op(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return ref_min_max(false, a, b);
    case ReduceOp::kMax: return ref_min_max(true, a, b);
  }
  return a;
}

template <class F>
bool same_float(F x, F y) {
  return (std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof(F)) == 0;
}

// Small integers and halves (exact sums in every format), wide random values, and
// sometimes a special value.
template <class F>
F gen_float(std::mt19937_64& rng) {
  const uint64_t r = rng();
  switch (r % 32) {
    case 0: return std::numeric_limits<F>::quiet_NaN();
    case 1: return std::numeric_limits<F>::infinity();
    case 2: return -std::numeric_limits<F>::infinity();
    case 3: return F(-0.0);
    case 4: return F(0.0);
    default: break;
  }
  if ((r >> 5) % 2 == 0) return static_cast<F>(static_cast<int>((r >> 8) % 65) - 32) / 2;
  return static_cast<F>(std::ldexp(static_cast<double>(static_cast<int>((r >> 8) % 2000001) - 1000000) / 1e6,
                                   static_cast<int>((r >> 32) % 40) - 20));
}

template <class F>
Model float_model() {
  Model m;
  m.size = sizeof(F);
  m.gen = [](std::mt19937_64& rng, void* out) { store(out, gen_float<F>(rng)); };
  m.ref = [](ReduceOp op, const void* a, const void* b, void* out) {
    store(out, ref_float_op<F>(op, load<F>(a), load<F>(b)));
  };
  m.same = [](const void* x, const void* y) { return same_float(load<F>(x), load<F>(y)); };
  m.show = [](const void* p) { return std::to_string(load<F>(p)); };
  return m;
}

// fp16/bf16: decoded exactly, combined in double, rounded once by the ladder. The
// kernels' fp32 path must give the same bits (fp32 has > 2p+2 bits, so its extra
// rounding is innocuous).
Model half_model(bool bfloat) {
  Model m;
  m.size = 2;
  m.gen = [](std::mt19937_64& rng, void* out) {
    // Any bit pattern: covers subnormals, huge values, inf and NaN.
    store(out, static_cast<uint16_t>(rng()));
  };
  m.ref = [bfloat](ReduceOp op, const void* pa, const void* pb, void* out) {
    const auto value = bfloat ? ref_bfloat_value : ref_half_value;
    const double r = ref_float_op<double>(op, value(load<uint16_t>(pa)), value(load<uint16_t>(pb)));
    store(out, bfloat ? ref_float_to_bfloat(r) : ref_float_to_half(r));
  };
  m.same = [bfloat](const void* x, const void* y) {
    const auto a = load<uint16_t>(x);
    const auto b = load<uint16_t>(y);
    const auto is_nan = bfloat ? bfloat_is_nan : half_is_nan;
    return a == b || (is_nan(a) && is_nan(b));
  };
  m.show = [](const void* p) {
    char s[16];
    std::snprintf(s, sizeof s, "0x%04x", load<uint16_t>(p));
    return std::string(s);
  };
  return m;
}

Model model_for(DataType type) {
  switch (type) {
    case DataType::kInt8: return integer_model<int8_t>();
    case DataType::kUint8: return integer_model<uint8_t>();
    case DataType::kInt32: return integer_model<int32_t>();
    case DataType::kUint32: return integer_model<uint32_t>();
    case DataType::kInt64: return integer_model<int64_t>();
    case DataType::kUint64: return integer_model<uint64_t>();
    case DataType::kFloat16: return half_model(false);
    case DataType::kBFloat16: return half_model(true);
    case DataType::kFloat32: return float_model<float>();
    case DataType::kFloat64: return float_model<double>();
  }
  return integer_model<uint8_t>();
}

std::string describe(DataType type, ReduceOp op, ReduceIsa isa, size_t count, size_t offset, const char* form) {
  return std::string(to_string(type)) + " " + std::string(to_string(op)) + " " + isa_name(isa) +
         " count=" + std::to_string(count) + " offset=" + std::to_string(offset) + " " + form;
}

// The aliasing forms the header allows.
enum class Form { kInto, kIntoSelf, kToDistinct, kToOutIsA, kToOutIsB };
constexpr Form kForms[] = {Form::kInto, Form::kIntoSelf, Form::kToDistinct, Form::kToOutIsA, Form::kToOutIsB};
const char* form_name(Form f) {
  switch (f) {
    case Form::kInto: return "reduce_into";
    case Form::kIntoSelf: return "reduce_into(self)";
    case Form::kToDistinct: return "reduce_to";
    case Form::kToOutIsA: return "reduce_to(out=a)";
    case Form::kToOutIsB: return "reduce_to(out=b)";
  }
  return "?";
}

// Buffers are element-aligned but start `offset` elements into a 64-byte aligned
// allocation, so the vector loops meet unaligned heads.
struct Buffer {
  explicit Buffer(size_t bytes) : storage((bytes + 128) / 8 + 1) {}
  std::byte* at(size_t offset_bytes) { return reinterpret_cast<std::byte*>(storage.data()) + offset_bytes; }
  std::vector<uint64_t> storage;
};

TEST(ReduceKernels, EveryTypeOpSizeFormAndPathMatchesTheReference) {
  std::mt19937_64 rng(42);
  for (const ReduceIsa isa : available_isas()) {
    IsaScope scope;
    ASSERT_TRUE(set_reduce_isa_for_testing(isa));
    for (const DataType type : kAllTypes) {
      const Model m = model_for(type);
      for (const ReduceOp op : kAllOps) {
        for (const size_t count : kSizes) {
          for (const size_t offset : {size_t{0}, size_t{1}}) {
            for (const Form form : kForms) {
              const size_t bytes = count * m.size;
              const size_t off = offset * m.size;
              Buffer ba(bytes), bb(bytes), bo(bytes), bw(bytes);
              std::byte* a = ba.at(off);
              std::byte* b = bb.at(off);
              std::byte* out = bo.at(off);
              std::byte* want = bw.at(off);
              for (size_t i = 0; i < count; ++i) {
                m.gen(rng, a + i * m.size);
                m.gen(rng, b + i * m.size);
              }
              const std::byte* rhs = form == Form::kIntoSelf ? a : b;
              for (size_t i = 0; i < count; ++i) m.ref(op, a + i * m.size, rhs + i * m.size, want + i * m.size);
              std::byte* result = out;
              switch (form) {
                case Form::kInto:
                  reduce_into(type, op, a, b, count);
                  result = a;
                  break;
                case Form::kIntoSelf:
                  reduce_into(type, op, a, a, count);
                  result = a;
                  break;
                case Form::kToDistinct: reduce_to(type, op, out, a, b, count); break;
                case Form::kToOutIsA:
                  reduce_to(type, op, a, a, b, count);
                  result = a;
                  break;
                case Form::kToOutIsB:
                  reduce_to(type, op, b, a, b, count);
                  result = b;
                  break;
              }
              for (size_t i = 0; i < count; ++i) {
                const std::byte* got = result + i * m.size;
                const std::byte* exp = want + i * m.size;
                ASSERT_TRUE(m.same(got, exp)) << describe(type, op, isa, count, offset, form_name(form))
                                              << " at " << i << ": got " << m.show(got) << " want " << m.show(exp);
              }
            }
          }
        }
      }
    }
  }
}

// ---- integers: wrap-around -----------------------------------------------------------

template <class T>
T reduce_one(DataType type, ReduceOp op, T a, T b) {
  reduce_into(type, op, &a, &b, 1);
  return a;
}

TEST(ReduceKernels, IntegersWrapAround) {
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, ReduceOp::kSum, 127, 1), -128);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, ReduceOp::kProd, -128, -1), -128);
  EXPECT_EQ(reduce_one<int8_t>(DataType::kInt8, ReduceOp::kProd, 16, 16), 0);
  EXPECT_EQ(reduce_one<uint8_t>(DataType::kUint8, ReduceOp::kSum, 255, 1), 0);
  EXPECT_EQ(reduce_one<uint8_t>(DataType::kUint8, ReduceOp::kProd, 255, 255), 1);
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, ReduceOp::kSum, kMax32, 1), kMin32);
  EXPECT_EQ(reduce_one<int32_t>(DataType::kInt32, ReduceOp::kProd, kMin32, -1), kMin32);
  EXPECT_EQ(reduce_one<uint32_t>(DataType::kUint32, ReduceOp::kSum, 0xFFFFFFFFu, 2), 1u);
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, ReduceOp::kSum, kMin64, -1), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, ReduceOp::kProd, kMin64, -1), kMin64);
  EXPECT_EQ(reduce_one<uint64_t>(DataType::kUint64, ReduceOp::kProd, ~uint64_t{0}, ~uint64_t{0}), 1u);
  EXPECT_EQ(reduce_one<int64_t>(DataType::kInt64, ReduceOp::kMin, kMin64, 0), kMin64);
  EXPECT_EQ(reduce_one<uint64_t>(DataType::kUint64, ReduceOp::kMax, ~uint64_t{0}, 0), ~uint64_t{0});
}

// ---- floats: NaN, inf, signed zero ---------------------------------------------------

TEST(ReduceKernels, FloatSpecialValues) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (const ReduceIsa isa : available_isas()) {
    IsaScope scope;
    ASSERT_TRUE(set_reduce_isa_for_testing(isa));
    SCOPED_TRACE(isa_name(isa));
    for (const ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kSum, ReduceOp::kProd}) {
      EXPECT_TRUE(std::isnan(reduce_one(DataType::kFloat32, op, kNan, 1.0f))) << to_string(op);
      EXPECT_TRUE(std::isnan(reduce_one(DataType::kFloat32, op, 1.0f, kNan))) << to_string(op);
      EXPECT_TRUE(std::isnan(reduce_one(DataType::kFloat64, op, 2.0, std::nan("")))) << to_string(op);
      EXPECT_TRUE(std::isnan(reduce_one(DataType::kFloat64, op, std::nan(""), 2.0))) << to_string(op);
    }
    EXPECT_TRUE(std::isnan(reduce_one(DataType::kFloat32, ReduceOp::kSum, kInf, -kInf)));
    EXPECT_TRUE(std::isnan(reduce_one(DataType::kFloat32, ReduceOp::kProd, kInf, 0.0f)));
    EXPECT_EQ(reduce_one(DataType::kFloat32, ReduceOp::kMax, -kInf, kInf), kInf);
    // -0 < +0 whichever side it comes from.
    EXPECT_FALSE(std::signbit(reduce_one(DataType::kFloat32, ReduceOp::kMax, -0.0f, 0.0f)));
    EXPECT_FALSE(std::signbit(reduce_one(DataType::kFloat32, ReduceOp::kMax, 0.0f, -0.0f)));
    EXPECT_TRUE(std::signbit(reduce_one(DataType::kFloat32, ReduceOp::kMin, -0.0f, 0.0f)));
    EXPECT_TRUE(std::signbit(reduce_one(DataType::kFloat32, ReduceOp::kMin, 0.0f, -0.0f)));
    EXPECT_TRUE(std::signbit(reduce_one(DataType::kFloat64, ReduceOp::kMin, 0.0, -0.0)));
    EXPECT_TRUE(std::signbit(reduce_one(DataType::kFloat32, ReduceOp::kSum, -0.0f, -0.0f)));
    EXPECT_FALSE(std::signbit(reduce_one(DataType::kFloat32, ReduceOp::kSum, -0.0f, 0.0f)));
    // fp16 and bf16 the same way.
    const uint16_t h_nan = 0x7E00, h_one = 0x3C00, h_neg_zero = 0x8000, h_inf = 0x7C00;
    EXPECT_TRUE(half_is_nan(reduce_one(DataType::kFloat16, ReduceOp::kMax, h_one, h_nan)));
    EXPECT_TRUE(half_is_nan(reduce_one(DataType::kFloat16, ReduceOp::kMin, h_nan, h_one)));
    EXPECT_TRUE(half_is_nan(reduce_one(DataType::kFloat16, ReduceOp::kSum, h_inf, uint16_t{0xFC00})));
    EXPECT_EQ(reduce_one(DataType::kFloat16, ReduceOp::kMax, h_neg_zero, uint16_t{0}), 0);
    EXPECT_EQ(reduce_one(DataType::kFloat16, ReduceOp::kMin, uint16_t{0}, h_neg_zero), 0x8000);
    EXPECT_EQ(reduce_one(DataType::kFloat16, ReduceOp::kSum, uint16_t{0x7BFF}, uint16_t{0x7BFF}), h_inf);
    EXPECT_TRUE(bfloat_is_nan(reduce_one(DataType::kBFloat16, ReduceOp::kMax, uint16_t{0x3F80}, uint16_t{0x7FC0})));
    EXPECT_EQ(reduce_one(DataType::kBFloat16, ReduceOp::kMin, uint16_t{0}, uint16_t{0x8000}), 0x8000);
  }
}

// ---- the instruction-set paths agree bit for bit -------------------------------------

// Every fp16 and bf16 pattern combined with values chosen to make every kind of rounding happen
// (halving makes subnormal ties, thirds make inexact quotients, big factors overflow);
// NaN payloads included, so the comparison is of raw bits.
TEST(ReduceKernels, HalfFormatPathsAgreeBitForBitOnEveryPattern) {
  const std::vector<ReduceIsa> isas = available_isas();
  if (isas.size() < 2) GTEST_SKIP() << "only the generic path on this CPU (no AVX2+F16C)";
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) all[i] = static_cast<uint16_t>(i);
  const uint16_t factors[] = {0x3800 /*0.5*/, 0x3555 /*~1/3*/, 0x7BFF /*max*/, 0x0001 /*least subnormal*/,
                              0xBC00 /*-1*/,  0x7E01 /*NaN*/,  0x3C01 /*1+ulp*/};
  for (const DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    for (const uint16_t factor : factors) {
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
        std::vector<std::vector<uint16_t>> results;
        for (const ReduceIsa isa : isas) {
          IsaScope scope;
          ASSERT_TRUE(set_reduce_isa_for_testing(isa));
          std::vector<uint16_t> f(all.size(), factor), out(all.size());
          reduce_to(type, op, out.data(), all.data(), f.data(), all.size());
          results.push_back(out);
          // Division too (finish_avg), on a copy of every pattern.
          std::vector<uint16_t> avg = all;
          finish_avg(type, avg.data(), avg.size(), 3);
          results.push_back(avg);
        }
        const auto is_nan = type == DataType::kFloat16 ? half_is_nan : bfloat_is_nan;
        for (size_t r = 2; r < results.size(); ++r) {
          for (size_t i = 0; i < all.size(); ++i) {
            // Which payload survives when both operands are NaN is the compiler's choice
            // of operand order (x86 returns the first source's); only NaN-ness is defined.
            if (r % 2 == 0 && is_nan(all[i]) && is_nan(factor)) {
              ASSERT_TRUE(is_nan(results[r][i]) && is_nan(results[0][i])) << std::hex << i;
              continue;
            }
            ASSERT_EQ(results[r][i], results[r % 2][i])
                << to_string(type) << " " << to_string(op) << " factor " << std::hex << factor << " pattern " << i;
          }
        }
      }
    }
  }
}

// ---- reduce_many ---------------------------------------------------------------------

TEST(ReduceMany, MatchesRepeatedReduceToForExactTypes) {
  std::mt19937_64 rng(9);
  for (const ReduceIsa isa : available_isas()) {
    IsaScope scope;
    ASSERT_TRUE(set_reduce_isa_for_testing(isa));
    for (const DataType type : {DataType::kInt8, DataType::kUint8, DataType::kInt32, DataType::kUint32,
                                DataType::kInt64, DataType::kUint64, DataType::kFloat32, DataType::kFloat64}) {
      const Model m = model_for(type);
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
        for (const size_t count : {size_t{1}, size_t{33}, size_t{4099}, size_t{9000}}) {
          for (const size_t n : {1, 2, 3, 5}) {
            std::vector<std::vector<std::byte>> inputs(n, std::vector<std::byte>(count * m.size));
            for (auto& in : inputs) {
              for (size_t i = 0; i < count; ++i) m.gen(rng, in.data() + i * m.size);
            }
            // (Not a copy of inputs[0]: g++ 12 then warns of a null dereference that cannot happen.)
            std::vector<std::byte> want(count * m.size);
            std::copy(inputs[0].begin(), inputs[0].end(), want.begin());
            for (size_t k = 1; k < n; ++k) reduce_to(type, op, want.data(), want.data(), inputs[k].data(), count);
            std::vector<const void*> ptrs;
            for (const auto& in : inputs) ptrs.push_back(in.data());
            std::vector<std::byte> out(count * m.size);
            reduce_many(type, op, out.data(), ptrs, count);
            // And in place over the first input.
            reduce_many(type, op, inputs[0].data(), ptrs, count);
            for (size_t i = 0; i < count; ++i) {
              const std::byte* w = want.data() + i * m.size;
              ASSERT_TRUE(m.same(out.data() + i * m.size, w))
                  << to_string(type) << " " << to_string(op) << " " << isa_name(isa) << " n=" << n << " at " << i;
              ASSERT_TRUE(m.same(inputs[0].data() + i * m.size, w))
                  << "in place: " << to_string(type) << " " << to_string(op) << " n=" << n << " at " << i;
            }
          }
        }
      }
    }
  }
}

// fp16/bf16: all inputs accumulate in fp32, then one rounding; reference does the same
// with its own conversions.
TEST(ReduceMany, HalfFormatsAccumulateInFp32) {
  std::mt19937_64 rng(11);
  for (const ReduceIsa isa : available_isas()) {
    IsaScope scope;
    ASSERT_TRUE(set_reduce_isa_for_testing(isa));
    for (const bool bfloat : {false, true}) {
      const DataType type = bfloat ? DataType::kBFloat16 : DataType::kFloat16;
      const auto value = bfloat ? ref_bfloat_value : ref_half_value;
      const auto round = bfloat ? ref_float_to_bfloat : ref_float_to_half;
      const Model m = half_model(bfloat);
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
        constexpr size_t kCount = 2500;  // crosses the kernel's block boundaries
        for (const size_t n : {1, 2, 4, 7}) {
          std::vector<std::vector<uint16_t>> inputs(n, std::vector<uint16_t>(kCount));
          for (auto& in : inputs) {
            for (auto& x : in) {
              // Moderate values so sums of several stay informative.
              x = round(static_cast<double>(rng() % 2001) / 100.0 - 10.0);
            }
          }
          std::vector<const void*> ptrs;
          for (const auto& in : inputs) ptrs.push_back(in.data());
          std::vector<uint16_t> out(kCount);
          reduce_many(type, op, out.data(), ptrs, kCount);
          for (size_t i = 0; i < kCount; ++i) {
            auto acc = static_cast<float>(value(inputs[0][i]));
            for (size_t k = 1; k < n; ++k) acc = ref_float_op<float>(op, acc, static_cast<float>(value(inputs[k][i])));
            const uint16_t want = round(acc);
            ASSERT_TRUE(m.same(&out[i], &want)) << to_string(type) << " " << to_string(op) << " " << isa_name(isa)
                                                << " n=" << n << " at " << i << ": " << out[i] << " vs " << want;
          }
        }
      }
    }
  }
}

// 1000 × 0.1: rounding after every step drifts (fp16 overshoots to ~105 where 0.1 is
// rounded to 2 ulps; bf16 stalls at 32 where it falls under half an ulp); one rounding
// at the end lands next to 100.
TEST(ReduceMany, Fp16AccumulationBeatsPairwiseRounding) {
  for (const bool bfloat : {false, true}) {
    const DataType type = bfloat ? DataType::kBFloat16 : DataType::kFloat16;
    const uint16_t tenth = bfloat ? float_to_bfloat(0.1f) : float_to_half(0.1f);
    const auto to_f = bfloat ? bfloat_to_float : half_to_float;
    constexpr size_t kInputs = 1000, kCount = 9;
    std::vector<uint16_t> in(kCount, tenth);
    std::vector<const void*> ptrs(kInputs, in.data());
    std::vector<uint16_t> many(kCount), pairwise = in;
    reduce_many(type, ReduceOp::kSum, many.data(), ptrs, kCount);
    for (size_t k = 1; k < kInputs; ++k) reduce_into(type, ReduceOp::kSum, pairwise.data(), in.data(), kCount);
    for (size_t i = 0; i < kCount; ++i) {
      const float exact = 1000.0f * to_f(tenth);
      const float ulp = bfloat ? 0.5f : 0.0625f;  // at 64..128
      EXPECT_LE(std::fabs(to_f(many[i]) - exact), ulp / 2) << to_string(type);
      EXPECT_GT(std::fabs(to_f(pairwise[i]) - exact), 2.0f) << to_string(type) << " pairwise " << to_f(pairwise[i]);
    }
  }
}

// ---- finish_avg / supported --------------------------------------------------------

TEST(ReduceKernels, FinishAvgDividesFloatingTypes) {
  for (const ReduceIsa isa : available_isas()) {
    IsaScope scope;
    ASSERT_TRUE(set_reduce_isa_for_testing(isa));
    std::vector<float> f32(4099);
    std::vector<double> f64(4099);
    std::vector<uint16_t> f16(4099), b16(4099);
    for (size_t i = 0; i < f32.size(); ++i) {
      f32[i] = static_cast<float>(i) * 3;
      f64[i] = static_cast<double>(i) * 3 + 1;
      f16[i] = float_to_half(static_cast<float>(i % 600) * 3);
      b16[i] = float_to_bfloat(static_cast<float>(i % 80) * 3);
    }
    finish_avg(DataType::kFloat32, f32.data(), f32.size(), 3);
    finish_avg(DataType::kFloat64, f64.data(), f64.size(), 3);
    finish_avg(DataType::kFloat16, f16.data(), f16.size(), 3);
    finish_avg(DataType::kBFloat16, b16.data(), b16.size(), 3);
    for (size_t i = 0; i < f32.size(); ++i) {
      ASSERT_EQ(f32[i], static_cast<float>(i)) << i;
      ASSERT_EQ(f64[i], (static_cast<double>(i) * 3 + 1) / 3) << i;
      ASSERT_EQ(f16[i], ref_float_to_half(ref_half_value(float_to_half(static_cast<float>(i % 600) * 3)) / 3)) << i;
      ASSERT_EQ(b16[i], float_to_bfloat(static_cast<float>(i % 80))) << i;
    }
    // n == 1 leaves data alone, integers are never divided, count 0 touches nothing.
    std::vector<float> one{5.0f};
    finish_avg(DataType::kFloat32, one.data(), 1, 1);
    EXPECT_EQ(one[0], 5.0f);
    std::vector<int32_t> ints{9, 12};
    finish_avg(DataType::kInt32, ints.data(), 2, 3);
    EXPECT_EQ(ints, (std::vector<int32_t>{9, 12}));
    finish_avg(DataType::kFloat32, nullptr, 0, 4);
    // avg combines as a sum.
    std::vector<float> x{1, 2}, y{3, 4};
    reduce_into(DataType::kFloat32, ReduceOp::kAvg, x.data(), y.data(), 2);
    finish_avg(DataType::kFloat32, x.data(), 2, 2);
    EXPECT_EQ(x, (std::vector<float>{2, 3}));
  }
}

TEST(ReduceKernels, SupportedIsAvgOnlyForFloatingTypes) {
  for (const DataType type : kAllTypes) {
    for (const ReduceOp op : kAllOps) {
      EXPECT_EQ(supported(type, op), op != ReduceOp::kAvg || is_floating(type)) << to_string(type) << to_string(op);
    }
  }
}

TEST(ReduceKernels, ZeroCountTouchesNothing) {
  const void* none[] = {nullptr};
  reduce_into(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, 0);
  reduce_to(DataType::kFloat16, ReduceOp::kMax, nullptr, nullptr, nullptr, 0);
  reduce_many(DataType::kInt8, ReduceOp::kProd, nullptr, none, 0);
  SUCCEED();
}

}  // namespace
}  // namespace remora::coll
