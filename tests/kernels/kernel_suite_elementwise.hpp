#pragma once
// Kernel suite, elementwise and reduction families: bias + activation, activation
// backward, bias_grad, dropout, scale/axpy/copy/copy_2d/fill, map, sum/sum_squares/all_finite,
// cast_elements, cast_ids.
#include <stdexcept>

#include "kernel_suite_common.hpp"

namespace kernel_suite {

TEST_CASE_TEMPLATE("kernels: bias_activation_forward and activation_backward", E, f32, f64, mixed, mixed_f16) {
  using T = typename E::T;
  queue_t q;
  rng g(1);
  for (const rc& s : kShapes)
    for (activation a : kActs)
      for (bool with_bias : {false, true}) {
        const std::size_t R = s.rows, C = s.cols, n = R * C;
        const std::string what = std::string(act_name(a)) + " " + shape_name(R, C) + (with_bias ? " bias" : "");
        const auto x = g.uniform<T>(n, -3, 3), b = g.uniform<T>(C), dy = g.uniform<T>(n);
        const auto xd = widen(x), bd = widen(b), dyd = widen(dy);
        std::vector<double> pre_ref(n), y_ref(n);
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t j = 0; j < C; ++j) {
            pre_ref[r * C + j] = xd[r * C + j] + (with_bias ? bd[j] : 0.0);
            y_ref[r * C + j] = ref_act(a, pre_ref[r * C + j]);
          }
        auto dx = to_dev(q, x), db = to_dev(q, b);
        const T* bias = with_bias ? db.data() : nullptr;
        auto dpre = poisoned<T>(q, n), dyo = poisoned<T>(q, n);
        bias_activation_forward(q, a, R, C, dx.data(), bias, dpre.data(), dyo.data());
        check_act(to_host(q, dpre.data(), n), pre_ref, 1e-6, "pre " + what);
        check_act(to_host(q, dyo.data(), n), y_ref, 1e-6, "y " + what);
        // y may overwrite x (pre skipped); pre may overwrite x.
        auto d2 = to_dev(q, x);
        bias_activation_forward(q, a, R, C, d2.data(), bias, static_cast<T*>(nullptr), d2.data());
        check_act(to_host(q, d2.data(), n), y_ref, 1e-6, "y in place " + what);
        auto d3 = to_dev(q, x), dy3 = poisoned<T>(q, n);
        bias_activation_forward(q, a, R, C, d3.data(), bias, d3.data(), dy3.data());
        check_act(to_host(q, d3.data(), n), pre_ref, 1e-6, "pre in place " + what);
        check_act(to_host(q, dy3.data(), n), y_ref, 1e-6, "y beside pre in place " + what);
        // A start one element past the allocation's alignment (scalar paths).
        if (n > 1) {
          auto d4 = to_dev(q, x);
          bias_activation_forward(q, a, 1, n - 1, d4.data() + 1, static_cast<const T*>(nullptr),
                                  static_cast<T*>(nullptr), d4.data() + 1);
          std::vector<double> ref(xd.begin() + 1, xd.end());
          for (auto& v : ref) v = ref_act(a, v);
          check_act(to_host(q, d4.data() + 1, n - 1), ref, 1e-6, "offset " + what);
        }

        // Backward at the pre-activation the kernel was given (rounded to T).
        const auto pre_t = narrow<T>(pre_ref);
        const auto pre_d = widen(pre_t);
        std::vector<double> dx_ref(n);
        for (std::size_t i = 0; i < n; ++i) dx_ref[i] = dyd[i] * ref_act_grad(a, pre_d[i]);
        auto dp = to_dev(q, pre_t), ddy = to_dev(q, dy), ddx = poisoned<T>(q, n);
        // GeLU' in float (tanh within a few ulps) cancels where it is small: ~1e-6
        // absolute, which f16's ulps (2^-21 near 1e-3) do not cover, hence the floor.
        const double floor = 2e-6;
        activation_backward(q, a, n, static_cast<const T*>(dp.data()), static_cast<const T*>(ddy.data()), ddx.data());
        check_act(to_host(q, ddx.data(), n), dx_ref, floor, "backward " + what);
        activation_backward(q, a, n, static_cast<const T*>(dp.data()), static_cast<const T*>(ddy.data()), ddy.data());
        check_act(to_host(q, ddy.data(), n), dx_ref, floor, "backward in place " + what);
      }
}

