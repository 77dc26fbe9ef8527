#pragma once
// Kernel suite, GEMM family: gemm (float, double, bf16 and f16 operands),
// gemm_strided_batched and gemm_bias_act, against plain float64 loops.
#include <stdexcept>

#include "kernel_suite_common.hpp"

namespace kernel_suite {

// C = alpha op(A) op(B) + beta C over the M x N window (beta == 0 never reads C).
inline void ref_gemm(trans ta, trans tb, std::size_t M, std::size_t N, std::size_t K, double alpha, const double* A,
                     std::size_t lda, const double* B, std::size_t ldb, double beta, double* C, std::size_t ldc) {
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double acc = 0;
      for (std::size_t k = 0; k < K; ++k)
        acc += (ta == trans::N ? A[i * lda + k] : A[k * lda + i]) * (tb == trans::N ? B[k * ldb + j] : B[j * ldb + k]);
      C[i * ldc + j] = alpha * acc + (beta == 0 ? 0.0 : beta * C[i * ldc + j]);
    }
}
// sum_k |op(A)_ik op(B)_kj| for an accumulation error bound.
inline double ref_gemm_mag(trans ta, trans tb, std::size_t i, std::size_t j, std::size_t K, const double* A,
                           std::size_t lda, const double* B, std::size_t ldb) {
  double m = 0;
  for (std::size_t k = 0; k < K; ++k)
    m += std::abs((ta == trans::N ? A[i * lda + k] : A[k * lda + i]) *
                  (tb == trans::N ? B[k * ldb + j] : B[j * ldb + k]));
  return m;
}

struct mnk {
  std::size_t M, N, K;
};
// Both former suites' shapes: 1x1x1, odd sizes, K past a block, thin and tall.
inline const std::vector<mnk> kGemmShapes = {{1, 1, 1},     {3, 5, 7},     {7, 13, 5},     {17, 33, 9},
                                             {65, 130, 33}, {64, 128, 96}, {128, 64, 256}, {129, 65, 257},
                                             {3, 200, 17},  {150, 9, 300}, {250, 3, 1000}};
inline std::string gemm_name(trans ta, trans tb, const mnk& s) {
  return std::string(ta == trans::N ? "N" : "T") + (tb == trans::N ? "N" : "T") + " " + std::to_string(s.M) + "x" +
         std::to_string(s.N) + "x" + std::to_string(s.K);
}

// Operands of op(A) (M x K) and op(B) (K x N) with leading dimensions padded by pa / pb.
struct operands {
  std::size_t lda, ldb, a_size, b_size;
};
inline operands layout(trans ta, trans tb, const mnk& s, std::size_t pa, std::size_t pb) {
  const std::size_t lda = (ta == trans::N ? s.K : s.M) + pa, ldb = (tb == trans::N ? s.N : s.K) + pb;
  return {lda, ldb, (ta == trans::N ? s.M : s.K) * lda, (tb == trans::N ? s.K : s.N) * ldb};
}

// The window must match `ref`, the padding columns must keep C0's bits.
template <class T>
void check_window(const std::vector<T>& got, const std::vector<double>& ref, const std::vector<T>& C0, std::size_t M,
                  std::size_t N, std::size_t ldc, double tolerance, const std::string& what) {
  std::vector<T> win, pad, pad0;
  std::vector<double> rwin;
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < ldc; ++j) {
      if (j < N) {
        win.push_back(got[i * ldc + j]);
        rwin.push_back(ref[i * ldc + j]);
      } else {
        pad.push_back(got[i * ldc + j]);
        pad0.push_back(C0[i * ldc + j]);
      }
    }
  check_close(win, rwin, tolerance, what);
  check_bits(pad, pad0, what + " (padding)");
}

