#pragma once
// Kernel suite, attention and transformer pieces: the head permutations
// (heads_from_rows / rows_from_heads), the scaled causal softmax of the score matrices
// forward and backward, gemm_strided_batched on bf16 and f16 (the attention products),
// add, scale / axpy on bf16 and f16, and learned positions (position_forward /
// position_backward).
#include "kernel_suite_common.hpp"
#include "kernel_suite_gemm.hpp"

namespace kernel_suite {

// ---- head permutations ------------------------------------------------------------------

// Token rows [seqs, seq, heads, parts, dh] against head-major [parts][seqs, heads, seq, dh].
struct heads_shape {
  std::size_t seqs, seq, heads, parts, dh;
  std::size_t size() const { return seqs * seq * heads * parts * dh; }
  std::string name() const {
    return std::to_string(seqs) + "x" + std::to_string(seq) + "x" + std::to_string(heads) + "x" +
           std::to_string(parts) + "x" + std::to_string(dh);
  }
};
inline const std::vector<heads_shape> kHeadShapes = {{1, 1, 1, 1, 1}, {2, 5, 3, 3, 4},   {3, 7, 2, 1, 8},
                                                     {2, 16, 4, 3, 16}, {1, 33, 5, 2, 7}, {4, 64, 2, 3, 32}};

// The index map written out: out[p][s, h, t, d] = rows[s, t, h, p, d].
template <class T>
std::vector<T> ref_heads_from_rows(const heads_shape& L, const std::vector<T>& rows) {
  std::vector<T> out(L.size());
  const std::size_t part = L.seqs * L.heads * L.seq * L.dh;
  for (std::size_t p = 0; p < L.parts; ++p)
    for (std::size_t s = 0; s < L.seqs; ++s)
      for (std::size_t h = 0; h < L.heads; ++h)
        for (std::size_t t = 0; t < L.seq; ++t)
          for (std::size_t d = 0; d < L.dh; ++d)
            out[p * part + ((s * L.heads + h) * L.seq + t) * L.dh + d] =
                rows[(((s * L.seq + t) * L.heads + h) * L.parts + p) * L.dh + d];
  return out;
}

TEST_CASE("kernels: heads_from_rows on a small explicit example") {
  queue_t q;
  // One sequence of 2 tokens, 2 heads, 3 parts (q, k, v), dh = 1: rows[t, h, p] = 6t + 3h + p.
  std::vector<float> rows(12);
  for (std::size_t i = 0; i < 12; ++i) rows[i] = float(i);
  const std::vector<float> want = {0, 6, 3, 9, 1, 7, 4, 10, 2, 8, 5, 11};  // [p][h][t]
  auto dr = to_dev(q, rows);
  auto dh = poisoned<float>(q, 12);
  heads_from_rows(q, 1, 2, 2, 3, 1, static_cast<const float*>(dr.data()), dh.data());
  check_bits(to_host(q, dh.data(), 12), want, "heads_from_rows");
  auto back = poisoned<float>(q, 12);
  rows_from_heads(q, 1, 2, 2, 3, 1, static_cast<const float*>(dh.data()), back.data());
  check_bits(to_host(q, back.data(), 12), rows, "rows_from_heads");
}

TEST_CASE_TEMPLATE("kernels: heads_from_rows and rows_from_heads (index map, round trip)", T, float, double, bf16,
                   f16) {
  queue_t q;
  rng g(700);
  for (const heads_shape& L : kHeadShapes) {
    const std::string what = L.name();
    const std::size_t n = L.size();
    const auto rows = g.uniform<T>(n);
    const auto want = ref_heads_from_rows(L, rows);
    auto dr = to_dev(q, rows);
    auto dh = poisoned<T>(q, n);
    heads_from_rows(q, L.seqs, L.seq, L.heads, L.parts, L.dh, static_cast<const T*>(dr.data()), dh.data());
    check_bits(to_host(q, dh.data(), n), want, "heads_from_rows " + what);
    // The inverse, from independent head-major data, against the same index map.
    const auto heads = g.uniform<T>(n);
    auto dh2 = to_dev(q, heads);
    auto dr2 = poisoned<T>(q, n);
    rows_from_heads(q, L.seqs, L.seq, L.heads, L.parts, L.dh, static_cast<const T*>(dh2.data()), dr2.data());
    const auto got_rows = to_host(q, dr2.data(), n);
    check_bits(ref_heads_from_rows(L, got_rows), heads, "rows_from_heads " + what);
    // Round trip: rows -> heads -> rows.
    auto back = poisoned<T>(q, n);
    rows_from_heads(q, L.seqs, L.seq, L.heads, L.parts, L.dh, static_cast<const T*>(dh.data()), back.data());
    check_bits(to_host(q, back.data(), n), rows, "round trip " + what);
  }
  // seqs == 0 touches nothing.
  auto d0 = poisoned<T>(q, 1);
  heads_from_rows(q, 0, 4, 2, 3, 8, static_cast<const T*>(d0.data()), d0.data());
  CHECK(std::isnan(to_d(to_host(q, d0.data(), 1)[0])));
}

// ---- attention softmax ------------------------------------------------------------------

// p[i, j] = exp(scale s[i, j] - m_i) / sum_k exp(scale s[i, k] - m_i) over j <= i (causal)
// or all j, 0 above the diagonal when causal; `batch` seq x seq matrices.
inline std::vector<double> ref_attention_softmax(std::size_t batch, std::size_t seq, double scale, bool causal,
                                                 const std::vector<double>& s) {
  std::vector<double> p(batch * seq * seq, 0.0);
  for (std::size_t r = 0; r < batch * seq; ++r) {
    const std::size_t i = r % seq, n = causal ? i + 1 : seq;
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::size_t j = 0; j < n; ++j) m = std::max(m, scale * s[r * seq + j]);
    for (std::size_t j = 0; j < n; ++j) sum += std::exp(scale * s[r * seq + j] - m);
    for (std::size_t j = 0; j < n; ++j) p[r * seq + j] = std::exp(scale * s[r * seq + j] - m) / sum;
  }
  return p;
}
// ds[i, j] = scale p[i, j] (dp[i, j] - sum_k p[i, k] dp[i, k]).
inline std::vector<double> ref_attention_softmax_grad(std::size_t batch, std::size_t seq, double scale,
                                                      const std::vector<double>& p, const std::vector<double>& dp) {
  std::vector<double> ds(p.size());
  for (std::size_t r = 0; r < batch * seq; ++r) {
    double dot = 0;
    for (std::size_t j = 0; j < seq; ++j) dot += p[r * seq + j] * dp[r * seq + j];
    for (std::size_t j = 0; j < seq; ++j) ds[r * seq + j] = scale * p[r * seq + j] * (dp[r * seq + j] - dot);
  }
  return ds;
}