TEST_CASE("kernels: bias + activation backward match finite differences (double)") {
  queue_t q;
  rng g(7);
  const std::size_t R = 9, C = 11;
  for (activation a : kActs) {
    CAPTURE(act_name(a));
    std::vector<double> x = g.uniform<double>(R * C, -2, 2), b = g.uniform<double>(C), G = g.uniform<double>(R * C);
    for (auto& v : x)  // keep relu's kink away from the FD stencil
      if (std::abs(v) < 1e-3) v += 1e-2;
    auto forward = [&] {
      auto dx = to_dev(q, x), db = to_dev(q, b);
      bias_activation_forward(q, a, R, C, dx.data(), static_cast<const double*>(db.data()),
                              static_cast<double*>(nullptr), dx.data());
      return dot(G, to_host(q, dx.data(), R * C));
    };
    auto dx = to_dev(q, x), db = to_dev(q, b), dG = to_dev(q, G);
    auto pre = poisoned<double>(q, R * C), y = poisoned<double>(q, R * C), dpre = poisoned<double>(q, R * C);
    auto dbias = poisoned<double>(q, C);
    bias_activation_forward(q, a, R, C, dx.data(), static_cast<const double*>(db.data()), pre.data(), y.data());
    activation_backward(q, a, R * C, static_cast<const double*>(pre.data()), static_cast<const double*>(dG.data()),
                        dpre.data());
    bias_grad(q, R, C, static_cast<const double*>(dpre.data()), dbias.data(), false);
    check_close(to_host(q, dpre.data(), R * C), fd_grad(x, forward), 1e-6, "dx");
    check_close(to_host(q, dbias.data(), C), fd_grad(b, forward), 1e-6, "dbias");
  }
}

TEST_CASE_TEMPLATE("kernels: bias_grad overwrites or accumulates, deterministically", E, f32, f64, mixed,
                   mixed_f16) {
  using T = typename E::T;
  using G = typename E::S;
  queue_t q;
  rng g(50);
  std::vector<rc> shapes = kShapes;
  shapes.insert(shapes.end(), {{0, 5}, {4000, 3}, {20000, 70}});
  for (const rc& s : shapes)
    for (bool accumulate : {false, true}) {
      const std::string what = shape_name(s.rows, s.cols) + (accumulate ? " accumulate" : " overwrite");
      const auto dy = g.uniform<T>(s.rows * s.cols);
      const auto init = g.uniform<G>(s.cols);
      const auto dyd = widen(dy);
      std::vector<double> ref(s.cols, 0.0);
      if (accumulate) ref = widen(init);
      for (std::size_t r = 0; r < s.rows; ++r)
        for (std::size_t j = 0; j < s.cols; ++j) ref[j] += dyd[r * s.cols + j];
      auto ddy = to_dev(q, dy);
      auto db = accumulate ? to_dev(q, init) : poisoned<G>(q, s.cols);
      bias_grad(q, s.rows, s.cols, static_cast<const T*>(ddy.data()), db.data(), accumulate);
      const auto first = to_host(q, db.data(), s.cols);
      // The sums of exact values in double, rounded once to G.
      check_stat<T, G>(first, ref, 1e-7 * double(s.rows + 1), what);
      if (!accumulate) {
        bias_grad(q, s.rows, s.cols, static_cast<const T*>(ddy.data()), db.data(), false);
        check_bits(to_host(q, db.data(), s.cols), first, "repeated " + what);
      }
    }
}

