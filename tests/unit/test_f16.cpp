// strata::f16 (IEEE binary16): every f16 widens exactly and narrows back, float -> f16
// rounds to nearest even against a float64 reference over millions of floats (ties,
// subnormals, the overflow boundary, NaN and Inf), the F16C instruction gives the same
// bits where the CPU has it, and the precision policy treats f16 like bf16.
#include <doctest/doctest.h>

#include <bit>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ios>
#include <limits>
#include <random>
#include <type_traits>

#include <strata/core/f16.hpp>
#include <strata/core/precision.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define STRATA_TEST_F16C 1
#endif

using strata::f16;

namespace {

// The value of f16 bits from the format's definition: sign, 5-bit exponent (bias 15),
// 10 fraction bits; exponent 0 is subnormal (units of 2^-24), 31 is Inf / NaN.
double value_of(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0    ? std::ldexp(double(m), -24)
                     : e == 31 ? (m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity())
                               : std::ldexp(double(1024 + m), e - 25);
  return (h & 0x8000) ? -mag : mag;
}

// float -> f16 in float64: the two neighbouring f16 values of |x| by their distance,
// a tie to the one with an even last bit; 65504 + 16 = 65520 and beyond (half an ulp
// past the largest finite f16) is Inf. The f16 bits of a finite magnitude are found
// by bisection over the ordered bit patterns, not by any bit trick.
std::uint16_t reference(float f) {
  if (std::isnan(f)) return 0x7e00;
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double x = std::abs(double(f));
  if (x >= 65520.0) return sign | 0x7c00;
  std::uint16_t lo = 0, hi = 0x7bff;  // largest pattern with value <= x
  if (x >= value_of(hi)) {
    lo = hi;
  } else {
    while (hi - lo > 1) {
      const auto mid = std::uint16_t((lo + hi) / 2);
      (value_of(mid) <= x ? lo : hi) = mid;
    }
  }
  if (value_of(lo) == x) return sign | lo;
  const auto up = std::uint16_t(lo + 1);
  const double dl = x - value_of(lo), du = (up == 0x7c00 ? 65536.0 : value_of(up)) - x;
  return sign | (dl < du ? lo : du < dl ? up : (lo & 1) ? up : lo);
}

#if defined(STRATA_TEST_F16C)
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
__attribute__((target("f16c"))) std::uint16_t f16c_narrow(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

}  // namespace

TEST_CASE("f16: every bit pattern widens exactly and narrows back to itself") {
  std::size_t nan = 0;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const f16 h = f16::from_bits(std::uint16_t(b));
    const float w = h;
    const double v = value_of(h.bits);
    if (std::isnan(v)) {
      ++nan;
      CHECK(std::isnan(w));
      // widening keeps the payload (bits 9..0 at 22..13); narrowing sets the quiet bit
      CHECK((std::bit_cast<std::uint32_t>(w) >> 13 & 0x3ff) == (b & 0x3ff));
      CHECK(f16(w).bits == (b | 0x0200));
      continue;
    }
    CHECK_MESSAGE(double(w) == v, "f16 bits 0x" << std::hex << b);
    CHECK_MESSAGE(f16(w).bits == b, "f16 bits 0x" << std::hex << b);
  }
  CHECK(nan == 2 * 1023);
}

