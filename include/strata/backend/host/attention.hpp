#pragma once
// strata host backend, attention: the host implementation of backend/attention.hpp (the
// head permutations, one pool task per (sequence, head) or (sequence, position); the
// score softmaxes, rows batched per pool task; flash attention, one pool task per
// (item, query tile) forward and per kv item backward, on tiles in compute_t<T> whose inner
// loops run over contiguous columns, so the compiler vectorises them). Attention dropout
// hashes each element's coordinates in a loop of its own, run only when the call drops.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "strata/backend/attention.hpp"
#include "strata/backend/host/gemm.hpp"
#include "strata/backend/host/launch.hpp"
#include "strata/core/math.hpp"

namespace strata::backend::host {

namespace detail {
// Flash attention's float loops, compiled per CPU level (launch.hpp): the exponentials of
// non-positive arguments through math::expm1_nonpositive, so that the loops vectorise.
// A row's sum and maximum run in flash_lanes partial results, one per vector lane: the
// compiler may not reorder a float reduction itself, and in order each element would wait
// on the previous one's addition (4 cycles) while its exponential takes under one.
inline constexpr std::size_t flash_lanes = 16;
STRATA_HOST_CLONES inline float flash_exp_shifted_f32(std::size_t n, float mx, float* s) {
  float part[flash_lanes] = {};
  std::size_t j = 0;
  for (; j + flash_lanes <= n; j += flash_lanes)
    for (std::size_t l = 0; l < flash_lanes; ++l) {
      s[j + l] = math::expm1_nonpositive(s[j + l] - mx) + 1.0f;
      part[l] += s[j + l];
    }
  float sum = 0;
  for (; j < n; ++j) {
    s[j] = math::expm1_nonpositive(s[j] - mx) + 1.0f;
    sum += s[j];
  }
  for (std::size_t l = 0; l < flash_lanes; ++l) sum += part[l];
  return sum;
}
// max(mx, s[0..n)), NaN scores passed over as std::max passes them (order does not matter)
STRATA_HOST_CLONES inline float flash_row_max_f32(std::size_t n, float mx, const float* s) {
  float part[flash_lanes];
  for (std::size_t l = 0; l < flash_lanes; ++l) part[l] = mx;
  std::size_t j = 0;
  for (; j + flash_lanes <= n; j += flash_lanes)
    for (std::size_t l = 0; l < flash_lanes; ++l) part[l] = std::max(part[l], s[j + l]);
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  for (std::size_t l = 0; l < flash_lanes; ++l) mx = std::max(mx, part[l]);
  return mx;
}
STRATA_HOST_CLONES inline void flash_probabilities_f32(std::size_t n, std::size_t nk, float lse, float delta,
                                                       float* p, float* ds) {
  for (std::size_t j = 0; j < n; ++j) {
    p[j] = math::expm1_nonpositive(p[j] - lse) + 1.0f;
    ds[j] = p[j] * (ds[j] - delta);
  }
  for (std::size_t j = n; j < nk; ++j) p[j] = ds[j] = 0.0f;
}
// Attention dropout: the factors m_j of a row's keys [feature, feature + n) — 1/(1 − rate)
// kept, 0 dropped — then the forward's s ← m s, the backward's p = exp(s − lse), ds = p (m dp
// − δ), p ← m p (math::dropout_value). The hashes' 64-bit products vectorise on AVX-512.
template <class C>
STRATA_HOST_CLONES inline void flash_drop_factors(std::size_t n, std::uint64_t row_key, std::uint64_t feature,
                                                  std::uint64_t threshold, C rs, C* mk) {
  for (std::size_t j = 0; j < n; ++j) mk[j] = dropout_keep_in_row(row_key, feature + j, threshold) ? rs : C(0);
}
template <class C>
STRATA_HOST_CLONES inline void flash_drop_row(std::size_t n, const C* mk, C* s) {
  for (std::size_t j = 0; j < n; ++j) s[j] = math::dropout_value(s[j], mk[j] != C(0), mk[j]);
}
STRATA_HOST_CLONES inline void flash_dropped_probabilities_f32(std::size_t n, std::size_t nk, float lse, float delta,
                                                               const float* mk, float* p, float* ds) {
  for (std::size_t j = 0; j < n; ++j) {
    const float pj = math::expm1_nonpositive(p[j] - lse) + 1.0f;
    ds[j] = pj * (math::dropout_value(ds[j], mk[j] != 0.0f, mk[j]) - delta);
    p[j] = math::dropout_value(pj, mk[j] != 0.0f, mk[j]);
  }
  for (std::size_t j = n; j < nk; ++j) p[j] = ds[j] = 0.0f;
}
}  // namespace detail

// Static members on arguments the front has checked (impl::attention_kernels<queue>).
struct attention_kernels {
  template <class T>
  static void heads_from_rows(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* rows, T* out) {
    const std::size_t part = seqs * heads * seq * dh, row = heads * parts * dh;
    q.parallel_for(seqs * heads, [&](std::size_t sh) {
      const std::size_t s = sh / heads, h = sh % heads;
      for (std::size_t p = 0; p < parts; ++p)
        for (std::size_t t = 0; t < seq; ++t) {
          const T* src = rows + (s * seq + t) * row + (h * parts + p) * dh;
          std::copy(src, src + dh, out + p * part + (sh * seq + t) * dh);
        }
    });
  }