// The mask at each element's global coordinates, from core/random.hpp's dropout_keep (all
// stages at once, not the kernel's per-row split), and the kept value x·scale computed in
// compute_t<T> and rounded once: bit-exact on every backend, plus the float64 check.
TEST_CASE_TEMPLATE("kernels: dropout keeps the mask of the global coordinates, scaled", T, float, double, bf16, f16) {
  using C = strata::backend::detail::compute_t<T>;
  queue_t q;
  rng g(810);
  const std::uint64_t seed = 77, step = 5;
  const std::vector<std::uint64_t> key_h{strata::dropout_step_key(seed, step)};
  auto key = to_dev(q, key_h);
  for (const rc& s : kShapes) {
    const std::size_t R = s.rows, Cc = s.cols, n = R * Cc;
    const std::string what = shape_name(R, Cc);
    // a block of a larger micro-batch: rows from 5 on (7 rows per sample), features from 3 on
    strata::backend::dropout_args a{.key = key.data(), .site = 11, .sample0 = 40, .row0 = 5, .sample_rows = 7,
                                    .col0 = 3, .threshold = strata::dropout_threshold(1, 4), .scale = 4.0 / 3.0};
    const auto x = g.uniform<T>(n, 0.5, 1.5);  // nonzero: a zero output is a dropped element
    std::vector<T> want(n);
    std::vector<double> ref(n);
    std::size_t kept = 0;
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t c = 0; c < Cc; ++c) {
        const std::size_t m = a.row0 + r, i = r * Cc + c;
        const bool keep = strata::dropout_keep(seed, step, a.site, a.sample0 + m / 7, m % 7, a.col0 + c, a.threshold);
        kept += keep;
        want[i] = keep ? T(C(x[i]) * C(a.scale)) : T(0.0f);
        ref[i] = keep ? to_d(x[i]) * a.scale : 0.0;
      }
    auto dx = to_dev(q, x), dy = poisoned<T>(q, n);
    dropout(q, a, R, Cc, static_cast<const T*>(dx.data()), dy.data());
    const auto got = to_host(q, dy.data(), n);
    check_bits(got, want, "dropout " + what);
    check_act(got, ref, 0.0, "dropout vs float64 " + what);
    if (n >= 1000) CHECK(std::abs(double(kept) / double(n) - 0.75) < 0.05);
    // in place (the backward may overwrite the gradient it reads)
    dropout(q, a, R, Cc, static_cast<const T*>(dx.data()), dx.data());
    check_bits(to_host(q, dx.data(), n), want, "dropout in place " + what);
  }
  // the step's key is read from backend memory at run time: another step, another mask
  const std::vector<std::uint64_t> other_h{strata::dropout_step_key(seed, step + 1)};
  auto other = to_dev(q, other_h);
  const std::size_t n = 64 * 128;
  const auto x = g.uniform<T>(n, 0.5, 1.5);
  auto dx = to_dev(q, x), d1 = poisoned<T>(q, n), d2 = poisoned<T>(q, n);
  strata::backend::dropout_args a{.key = key.data(), .threshold = strata::dropout_threshold(1, 2), .scale = 2.0};
  dropout(q, a, 64, 128, static_cast<const T*>(dx.data()), d1.data());
  a.key = other.data();
  dropout(q, a, 64, 128, static_cast<const T*>(dx.data()), d2.data());
  const auto h1 = to_host(q, d1.data(), n), h2 = to_host(q, d2.data(), n);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < n; ++i) differ += (to_d(h1[i]) == 0.0) != (to_d(h2[i]) == 0.0);
  CHECK(differ > n / 4);  // independent masks of rate 1/2 differ at half the elements
  CHECK_THROWS_AS(dropout(q, strata::backend::dropout_args{}, 2, 2, static_cast<const T*>(dx.data()), dx.data()),
                  std::invalid_argument);
}

