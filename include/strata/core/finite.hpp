#pragma once
// The NaN/Inf scan of host memory, shared by the host backend's all_finite and the
// executor's batch checks (which run on the CPU whatever the backend).
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace strata {

// True iff no element of x[0, n) is NaN or ±Inf: an exponent-bit test (branch-free, and
// immune to -ffast-math folding isfinite away), in chunks run by pfor(tasks, f).
template <class T, class ParallelFor>
bool all_finite_bits(std::size_t n, const T* x, ParallelFor&& pfor) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);
  using U = std::conditional_t<sizeof(T) == 2, std::uint16_t,
                               std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;
  // the 16-bit types (bf16, f16) name their own exponent field
  constexpr U exp_mask = [] {
    if constexpr (sizeof(T) == 2) return U(T::exponent_bits);
    else return sizeof(T) == 4 ? U(0x7f800000u) : U(0x7ff0000000000000ull);
  }();
  constexpr std::size_t chunk = std::size_t(1) << 15;
  if (n == 0) return true;
  std::atomic<bool> bad{false};
  pfor((n + chunk - 1) / chunk, [&](std::size_t c) {
    const std::size_t b = c * chunk, e = std::min(n, b + chunk);
    U hit = 0;
    for (std::size_t i = b; i < e; ++i) hit |= U((std::bit_cast<U>(x[i]) & exp_mask) == exp_mask);
    if (hit) bad.store(true, std::memory_order_relaxed);
  });
  return !bad.load();
}

}  // namespace strata