struct bs {
  std::size_t batch, seq;
};
// One-warp rows (seq <= 256), 128-thread rows (<= 2048) and 512-thread rows.
inline const std::vector<bs> kScoreShapes = {{1, 1}, {3, 7}, {2, 33}, {4, 64}, {1, 257}, {1, 2049}};

// Every element above the diagonal of every causal matrix is exactly zero.
template <class T>
void check_masked_zero(const std::vector<T>& got, std::size_t batch, std::size_t seq, const std::string& what) {
  INFO(what);
  std::size_t bad = 0;
  for (std::size_t r = 0; r < batch * seq; ++r)
    for (std::size_t j = r % seq + 1; j < seq; ++j) bad += !(to_d(got[r * seq + j]) == 0.0);
  CHECK(bad == 0);
}

TEST_CASE_TEMPLATE("kernels: attention_softmax_forward (causal or not, scaled)", T, float, double, bf16, f16) {
  queue_t q;
  rng g(710);
  for (const bs& sh : kScoreShapes)
    for (bool causal : {false, true})
      for (double scale : {1.0, 0.125, 0.37}) {
        const std::size_t B = sh.batch, S = sh.seq, n = B * S * S;
        const std::string what = std::to_string(B) + "x" + std::to_string(S) + (causal ? " causal" : "") +
                                 " scale " + std::to_string(scale);
        const auto s = g.uniform<T>(n, -8, 8);
        const auto ref = ref_attention_softmax(B, S, scale, causal, widen(s));
        auto ds = to_dev(q, s);
        auto dp = poisoned<T>(q, n);
        attention_softmax_forward(q, B, S, scale, causal, static_cast<const T*>(ds.data()), dp.data());
        const auto got = to_host(q, dp.data(), n);
        check_act(got, ref, 0.0, "p " + what);
        if (causal) check_masked_zero(got, B, S, "masked p " + what);
        // p may overwrite s.
        attention_softmax_forward(q, B, S, scale, causal, static_cast<const T*>(ds.data()), ds.data());
        check_bits(to_host(q, ds.data(), n), got, "p in place " + what);
      }
}