TEST_CASE_TEMPLATE("kernels: scale, axpy, copy and fill", T, float, double) {
  queue_t q;
  rng g(500);
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(7), std::size_t(1000),
                        std::size_t(65537), std::size_t(100003), std::size_t(3000001)}) {
    const std::string what = "n=" + std::to_string(n);
    const auto x = g.uniform<T>(n), y = g.uniform<T>(n);
    const auto xd = widen(x), yd = widen(y);
    std::vector<double> ref(n);

    auto ds = to_dev(q, x);
    scale(q, n, -0.3, ds.data());
    for (std::size_t i = 0; i < n; ++i) ref[i] = -0.3 * xd[i];
    check_close(to_host(q, ds.data(), n), ref, tol<T>, "scale " + what);

    auto dx = to_dev(q, x), da = to_dev(q, y);
    axpy(q, n, 1.7, static_cast<const T*>(dx.data()), da.data());
    for (std::size_t i = 0; i < n; ++i) ref[i] = yd[i] + 1.7 * xd[i];
    check_close(to_host(q, da.data(), n), ref, tol<T>, "axpy " + what);

    // One element past the allocation's alignment (scalar paths).
    if (n > 2) {
      auto d2 = to_dev(q, x), a2 = to_dev(q, y);
      scale(q, n - 1, 3.0, d2.data() + 1);
      axpy(q, n - 1, -0.5, static_cast<const T*>(dx.data()) + 1, a2.data() + 1);
      std::vector<double> r2(n - 1), a2r(n - 1);
      for (std::size_t i = 1; i < n; ++i) r2[i - 1] = 3.0 * xd[i], a2r[i - 1] = yd[i] - 0.5 * xd[i];
      check_close(to_host(q, d2.data() + 1, n - 1), r2, tol<T>, "scale offset " + what);
      check_close(to_host(q, a2.data() + 1, n - 1), a2r, tol<T>, "axpy offset " + what);
    }

    // n == 0 touches nothing: the poisoned element stays.
    auto dc = poisoned<T>(q, n);
    copy(q, n, static_cast<const T*>(dx.data()), dc.data());
    check_bits(to_host(q, dc.data(), std::max<std::size_t>(n, 1)), n ? x : std::vector<T>{nan_of<T>()}, "copy " + what);
    auto df = poisoned<T>(q, n);
    fill(q, n, T(2.5), df.data());
    CHECK(to_host(q, df.data(), n) == std::vector<T>(n, T(2.5)));
    fill(q, n, T(0), df.data());  // all-zero bytes (a memset on a device)
    CHECK(to_host(q, df.data(), n) == std::vector<T>(n, T(0)));
    if (n == 0) CHECK(std::isnan(to_host(q, df.data(), 1)[0]));
  }
}

// A per-element formula as a user layer writes it for map: y = a·b − s·c, evaluated
// in the inputs' compute type.
struct mul_sub {
  double s;
  template <class C>
  STRATA_HD C operator()(C a, C b, C c) const {
    return a * b - C(s) * c;
  }
};
struct negate {
  template <class C>
  STRATA_HD C operator()(C a) const {
    return -a;
  }
};

TEST_CASE_TEMPLATE("kernels: map runs a per-element functor on every backend", T, float, double, bf16, f16) {
  queue_t q;
  rng g(640);
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(65537), std::size_t(1000003)}) {
    const std::string what = "n=" + std::to_string(n);
    const auto a = g.uniform<T>(n), b = g.uniform<T>(n), c = g.uniform<T>(n);
    const auto ad = widen(a), bd = widen(b), cd = widen(c);
    std::vector<double> ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = ad[i] * bd[i] - 0.25 * cd[i];
    auto da = to_dev(q, a), db = to_dev(q, b), dc = to_dev(q, c), dy = poisoned<T>(q, n);
    map(q, n, mul_sub{0.25}, dy.data(), static_cast<const T*>(da.data()), static_cast<const T*>(db.data()),
        static_cast<const T*>(dc.data()));
    check_act(to_host(q, dy.data(), n), ref, 1e-6, "map " + what);
    // in place, one input: exact
    map(q, n, negate{}, da.data(), static_cast<const T*>(da.data()));
    std::vector<T> neg(a);
    for (auto& v : neg) v = T(-static_cast<double>(v));
    check_bits(to_host(q, da.data(), n), neg, "map in place " + what);
  }
  CHECK_THROWS_AS(map(q, 3, negate{}, static_cast<T*>(nullptr), static_cast<const T*>(nullptr)), std::invalid_argument);
}

TEST_CASE_TEMPLATE("kernels: sum and sum_squares accumulate in double", T, float, double, bf16, f16) {
  queue_t q;
  rng g(700);
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(9), std::size_t(16384), std::size_t(16385),
                        std::size_t(65537), std::size_t(1000001), std::size_t(3000001)}) {
    CAPTURE(n);
    const auto x = g.uniform<T>(n);
    double s_ref = 0, abs_ref = 0, q_ref = 0;
    for (T v : x) s_ref += to_d(v), abs_ref += std::abs(to_d(v)), q_ref += to_d(v) * to_d(v);
    auto dx = to_dev(q, x);
    const T* p = n ? dx.data() : nullptr;
    const double s = sum(q, n, p), sq = sum_squares(q, n, p);
    // Exact terms summed in double: only the order differs from the reference.
    CHECK(std::abs(s - s_ref) <= 1e-12 * std::max(1.0, abs_ref));
    CHECK(std::abs(sq - q_ref) <= 1e-12 * std::max(1.0, q_ref));
    if (n == 0) CHECK((s == 0.0 && sq == 0.0));
  }
}

