#pragma once
// Kernel suite, LayerNorm and embedding families.
#include "kernel_suite_common.hpp"

namespace kernel_suite {

TEST_CASE_TEMPLATE("kernels: layernorm forward and backward (every optional input and output)", E, f32, f64, mixed,
                   mixed_f16) {
  using T = typename E::T;
  using S = typename E::S;
  queue_t q;
  rng g(400);
  const double eps = 1e-5;
  std::vector<rc> shapes = kShapes;
  shapes.insert(shapes.end(), {{2000, 64}, {1500, 1024}, {7, 5000}});
  for (const rc& s : shapes)
    for (bool affine : {false, true}) {
      const std::size_t R = s.rows, D = s.cols, n = R * D;
      const std::string what = shape_name(R, D) + (affine ? " affine" : "");
      const auto x = g.uniform<T>(n, -2, 3), gamma = g.uniform<T>(D, 0.5, 1.5), beta = g.uniform<T>(D),
                 dy = g.uniform<T>(n);
      const auto xd = widen(x), gd = widen(gamma), bd = widen(beta), dyd = widen(dy);
      std::vector<double> y_ref(n), mean(R), rstd(R);
      for (std::size_t r = 0; r < R; ++r) {
        double mu = 0, var = 0;
        for (std::size_t j = 0; j < D; ++j) mu += xd[r * D + j];
        mu /= double(D);
        for (std::size_t j = 0; j < D; ++j) var += (xd[r * D + j] - mu) * (xd[r * D + j] - mu);
        mean[r] = mu;
        rstd[r] = 1.0 / std::sqrt(var / double(D) + eps);
        for (std::size_t j = 0; j < D; ++j)
          y_ref[r * D + j] = (xd[r * D + j] - mu) * rstd[r] * (affine ? gd[j] : 1.0) + (affine ? bd[j] : 0.0);
      }
      auto dx = to_dev(q, x), dg = to_dev(q, gamma), db = to_dev(q, beta), ddy = to_dev(q, dy);
      const T* gam = affine ? dg.data() : nullptr;
      const T* bet = affine ? db.data() : nullptr;
      auto dyo = poisoned<T>(q, n);
      auto dmean = poisoned<S>(q, R), drstd = poisoned<S>(q, R);
      layernorm_forward(q, R, D, static_cast<const T*>(dx.data()), gam, bet, eps, dyo.data(), dmean.data(),
                        drstd.data());
      check_act(to_host(q, dyo.data(), n), y_ref, 1e-6, "y " + what);
      check_stat<T, S>(to_host(q, dmean.data(), R), mean, 1e-9, "mean " + what);
      check_stat<T, S>(to_host(q, drstd.data(), R), rstd, 0.0, "rstd " + what);
      // No saved statistics, and y over x.
      auto dx2 = to_dev(q, x);
      layernorm_forward(q, R, D, static_cast<const T*>(dx2.data()), gam, bet, eps, dx2.data(), static_cast<S*>(nullptr),
                        static_cast<S*>(nullptr));
      check_act(to_host(q, dx2.data(), n), y_ref, 1e-6, "y in place, no statistics " + what);

      // Backward from given statistics (the reference's, rounded to S).
      const auto mean_s = narrow<S>(mean), rstd_s = narrow<S>(rstd);
      std::vector<double> dx_ref(n), dg_sum(D, 0.0), db_sum(D, 0.0);
      for (std::size_t r = 0; r < R; ++r) {
        const double mu = double(mean_s[r]), rs = double(rstd_s[r]);
        double sg = 0, sgx = 0;
        for (std::size_t j = 0; j < D; ++j) {
          const double xh = (xd[r * D + j] - mu) * rs, gg = dyd[r * D + j] * (affine ? gd[j] : 1.0);
          sg += gg;
          sgx += gg * xh;
          dg_sum[j] += dyd[r * D + j] * xh;
          db_sum[j] += dyd[r * D + j];
        }
        sg /= double(D);
        sgx /= double(D);
        for (std::size_t j = 0; j < D; ++j) {
          const double xh = (xd[r * D + j] - mu) * rs, gg = dyd[r * D + j] * (affine ? gd[j] : 1.0);
          dx_ref[r * D + j] = rs * (gg - sg - xh * sgx);
        }
      }
      auto hmean = to_dev(q, mean_s), hrstd = to_dev(q, rstd_s);
      const S* mu = hmean.data();
      const S* rs = hrstd.data();
      for (int mask = 1; mask < 8; ++mask)
        for (bool accumulate : {false, true}) {
          const bool want_dx = mask & 1, want_dg = mask & 2, want_db = mask & 4;
          const std::string w2 = what + " mask " + std::to_string(mask) + (accumulate ? " accumulate" : "");
          const auto g0 = g.uniform<S>(D), b0 = g.uniform<S>(D);
          std::vector<double> dg_ref = dg_sum, db_ref = db_sum;
          for (std::size_t j = 0; j < D && accumulate; ++j) dg_ref[j] += double(g0[j]), db_ref[j] += double(b0[j]);
          auto ddx = poisoned<T>(q, n);
          auto ddg = accumulate ? to_dev(q, g0) : poisoned<S>(q, D);
          auto ddb = accumulate ? to_dev(q, b0) : poisoned<S>(q, D);
          T* out_dx = want_dx ? ddx.data() : nullptr;
          S* out_dg = want_dg ? ddg.data() : nullptr;
          S* out_db = want_db ? ddb.data() : nullptr;
          layernorm_backward(q, R, D, static_cast<const T*>(dx.data()), gam, mu, rs, static_cast<const T*>(ddy.data()),
                             out_dx, out_dg, out_db, accumulate);
          // dx: terms up to ~5 whose float intermediates (~1e-6) may cancel near 0 for 16 bits;
          // dgamma/dbeta: column sums of |dy xhat| <~ 3 and |dy| <= 1 over R rows.
          if (want_dx) check_act(to_host(q, ddx.data(), n), dx_ref, 1e-5, "dx " + w2);
          if (want_dg) check_stat<T, S>(to_host(q, ddg.data(), D), dg_ref, 3e-7 * double(R) + 1e-6, "dgamma " + w2);
          if (want_db) check_stat<T, S>(to_host(q, ddb.data(), D), db_ref, 1e-7 * double(R) + 1e-6, "dbeta " + w2);
          if (want_dg && !accumulate) {  // deterministic: the same bits again
            const auto first = to_host(q, ddg.data(), D);
            layernorm_backward(q, R, D, static_cast<const T*>(dx.data()), gam, mu, rs,
                               static_cast<const T*>(ddy.data()), static_cast<T*>(nullptr), ddg.data(),
                               static_cast<S*>(nullptr), false);
            check_bits(to_host(q, ddg.data(), D), first, "repeated dgamma " + w2);
          }
        }
    }
}

TEST_CASE("kernels: layernorm backward matches finite differences (double)") {
  queue_t q;
  rng g(31);
  const std::size_t R = 5, D = 8;
  const double eps = 1e-5;
  std::vector<double> x = g.uniform<double>(R * D, -2, 2), gamma = g.uniform<double>(D, 0.5, 1.5),
                      beta = g.uniform<double>(D), G = g.uniform<double>(R * D);
  auto loss = [&] {
    auto dx = to_dev(q, x), dg = to_dev(q, gamma), db = to_dev(q, beta);
    layernorm_forward(q, R, D, static_cast<const double*>(dx.data()), static_cast<const double*>(dg.data()),
                      static_cast<const double*>(db.data()), eps, dx.data(), static_cast<double*>(nullptr),
                      static_cast<double*>(nullptr));
    return dot(G, to_host(q, dx.data(), R * D));
  };
  auto dx = to_dev(q, x), dg = to_dev(q, gamma), db = to_dev(q, beta), dG = to_dev(q, G);
  auto y = poisoned<double>(q, R * D), mean = poisoned<double>(q, R), rstd = poisoned<double>(q, R);
  auto gx = poisoned<double>(q, R * D), gg = poisoned<double>(q, D), gb = poisoned<double>(q, D);
  layernorm_forward(q, R, D, static_cast<const double*>(dx.data()), static_cast<const double*>(dg.data()),
                    static_cast<const double*>(db.data()), eps, y.data(), mean.data(), rstd.data());
  layernorm_backward(q, R, D, static_cast<const double*>(dx.data()), static_cast<const double*>(dg.data()),
                     static_cast<const double*>(mean.data()), static_cast<const double*>(rstd.data()),
                     static_cast<const double*>(dG.data()), gx.data(), gg.data(), gb.data(), false);
  check_close(to_host(q, gx.data(), R * D), fd_grad(x, loss), 1e-6, "dx");
  check_close(to_host(q, gg.data(), D), fd_grad(gamma, loss), 1e-6, "dgamma");
  check_close(to_host(q, gb.data(), D), fd_grad(beta, loss), 1e-6, "dbeta");
}

// ---- embedding ------------------------------------------------------------------------------

// rows x D lookups into a vocabulary cut into slices at `cuts` (first 0, last V).
struct emb_case {
  std::size_t rows, D;
  std::vector<std::size_t> cuts;
};
inline std::vector<emb_case> emb_cases() {
  std::vector<emb_case> cases;
  for (const rc& s : std::vector<rc>{{1, 1}, {7, 3}, {64, 128}, {300, 33}, {1000, 256}, {50, 1030}})
    for (std::size_t parts : {std::size_t(1), std::size_t(4)}) {
      emb_case c{s.rows, s.cols, {}};
      for (std::size_t p = 0; p <= parts; ++p) c.cuts.push_back(37 * p);
      cases.push_back(c);
    }
  cases.push_back({40, 19, {0, 8, 15, 23}});  // uneven slices
  return cases;
}

TEST_CASE_TEMPLATE("kernels: embedding forward and backward (vocabulary slices, repeated ids)", E, f32, f64, mixed,
                   mixed_f16) {
  using T = typename E::T;
  using G = typename E::S;
  queue_t q;
  rng g(402);
  for (const emb_case& c : emb_cases()) {
    const std::size_t R = c.rows, D = c.D, V = c.cuts.back();
    auto ids = g.ints(R, 0, std::int32_t(V));
    if (R > 11) ids[3] = ids[7] = ids[11] = 5;  // repeated ids accumulate
    const auto dout = g.uniform<T>(R * D);
    auto dids = to_dev(q, ids);
    auto ddout = to_dev(q, dout);
    const auto* id = static_cast<const std::int32_t*>(dids.data());
    for (std::size_t k = 0; k + 1 < c.cuts.size(); ++k) {
      const std::size_t off = c.cuts[k], local = c.cuts[k + 1] - off;
      const std::string what =
          shape_name(R, D) + " slice [" + std::to_string(off) + ", " + std::to_string(off + local) + ")";
      const auto table = g.uniform<T>(local * D);
      const auto init = g.uniform<G>(local * D);
      auto in_slice = [&](std::size_t r) { return std::size_t(ids[r]) >= off && std::size_t(ids[r]) - off < local; };
      // The forward is a copy (and +0 outside the slice): the same bits.
      std::vector<T> out_ref(R * D, T(0.0f));
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t j = 0; j < D && in_slice(r); ++j)
          out_ref[r * D + j] = table[(std::size_t(ids[r]) - off) * D + j];
      auto dtab = to_dev(q, table);
      auto dout_fwd = poisoned<T>(q, R * D);
      embedding_forward(q, R, D, id, static_cast<const T*>(dtab.data()), off, local, dout_fwd.data());
      check_bits(to_host(q, dout_fwd.data(), R * D), out_ref, "forward " + what);
      for (bool accumulate : {false, true}) {
        // Rows of one id are added in row order, in G.
        std::vector<G> seq = accumulate ? init : std::vector<G>(local * D, G(0));
        std::vector<double> ref = widen(seq);
        for (std::size_t r = 0; r < R; ++r)
          for (std::size_t j = 0; j < D && in_slice(r); ++j) {
            seq[(std::size_t(ids[r]) - off) * D + j] += G(to_d(dout[r * D + j]));
            ref[(std::size_t(ids[r]) - off) * D + j] += to_d(dout[r * D + j]);
          }
        auto dg = accumulate ? to_dev(q, init) : poisoned<G>(q, local * D);
        embedding_backward(q, R, D, id, static_cast<const T*>(ddout.data()), off, local, dg.data(), accumulate);
        const auto got = to_host(q, dg.data(), local * D);
        const std::string w2 = "backward " + what + (accumulate ? " accumulate" : "");
        if constexpr (std::is_same_v<T, G>)
          check_bits(got, seq, w2);
        else
          check_near(got, ref, tol_mixed, 1e-6, w2);
      }
    }
  }
}

TEST_CASE("kernels: embedding backward matches finite differences (double)") {
  queue_t q;
  rng g(41);
  const std::size_t V = 6, D = 4, R = 9;
  std::vector<double> table = g.uniform<double>(V * D), G = g.uniform<double>(R * D);
  auto dids = to_dev(q, std::vector<std::int32_t>{0, 5, 2, 2, 3, 5, 5, 1, 0});
  const auto* ids = static_cast<const std::int32_t*>(dids.data());
  auto loss = [&] {
    auto dt = to_dev(q, table);
    auto out = poisoned<double>(q, R * D);
    embedding_forward(q, R, D, ids, static_cast<const double*>(dt.data()), 0, V, out.data());
    return dot(G, to_host(q, out.data(), R * D));
  };
  auto dG = to_dev(q, G);
  auto dtab = poisoned<double>(q, V * D);
  embedding_backward(q, R, D, ids, static_cast<const double*>(dG.data()), 0, V, dtab.data(), false);
  check_close(to_host(q, dtab.data(), V * D), fd_grad(table, loss), 1e-6, "dtable");
}

}  // namespace kernel_suite
