#pragma once
// Kernel suite, softmax cross-entropy family: the fused loss and its gradient, the
// vocabulary-parallel pieces (each alone, then composed over simulated ranks), and
// loss_accumulate.
#include "kernel_suite_common.hpp"

namespace kernel_suite {

// Row-wise softmax cross-entropy of a R x C matrix in float64.
struct xent_ref {
  std::vector<double> loss, probs;
};
inline xent_ref ref_xent(std::size_t R, std::size_t C, const std::vector<double>& x,
                         const std::vector<std::int32_t>& y) {
  xent_ref o{std::vector<double>(R), std::vector<double>(R * C)};
  for (std::size_t r = 0; r < R; ++r) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (std::size_t j = 0; j < C; ++j) m = std::max(m, x[r * C + j]);
    for (std::size_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - m);
    o.loss[r] = std::log(s) + m - x[r * C + std::size_t(y[r])];
    for (std::size_t j = 0; j < C; ++j) o.probs[r * C + j] = std::exp(x[r * C + j] - m) / s;
  }
  return o;
}
// scale * (probs - onehot(labels)).
inline std::vector<double> ref_xent_grad(std::size_t R, std::size_t C, const std::vector<double>& probs,
                                         const std::vector<std::int32_t>& y, double scale) {
  std::vector<double> d(R * C);
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t j = 0; j < C; ++j)
      d[r * C + j] = scale * (probs[r * C + j] - (std::int32_t(j) == y[r] ? 1.0 : 0.0));
  return d;
}

TEST_CASE_TEMPLATE("kernels: softmax cross-entropy forward and backward", E, f32, f64, mixed, mixed_f16) {
  using T = typename E::T;
  using S = typename E::S;
  queue_t q;
  rng g(100);
  for (const rc& s : kShapes) {
    const std::size_t R = s.rows, C = s.cols, n = R * C;
    const std::string what = shape_name(R, C);
    const auto x = g.uniform<T>(n, -8, 8);
    const auto y = g.ints(R, 0, std::int32_t(C));
    const xent_ref ref = ref_xent(R, C, widen(x), y);
    auto dx = to_dev(q, x);
    auto dy = to_dev(q, y);
    auto loss = poisoned<S>(q, R);
    auto probs = poisoned<T>(q, n);
    softmax_cross_entropy_forward(q, R, C, static_cast<const T*>(dx.data()),
                                  static_cast<const std::int32_t*>(dy.data()), loss.data(), probs.data());
    check_stat<T, S>(to_host(q, loss.data(), R), ref.loss, 1e-6, "loss " + what);
    check_act(to_host(q, probs.data(), n), ref.probs, 0.0, "probs " + what);
    auto loss2 = poisoned<S>(q, R);
    softmax_cross_entropy_forward(q, R, C, static_cast<const T*>(dx.data()),
                                  static_cast<const std::int32_t*>(dy.data()), loss2.data(), static_cast<T*>(nullptr));
    check_stat<T, S>(to_host(q, loss2.data(), R), ref.loss, 1e-6, "loss without probs " + what);

    // Backward from given probabilities (rounded to T); dlogits may overwrite them.
    const auto p = narrow<T>(ref.probs);
    for (double scale : {0.25, 1.0 / double(R)}) {
      const auto d_ref = ref_xent_grad(R, C, widen(p), y, scale);
      auto dp = to_dev(q, p);
      auto dd = poisoned<T>(q, n);
      softmax_cross_entropy_backward(q, R, C, static_cast<const T*>(dp.data()),
                                     static_cast<const std::int32_t*>(dy.data()), scale, dd.data());
      check_act(to_host(q, dd.data(), n), d_ref, 0.0, "dlogits " + what);
      softmax_cross_entropy_backward(q, R, C, static_cast<const T*>(dp.data()),
                                     static_cast<const std::int32_t*>(dy.data()), scale, dp.data());
      check_act(to_host(q, dp.data(), n), d_ref, 0.0, "dlogits in place " + what);
    }
  }
}

TEST_CASE("kernels: softmax cross-entropy is stable for huge logits") {
  queue_t q;
  const std::vector<float> x = {1000.f, 0.f, -1000.f, 88.f, 89.f, 90.f};
  const std::vector<std::int32_t> y = {0, 2};
  auto dx = to_dev(q, x);
  auto dy = to_dev(q, y);
  auto loss = poisoned<float>(q, 2);
  softmax_cross_entropy_forward(q, 2, 3, static_cast<const float*>(dx.data()),
                                static_cast<const std::int32_t*>(dy.data()), loss.data(), static_cast<float*>(nullptr));
  const auto l = to_host(q, loss.data(), 2);
  CHECK(l[0] == doctest::Approx(0.0).epsilon(1e-6));
  CHECK(l[1] == doctest::Approx(std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0)).epsilon(1e-6));
}