  template <class T>
  static void rows_from_heads(queue& q, std::size_t seqs, std::size_t seq, std::size_t heads, std::size_t parts,
                              std::size_t dh, const T* in, T* rows) {
    const std::size_t part = seqs * heads * seq * dh, row = heads * parts * dh;
    q.parallel_for(seqs * seq, [&](std::size_t st) {
      const std::size_t s = st / seq, t = st % seq;
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t p = 0; p < parts; ++p) {
          const T* src = in + p * part + ((s * heads + h) * seq + t) * dh;
          std::copy(src, src + dh, rows + st * row + (h * parts + p) * dh);
        }
    });
  }

  template <class T>
  static void attention_softmax_forward(queue& q, std::size_t batch, std::size_t seq, double scale, bool causal,
                                        const T* s, T* p) {
    using C = detail::compute_t<T>;
    const C a = C(scale);
    detail::for_rows(q, batch * seq, seq, [&](std::size_t r) {
      const std::size_t i = r % seq, n = causal ? i + 1 : seq;
      const T* x = s + r * seq;
      T* y = p + r * seq;
      C m = -std::numeric_limits<C>::infinity();
      for (std::size_t j = 0; j < n; ++j) m = std::max(m, a * C(x[j]));
      double sum = 0;
      for (std::size_t j = 0; j < n; ++j) sum += double(std::exp(a * C(x[j]) - m));
      const C inv = C(1.0 / sum);
      for (std::size_t j = 0; j < n; ++j) y[j] = T(std::exp(a * C(x[j]) - m) * inv);
      for (std::size_t j = n; j < seq; ++j) y[j] = T(C(0));
    });
  }

  template <class T>
  static void attention_softmax_backward(queue& q, std::size_t batch, std::size_t seq, double scale, const T* p,
                                         const T* dp, T* ds) {
    using C = detail::compute_t<T>;
    detail::for_rows(q, batch * seq, seq, [&](std::size_t r) {
      const T* pr = p + r * seq;
      const T* g = dp + r * seq;
      T* o = ds + r * seq;
      double dot = 0;
      for (std::size_t j = 0; j < seq; ++j) dot += double(C(pr[j])) * double(C(g[j]));
      const C d = C(dot), a = C(scale);
      for (std::size_t j = 0; j < seq; ++j) o[j] = T(a * C(pr[j]) * (C(g[j]) - d));
    });
  }