TEST_CASE("f16: float -> f16 rounds to nearest even (float64 reference, millions of floats)") {
  std::size_t checked = 0, bad = 0;
  auto check = [&](std::uint32_t bits) {
    const float f = std::bit_cast<float>(bits);
    const std::uint16_t got = f16(f).bits, want = reference(f);
    const bool ok = std::isnan(f) ? (got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0 && (got & 0x200) : got == want;
    if (!ok && bad++ < 5) FAIL_CHECK("float bits 0x" << std::hex << bits << ": got 0x" << got << ", want 0x" << want);
    ++checked;
  };
  // A sweep over every exponent, each point also next to the rounding position of a
  // normal f16 (bit 12: a tie at 0x1000) and of the subnormals below.
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 0x1235)
    for (std::uint32_t d : {0u, 0x0fffu, 0x1000u, 0x1001u, 0x3000u, 0x2000u, 0x7fffu, 0x8000u})
      check(static_cast<std::uint32_t>(u) ^ d);
  // Every float near the edges: the subnormal range and the underflow to 0 (2^-26 ..
  // 2^-13), the overflow boundary (65504 .. 65536), stepped through each binade.
  for (std::uint32_t b = 0x32800000u; b < 0x39000000u; b += 0x101) check(b), check(b | 0x80000000u);
  for (std::uint32_t b = 0x477fe000u; b <= 0x47800000u; ++b) check(b), check(b | 0x80000000u);
  // Exact ties at every f16 exponent and subnormal position, and their neighbours.
  for (int e = -25; e <= 15; ++e)
    for (int k = 1; k < 2048; k += 2) {
      const float tie = std::ldexp(float(k), std::max(e, -14) - 11);  // half-way between two f16
      if (!(tie < 65536.f)) continue;
      const auto tb = std::bit_cast<std::uint32_t>(tie);
      check(tb), check(tb + 1), check(tb - 1), check(tb | 0x80000000u);
    }
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
    check(std::bit_cast<std::uint32_t>(f));
  MESSAGE(checked << " floats checked against the float64 reference");
  CHECK(checked > 3000000);
  CHECK(bad == 0);
  // The named boundaries.
  CHECK(f16(65504.0f).bits == 0x7bff);
  CHECK(f16(65519.996f).bits == 0x7bff);
  CHECK(f16(65520.0f).bits == 0x7c00);  // the tie past 65504 rounds to even: Inf
  CHECK(f16(-1e9f).bits == 0xfc00);
  CHECK(f16(0x1p-24f).bits == 0x0001);
  CHECK(f16(0x1p-25f).bits == 0x0000);         // tie with 0: to even
  CHECK(f16(0x1.8p-24f).bits == 0x0002);       // tie between 1 and 2 ulps: to even
  CHECK(f16(0x1p-14f).bits == 0x0400);         // smallest normal
  CHECK(f16(1.0f + 0x1p-11f).bits == 0x3c00);  // tie: to even (1.0)
  CHECK(float(f16(0.1)) == 0.0999755859375f);  // explicit from double (via float)
  CHECK(float(f16(-3)) == -3.0f);              // explicit from int
}

TEST_CASE("f16: the F16C instruction gives the same bits as the software conversion") {
#if defined(STRATA_TEST_F16C)
  if (!cpu_has_f16c()) {
    MESSAGE("this CPU has no F16C; nothing to compare");
    return;
  }
  std::size_t bad = 0;
  std::mt19937 g(16);
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 0x3b9) {  // ~11 M patterns over all exponents
    const std::uint32_t b = static_cast<std::uint32_t>(u) ^ (g() & 0x1fffu);
    const float f = std::bit_cast<float>(b);
    bad += strata::detail::f16_bits_from_float_bits(b) != f16c_narrow(f);
  }
  CHECK(bad == 0);
#else
  MESSAGE("not an x86-64 GCC/clang build; nothing to compare");
#endif
}

TEST_CASE("f16: the precision policy makes it mixed precision like bf16") {
  static_assert(std::is_same_v<strata::precision<f16>::compute, f16>);
  static_assert(std::is_same_v<strata::master_t<f16>, float> && std::is_same_v<strata::stat_t<f16>, float>);
  static_assert(std::is_same_v<strata::gemm_scalar_t<f16>, float>);
  static_assert(strata::is_mixed_v<f16> && strata::is_half16_v<f16> && strata::is_half16_v<strata::bf16>);
  static_assert(strata::is_precision_v<f16> && !strata::is_precision_v<short> && !strata::is_half16_v<float>);
  static_assert(std::is_trivially_copyable_v<f16> && sizeof(f16) == 2);
  CHECK(std::isnan(float(f16::from_bits(f16::quiet_nan_bits))));
  CHECK(std::isinf(float(f16::from_bits(f16::exponent_bits))));
}
