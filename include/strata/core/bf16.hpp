#pragma once
// bfloat16: a storage type of mixed-precision training, shared by every backend
// (core/f16.hpp is the other: IEEE half, more precision, less range).
//
// One type for host and device code (the CUDA backend hands its bits to cuBLASLt
// as CUDA_R_16BF, the MPI communicator moves them as 16-bit words), so a plan
// trained with make_trainer<P, bf16> means the same numbers on CPUs and GPUs:
//  * float -> bf16 rounds to nearest, ties to even (IEEE default); NaN stays a
//    quiet NaN, overflow goes to ±Inf; on sm_80+ devices one cvt.rn.bf16.f32;
//  * bf16 -> float is exact (the 16 bits are the high half of the float);
//  * arithmetic converts to float: a bf16 is a storage format, never an
//    accumulator (core/precision.hpp names the types that are).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "strata/core/hd.hpp"

namespace strata {

namespace detail {
STRATA_HD inline float bf16_bits_to_float(std::uint16_t b) noexcept {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(static_cast<unsigned>(b) << 16);
#else
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

STRATA_HD inline std::uint16_t float_to_bf16_bits(float f) noexcept {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#else
#if defined(__CUDA_ARCH__)
  const std::uint32_t u = __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
}  // namespace detail

struct bf16 {
  std::uint16_t bits;  // no initializer: trivial, so it lives in __shared__ arrays and unions

  bf16() = default;
  STRATA_HD bf16(float f) noexcept : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT: implicit, like a float
  STRATA_HD explicit bf16(double d) noexcept : bf16(static_cast<float>(d)) {}
  STRATA_HD explicit bf16(int i) noexcept : bf16(static_cast<float>(i)) {}
  STRATA_HD operator float() const noexcept { return detail::bf16_bits_to_float(bits); }  // NOLINT: exact

  STRATA_HD static bf16 from_bits(std::uint16_t b) noexcept {
    bf16 r;
    r.bits = b;
    return r;
  }
  // Bit patterns shared with f16's: exponent field (all set: Inf or NaN), a quiet NaN.
  static constexpr std::uint16_t exponent_bits = 0x7f80u;
  static constexpr std::uint16_t quiet_nan_bits = 0x7fc0u;
};
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2 && std::is_trivially_copyable_v<bf16> &&
              std::is_trivially_default_constructible_v<bf16>);

}  // namespace strata