TEST_CASE_TEMPLATE("kernels: gemm (all transposes, padded leading dimensions, alpha and beta)", T, float, double) {
  queue_t q;
  rng g(100);
  struct variant {
    double alpha, beta;
    std::size_t pa, pb, pc;
  };
  // beta = 0 must not read C (poisoned); beta = 1 accumulates; general scalars with padding.
  const variant variants[] = {{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {0.5, -1.5, 3, 1, 2}, {-0.75, 0.5, 3, 3, 3}};
  for (const mnk& s : kGemmShapes)
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T})
        for (const variant& v : variants) {
          const std::string what = gemm_name(ta, tb, s) + " alpha " + std::to_string(v.alpha) + " beta " +
                                   std::to_string(v.beta) + " pad " + std::to_string(v.pa);
          const operands o = layout(ta, tb, s, v.pa, v.pb);
          const std::size_t ldc = s.N + v.pc;
          const auto A = g.uniform<T>(o.a_size), Bm = g.uniform<T>(o.b_size);
          auto C0 = g.uniform<T>(s.M * ldc);
          if (v.beta == 0) C0.assign(C0.size(), nan_of<T>());
          const auto Ad = widen(A), Bd = widen(Bm);
          auto ref = widen(C0);
          ref_gemm(ta, tb, s.M, s.N, s.K, v.alpha, Ad.data(), o.lda, Bd.data(), o.ldb, v.beta, ref.data(), ldc);
          auto dA = to_dev(q, A), dB = to_dev(q, Bm), dC = to_dev(q, C0);
          gemm(q, ta, tb, s.M, s.N, s.K, T(v.alpha), static_cast<const T*>(dA.data()), o.lda,
               static_cast<const T*>(dB.data()), o.ldb, T(v.beta), dC.data(), ldc);
          check_window(to_host(q, dC.data(), s.M * ldc), ref, C0, s.M, s.N, ldc, tol<T>, what);
        }
}

TEST_CASE_TEMPLATE("kernels: gemm with alpha = 0 or K = 0 only scales C and never reads A or B", T, float, double) {
  queue_t q;
  rng g(7);
  const std::size_t M = 37, N = 70;
  const auto C0 = g.uniform<T>(M * N);
  const T* none = nullptr;
  for (double beta : {0.0, 1.0, 2.0, -2.0}) {
    CAPTURE(beta);
    std::vector<double> want(M * N);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = beta * to_d(C0[i]);  // beta = 0: zeros, NaN dropped
    const auto start = beta == 0 ? std::vector<T>(M * N, nan_of<T>()) : C0;
    auto dC = to_dev(q, start);
    gemm(q, trans::N, trans::N, M, N, 5, T(0), none, 5, none, N, T(beta), dC.data(), N);
    check_close(to_host(q, dC.data(), M * N), want, 0.0, "alpha = 0");
    auto dC2 = to_dev(q, start);
    gemm(q, trans::T, trans::T, M, N, 0, T(1), none, M, none, 0, T(beta), dC2.data(), N);
    check_close(to_host(q, dC2.data(), M * N), want, 0.0, "K = 0");
  }
  // M or N == 0: nothing to do, nothing read or written.
  gemm(q, trans::N, trans::N, 0, 5, 5, T(1), none, 5, none, 5, T(0), static_cast<T*>(nullptr), 5);
  gemm(q, trans::N, trans::N, 5, 0, 5, T(1), none, 5, none, 5, T(0), static_cast<T*>(nullptr), 5);
  // Operands that would be read, and C, must exist: refused before C is touched.
  auto dC = to_dev(q, C0), dA = to_dev(q, std::vector<T>(M * 5, T(1)));
  CHECK_THROWS_AS(gemm(q, trans::N, trans::N, M, N, 5, T(1), none, 5, none, N, T(0), dC.data(), N),
                  std::invalid_argument);
  CHECK_THROWS_AS(gemm(q, trans::N, trans::T, M, N, 5, T(1), static_cast<const T*>(dA.data()), 5,
                       static_cast<const T*>(dA.data()), 5, T(0), static_cast<T*>(nullptr), N),
                  std::invalid_argument);
  check_bits(to_host(q, dC.data(), M * N), C0, "C after a refused call");
}