  template <class T>
  static void rotary_embedding(queue& q, std::size_t items, std::size_t seq, std::size_t dh, long long pos0,
                               double base, bool inverse, T* x) {
    const std::size_t h = dh / 2;
    // cos θ and sin θ per (position, pair), once: every item (sequence, head) reuses them
    std::vector<double> cs(2 * seq * h);
    for (std::size_t p = 0; p < seq; ++p)
      for (std::size_t i = 0; i < h; ++i) {
        const double theta = math::rope_angle(pos0 + static_cast<long long>(p), i, dh, base);
        cs[2 * (p * h + i)] = std::cos(theta);
        cs[2 * (p * h + i) + 1] = std::sin(theta);
      }
    detail::for_rows(q, items * seq, dh, [&](std::size_t r) {
      T* row = x + r * dh;
      const double* t = cs.data() + 2 * (r % seq) * h;
      for (std::size_t i = 0; i < h; ++i) {
        double a = double(row[i]), b = double(row[i + h]);
        math::rope_apply(a, b, t[2 * i], t[2 * i + 1], inverse);
        row[i] = T(detail::compute_t<T>(a));
        row[i + h] = T(detail::compute_t<T>(b));
      }
    });
  }

  template <class T, class L>
  static void attention_merge(queue& q, std::size_t rows, std::size_t dh, T* o, L* lse, const T* o_b,
                              const L* lse_b) {
    using W = std::common_type_t<detail::compute_t<T>, L>;
    detail::for_rows(q, rows, dh, [&](std::size_t r) {
      W wa, wb;
      lse[r] = L(math::lse_merge(W(lse[r]), W(lse_b[r]), wa, wb));
      T* x = o + r * dh;
      const T* y = o_b + r * dh;
      for (std::size_t d = 0; d < dh; ++d) x[d] = T(detail::compute_t<T>(wa * W(x[d]) + wb * W(y[d])));
    });
  }

  // ---- flash attention ------------------------------------------------------------------
  // Tiles of queries x keys; their products are single-threaded BLAS calls inside the pool's
  // tasks (gemm.hpp's convention), the softmax between them loops over contiguous columns.
  static constexpr std::size_t flash_q_tile = 64, flash_k_tile = 64;

  // How many keys of a tile starting at key kb (nk of them) query i sees.
  static std::size_t keys_seen(const flash_shape& f, std::size_t i, std::size_t kb, std::size_t nk) {
    const std::size_t n = f.keys_seen_by(i);
    return n <= kb ? 0 : std::min(nk, n - kb);
  }

  // Instantiated with and without attention dropout: a call that does not drop runs loops
  // with none of it.
  template <class T, class L>
  static void flash_attention_forward(queue& q, const flash_shape& f, const T* qh, const T* kh, const T* vh, T* o,
                                      L* lse) {
    if (f.dropping()) flash_forward<true>(q, f, qh, kh, vh, o, lse);
    else flash_forward<false>(q, f, qh, kh, vh, o, lse);
  }
  template <class T, class L>
  static void flash_attention_backward(queue& q, const flash_shape& f, const T* qh, const T* kh, const T* vh,
                                       const T* o, const T* dout, const L* lse, T* dq, T* dk, T* dv) {
    if (f.dropping()) flash_backward<true>(q, f, qh, kh, vh, o, dout, lse, dq, dk, dv);
    else flash_backward<false>(q, f, qh, kh, vh, o, dout, lse, dq, dk, dv);
  }