TEST_CASE("kernels: attention_softmax_forward is stable for huge scores") {
  queue_t q;
  // Two 2 x 2 matrices; the first causal row of each has one entry, so p = 1 there.
  const std::vector<float> s = {1000.f, -1000.f, 3000.f, 2999.f, -500.f, 7.f, 88.f, 90.f};
  auto ds = to_dev(q, s);
  auto dp = poisoned<float>(q, 8);
  attention_softmax_forward(q, 2, 2, 0.5, true, static_cast<const float*>(ds.data()), dp.data());
  const auto p = to_host(q, dp.data(), 8);
  const double e = 1.0 / (1.0 + std::exp(-0.5));
  const std::vector<double> want = {1, 0, e, 1 - e, 1, 0, 1 - 1 / (1 + std::exp(-1.0)), 1 / (1 + std::exp(-1.0))};
  check_close(p, want, 1e-6, "huge scores");
}

TEST_CASE_TEMPLATE("kernels: attention_softmax_backward", T, float, double, bf16, f16) {
  queue_t q;
  rng g(720);
  for (const bs& sh : kScoreShapes)
    for (bool causal : {false, true})
      for (double scale : {1.0, 0.37}) {
        const std::size_t B = sh.batch, S = sh.seq, n = B * S * S;
        const std::string what = std::to_string(B) + "x" + std::to_string(S) + (causal ? " causal" : "") +
                                 " scale " + std::to_string(scale);
        // Probabilities as the forward leaves them (rounded to T, zero above a causal diagonal).
        const auto p = narrow<T>(ref_attention_softmax(B, S, 1.0, causal, widen(g.uniform<T>(n, -4, 4))));
        const auto dpv = g.uniform<T>(n);
        const auto ref = ref_attention_softmax_grad(B, S, scale, widen(p), widen(dpv));
        auto dp = to_dev(q, p), dg = to_dev(q, dpv);
        auto dds = poisoned<T>(q, n);
        attention_softmax_backward(q, B, S, scale, static_cast<const T*>(dp.data()), static_cast<const T*>(dg.data()),
                                   dds.data());
        const auto got = to_host(q, dds.data(), n);
        // bf16, f16: dp - sum(p dp) cancels in float; the floor covers its rounding.
        check_act(got, ref, 1e-6 * scale, "ds " + what);
        if (causal) check_masked_zero(got, B, S, "masked ds " + what);
        // ds may overwrite dp.
        attention_softmax_backward(q, B, S, scale, static_cast<const T*>(dp.data()), static_cast<const T*>(dg.data()),
                                   dg.data());
        check_bits(to_host(q, dg.data(), n), got, "ds in place " + what);
      }
}