TEST_CASE("kernels: softmax cross-entropy backward matches finite differences (double)") {
  queue_t q;
  rng g(21);
  const std::size_t R = 6, C = 9;
  std::vector<double> x = g.uniform<double>(R * C, -4, 4);
  const auto y = g.ints(R, 0, std::int32_t(C));
  const double scale = 0.37;
  auto dy = to_dev(q, y);
  const auto* labels = static_cast<const std::int32_t*>(dy.data());
  auto loss = [&] {
    auto dx = to_dev(q, x);
    auto l = poisoned<double>(q, R);
    softmax_cross_entropy_forward(q, R, C, static_cast<const double*>(dx.data()), labels, l.data(),
                                  static_cast<double*>(nullptr));
    double s = 0;
    for (double v : to_host(q, l.data(), R)) s += v;
    return scale * s;
  };
  auto dx = to_dev(q, x);
  auto l = poisoned<double>(q, R), p = poisoned<double>(q, R * C), d = poisoned<double>(q, R * C);
  softmax_cross_entropy_forward(q, R, C, static_cast<const double*>(dx.data()), labels, l.data(), p.data());
  softmax_cross_entropy_backward(q, R, C, static_cast<const double*>(p.data()), labels, scale, d.data());
  check_close(to_host(q, d.data(), R * C), fd_grad(x, loss), 1e-6, "dlogits");
}

// Each piece of the vocabulary-parallel loss on one slice, fed the statistics it
// would get from the all-reduces (the reference's, rounded to S).
TEST_CASE_TEMPLATE("kernels: vocabulary-parallel cross-entropy pieces", E, f32, f64, mixed, mixed_f16) {
  using T = typename E::T;
  using S = typename E::S;
  queue_t q;
  rng g(200);
  for (const rc& s : kShapes)
    for (std::size_t parts : {std::size_t(1), std::size_t(3)}) {
      const std::size_t R = s.rows, local = s.cols, V = local * parts;
      const auto y = g.ints(R, 0, std::int32_t(V));
      auto dy = to_dev(q, y);
      const auto* labels = static_cast<const std::int32_t*>(dy.data());
      for (std::size_t p = 0; p < parts; ++p) {
        const std::size_t off = p * local, n = R * local;
        const std::string what = shape_name(R, local) + " part " + std::to_string(p);
        const auto x = g.uniform<T>(n, -5, 5);
        const auto xd = widen(x);
        std::vector<S> mx(R), tg(R);
        std::vector<double> se(R, 0.0);
        for (std::size_t r = 0; r < R; ++r) {
          double m = -std::numeric_limits<double>::infinity();
          for (std::size_t j = 0; j < local; ++j) m = std::max(m, xd[r * local + j]);
          mx[r] = S(m);  // exact: a value of T
          for (std::size_t j = 0; j < local; ++j) se[r] += std::exp(xd[r * local + j] - m);
          const std::size_t l = std::size_t(y[r]);
          tg[r] = l >= off && l - off < local ? S(xd[r * local + l - off]) : S(0);
        }
        auto dx = to_dev(q, x);
        const T* logits = dx.data();
        auto dmx = poisoned<S>(q, R), dse = poisoned<S>(q, R), dtg = poisoned<S>(q, R);
        xent_local_max(q, R, local, logits, dmx.data());
        check_bits(to_host(q, dmx.data(), R), mx, "row max " + what);  // a max of exact values
        auto hmx = to_dev(q, mx);
        const S* row_max = hmx.data();
        xent_local_sumexp(q, R, local, logits, row_max, dse.data());
        check_stat<T, S>(to_host(q, dse.data(), R), se, 1e-30, "sum_exp " + what);
        xent_target_logit(q, R, local, logits, labels, off, dtg.data());
        check_bits(to_host(q, dtg.data(), R), tg, "target " + what);

        const auto se_s = narrow<S>(se);
        std::vector<double> loss_ref(R);
        for (std::size_t r = 0; r < R; ++r) loss_ref[r] = std::log(double(se_s[r])) + double(mx[r]) - double(tg[r]);
        auto hse = to_dev(q, se_s), htg = to_dev(q, tg);
        const S* sum_exp = hse.data();
        auto dloss = poisoned<S>(q, R);
        xent_loss(q, R, row_max, sum_exp, static_cast<const S*>(htg.data()), dloss.data());
        check_stat<T, S>(to_host(q, dloss.data(), R), loss_ref, 1e-6, "loss " + what);

        std::vector<double> d_ref(n);
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t j = 0; j < local; ++j) {
            const bool target = std::size_t(y[r]) == off + j;
            d_ref[r * local + j] = 0.5 * (std::exp(xd[r * local + j] - double(mx[r])) / double(se_s[r]) - target);
          }
        auto dd = poisoned<T>(q, n);
        xent_local_backward(q, R, local, logits, labels, off, row_max, sum_exp, 0.5, dd.data());
        check_act(to_host(q, dd.data(), n), d_ref, 1e-6, "dlogits " + what);
      }
    }
  // An empty slice: row max -inf, no sum, no target.
  auto dmx = poisoned<S>(q, 4), dse = poisoned<S>(q, 4), dtg = poisoned<S>(q, 4);
  const std::vector<S> zero(4, S(0)), lowest(4, -std::numeric_limits<S>::infinity());
  auto hz = to_dev(q, zero);
  auto dy = to_dev(q, std::vector<std::int32_t>{0, 1, 2, 3});
  xent_local_max(q, 4, 0, static_cast<const T*>(nullptr), dmx.data());
  xent_local_sumexp(q, 4, 0, static_cast<const T*>(nullptr), static_cast<const S*>(hz.data()), dse.data());
  xent_target_logit(q, 4, 0, static_cast<const T*>(nullptr), static_cast<const std::int32_t*>(dy.data()), 0,
                    dtg.data());
  check_bits(to_host(q, dmx.data(), 4), lowest, "empty slice max");
  check_bits(to_host(q, dse.data(), 4), zero, "empty slice sum_exp");
  check_bits(to_host(q, dtg.data(), 4), zero, "empty slice target");
}