 private:
  template <bool Drop, class T, class L>
  static void flash_forward(queue& q, const flash_shape& f, const T* qh, const T* kh, const T* vh, T* o, L* lse) {
    using C = detail::compute_t<T>;
    constexpr std::size_t BQ = flash_q_tile, BK = flash_k_tile;
    const std::size_t dh = f.dh, tiles = (f.q_len + BQ - 1) / BQ;
    const C scale = C(f.scale);
    [[maybe_unused]] const std::uint64_t key = Drop ? *f.drop.key : 0;
    [[maybe_unused]] const C rs = C(f.drop.scale);
    detail::blas_single_threaded();
    q.parallel_for(f.items * tiles, [&](std::size_t task) {
      const std::size_t item = task / tiles, i0 = (task % tiles) * BQ, ni = std::min(BQ, f.q_len - i0);
      thread_local std::vector<C> buf;
      buf.resize(2 * BQ * dh + 2 * BK * dh + BQ * BK + 3 * BQ + (Drop ? BK : 0));
      C* qs = buf.data();    // [ni, dh]: scale · q
      C* acc = qs + BQ * dh;  // [ni, dh]: Σ exp(s − m) v
      C* kc = acc + BQ * dh;  // [nk, dh]: the key tile (16-bit T: widened)
      C* vc = kc + BK * dh;   // [nk, dh]: the value tile
      C* sc = vc + BK * dh;   // [ni, BK]: scores, then exp(s − m)
      C* m = sc + BQ * BK;    // running maxima
      C* l = m + BQ;          // running sums
      C* corr = l + BQ;       // this tile's rescaling of each row
      [[maybe_unused]] C* mk = corr + BQ;  // dropout: a row's factors
      const T* qi = qh + (item * f.q_len + i0) * dh;
      for (std::size_t x = 0; x < ni * dh; ++x) qs[x] = scale * C(qi[x]);
      std::fill(acc, acc + ni * dh, C(0));
      std::fill(m, m + ni, -std::numeric_limits<C>::infinity());
      std::fill(l, l + ni, C(0));
      const std::size_t kend = f.keys_seen_by(i0 + ni - 1);  // what the tile's last query sees
      const std::size_t kv = f.kv_item_of(item);
      for (std::size_t kb = 0; kb < kend; kb += BK) {
        const std::size_t nk = std::min(BK, kend - kb);
        const C* kt = tile_of(kh + (kv * f.k_len + kb) * dh, nk * dh, kc);
        const C* vt = tile_of(vh + (kv * f.k_len + kb) * dh, nk * dh, vc);
        tile_gemm(false, true, ni, nk, dh, C(1), qs, dh, kt, dh, C(0), sc, BK);
        for (std::size_t i = 0; i < ni; ++i) {
          const std::size_t n = keys_seen(f, i0 + i, kb, nk);
          C* s = sc + i * BK;
          if (n == 0) {  // nothing of this tile: the row is unchanged
            std::fill(s, s + nk, C(0));
            corr[i] = C(1);
            continue;
          }
          const C mx = row_max(n, m[i], s);
          corr[i] = std::exp(m[i] - mx);  // 0 on the first tile (m = −∞)
          l[i] = l[i] * corr[i] + exp_shifted(n, mx, s);  // the undropped sum: lse is the softmax's
          std::fill(s + n, s + nk, C(0));
          m[i] = mx;
          if constexpr (Drop) {
            detail::flash_drop_factors(n, f.drop_row_key(key, item, i0 + i), f.drop_feature0(item) + kb,
                                       f.drop.threshold, rs, mk);
            detail::flash_drop_row(n, static_cast<const C*>(mk), s);
          }
        }
        for (std::size_t i = 0; i < ni; ++i)
          if (corr[i] != C(1))
            for (std::size_t d = 0; d < dh; ++d) acc[i * dh + d] *= corr[i];
        tile_gemm(false, false, ni, dh, nk, C(1), sc, BK, vt, dh, C(1), acc, dh);
      }
      T* oi = o + (item * f.q_len + i0) * dh;
      L* li = lse + item * f.q_len + i0;
      for (std::size_t i = 0; i < ni; ++i) {
        const C inv = C(1) / l[i];
        for (std::size_t d = 0; d < dh; ++d) oi[i * dh + d] = T(acc[i * dh + d] * inv);
        li[i] = L(m[i]) + L(std::log(l[i]));
      }
    });
  }

