#pragma once
// IEEE binary16 ("fp16", half): the second 16-bit storage type of mixed-precision
// training (AMP O1: fp16 activations and compute copies, FP32 master weights), beside
// bf16 (core/bf16.hpp) and with the same interface, shared by every backend.
//
// One type for host and device code (cuBLASLt reads its bits as CUDA_R_16F, NCCL as
// ncclFloat16, the MPI communicator moves them as 16-bit words), so a plan trained
// with make_trainer<P, f16> means the same numbers on CPUs and GPUs:
//  * float -> f16 rounds to nearest, ties to even, subnormals included (2^-24 steps
//    below 2^-14); |x| >= 65520 goes to ±Inf; NaN stays a NaN with the quiet bit set
//    and the top payload bits kept (what x86 F16C does). On the device one
//    cvt.rn.f16.f32 (canonical NaN there: payloads may differ, never NaN-ness);
//  * f16 -> float is exact (every f16 is a float), NaN payloads included;
//  * arithmetic converts to float: an f16 is a storage format, never an accumulator.
//    Its range is small (largest 65504, smallest normal 2^-14), so unlike bf16 an f16
//    gradient can underflow or overflow where FP32 would not: a loss scale is the
//    usual remedy; the kernels themselves keep statistics and gradients in float.
//
// The host conversion is integer arithmetic with selects (no branch on the value, no
// dependence on the FPU's rounding mode or flush-to-zero flags), and constexpr, so the
// edge cases below are checked when this header compiles; with F16C (-mf16c, -march=
// x86-64-v3) float -> f16 is one vcvtps2ph, which gives the same bits.
#include <bit>
#include <cstdint>
#include <type_traits>

#include "strata/core/hd.hpp"

#if defined(__F16C__) && !defined(__CUDACC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define STRATA_F16C 1
#endif

namespace strata {

namespace detail {

// f16 bits of the float with bits u, rounded to nearest even.
constexpr std::uint16_t f16_bits_from_float_bits(std::uint32_t u) noexcept {
  const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  // Normal results (|x| >= 2^-14): rebias the exponent (127 -> 15) and round off 13
  // bits; a carry moves into the exponent, and at 65520 on into Inf (0x7c00).
  const std::uint32_t r = a - 0x38000000u;
  const std::uint32_t normal = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
  // Subnormal results: the 24-bit significand in units of 2^-24, i.e. shifted right by
  // 126 - exponent (14 just below 2^-14; from 25 on everything rounds to 0). The shift
  // is clamped to [1, 31] so that the unused lanes stay defined.
  const std::uint32_t shift = 126u - (a >> 23);
  const std::uint32_t s = shift - 1u < 30u ? shift : 31u;
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t q = m >> s, rest = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  const std::uint32_t sub = q + std::uint32_t(rest > half || (rest == half && (q & 1u)));
  const std::uint32_t mag = a > 0x7f800000u   ? 0x7e00u | ((a >> 13) & 0x3ffu)  // NaN: quiet, top payload
                            : a >= 0x477ff000u ? 0x7c00u                         // 65520 and above: Inf
                            : a >= 0x38800000u ? normal
                                               : sub;
  return static_cast<std::uint16_t>(sign | mag);
}

// The float bits of the f16 with bits h (exact).
constexpr std::uint32_t float_bits_from_f16_bits(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, em = h & 0x7fffu;
  const std::uint32_t normal = (em << 13) + 0x38000000u;  // rebias the exponent 15 -> 127
  const std::uint32_t special = (em << 13) | 0x7f800000u;  // Inf, NaN with its payload
  // zero and subnormals: em * 2^-24, exact in float (em < 2^10)
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(float(em) * 0x1p-24f);
  return sign | (em >= 0x7c00u ? special : em >= 0x0400u ? normal : sub);
}

STRATA_HD inline float f16_bits_to_float(std::uint16_t h) noexcept {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return std::bit_cast<float>(float_bits_from_f16_bits(h));
#endif
}

STRATA_HD inline std::uint16_t float_to_f16_bits(float f) noexcept {
#if defined(__CUDA_ARCH__)
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#elif defined(STRATA_F16C)
  // Same bits as the software path (tests/unit/test_f16.cpp compares them).
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
  return f16_bits_from_float_bits(std::bit_cast<std::uint32_t>(f));
#endif
}

// Edge cases of the rounding, checked at compile time.
static_assert(f16_bits_from_float_bits(0x3f800000u) == 0x3c00u);                                  // 1
static_assert(f16_bits_from_float_bits(0x477fe000u) == 0x7bffu);                                  // 65504
static_assert(f16_bits_from_float_bits(0x477fefffu) == 0x7bffu);                                  // below 65520
static_assert(f16_bits_from_float_bits(0x477ff000u) == 0x7c00u);                                  // 65520: tie, to Inf
static_assert(f16_bits_from_float_bits(0x3f801000u) == 0x3c00u);                                  // tie, to even (down)
static_assert(f16_bits_from_float_bits(0x3f803000u) == 0x3c02u);                                  // tie, to even (up)
static_assert(f16_bits_from_float_bits(0x33800000u) == 0x0001u);                                  // 2^-24
static_assert(f16_bits_from_float_bits(0x33000000u) == 0x0000u);                                  // 2^-25: tie, to 0
static_assert(f16_bits_from_float_bits(0x33000001u) == 0x0001u);                                  // just above
static_assert(f16_bits_from_float_bits(0x387fc000u) == 0x03ffu);                                  // largest subnormal
static_assert(f16_bits_from_float_bits(0x387fe000u) == 0x0400u);                                  // tie, up to 2^-14
static_assert(f16_bits_from_float_bits(0xff800000u) == 0xfc00u);                                  // -Inf
static_assert(f16_bits_from_float_bits(0x7f800001u) == 0x7e00u);                                  // sNaN -> qNaN
static_assert(float_bits_from_f16_bits(0x0001u) == 0x33800000u && float_bits_from_f16_bits(0x8000u) == 0x80000000u);
static_assert(float_bits_from_f16_bits(0x7bffu) == 0x477fe000u && float_bits_from_f16_bits(0xfc00u) == 0xff800000u);

}  // namespace detail

struct f16 {
  std::uint16_t bits;  // no initializer: trivial, so it lives in __shared__ arrays and unions

  f16() = default;
  STRATA_HD f16(float f) noexcept : bits(detail::float_to_f16_bits(f)) {}  // NOLINT: implicit, like a float
  STRATA_HD explicit f16(double d) noexcept : f16(static_cast<float>(d)) {}
  STRATA_HD explicit f16(int i) noexcept : f16(static_cast<float>(i)) {}
  STRATA_HD operator float() const noexcept { return detail::f16_bits_to_float(bits); }  // NOLINT: exact

  STRATA_HD static f16 from_bits(std::uint16_t b) noexcept {
    f16 r;
    r.bits = b;
    return r;
  }
  // Bit patterns shared with bf16's: exponent field (all set: Inf or NaN), a quiet NaN.
  static constexpr std::uint16_t exponent_bits = 0x7c00u;
  static constexpr std::uint16_t quiet_nan_bits = 0x7e00u;
};
static_assert(sizeof(f16) == 2 && alignof(f16) == 2 && std::is_trivially_copyable_v<f16> &&
              std::is_trivially_default_constructible_v<f16>);

}  // namespace strata