TEST_CASE_TEMPLATE("kernels: all_finite finds NaN and infinities anywhere", T, float, double, bf16, f16) {
  queue_t q;
  rng g(800);
  std::vector<T> bad;
  T biggest, tiny;
  if constexpr (std::is_same_v<T, bf16>) {
    for (int b : {0x7fc0, 0xffff, 0x7f80, 0xff80, 0x7f81}) bad.push_back(bf16::from_bits(std::uint16_t(b)));
    biggest = bf16::from_bits(0x7f7f);
    tiny = bf16::from_bits(0x0001);
  } else if constexpr (std::is_same_v<T, f16>) {
    for (int b : {0x7e00, 0xffff, 0x7c00, 0xfc00, 0x7c01}) bad.push_back(f16::from_bits(std::uint16_t(b)));
    biggest = f16::from_bits(0x7bff);  // 65504
    tiny = f16::from_bits(0x0001);     // 2^-24
  } else {
    bad = {std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::quiet_NaN(),
           std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity()};
    biggest = std::numeric_limits<T>::max();
    tiny = std::numeric_limits<T>::denorm_min();
  }
  for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(31), std::size_t(1000), std::size_t(32768),
                        std::size_t(65537), std::size_t(100000), std::size_t(3000001)}) {
    CAPTURE(n);
    auto x = g.uniform<T>(n);
    x[0] = biggest;  // large, and subnormal, but finite
    if (n > 1) x[1] = tiny;
    auto dx = to_dev(q, x);
    CHECK(all_finite(q, n, static_cast<const T*>(dx.data())));
    for (std::size_t pos : {std::size_t(0), n / 2, n - 1})
      for (T v : bad) {
        B::upload(q, &v, 1, dx.data() + pos);
        CHECK_FALSE(all_finite(q, n, static_cast<const T*>(dx.data())));
        B::upload(q, &x[pos], 1, dx.data() + pos);
      }
    CHECK(all_finite(q, n, static_cast<const T*>(dx.data())));
  }
  CHECK(all_finite(q, 0, static_cast<const T*>(nullptr)));
}

TEST_CASE_TEMPLATE("kernels: copy_2d copies a block between padded layouts", T, float, double, bf16, f16) {
  queue_t q;
  rng g(900);
  const std::size_t rows = 5, cols = 7, ls = 11, ld = 9;
  const auto src = g.uniform<T>(rows * ls);
  auto dsrc = to_dev(q, src), ddst = poisoned<T>(q, rows * ld);
  copy_2d(q, rows, cols, static_cast<const T*>(dsrc.data()), ls, ddst.data(), ld);
  std::vector<T> want(rows * ld, nan_of<T>());  // the padding is never written
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) want[r * ld + c] = src[r * ls + c];
  check_bits(to_host(q, ddst.data(), rows * ld), want, "copy_2d");
  // Nothing to copy: nothing touched; leading dimensions below cols are refused first.
  copy_2d(q, 0, cols, static_cast<const T*>(dsrc.data()), ls, ddst.data(), ld);
  copy_2d(q, rows, 0, static_cast<const T*>(dsrc.data()), ls, ddst.data(), ld);
  CHECK_THROWS_AS(copy_2d(q, rows, cols, static_cast<const T*>(dsrc.data()), 3, ddst.data(), ld),
                  std::invalid_argument);
  CHECK_THROWS_AS(copy_2d(q, rows, cols, static_cast<const T*>(dsrc.data()), ls, ddst.data(), 6),
                  std::invalid_argument);
  check_bits(to_host(q, ddst.data(), rows * ld), want, "copy_2d untouched");
}

// ---- conversions ------------------------------------------------------------------------

// float -> bf16, round to nearest even, by comparing distances in double (independent
// of the bit trick strata::bf16 uses). NaN gives a NaN.
inline bf16 ref_bf16(float f) {
  if (std::isnan(f)) return bf16::from_bits(0x7fc0);
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto lo = std::uint16_t(u >> 16);  // truncated toward zero
  if ((u & 0xffffu) == 0) return bf16::from_bits(lo);
  const auto hi = std::uint16_t(lo + 1);  // the next bf16 away from zero
  const double x = f, a = std::bit_cast<float>(std::uint32_t(lo) << 16);
  // past the largest finite bf16 the next step is 2^128, which rounds to Inf
  const double b = (hi & 0x7f80) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), x)
                                           : double(std::bit_cast<float>(std::uint32_t(hi) << 16));
  const double da = std::abs(x - a), db = std::abs(x - b);
  return bf16::from_bits(da < db ? lo : db < da ? hi : (lo & 1) ? hi : lo);
}

