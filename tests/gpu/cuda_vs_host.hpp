// The GPU tests' comparison against the host backend (test_cuda_kernels.cu,
// test_cuda_images.cu): the same inputs to both, device outputs poisoned with NaN first,
// norm-wise relative errors.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/cuda/kernels.cuh"
#include "strata/backend/host/kernels.hpp"

namespace gpu_test {

namespace cu = strata::backend::cuda;
namespace hb = strata::backend::host;
using strata::backend::activation;
using strata::backend::trans;
using cu::bf16;
static_assert(std::is_same_v<cu::bf16, strata::bf16>, "one bf16 for host, device and cuBLASLt");

template <class T>
inline constexpr double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
inline constexpr double tol_tf32 = 5e-3;
inline constexpr double tol_bf16 = 2e-2;
inline constexpr double tol_lt_gelu = 1e-3;
// cuBLASLt's GELU epilogue in double is an approximation of its own: 6.0e-10 worst on an
// H100 (CUDA 13.0) against the host's double tanh form, so double gets its own bound.
inline constexpr double tol_lt_gelu_double = 5e-9;

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(20240611);
  return g;
}

template <class T>
std::vector<T> random_vec(std::size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng()));
  return v;
}
inline std::vector<std::int32_t> random_ids(std::size_t n, std::int32_t lo, std::int32_t hi) {
  std::uniform_int_distribution<std::int32_t> d(lo, hi - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

inline double as_double(float v) { return v; }
inline double as_double(double v) { return v; }
inline double as_double(bf16 v) { return double(float(v)); }

template <class T>
cu::buffer<T> to_dev(cu::queue& q, const std::vector<T>& h) {
  cu::buffer<T> b(std::max<std::size_t>(h.size(), 1));
  cu::upload(q, h.data(), h.size(), b.data());
  return b;
}
template <class T>
cu::buffer<T> poisoned(cu::queue& q, std::size_t n) {
  cu::buffer<T> b(std::max<std::size_t>(n, 1));
  // All-ones bytes are a NaN in float, double and bf16.
  STRATA_CUDA_CHECK(cudaMemsetAsync(b.data(), 0xff, b.bytes(), q.stream()));
  return b;
}
template <class T>
std::vector<T> to_host(cu::queue& q, const T* d, std::size_t n) {
  std::vector<T> h(n);
  cu::download(q, d, n, h.data());
  q.synchronize();
  return h;
}
template <class T>
std::vector<T> to_host(cu::queue& q, const cu::buffer<T>& b, std::size_t n) {
  return to_host(q, b.data(), n);
}

// Norm-wise relative error, plus: every element the host made finite must be
// finite on the device too (catches unwritten, NaN-poisoned outputs), and
// NaN/Inf must sit at the same places.
template <class T, class U>
void expect_close(const std::vector<T>& dev, const std::vector<U>& ref, double tolerance, const std::string& what) {
  INFO(what);
  REQUIRE(dev.size() == ref.size());
  double num = 0, den = 0;
  std::size_t mismatch = 0, first = dev.size();
  for (std::size_t i = 0; i < dev.size(); ++i) {
    const double d = as_double(dev[i]), r = as_double(ref[i]);
    if (!std::isfinite(r) || !std::isfinite(d)) {
      const bool same = (std::isnan(r) && std::isnan(d)) || r == d;
      if (!same && ++mismatch == 1) first = i;
      continue;
    }
    num += (d - r) * (d - r);
    den += r * r;
  }
  INFO("first non-finite mismatch at " << first);
  CHECK(mismatch == 0);
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  INFO("relative error " << err << " (tolerance " << tolerance << ")");
  CHECK(err <= tolerance);
}

template <class T>
std::vector<T> round_bf16(const std::vector<T>& v) {
  std::vector<T> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = T(float(bf16(float(v[i]))));
  return r;
}
inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = bf16(v[i]);
  return r;
}

struct fixture {
  cu::queue q;
  hb::queue hq{2};
};

}  // namespace gpu_test

using namespace gpu_test;  // NOLINT: test programs only