// The protocol of softmax.hpp over `ranks` column slices in one process, the
// all-reduces (max, sum, sum) done by hand on the pieces' outputs: the loss and the
// gathered gradient equal the unsplit float64 reference.
template <class T>
void check_vocab_parallel(std::size_t R, std::size_t V, std::size_t ranks, std::uint64_t seed) {
  CAPTURE(R);
  CAPTURE(V);
  CAPTURE(ranks);
  queue_t q;
  rng g(seed);
  const auto x = g.uniform<T>(R * V, -6, 6);
  const auto y = g.ints(R, 0, std::int32_t(V));
  const double scale = 0.5;
  const xent_ref ref = ref_xent(R, V, widen(x), y);
  const auto d_ref = ref_xent_grad(R, V, ref.probs, y, scale);
  auto dy = to_dev(q, y);
  const auto* labels = static_cast<const std::int32_t*>(dy.data());

  // Uneven split: the first V % ranks slices get one extra column.
  std::vector<std::size_t> off(ranks + 1, 0);
  for (std::size_t k = 0; k < ranks; ++k) off[k + 1] = off[k] + V / ranks + (k < V % ranks ? 1 : 0);
  auto cols = [&](std::size_t k) { return off[k + 1] - off[k]; };
  std::vector<dev<T>> slice;
  for (std::size_t k = 0; k < ranks; ++k) {
    std::vector<T> part(R * cols(k));
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < cols(k); ++j) part[r * cols(k) + j] = x[r * V + off[k] + j];
    slice.push_back(to_dev(q, part));
  }
  std::vector<T> gmax(R, -std::numeric_limits<T>::infinity()), gsum(R, T(0)), gtarget(R, T(0));
  for (std::size_t k = 0; k < ranks; ++k) {  // all-reduce(max)
    auto m = poisoned<T>(q, R);
    xent_local_max(q, R, cols(k), static_cast<const T*>(slice[k].data()), m.data());
    const auto mh = to_host(q, m.data(), R);
    for (std::size_t r = 0; r < R; ++r) gmax[r] = std::max(gmax[r], mh[r]);
  }
  auto dmax = to_dev(q, gmax);
  for (std::size_t k = 0; k < ranks; ++k) {  // all-reduce(sum) of sum_exp and of the target logit
    auto se = poisoned<T>(q, R), tg = poisoned<T>(q, R);
    xent_local_sumexp(q, R, cols(k), static_cast<const T*>(slice[k].data()), static_cast<const T*>(dmax.data()),
                      se.data());
    xent_target_logit(q, R, cols(k), static_cast<const T*>(slice[k].data()), labels, off[k], tg.data());
    const auto sh = to_host(q, se.data(), R), th = to_host(q, tg.data(), R);
    for (std::size_t r = 0; r < R; ++r) gsum[r] += sh[r], gtarget[r] += th[r];
  }
  auto dsum = to_dev(q, gsum), dtarget = to_dev(q, gtarget);
  std::vector<double> d_cat(R * V);
  for (std::size_t k = 0; k < ranks; ++k) {
    auto loss = poisoned<T>(q, R);
    xent_loss(q, R, static_cast<const T*>(dmax.data()), static_cast<const T*>(dsum.data()),
              static_cast<const T*>(dtarget.data()), loss.data());
    check_close(to_host(q, loss.data(), R), ref.loss, tol<T>, "loss on rank " + std::to_string(k));
    auto d = poisoned<T>(q, R * cols(k));
    xent_local_backward(q, R, cols(k), static_cast<const T*>(slice[k].data()), labels, off[k],
                        static_cast<const T*>(dmax.data()), static_cast<const T*>(dsum.data()), scale, d.data());
    const auto dh = to_host(q, d.data(), R * cols(k));
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < cols(k); ++j) d_cat[r * V + off[k] + j] = to_d(dh[r * cols(k) + j]);
  }
  check_close(d_cat, d_ref, tol<T>, "gathered dlogits");
}