// The value of f16 bits, from the format's definition (sign, 5-bit exponent, 10 bits).
inline double ref_f16_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0    ? std::ldexp(m, -24)
                     : e == 31 ? (m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity())
                               : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}
// float -> f16, round to nearest even, in double: |x| in units of its f16 ulp (2^-24
// below 2^-14), rounded by nearbyint (ties to even), encoded from the result; 65520
// and above round to Inf. NaN gives a NaN.
inline f16 ref_f16(float f) {
  if (std::isnan(f)) return f16::from_bits(0x7e00);
  const double x = std::abs(double(f));
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (x >= 65520.0) return f16::from_bits(sign | 0x7c00);
  int e;
  (void)std::frexp(x, &e);  // x in [2^(e-1), 2^e)
  const int ulp = std::max(e - 1, -14) - 10;
  const double q = std::nearbyint(std::ldexp(x, -ulp)), v = std::ldexp(q, ulp);
  if (v < 0x1p-14) return f16::from_bits(std::uint16_t(sign | std::uint16_t(q)));
  (void)std::frexp(v, &e);
  const auto bits = std::uint16_t(((e - 1 + 15) << 10) | (std::uint16_t(std::ldexp(v, 11 - e)) & 0x3ff));
  return f16::from_bits(sign | bits);
}
template <class H>
H ref_half(float f) {
  if constexpr (std::is_same_v<H, bf16>)
    return ref_bf16(f);
  else
    return ref_f16(f);
}
// The float a 16-bit value widens to (exact), from its bits.
template <class H>
float ref_widen(H h) {
  if constexpr (std::is_same_v<H, bf16>)
    return std::bit_cast<float>(std::uint32_t(h.bits) << 16);
  else
    return float(ref_f16_value(h.bits));
}

// Random bit patterns (NaNs, infinities, subnormals), values over many binades, and
// the edge cases of round-to-nearest-even.
inline std::vector<float> cast_inputs(rng& g, std::size_t n) {
  std::vector<float> v;
  std::uniform_int_distribution<std::uint32_t> any;
  std::uniform_real_distribution<double> mag(-40.0, 40.0);
  for (std::size_t i = 0; i < n; ++i)
    v.push_back(i % 2 == 0 ? std::bit_cast<float>(any(g.engine()))
                           : float((i % 4 == 1 ? 1.0 : -1.0) * std::exp2(mag(g.engine()))));
  for (std::uint32_t b : {0x00000000u, 0x80000000u,                            // +-0
                          0x3f808000u, 0x3f818000u, 0xbf808000u,               // ties: down, up, negative
                          0x3f808001u, 0x3f807fffu,                            // just above / below a tie
                          0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0x7f7f8000u,  // overflow, largest bf16, its tie
                          0x7f800000u, 0xff800000u,                            // +-Inf
                          0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu,  // quiet and signalling NaNs
                          0x3f801000u, 0x3f803000u, 0x3f801001u,               // f16 ties, just above
                          0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u,  // 65504, overflow at 65520
                          0x387fe000u, 0x387fc000u, 0x33000000u, 0x33000001u,  // f16 subnormal edges
                          0x33c00000u, 0x34200000u, 0xb3800000u,               // f16 subnormal ties
                          0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x00800000u, 0x807f8000u})
    v.push_back(std::bit_cast<float>(b));  // subnormals and tiny ties last
  return v;
}

template <class From, class To>
void check_cast(queue_t& q, const std::vector<From>& x, const std::vector<To>& want, const std::string& what) {
  const std::size_t m = x.size();
  auto dx = to_dev(q, x);
  auto dy = poisoned<To>(q, m);
  cast_elements(q, m, static_cast<const From*>(dx.data()), dy.data());
  check_bits(to_host(q, dy.data(), m), want, what);
  if (m > 2) {  // misaligned starts take the scalar path
    auto dz = poisoned<To>(q, m);
    cast_elements(q, m - 1, static_cast<const From*>(dx.data()) + 1, dz.data() + 1);
    check_bits(to_host(q, dz.data() + 1, m - 1), std::vector<To>(want.begin() + 1, want.end()), what + " offset");
  }
}