TEST_CASE("kernels: attention softmax backward matches finite differences (double)") {
  queue_t q;
  rng g(730);
  const std::size_t B = 2, S = 5, n = B * S * S;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const double scale = 0.37;
    std::vector<double> s = g.uniform<double>(n, -3, 3);
    const std::vector<double> G = g.uniform<double>(n);
    auto loss = [&] {
      auto d = to_dev(q, s);
      attention_softmax_forward(q, B, S, scale, causal, static_cast<const double*>(d.data()), d.data());
      return dot(G, to_host(q, d.data(), n));
    };
    auto ds = to_dev(q, s), dG = to_dev(q, G);
    auto p = poisoned<double>(q, n), grad = poisoned<double>(q, n);
    attention_softmax_forward(q, B, S, scale, causal, static_cast<const double*>(ds.data()), p.data());
    attention_softmax_backward(q, B, S, scale, static_cast<const double*>(p.data()),
                               static_cast<const double*>(dG.data()), grad.data());
    check_close(to_host(q, grad.data(), n), fd_grad(s, loss), 1e-6, "dscores");
  }
}

// ---- 16-bit gemm_strided_batched (the attention products) ----------------------------------

TEST_CASE_TEMPLATE("kernels: 16-bit gemm_strided_batched equals a loop of float64 products", H, bf16, f16) {
  queue_t q;
  rng g(std::is_same_v<H, bf16> ? 740 : 741);
  const std::size_t batch = 6;
  for (const mnk& s : {mnk{13, 24, 31}, mnk{9, 11, 13}, mnk{64, 64, 32}})
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T})
        for (float beta : {0.0f, 0.5f}) {
          const std::string what = std::string(std::is_same_v<H, bf16> ? "bf16" : "f16") + " batched " +
                                   gemm_name(ta, tb, s) + " beta " + std::to_string(beta);
          const operands o = layout(ta, tb, s, 0, 0);
          const std::size_t ldc = s.N, sa = o.a_size + 8, sb = o.b_size + 8, sc = s.M * ldc + 8;
          const auto A = g.uniform<H>(sa * batch), Bm = g.uniform<H>(sb * batch);
          auto C0 = g.uniform<H>(sc * batch);
          if (beta == 0) C0.assign(C0.size(), nan_of<H>());
          const auto Ad = widen(A), Bd = widen(Bm);
          auto ref = widen(C0);
          std::vector<double> mag(sc * batch, 0.0);
          for (std::size_t b = 0; b < batch; ++b) {
            ref_gemm(ta, tb, s.M, s.N, s.K, 0.75, Ad.data() + b * sa, o.lda, Bd.data() + b * sb, o.ldb, beta,
                     ref.data() + b * sc, ldc);
            for (std::size_t i = 0; i < s.M; ++i)
              for (std::size_t j = 0; j < s.N; ++j)
                mag[b * sc + i * ldc + j] =
                    0.75 * ref_gemm_mag(ta, tb, i, j, s.K, Ad.data() + b * sa, o.lda, Bd.data() + b * sb, o.ldb) + 1;
          }
          auto dA = to_dev(q, A), dB = to_dev(q, Bm), dC = to_dev(q, C0);
          gemm_strided_batched(q, ta, tb, s.M, s.N, s.K, 0.75f, static_cast<const H*>(dA.data()), o.lda, sa,
                               static_cast<const H*>(dB.data()), o.ldb, sb, beta, dC.data(), ldc, sc, batch);
          const auto got = to_host(q, dC.data(), sc * batch);
          std::size_t bad = 0, bad_gap = 0;
          std::vector<double> w, rw;
          for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t k = 0; k < sc; ++k) {
              const std::size_t i = b * sc + k;
              if (k >= s.M * ldc) {  // the gaps between the matrices are never written
                bad_gap += got[i].bits != C0[i].bits;
                continue;
              }
              bad += !(std::abs(to_d(got[i]) - ref[i]) <= kHalfOut<H> * mag[i]);
              w.push_back(to_d(got[i]));
              rw.push_back(ref[i]);
            }
          INFO(what);
          CHECK(bad == 0);
          CHECK(bad_gap == 0);
          check_close(w, rw, tol_half<H>, what);
        }
}