TEST_CASE_TEMPLATE("kernels: gemm_strided_batched equals a loop of products", T, float, double) {
  queue_t q;
  rng g(200);
  const std::size_t batch = 4;
  for (const mnk& s : {mnk{13, 24, 31}, mnk{9, 11, 13}})
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T})
        for (double beta : {0.0, 0.5}) {
          const std::string what = "batched " + gemm_name(ta, tb, s) + " beta " + std::to_string(beta);
          const operands o = layout(ta, tb, s, 0, 0);
          const std::size_t ldc = s.N, sa = o.a_size + 5, sb = o.b_size + 3, sc = s.M * ldc + 7;
          const auto A = g.uniform<T>(sa * batch), Bm = g.uniform<T>(sb * batch);
          auto C0 = g.uniform<T>(sc * batch);
          if (beta == 0) C0.assign(C0.size(), nan_of<T>());
          const auto Ad = widen(A), Bd = widen(Bm);
          auto ref = widen(C0);
          for (std::size_t b = 0; b < batch; ++b)
            ref_gemm(ta, tb, s.M, s.N, s.K, 1.0, Ad.data() + b * sa, o.lda, Bd.data() + b * sb, o.ldb, beta,
                     ref.data() + b * sc, ldc);
          auto dA = to_dev(q, A), dB = to_dev(q, Bm), dC = to_dev(q, C0);
          gemm_strided_batched(q, ta, tb, s.M, s.N, s.K, T(1), static_cast<const T*>(dA.data()), o.lda, sa,
                               static_cast<const T*>(dB.data()), o.ldb, sb, T(beta), dC.data(), ldc, sc, batch);
          // The gaps between the matrices are never written: compared like padding.
          check_window(to_host(q, dC.data(), sc * batch), ref, C0, batch, s.M * ldc, sc, tol<T>, what);
        }
}

// Error bounds of 16-bit GEMMs relative to the magnitude of the terms, m = |alpha|
// sum|ab| + |beta c|: a float output is an FP32 sum in some order (truncating
// tensor-core adders and split-K included: K 2^-23 m at worst, K <= 1000 here); a
// 16-bit output may also round split-K partials and, fused with a bias, the product
// before it: a few roundings of the type (bf16 2^-9 each, f16 2^-12).
constexpr double kHalfFloatOut = 0x1p-12;
template <class H>
constexpr double kHalfOut = std::is_same_v<H, bf16> ? 0x1p-5 : 0x1p-8;

