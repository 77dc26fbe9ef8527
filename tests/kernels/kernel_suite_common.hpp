#pragma once
// Shared pieces of the kernel suite (see kernel_suite.hpp): moving data through the
// backend under test, random inputs, float64 reference helpers and the comparisons
// every part uses. Written against kernel_suite::backend only.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"
#include "strata/core/kernel_args.hpp"
#include "strata/core/precision.hpp"

namespace kernel_suite {

using strata::bf16;
using strata::f16;
using strata::backend::activation;
using strata::backend::trans;

using B = backend;  // chosen by the file that includes the suite
using queue_t = typename B::queue;
template <class T>
using dev = typename B::template buffer<T>;

// ---- tolerances (the table in kernel_suite.hpp) -------------------------------------
template <class T>
constexpr double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
constexpr double tol_mixed = 1e-5;  // float statistics and gradients of 16-bit kernels
// Norm-wise storage accuracy of the 16-bit types: a few units of their roundoff (bf16
// 2^-9 with 8 significant bits, f16 2^-12 with 11).
template <class H>
constexpr double tol_half = std::is_same_v<H, bf16> ? 2e-2 : 2.5e-3;

// Element types of one kernel call: activations T, statistics / gradients S
// (S = T for the reals, float for bf16 and f16).
template <class T_, class S_>
struct types {
  using T = T_;
  using S = S_;
};
using f32 = types<float, float>;
using f64 = types<double, double>;
using mixed = types<bf16, float>;
using mixed_f16 = types<f16, float>;

// bf16 or f16: storage types that kernels compute on in float.
template <class T>
constexpr bool is_half = strata::is_half16_v<T>;

inline double to_d(float v) { return v; }
inline double to_d(double v) { return v; }
inline double to_d(bf16 v) { return double(float(v)); }
inline double to_d(f16 v) { return double(float(v)); }

template <class T>
T from_d(double v) {
  if constexpr (is_half<T>)
    return T(float(v));
  else
    return T(v);
}

template <class T>
T nan_of() {
  if constexpr (is_half<T>)
    return T::from_bits(T::quiet_nan_bits);
  else
    return std::numeric_limits<T>::quiet_NaN();
}

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> d(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = to_d(v[i]);
  return d;
}
template <class T>
std::vector<T> narrow(const std::vector<double>& v) {
  std::vector<T> t(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) t[i] = from_d<T>(v[i]);
  return t;
}

// ---- backend memory -----------------------------------------------------------------
// At least one element, so that a pointer handed to a kernel is never null by accident.
template <class T>
dev<T> to_dev(queue_t& q, const std::vector<T>& h) {
  dev<T> b = B::template allocate<T>(std::max<std::size_t>(h.size(), 1));
  B::upload(q, h.data(), h.size(), b.data());
  return b;
}
// NaN-filled, so an element a kernel forgets to write fails the comparison.
template <class T>
dev<T> poisoned(queue_t& q, std::size_t n) {
  return to_dev(q, std::vector<T>(std::max<std::size_t>(n, 1), nan_of<T>()));
}
template <class T>
std::vector<T> to_host(queue_t& q, const T* p, std::size_t n) {
  std::vector<T> h(n);
  B::download(q, p, n, h.data());
  B::synchronize(q);
  return h;
}

// ---- random inputs ----------------------------------------------------------------------
class rng {
 public:
  explicit rng(std::uint64_t seed) : g_(seed) {}
  // Uniform in [lo, hi), rounded to T: the reference reads the rounded values.
  template <class T>
  std::vector<T> uniform(std::size_t n, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = from_d<T>(d(g_));
    return v;
  }
  std::vector<std::int32_t> ints(std::size_t n, std::int32_t lo, std::int32_t hi) {
    std::uniform_int_distribution<std::int32_t> d(lo, hi - 1);
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = d(g_);
    return v;
  }
  std::mt19937_64& engine() { return g_; }