// ---- add, and scale / axpy on bf16 and f16 ---------------------------------------------

TEST_CASE_TEMPLATE("kernels: add (separate output, in place, unaligned)", T, float, double, bf16, f16) {
  queue_t q;
  rng g(750);
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(7), std::size_t(1000),
                        std::size_t(65537), std::size_t(100003)}) {
    const std::string what = "n=" + std::to_string(n);
    const auto a = g.uniform<T>(n), b = g.uniform<T>(n, -4, 4);
    const auto ad = widen(a), bd = widen(b);
    std::vector<double> ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = ad[i] + bd[i];
    auto da = to_dev(q, a), db = to_dev(q, b);
    auto dy = poisoned<T>(q, n);
    add(q, n, static_cast<const T*>(da.data()), static_cast<const T*>(db.data()), dy.data());
    if (n == 0) {
      CHECK(std::isnan(to_d(to_host(q, dy.data(), 1)[0])));  // n == 0 touches nothing
      continue;
    }
    const auto got = to_host(q, dy.data(), n);
    check_act(got, ref, 0.0, "add " + what);
    // y may alias a or b.
    add(q, n, static_cast<const T*>(da.data()), static_cast<const T*>(db.data()), da.data());
    check_bits(to_host(q, da.data(), n), got, "add into a " + what);
    auto da2 = to_dev(q, a);
    add(q, n, static_cast<const T*>(da2.data()), static_cast<const T*>(db.data()), db.data());
    check_bits(to_host(q, db.data(), n), got, "add into b " + what);
    // One element past the allocation's alignment (scalar paths).
    if (n > 2) {
      auto a3 = to_dev(q, a), b3 = to_dev(q, b);
      auto y3 = poisoned<T>(q, n);
      add(q, n - 1, static_cast<const T*>(a3.data()) + 1, static_cast<const T*>(b3.data()) + 1, y3.data() + 1);
      const auto got3 = to_host(q, y3.data(), n);
      CHECK(std::isnan(to_d(got3[0])));
      check_act(std::vector<T>(got3.begin() + 1, got3.end()), std::vector<double>(ref.begin() + 1, ref.end()), 0.0,
                "add offset " + what);
    }
  }
}

TEST_CASE_TEMPLATE("kernels: scale and axpy on 16-bit types (alpha rounded to the type, computed in float)", H,
                   bf16, f16) {
  queue_t q;
  rng g(760);
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(65537)})
    for (double alpha : {-0.3, 1.7}) {
      const std::string what = "n=" + std::to_string(n) + " alpha " + std::to_string(alpha);
      const double ab = to_d(H(float(alpha)));
      const auto x = g.uniform<H>(n), y = g.uniform<H>(n);
      const auto xd = widen(x), yd = widen(y);
      std::vector<double> rs(n), ra(n);
      for (std::size_t i = 0; i < n; ++i) rs[i] = ab * xd[i], ra[i] = yd[i] + ab * xd[i];
      auto ds = to_dev(q, x);
      scale(q, n, alpha, ds.data());
      check_half(to_host(q, ds.data(), n), rs, 0.0, "scale " + what);
      auto dx = to_dev(q, x), dy = to_dev(q, y);
      axpy(q, n, alpha, static_cast<const H*>(dx.data()), dy.data());
      check_half(to_host(q, dy.data(), n), ra, 1e-6, "axpy " + what);
    }
}

// ---- learned positions ----------------------------------------------------------------------