  // One pool task per kv item: its key tiles in turn, each against the query tiles of every
  // item of its group (so a kv head's dk and dv sum over its query heads in a fixed order).
  template <bool Drop, class T, class L>
  static void flash_backward(queue& q, const flash_shape& f, const T* qh, const T* kh, const T* vh, const T* o,
                             const T* dout, const L* lse, T* dq, T* dk, T* dv) {
    using C = detail::compute_t<T>;
    constexpr std::size_t BQ = flash_q_tile, BK = flash_k_tile;
    const std::size_t dh = f.dh, nq = f.q_len, G = f.group;
    const C scale = C(f.scale);
    [[maybe_unused]] const std::uint64_t key = Drop ? *f.drop.key : 0;
    [[maybe_unused]] const C rs = C(f.drop.scale);
    detail::blas_single_threaded();
    q.parallel_for(f.kv_items(), [&](std::size_t kv) {
      thread_local std::vector<C> buf;
      buf.resize(G * (nq * dh + 2 * nq) + 4 * BK * dh + 2 * BQ * dh + 2 * BQ * BK + (Drop ? BK : 0));
      C* dqa = buf.data();           // [G, nq, dh]: Σ_j ds k_j over the key tiles
      C* delta = dqa + G * nq * dh;  // [G, nq]: do_i · o_i
      C* lq = delta + G * nq;        // [G, nq]: the log-sum-exps in C
      C* kc = lq + G * nq;           // [nk, dh] key tile (16-bit T: widened)
      C* vc = kc + BK * dh;          // [nk, dh] value tile
      C* dka = vc + BK * dh;         // [nk, dh]
      C* dva = dka + BK * dh;        // [nk, dh]
      C* qs = dva + BK * dh;         // [ni, dh]: scale · q
      C* go = qs + BQ * dh;          // [ni, dh]: do (16-bit T: widened)
      C* p = go + BQ * dh;           // [ni, BK]: scores, then probabilities
      C* ds = p + BQ * BK;           // [ni, BK]: dp, then ds
      [[maybe_unused]] C* mk = ds + BQ * BK;  // dropout: a row's factors
      const std::size_t base_k = kv * f.k_len * dh;
      for (std::size_t m = 0; m < G; ++m) {
        const std::size_t item = f.query_item(kv, m), base_q = item * nq * dh;
        for (std::size_t i = 0; i < nq; ++i) {
          C d = 0;
          for (std::size_t x = 0; x < dh; ++x) d += C(dout[base_q + i * dh + x]) * C(o[base_q + i * dh + x]);
          delta[m * nq + i] = d;
          lq[m * nq + i] = C(lse[item * nq + i]);
        }
      }
      std::fill(dqa, dqa + G * nq * dh, C(0));
      for (std::size_t kb = 0; kb < f.k_len; kb += BK) {
        const std::size_t nk = std::min(BK, f.k_len - kb);
        const C* kt = tile_of(kh + base_k + kb * dh, nk * dh, kc);
        const C* vt = tile_of(vh + base_k + kb * dh, nk * dh, vc);
        std::fill(dka, dka + nk * dh, C(0));
        std::fill(dva, dva + nk * dh, C(0));
        for (std::size_t m = 0; m < G; ++m) {
          const std::size_t item = f.query_item(kv, m), base_q = item * nq * dh, r0 = m * nq;
          for (std::size_t i0 = f.first_query_of(kb); i0 < nq; i0 += BQ) {
            const std::size_t ni = std::min(BQ, nq - i0);
            for (std::size_t x = 0; x < ni * dh; ++x) qs[x] = scale * C(qh[base_q + i0 * dh + x]);
            const C* gt = tile_of(dout + base_q + i0 * dh, ni * dh, go);
            tile_gemm(false, true, ni, nk, dh, C(1), qs, dh, kt, dh, C(0), p, BK);
            tile_gemm(false, true, ni, nk, dh, C(1), gt, dh, vt, dh, C(0), ds, BK);
            for (std::size_t i = 0; i < ni; ++i) {
              const std::size_t n = keys_seen(f, i0 + i, kb, nk);
              if constexpr (Drop) {
                detail::flash_drop_factors(n, f.drop_row_key(key, item, i0 + i), f.drop_feature0(item) + kb,
                                           f.drop.threshold, rs, mk);
                dropped_probabilities(n, nk, lq[r0 + i0 + i], delta[r0 + i0 + i], mk, p + i * BK, ds + i * BK);
              } else {
                probabilities(n, nk, lq[r0 + i0 + i], delta[r0 + i0 + i], p + i * BK, ds + i * BK);
              }
            }
            // dv += pᵀ do; dk += dsᵀ (scale q); dq += ds k (scaled at the end)
            tile_gemm(true, false, nk, dh, ni, C(1), p, BK, gt, dh, C(1), dva, dh);
            tile_gemm(true, false, nk, dh, ni, C(1), ds, BK, qs, dh, C(1), dka, dh);
            tile_gemm(false, false, ni, dh, nk, C(1), ds, BK, kt, dh, C(1), dqa + (r0 + i0) * dh, dh);
          }
        }
        for (std::size_t x = 0; x < nk * dh; ++x) {
          dk[base_k + kb * dh + x] = T(dka[x]);
          dv[base_k + kb * dh + x] = T(dva[x]);
        }
      }
      for (std::size_t m = 0; m < G; ++m) {
        const std::size_t base_q = f.query_item(kv, m) * nq * dh;
        for (std::size_t x = 0; x < nq * dh; ++x) dq[base_q + x] = T(scale * dqa[m * nq * dh + x]);
      }
    });
  }