TEST_CASE_TEMPLATE("kernels: 16-bit gemm, FP32 accumulation, to float and to the 16-bit type", H, bf16, f16) {
  queue_t q;
  rng g(std::is_same_v<H, bf16> ? 300 : 301);
  double worst_f = 0, worst_h = 0;  // norm-wise errors, for the message
  for (const mnk& s : kGemmShapes)
    for (trans ta : {trans::N, trans::T})
      for (trans tb : {trans::N, trans::T}) {
        const std::string what = (std::is_same_v<H, bf16> ? "bf16 " : "f16 ") + gemm_name(ta, tb, s);
        const operands o = layout(ta, tb, s, 3, 1);
        const std::size_t ldc = s.N + 2;
        const auto A = g.uniform<H>(o.a_size), Bm = g.uniform<H>(o.b_size);
        const auto Cf0 = g.uniform<float>(s.M * ldc);
        const auto Cb0 = g.uniform<H>(s.M * ldc);
        const auto Ad = widen(A), Bd = widen(Bm);
        auto dA = to_dev(q, A), dB = to_dev(q, Bm), dCb = to_dev(q, Cb0);
        auto dCf = to_dev(q, Cf0);
        const auto* a = static_cast<const H*>(dA.data());
        const auto* b = static_cast<const H*>(dB.data());
        gemm(q, ta, tb, s.M, s.N, s.K, 0.5f, a, o.lda, b, o.ldb, 1.0f, dCf.data(), ldc);
        gemm(q, ta, tb, s.M, s.N, s.K, 1.0f, a, o.lda, b, o.ldb, 0.5f, dCb.data(), ldc);
        auto dCz = poisoned<H>(q, s.M * ldc);  // beta = 0 never reads C
        gemm(q, ta, tb, s.M, s.N, s.K, 1.0f, a, o.lda, b, o.ldb, 0.0f, dCz.data(), ldc);
        std::vector<double> rf = widen(Cf0), rb = widen(Cb0), rz(s.M * ldc, 0.0), mag(s.M * ldc, 0.0);
        ref_gemm(ta, tb, s.M, s.N, s.K, 0.5, Ad.data(), o.lda, Bd.data(), o.ldb, 1.0, rf.data(), ldc);
        ref_gemm(ta, tb, s.M, s.N, s.K, 1.0, Ad.data(), o.lda, Bd.data(), o.ldb, 0.5, rb.data(), ldc);
        ref_gemm(ta, tb, s.M, s.N, s.K, 1.0, Ad.data(), o.lda, Bd.data(), o.ldb, 0.0, rz.data(), ldc);
        for (std::size_t i = 0; i < s.M; ++i)
          for (std::size_t j = 0; j < s.N; ++j)  // |C| <= 1 and |alpha|, |beta| <= 1
            mag[i * ldc + j] = ref_gemm_mag(ta, tb, i, j, s.K, Ad.data(), o.lda, Bd.data(), o.ldb) + 1.0;
        const auto gf = to_host(q, dCf.data(), s.M * ldc);
        const auto gb = to_host(q, dCb.data(), s.M * ldc);
        const auto gz = to_host(q, dCz.data(), s.M * ldc);
        std::size_t bad_f = 0, bad_b = 0, bad_pad = 0;
        for (std::size_t i = 0; i < s.M; ++i)
          for (std::size_t j = 0; j < ldc; ++j) {
            const std::size_t k = i * ldc + j;
            if (j >= s.N) {  // the padding is never written
              bad_pad += bits_of(gf[k]) != bits_of(Cf0[k]) || gb[k].bits != Cb0[k].bits || !std::isnan(to_d(gz[k]));
              continue;
            }
            bad_f += !(std::abs(double(gf[k]) - rf[k]) <= kHalfFloatOut * mag[k]);
            bad_b += !(std::abs(to_d(gb[k]) - rb[k]) <= kHalfOut<H> * mag[k]);
            bad_b += !(std::abs(to_d(gz[k]) - rz[k]) <= kHalfOut<H> * mag[k]);
          }
        INFO(what);
        CHECK(bad_f == 0);
        CHECK(bad_b == 0);
        CHECK(bad_pad == 0);
        // And norm-wise, within the type's storage accuracy.
        std::vector<double> wf, wb, rwf, rwb;
        for (std::size_t i = 0; i < s.M; ++i)
          for (std::size_t j = 0; j < s.N; ++j) {
            wf.push_back(gf[i * ldc + j]), rwf.push_back(rf[i * ldc + j]);
            wb.push_back(to_d(gb[i * ldc + j])), rwb.push_back(rb[i * ldc + j]);
          }
        check_close(wf, rwf, tol_half<H>, what + " to float");
        check_close(wb, rwb, tol_half<H>, what + " to 16 bits");
        worst_f = std::max(worst_f, rel_err(wf, rwf));
        worst_h = std::max(worst_h, rel_err(wb, rwb));
      }
  MESSAGE("16-bit gemm (" << std::string(std::is_same_v<H, bf16> ? "bf16" : "f16") << "): worst norm-wise error to float "
                          << worst_f << ", to 16 bits " << worst_h << " (tolerance " << tol_half<H> << ")");
}