TEST_CASE_TEMPLATE("kernels: vocabulary-parallel cross-entropy over 2 and 4 ranks equals the unsplit loss", T, float,
                   double) {
  check_vocab_parallel<T>(5, 12, 2, 1);
  check_vocab_parallel<T>(7, 13, 4, 2);
  check_vocab_parallel<T>(64, 1001, 2, 3);
  check_vocab_parallel<T>(33, 1001, 4, 4);
  check_vocab_parallel<T>(3, 3, 4, 5);  // more ranks than columns: one empty slice
}

TEST_CASE_TEMPLATE("kernels: loss_accumulate keeps the loss books in backend memory", T, float, double) {
  queue_t q;
  rng g(300);
  for (std::size_t rows : {std::size_t(1), std::size_t(7), std::size_t(1000)})
    for (std::size_t valid : {std::size_t(0), std::size_t(5), std::size_t(-1)}) {
      CAPTURE(rows);
      CAPTURE(valid);
      const auto loss = g.uniform<T>(rows, 0, 3), target = g.uniform<T>(rows);
      auto mx = g.uniform<T>(rows);
      mx[0] = target[0];  // a tie counts as correct
      std::vector<std::int32_t> labels(rows, 3);
      for (std::size_t r = 1; r < rows; r += 3) labels[r] = strata::ignore_label;  // not counted
      const std::vector<double> acc0 = {1.5, 2.0, 3.0};
      std::vector<double> ref = acc0;
      const std::size_t n = std::min(rows, valid);
      for (std::size_t r = 0; r < n; ++r) {
        if (labels[r] == strata::ignore_label) continue;
        ref[0] += to_d(loss[r]);
        ref[1] += target[r] >= mx[r] ? 1.0 : 0.0;
        ref[2] += 1.0;
      }
      auto dl = to_dev(q, loss), dt = to_dev(q, target), dm = to_dev(q, mx);
      auto dlab = to_dev(q, labels);
      auto acc = to_dev(q, acc0);
      loss_accumulate(q, rows, valid, static_cast<const std::int32_t*>(dlab.data()), static_cast<const T*>(dl.data()),
                      static_cast<const T*>(dt.data()), static_cast<const T*>(dm.data()), acc.data());
      const auto got = to_host(q, acc.data(), 3);
      CHECK(got[0] == doctest::Approx(ref[0]).epsilon(1e-12));
      CHECK(got[1] == ref[1]);
      CHECK(got[2] == ref[2]);
    }
}