  // A tile of T in the compute type: the data itself when T is float or double, else
  // widened into `scratch`.
  template <class T, class C>
  static const C* tile_of(const T* x, std::size_t n, C* scratch) {
    if constexpr (std::is_same_v<T, C>) {
      return x;
    } else {
      for (std::size_t i = 0; i < n; ++i) scratch[i] = C(x[i]);
      return scratch;
    }
  }
  // C = alpha op(A) op(B) + beta C, row-major, one single-threaded BLAS call.
  template <class C>
  static void tile_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, C alpha, const C* a,
                        std::size_t lda, const C* b, std::size_t ldb, C beta, C* c, std::size_t ldc) {
    const auto opa = detail::blas_trans(ta ? trans::T : trans::N), opb = detail::blas_trans(tb ? trans::T : trans::N);
    if constexpr (std::is_same_v<C, float>)
      cblas_sgemm(CblasRowMajor, opa, opb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    else
      cblas_dgemm(CblasRowMajor, opa, opb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  }
  static float row_max(std::size_t n, float mx, const float* s) { return detail::flash_row_max_f32(n, mx, s); }
  static double row_max(std::size_t n, double mx, const double* s) {
    for (std::size_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    return mx;
  }
  // s[j] = exp(s[j] − mx) for j < n (all <= 0); returns their sum.
  static float exp_shifted(std::size_t n, float mx, float* s) { return detail::flash_exp_shifted_f32(n, mx, s); }
  static double exp_shifted(std::size_t n, double mx, double* s) {
    double sum = 0;
    for (std::size_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
    return sum;
  }
  // A row of a backward tile: p = exp(s − lse) and ds = p (dp − δ) over the n keys the
  // query sees, 0 over the rest of the nk.
  static void probabilities(std::size_t n, std::size_t nk, float lse, float delta, float* p, float* ds) {
    detail::flash_probabilities_f32(n, nk, lse, delta, p, ds);
  }
  static void probabilities(std::size_t n, std::size_t nk, double lse, double delta, double* p, double* ds) {
    for (std::size_t j = 0; j < n; ++j) {
      p[j] = std::exp(p[j] - lse);
      ds[j] = p[j] * (ds[j] - delta);
    }
    std::fill(p + n, p + nk, 0.0);
    std::fill(ds + n, ds + nk, 0.0);
  }
  // Attention dropout's backward row with the factors mk (detail::flash_drop_factors).
  static void dropped_probabilities(std::size_t n, std::size_t nk, float lse, float delta, const float* mk, float* p,
                                    float* ds) {
    detail::flash_dropped_probabilities_f32(n, nk, lse, delta, mk, p, ds);
  }
  static void dropped_probabilities(std::size_t n, std::size_t nk, double lse, double delta, const double* mk,
                                    double* p, double* ds) {
    for (std::size_t j = 0; j < n; ++j) {
      const double pj = std::exp(p[j] - lse);
      ds[j] = pj * (math::dropout_value(ds[j], mk[j] != 0.0, mk[j]) - delta);
      p[j] = math::dropout_value(pj, mk[j] != 0.0, mk[j]);
    }
    std::fill(p + n, p + nk, 0.0);
    std::fill(ds + n, ds + nk, 0.0);
  }
};

}  // namespace strata::backend::host

namespace strata::backend::impl {
template <>
struct attention_kernels<host::queue> : host::attention_kernels {};
}  // namespace strata::backend::impl