TEST_CASE_TEMPLATE("kernels: gemm_bias_act equals act(op(A) op(B) + beta C + bias)", E, f32, f64, mixed,
                   mixed_f16) {
  using T = typename E::T;
  using Sc = strata::gemm_scalar_t<T>;
  queue_t q;
  rng g(400);
  for (const mnk& s : kGemmShapes)
    for (activation act : kActs)
      for (int flags = 0; flags < 8; ++flags) {
        const bool with_bias = flags & 1, with_pre = flags & 2, accumulate = flags & 4;
        const double alpha = accumulate ? 0.5 : 1.0, beta = accumulate ? 1.0 : 0.0;
        const std::size_t ldc = s.N % 8 == 0 ? s.N : s.N + 1;  // ld != N too
        const std::string what = std::string("gemm_bias_act ") + act_name(act) + " " +
                                 gemm_name(trans::N, trans::N, s) + (with_bias ? " bias" : "") +
                                 (with_pre ? " pre" : "") + (accumulate ? " beta 1" : "");
        const auto A = g.uniform<T>(s.M * s.K), Bm = g.uniform<T>(s.K * s.N), bias = g.uniform<T>(s.N);
        auto C0 = g.uniform<T>(s.M * ldc);
        if (!accumulate) C0.assign(C0.size(), nan_of<T>());
        const auto Ad = widen(A), Bd = widen(Bm), bd = widen(bias);
        auto pre_ref = widen(C0);
        ref_gemm(trans::N, trans::N, s.M, s.N, s.K, alpha, Ad.data(), s.K, Bd.data(), s.N, beta, pre_ref.data(), ldc);
        auto y_ref = pre_ref;
        for (std::size_t i = 0; i < s.M; ++i)
          for (std::size_t j = 0; j < s.N; ++j) {
            pre_ref[i * ldc + j] += with_bias ? bd[j] : 0.0;
            y_ref[i * ldc + j] = ref_act(act, pre_ref[i * ldc + j]);
          }
        auto dA = to_dev(q, A), dB = to_dev(q, Bm), dbias = to_dev(q, bias), dC = to_dev(q, C0);
        auto dP = poisoned<T>(q, s.M * ldc);
        gemm_bias_act(q, trans::N, trans::N, s.M, s.N, s.K, Sc(alpha), static_cast<const T*>(dA.data()), s.K,
                      static_cast<const T*>(dB.data()), s.N, Sc(beta), dC.data(), ldc,
                      with_bias ? static_cast<const T*>(dbias.data()) : nullptr, act,
                      with_pre ? dP.data() : static_cast<T*>(nullptr));
        const auto got_c = to_host(q, dC.data(), s.M * ldc);
        const auto got_p = to_host(q, dP.data(), s.M * ldc);
        if constexpr (is_half<T>) {
          // As a 16-bit gemm, plus the sum with the bias and the activation (slope <= 1.13):
          // a few roundings of the terms' magnitude.
          std::vector<double> bound(s.M * ldc, 0.0);
          for (std::size_t i = 0; i < s.M; ++i)
            for (std::size_t j = 0; j < s.N; ++j)
              bound[i * ldc + j] =
                  kHalfOut<T> *
                  (alpha * ref_gemm_mag(trans::N, trans::N, i, j, s.K, Ad.data(), s.K, Bd.data(), s.N) +
                   (accumulate ? std::abs(beta * to_d(C0[i * ldc + j])) : 0.0) + (with_bias ? std::abs(bd[j]) : 0.0));
          auto within = [&](std::size_t i, double g, double r) { return std::abs(g - r) <= bound[i]; };
          check_each(got_c, y_ref, within, what);
          auto pre_cmp = pre_ref;  // pre_out's padding stays poisoned
          for (std::size_t i = 0; i < s.M; ++i)
            for (std::size_t j = s.N; j < ldc; ++j) pre_cmp[i * ldc + j] = nan_of<double>();
          if (with_pre) check_each(got_p, pre_cmp, within, what + " (pre)");
        } else {
          check_window(got_c, y_ref, C0, s.M, s.N, ldc, tol<T>, what);
          if (with_pre)
            check_window(got_p, pre_ref, std::vector<T>(s.M * ldc, nan_of<T>()), s.M, s.N, ldc, tol<T>,
                         what + " (pre)");
        }
      }
  // pre_out may share C only when there is no activation to apply after it.
  auto dA = to_dev(q, std::vector<T>(4, T(1.0f))), dC = to_dev(q, std::vector<T>(4, T(0.0f)));
  CHECK_THROWS_AS(gemm_bias_act(q, trans::N, trans::N, 2, 2, 2, Sc(1), static_cast<const T*>(dA.data()), 2,
                                static_cast<const T*>(dA.data()), 2, Sc(0), dC.data(), 2,
                                static_cast<const T*>(nullptr), activation::relu, dC.data()),
                  std::invalid_argument);
}

}  // namespace kernel_suite