// Rows labelled strata::ignore_label (a masked-language-model loss's unmasked positions): zero
// loss and gradient from the fused loss and from the vocabulary-parallel pieces over two
// slices; the other rows equal the float64 reference.
TEST_CASE_TEMPLATE("kernels: ignored labels have no loss and no gradient", T, float, double) {
  queue_t q;
  rng g(400);
  const std::size_t R = 9, C = 12, half = C / 2;
  const auto x = g.uniform<T>(R * C, -5, 5);
  auto y = g.ints(R, 0, std::int32_t(C));
  for (std::size_t r : {std::size_t(1), std::size_t(4), std::size_t(8)}) y[r] = strata::ignore_label;
  auto yc = y;  // the reference on counted rows (ignored rows take label 0, then zeroed)
  for (auto& l : yc) l = l == strata::ignore_label ? 0 : l;
  const xent_ref ref = ref_xent(R, C, widen(x), yc);
  auto d_ref = ref_xent_grad(R, C, ref.probs, yc, 0.5);
  auto loss_ref = ref.loss;
  for (std::size_t r = 0; r < R; ++r)
    if (y[r] == strata::ignore_label) {
      loss_ref[r] = 0;
      for (std::size_t j = 0; j < C; ++j) d_ref[r * C + j] = 0;
    }
  auto dx = to_dev(q, x);
  auto dy = to_dev(q, y);
  const auto* labels = static_cast<const std::int32_t*>(dy.data());
  auto loss = poisoned<T>(q, R);
  auto probs = poisoned<T>(q, R * C);
  softmax_cross_entropy_forward(q, R, C, static_cast<const T*>(dx.data()), labels, loss.data(), probs.data());
  check_close(to_host(q, loss.data(), R), loss_ref, tol<T>, "fused loss");
  auto d = poisoned<T>(q, R * C);
  softmax_cross_entropy_backward(q, R, C, static_cast<const T*>(probs.data()), labels, 0.5, d.data());
  check_close(to_host(q, d.data(), R * C), d_ref, tol<T>, "fused dlogits");

  // two vocabulary slices, the all-reduces done by hand
  std::vector<dev<T>> slice;
  for (std::size_t k = 0; k < 2; ++k) {
    std::vector<T> part(R * half);
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < half; ++j) part[r * half + j] = x[r * C + k * half + j];
    slice.push_back(to_dev(q, part));
  }
  std::vector<T> gmax(R, -std::numeric_limits<T>::infinity()), gsum(R, T(0)), gtarget(R, T(0));
  for (std::size_t k = 0; k < 2; ++k) {
    auto m = poisoned<T>(q, R);
    xent_local_max(q, R, half, static_cast<const T*>(slice[k].data()), m.data());
    const auto mh = to_host(q, m.data(), R);
    for (std::size_t r = 0; r < R; ++r) gmax[r] = std::max(gmax[r], mh[r]);
  }
  auto dmax = to_dev(q, gmax);
  for (std::size_t k = 0; k < 2; ++k) {
    auto se = poisoned<T>(q, R), tg = poisoned<T>(q, R);
    xent_local_sumexp(q, R, half, static_cast<const T*>(slice[k].data()), static_cast<const T*>(dmax.data()),
                      se.data());
    xent_target_logit(q, R, half, static_cast<const T*>(slice[k].data()), labels, k * half, tg.data());
    const auto sh = to_host(q, se.data(), R), th = to_host(q, tg.data(), R);
    for (std::size_t r = 0; r < R; ++r) {
      gsum[r] += sh[r], gtarget[r] += th[r];
      if (y[r] == strata::ignore_label) CHECK(th[r] == T(0));
    }
  }
  auto dsum = to_dev(q, gsum);
  std::vector<double> d_cat(R * C);
  for (std::size_t k = 0; k < 2; ++k) {
    auto dk = poisoned<T>(q, R * half);
    xent_local_backward(q, R, half, static_cast<const T*>(slice[k].data()), labels, k * half,
                        static_cast<const T*>(dmax.data()), static_cast<const T*>(dsum.data()), 0.5, dk.data());
    const auto dh = to_host(q, dk.data(), R * half);
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < half; ++j) d_cat[r * C + k * half + j] = to_d(dh[r * half + j]);
  }
  check_close(d_cat, d_ref, tol<T>, "vocabulary-parallel dlogits");

  // another negative label is still an error
  auto bad = to_dev(q, std::vector<std::int32_t>{0, -1, 2});
  auto l3 = poisoned<T>(q, 3);
  auto run = [&](auto& qq) {  // generic: the device backend's error read-back found by ADL
    softmax_cross_entropy_forward(qq, 3, C, static_cast<const T*>(dx.data()),
                                  static_cast<const std::int32_t*>(bad.data()), l3.data(), static_cast<T*>(nullptr));
    if constexpr (requires { raise_device_errors(qq); }) raise_device_errors(qq);
  };
  CHECK_THROWS_AS(run(q), std::out_of_range);
}

}  // namespace kernel_suite