TEST_CASE_TEMPLATE("kernels: cast_elements between float, double and a 16-bit type is bit-exact", H, bf16, f16) {
  queue_t q;
  rng g(std::is_same_v<H, bf16> ? 1000 : 1001);
  for (std::size_t n :
       {std::size_t(1), std::size_t(7), std::size_t(8), std::size_t(1003), std::size_t(65537), std::size_t(1000003)}) {
    const std::string what = " n=" + std::to_string(n);
    auto xf = cast_inputs(g, n);
    if constexpr (std::is_same_v<H, f16>)  // most of f16's range, finely: ties and subnormals too
      for (std::size_t i = 0; i < n; i += 2) xf[i] = std::ldexp(float(i % 4096) * 0.25f - 512.f, int(i % 41) - 30);
    const std::size_t m = xf.size();
    // Doubles between floats, so that double -> float rounds too.
    std::vector<double> xd(m);
    for (std::size_t i = 0; i < m; ++i) xd[i] = double(xf[i]) * (1.0 + std::ldexp(double(i % 5), -30));
    std::vector<H> f2b(m), d2b(m);
    std::vector<float> b2f(m), d2f(m);
    std::vector<double> f2d(m), b2d(m);
    for (std::size_t i = 0; i < m; ++i) {
      f2b[i] = ref_half<H>(xf[i]);
      d2b[i] = ref_half<H>(static_cast<float>(xd[i]));  // via float: two roundings, as documented
      d2f[i] = static_cast<float>(xd[i]);
      f2d[i] = xf[i];
      b2f[i] = ref_widen(f2b[i]);
      b2d[i] = b2f[i];
    }
    const std::string h = std::is_same_v<H, bf16> ? "bf16" : "f16";
    check_cast(q, xf, f2b, "float -> " + h + what);
    check_cast(q, f2b, b2f, h + " -> float" + what);
    check_cast(q, xd, d2b, "double -> " + h + what);
    check_cast(q, xd, d2f, "double -> float" + what);
    check_cast(q, f2b, b2d, h + " -> double" + what);
    check_cast(q, xf, f2d, "float -> double" + what);
  }
  // Every bit pattern widens exactly.
  std::vector<H> every(65536);
  std::vector<float> wide(every.size());
  for (std::size_t i = 0; i < every.size(); ++i) {
    every[i] = H::from_bits(static_cast<std::uint16_t>(i));
    wide[i] = ref_widen(every[i]);
  }
  check_cast(q, every, wide, "every 16-bit pattern -> float");
  CHECK_THROWS_AS(cast_elements(q, 3, static_cast<const float*>(nullptr), static_cast<H*>(nullptr)),
                  std::invalid_argument);
}

TEST_CASE("kernels: cast_ids truncates toward zero; unrepresentable values become INT32_MIN") {
  queue_t q;
  constexpr std::int32_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> vd = {0.0,          1.9,           -1.9,   7.0, 2147483647.0, -2147483648.0,
                                  2147483648.0, -2147483649.0, -1e300, nan, inf,          -0.5};
  const std::vector<std::int32_t> want_d = {0, 1, -1, 7, hi, lo, lo, lo, lo, lo, lo, 0};
  auto dd = to_dev(q, vd);
  auto ids = poisoned<std::int32_t>(q, vd.size());
  cast_ids(q, vd.size(), static_cast<const double*>(dd.data()), ids.data());
  CHECK(to_host(q, ids.data(), vd.size()) == want_d);
  // 2147483520 is the largest float below 2^31.
  const std::vector<float> vf = {3.0f,          12345.0f,      -0.5f, 16777216.0f, -1.9f,
                                 2147483520.0f, 2147483648.0f, 3e9f,  float(nan),  float(-inf)};
  const std::vector<std::int32_t> want_f = {3, 12345, 0, 16777216, -1, 2147483520, lo, lo, lo, lo};
  auto df = to_dev(q, vf);
  cast_ids(q, vf.size(), static_cast<const float*>(df.data()), ids.data());
  CHECK(to_host(q, ids.data(), vf.size()) == want_f);
}

}  // namespace kernel_suite