// rows x D activations of seq-token sequences, this device's rows starting at row0.
struct pos_case {
  std::size_t rows, D, seq, row0;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(D) + " seq " + std::to_string(seq) + " row0 " +
           std::to_string(row0);
  }
};
inline const std::vector<pos_case> kPosCases = {{1, 1, 1, 0},     {7, 3, 4, 0},      {12, 8, 4, 2},
                                                {3, 5, 10, 4},    {37, 33, 5, 13},   {64, 128, 16, 24},
                                                {300, 256, 64, 1000}, {50, 1030, 7, 3}, {0, 8, 4, 2}};

TEST_CASE_TEMPLATE("kernels: position_forward and position_backward (row0, accumulate)", E, f32, f64, mixed,
                   mixed_f16) {
  using T = typename E::T;
  using G = typename E::S;
  queue_t q;
  rng g(770);
  for (const pos_case& c : kPosCases) {
    const std::size_t R = c.rows, D = c.D, S = c.seq, n = R * D;
    const std::string what = c.name();
    const auto x = g.uniform<T>(n), pos = g.uniform<T>(S * D), dy = g.uniform<T>(n);
    const auto xd = widen(x), pd = widen(pos), dyd = widen(dy);
    auto dpos = to_dev(q, pos);
    const T* pp = dpos.data();

    // Forward: y[r] = x[r] + pos[(row0 + r) mod seq].
    std::vector<double> ref(n);
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t j = 0; j < D; ++j) ref[r * D + j] = xd[r * D + j] + pd[((c.row0 + r) % S) * D + j];
    auto dx = to_dev(q, x);
    auto dyo = poisoned<T>(q, n);
    position_forward(q, R, D, S, c.row0, static_cast<const T*>(dx.data()), pp, dyo.data());
    if (n > 0) {
      const auto got = to_host(q, dyo.data(), n);
      check_act(got, ref, 0.0, "forward " + what);
      position_forward(q, R, D, S, c.row0, static_cast<const T*>(dx.data()), pp, dx.data());  // y may alias x
      check_bits(to_host(q, dx.data(), n), got, "forward in place " + what);
    }

    // Backward: each position's rows summed in row order in double, rounded once to G.
    auto ddy = to_dev(q, dy);
    const auto init = g.uniform<G>(S * D);
    for (bool accumulate : {false, true}) {
      std::vector<double> acc = accumulate ? widen(init) : std::vector<double>(S * D, 0.0);
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t j = 0; j < D; ++j) acc[((c.row0 + r) % S) * D + j] += dyd[r * D + j];
      std::vector<G> want(S * D);
      for (std::size_t i = 0; i < S * D; ++i) want[i] = G(acc[i]);
      auto dg = accumulate ? to_dev(q, init) : poisoned<G>(q, S * D);
      position_backward(q, R, D, S, c.row0, static_cast<const T*>(ddy.data()), dg.data(), accumulate);
      check_bits(to_host(q, dg.data(), S * D), want, "backward " + what + (accumulate ? " accumulate" : ""));
    }
  }
}

TEST_CASE("kernels: position backward matches finite differences (double)") {
  queue_t q;
  rng g(780);
  const std::size_t R = 11, D = 3, S = 4, row0 = 6;
  std::vector<double> pos = g.uniform<double>(S * D);
  const std::vector<double> x = g.uniform<double>(R * D), G = g.uniform<double>(R * D);
  auto dx = to_dev(q, x);
  auto loss = [&] {
    auto dp = to_dev(q, pos);
    auto y = poisoned<double>(q, R * D);
    position_forward(q, R, D, S, row0, static_cast<const double*>(dx.data()), static_cast<const double*>(dp.data()),
                     y.data());
    return dot(G, to_host(q, y.data(), R * D));
  };
  auto dG = to_dev(q, G);
  auto dpos = poisoned<double>(q, S * D);
  position_backward(q, R, D, S, row0, static_cast<const double*>(dG.data()), dpos.data(), false);
  check_close(to_host(q, dpos.data(), S * D), fd_grad(pos, loss), 1e-6, "dpos");
}

}  // namespace kernel_suite