 private:
  std::mt19937_64 g_;
};

struct rc {
  std::size_t rows, cols;
};
// Both former suites' shapes: tiny, odd, one wide row, many short rows, vector-width
// remainders (4099, 9000) and multi-block rows.
inline const std::vector<rc> kShapes = {{1, 1},      {3, 7},    {7, 13},  {17, 33},  {65, 130}, {64, 128}, {128, 64},
                                        {129, 1000}, {3, 1000}, {513, 7}, {5, 4099}, {3, 9000}, {300, 256}};
inline std::string shape_name(std::size_t r, std::size_t c) { return std::to_string(r) + "x" + std::to_string(c); }
inline const char* act_name(activation a) {
  return a == activation::none ? "none" : a == activation::relu ? "relu" : "gelu";
}
constexpr activation kActs[] = {activation::none, activation::relu, activation::gelu};

// ---- float64 references ---------------------------------------------------------------
inline double ref_act(activation a, double x) {
  if (a == activation::relu) return x > 0 ? x : 0.0;
  if (a == activation::gelu) {
    const double c = std::sqrt(2.0 / std::numbers::pi);
    return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
  }
  return x;
}
inline double ref_act_grad(activation a, double x) {
  if (a == activation::relu) return x > 0 ? 1.0 : 0.0;
  if (a == activation::gelu) {
    const double c = std::sqrt(2.0 / std::numbers::pi), t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  }
  return 1.0;
}

// Central finite difference of a scalar function with respect to p.
inline std::vector<double> fd_grad(std::vector<double>& p, const std::function<double()>& f, double h = 1e-6) {
  std::vector<double> g(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + h;
    const double up = f();
    p[i] = keep - h;
    const double down = f();
    p[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- comparisons ------------------------------------------------------------------------
// Norm-wise relative error ||got - ref|| / ||ref|| (absolute when ref is 0); NaN and
// Inf must sit at the same places on both sides, so a poisoned element the kernel
// did not write fails even where the norm would hide it.
template <class T>
void check_close(const std::vector<T>& got, const std::vector<double>& ref, double tolerance, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == ref.size());
  double num = 0, den = 0;
  std::size_t mismatch = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = to_d(got[i]), r = ref[i];
    if (!std::isfinite(r) || !std::isfinite(g)) {
      const bool same = (std::isnan(r) && std::isnan(g)) || r == g;
      if (!same && mismatch++ == 0) first = i;
      continue;
    }
    num += (g - r) * (g - r);
    den += r * r;
  }
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  INFO(mismatch << " non-finite mismatches, the first at " << first << "; relative error " << err << " (tolerance "
                << tolerance << ")");
  CHECK(mismatch == 0);
  CHECK(err <= tolerance);
}

// ||got - ref|| / ||ref|| over finite pairs: the measured error, for messages.
inline double rel_err(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::isfinite(got[i]) && std::isfinite(ref[i])) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Element by element: NaN/Inf at the same places, finite values accepted by ok(i, got, ref).
template <class T, class Ok>
void check_each(const std::vector<T>& got, const std::vector<double>& ref, Ok ok, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = to_d(got[i]), r = ref[i];
    const bool fine =
        (!std::isfinite(r) || !std::isfinite(g)) ? (std::isnan(r) && std::isnan(g)) || r == g : ok(i, g, r);
    if (!fine && bad++ == 0) first = i;
  }
  INFO(bad << " elements differ; the first at " << first << ": got " << (bad ? to_d(got[first]) : 0.0) << ", reference "
           << (bad ? ref[first] : 0.0));
  CHECK(bad == 0);
}

// |got - ref| <= rel |ref| + abs_floor.
template <class T>
void check_near(const std::vector<T>& got, const std::vector<double>& ref, double rel, double abs_floor,
                const std::string& what) {
  check_each(
      got, ref, [&](std::size_t, double g, double r) { return std::abs(g - r) <= rel * std::abs(r) + abs_floor; },
      what);
}

// Position of a bf16 or f16 on the number line in ulps (+0 and -0 both 0): both are
// sign-magnitude with the magnitude's bits in order.
template <class H>
int half_order(H v) {
  const int m = v.bits & 0x7fff;
  return (v.bits & 0x8000) ? -m : m;
}
// A 16-bit output computed in float and rounded once lies within one ulp (of its
// type) of the float64 reference rounded to that type; abs_floor covers float
// intermediates that cancel near zero.
template <class H>
void check_half(const std::vector<H>& got, const std::vector<double>& ref, double abs_floor, const std::string& what) {
  check_each(
      got, ref,
      [&](std::size_t i, double g, double r) {
        return std::abs(half_order(got[i]) - half_order(H(float(r)))) <= 1 || std::abs(g - r) <= abs_floor;
      },
      what);
}

// An activation-typed output: norm-wise tol<T> for the reals, ulps for bf16 and f16.
template <class T>
void check_act(const std::vector<T>& got, const std::vector<double>& ref, double half_floor, const std::string& what) {
  if constexpr (is_half<T>)
    check_half(got, ref, half_floor, what);
  else
    check_close(got, ref, tol<T>, what);
}
// A statistic or gradient of a kernel on activations T: norm-wise tol<S> for the
// reals; element-wise tol_mixed plus abs_floor for the float outputs of 16-bit kernels.
template <class T, class S>
void check_stat(const std::vector<S>& got, const std::vector<double>& ref, double abs_floor, const std::string& what) {
  if constexpr (is_half<T>)
    check_near(got, ref, tol_mixed, abs_floor, what);
  else
    check_close(got, ref, tol<S>, what);
}

// Bit patterns, for exact comparisons (conversions, copies).
inline std::uint16_t bits_of(bf16 v) { return v.bits; }
inline std::uint16_t bits_of(f16 v) { return v.bits; }
inline std::uint32_t bits_of(float v) { return std::bit_cast<std::uint32_t>(v); }
inline std::uint64_t bits_of(double v) { return std::bit_cast<std::uint64_t>(v); }
inline std::uint32_t bits_of(std::int32_t v) { return std::uint32_t(v); }
// Same bits, except that any NaN matches any NaN (payloads may differ).
template <class T>
void check_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    bool ok = bits_of(got[i]) == bits_of(want[i]);
    if constexpr (!std::is_integral_v<T>) ok = ok || (std::isnan(to_d(got[i])) && std::isnan(to_d(want[i])));
    if (!ok && bad++ == 0) first = i;
  }
  INFO(bad << " elements differ; the first at " << first << ": bits " << (bad ? bits_of(got[first]) : 0u)
           << ", expected " << (bad ? bits_of(want[first]) : 0u));
  CHECK(bad == 0);
}

}  // namespace kernel_suite
