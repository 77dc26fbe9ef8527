// requires: cuda
// The convolution family and batch normalisation on the CUDA backend against the host
// backend (until the kernel suite covers them): conv2d forward and backwards (cuDNN's where
// strata::cudnn is linked — the CMake build links it into every GPU test when found — else
// im2col and cuBLASLt), im2col, col2im, max and average pooling, batch normalisation's
// statistics, apply and backward. Tolerances as test_cuda_kernels.cu's (float 1e-5,
// double 1e-12, bf16 2e-2). Exit code 77 (ctest: skipped) when there is no CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_vs_host.hpp"

// ---------------------------------------------------------------------------
// Convolution family and batch normalisation (not yet in the kernel suite) against
// the host backend
// ---------------------------------------------------------------------------

// conv2d_forward / _backward_data / _backward_weights: cuDNN's where strata::cudnn is linked
// (the CMake build links it into every GPU test when found), else im2col and cuBLASLt, against
// the host's im2col and BLAS on the same inputs. A bf16 filter gradient into float master
// gradients takes im2col either way.
TEST_CASE_TEMPLATE("conv2d forward and backwards equal the host's", T, float, double, bf16) {
  using G = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using strata::conv_geometry;
  namespace be = strata::backend;
  const double tl = std::is_same_v<T, bf16> ? tol_bf16 : tol<T>;
#if defined(STRATA_WITH_CUDNN)
  MESSAGE("conv2d on cuDNN " << CUDNN_MAJOR << "." << CUDNN_MINOR << " (double: im2col)");
  static_assert(be::detail::native_conv2d_v<cu::queue, float> && !be::detail::native_conv2d_v<cu::queue, double>);
#endif
  fixture f;
  // a queue with a 4 KiB workspace: cuDNN then works in the layer's im2col buffer, or falls
  // back to im2col where no algorithm fits
  cu::queue small(cu::queue_options{.workspace_bytes = 4096});
  const std::size_t samples = 3;
  for (cu::queue* dq : {&f.q, &small})
    for (const auto& g : {conv_geometry::of(9, 8, 3, 3, 3, 2, 1), conv_geometry::of(6, 6, 16, 1, 1, 1, 0),
                          conv_geometry::of(11, 11, 5, 7, 7, 2, 3), conv_geometry::of(7, 7, 32, 3, 3, 1, 1)})
      for (std::size_t O : {std::size_t(8), std::size_t(19)}) {
        const std::string what = std::string(dq == &small ? "4 KiB workspace, " : "") + "conv " +
                                 std::to_string(g.H) + "x" + std::to_string(g.W) + "x" + std::to_string(g.C) + " K" +
                                 std::to_string(g.KH) + "/" + std::to_string(g.stride) + " -> " + std::to_string(O);
        const std::size_t nx = samples * g.in_pixels() * std::size_t(g.C), ny = samples * g.out_pixels() * O,
                          nw = O * g.patch(), nwork = be::conv2d_work_values(samples, g);
        auto x = random_vec<T>(nx), w = random_vec<T>(nw), b = random_vec<T>(O), dy = random_vec<T>(ny);
        auto dw = random_vec<G>(nw), db = random_vec<G>(O);  // the gradients accumulate onto these
        std::vector<T> y(ny), dx(nx), work(nwork);
        std::vector<G> dw_ref = dw, db_ref = db;
        be::conv2d_forward(f.hq, samples, g, O, x.data(), w.data(), b.data(), y.data(), work.data());
        be::conv2d_backward_weights(f.hq, samples, g, O, x.data(), dy.data(), dw_ref.data(), db_ref.data(),
                                    work.data());
        be::conv2d_backward_data(f.hq, samples, g, O, dy.data(), w.data(), dx.data(), work.data());
        auto d_x = to_dev(*dq, x), d_w = to_dev(*dq, w), d_b = to_dev(*dq, b), d_dy = to_dev(*dq, dy);
        auto d_dw = to_dev(*dq, dw), d_db = to_dev(*dq, db);
        auto d_y = poisoned<T>(*dq, ny), d_dx = poisoned<T>(*dq, nx);
        auto d_work = poisoned<T>(*dq, std::max<std::size_t>(nwork, 1));
        T* work_ptr = nwork ? d_work.data() : nullptr;
        be::conv2d_forward(*dq, samples, g, O, d_x.data(), d_w.data(), d_b.data(), d_y.data(), work_ptr);
        be::conv2d_backward_weights(*dq, samples, g, O, d_x.data(), d_dy.data(), d_dw.data(), d_db.data(), work_ptr);
        be::conv2d_backward_data(*dq, samples, g, O, d_dy.data(), d_w.data(), d_dx.data(), work_ptr);
        expect_close(to_host(*dq, d_y, ny), y, tl, what + " forward (with bias)");
        expect_close(to_host(*dq, d_dw, nw), dw_ref, tl, what + " filter gradient (accumulated)");
        expect_close(to_host(*dq, d_db, O), db_ref, tl, what + " bias gradient (accumulated)");
        expect_close(to_host(*dq, d_dx, nx), dx, tl, what + " data gradient");
      }
}

TEST_CASE_TEMPLATE("im2col, col2im, pooling and batch normalisation equal the host's", T, float, double, bf16) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // statistics and parameter gradients
  using strata::conv_geometry;
  const double tl = std::is_same_v<T, bf16> ? tol_bf16 : tol<T>;
  fixture f;
  const std::size_t samples = 2;
  const auto in_n = [&](const conv_geometry& g) { return samples * g.in_pixels() * std::size_t(g.C); };
  const auto out_n = [&](const conv_geometry& g) { return samples * g.out_pixels() * std::size_t(g.C); };

  {  // im2col and col2im: 3x3 window, stride 2, padding 1
    const auto g = conv_geometry::of(7, 6, 3, 3, 3, 2, 1);
    const std::size_t nc = samples * g.out_pixels() * g.patch();
    auto x = random_vec<T>(in_n(g)), dcols = random_vec<T>(nc);
    std::vector<T> cols(nc), dx(in_n(g));
    hb::im2col(f.hq, samples, g, x.data(), cols.data());
    hb::col2im(f.hq, samples, g, dcols.data(), dx.data());
    auto d_x = to_dev(f.q, x), d_dcols = to_dev(f.q, dcols);
    auto d_cols = poisoned<T>(f.q, nc), d_dx = poisoned<T>(f.q, in_n(g));
    cu::im2col(f.q, samples, g, d_x.data(), d_cols.data());
    cu::col2im(f.q, samples, g, d_dcols.data(), d_dx.data());
    expect_close(to_host(f.q, d_cols, nc), cols, 0.0, "im2col (a copy: the same bits)");
    expect_close(to_host(f.q, d_dx, in_n(g)), dx, tl, "col2im");
  }

  {  // max pooling: 3x3 window, stride 2, padding 1; the same winners, then their gradient
    const auto g = conv_geometry::of(7, 6, 3, 3, 3, 2, 1);
    auto x = random_vec<T>(in_n(g)), dy = random_vec<T>(out_n(g));
    std::vector<T> y(out_n(g)), dx(in_n(g));
    std::vector<std::int32_t> arg(out_n(g));
    hb::maxpool_forward(f.hq, samples, g, x.data(), y.data(), arg.data());
    hb::maxpool_backward(f.hq, samples, g, dy.data(), arg.data(), dx.data());
    auto d_x = to_dev(f.q, x), d_dy = to_dev(f.q, dy);
    auto d_y = poisoned<T>(f.q, out_n(g)), d_y2 = poisoned<T>(f.q, out_n(g)), d_dx = poisoned<T>(f.q, in_n(g));
    auto d_arg = poisoned<std::int32_t>(f.q, out_n(g));
    cu::maxpool_forward(f.q, samples, g, d_x.data(), d_y.data(), d_arg.data());
    cu::maxpool_forward(f.q, samples, g, d_x.data(), d_y2.data(), static_cast<std::int32_t*>(nullptr));
    const auto arg_dev = to_host(f.q, d_arg, out_n(g));
    CHECK(arg_dev == arg);
    cu::maxpool_backward(f.q, samples, g, d_dy.data(), d_arg.data(), d_dx.data());
    expect_close(to_host(f.q, d_y, out_n(g)), y, 0.0, "maxpool_forward");
    expect_close(to_host(f.q, d_y2, out_n(g)), y, 0.0, "maxpool_forward without arg");
    expect_close(to_host(f.q, d_dx, in_n(g)), dx, tl, "maxpool_backward");
  }

  // average pooling: 2x2 window, stride 2; global (the window is the image)
  for (const auto& g : {conv_geometry::of(7, 6, 3, 2, 2, 2, 0), conv_geometry::of(7, 6, 3, 7, 6, 1, 0)}) {
    const std::string what = "avgpool K=" + std::to_string(g.KH) + "x" + std::to_string(g.KW);
    auto x = random_vec<T>(in_n(g)), dy = random_vec<T>(out_n(g));
    std::vector<T> y(out_n(g)), dx(in_n(g));
    hb::avgpool_forward(f.hq, samples, g, x.data(), y.data());
    hb::avgpool_backward(f.hq, samples, g, dy.data(), dx.data());
    auto d_x = to_dev(f.q, x), d_dy = to_dev(f.q, dy);
    auto d_y = poisoned<T>(f.q, out_n(g)), d_dx = poisoned<T>(f.q, in_n(g));
    cu::avgpool_forward(f.q, samples, g, d_x.data(), d_y.data());
    cu::avgpool_backward(f.q, samples, g, d_dy.data(), d_dx.data());
    expect_close(to_host(f.q, d_y, out_n(g)), y, tl, what + " forward");
    expect_close(to_host(f.q, d_dx, in_n(g)), dx, tl, what + " backward");
  }

  // batch normalisation over rows x C: one chunk of 256 rows, and three (partials in order)
  const std::size_t C = 5;
  const double eps = 1e-5;
  for (std::size_t rows : {std::size_t(37), std::size_t(613)})
    for (bool affine : {true, false}) {
      const std::string what = " rows=" + std::to_string(rows) + " affine=" + std::to_string(affine);
      const std::size_t n = rows * C;
      const double count = double(rows);
      auto x = random_vec<T>(n, -2, 3), dy = random_vec<T>(n), gamma = random_vec<T>(C, 0.5, 1.5),
           beta = random_vec<T>(C);
      const auto dgamma0 = random_vec<S>(C), dbeta0 = random_vec<S>(C);
      std::vector<S> sum_x(C), mean(C), rstd(C), sums(2 * C), dgamma = dgamma0, dbeta = dbeta0;
      std::vector<T> y(n), dx(n);
      const T* hg = affine ? gamma.data() : nullptr;
      const T* hbeta = affine ? beta.data() : nullptr;
      S* hdg = affine ? dgamma.data() : nullptr;
      S* hdb = affine ? dbeta.data() : nullptr;
      hb::channel_moment(f.hq, rows, C, x.data(), static_cast<const S*>(nullptr), sum_x.data());
      mean = sum_x;
      hb::batchnorm_finish(f.hq, C, count, eps, mean.data(), static_cast<S*>(nullptr));
      hb::channel_moment(f.hq, rows, C, x.data(), static_cast<const S*>(mean.data()), rstd.data());
      hb::batchnorm_finish(f.hq, C, count, eps, static_cast<S*>(nullptr), rstd.data());
      hb::batchnorm_apply(f.hq, rows, C, x.data(), mean.data(), rstd.data(), hg, hbeta, y.data());
      hb::batchnorm_backward_sums(f.hq, rows, C, x.data(), mean.data(), rstd.data(), dy.data(), sums.data(), hdg, hdb);
      hb::batchnorm_backward_data(f.hq, rows, C, count, x.data(), mean.data(), rstd.data(), hg, dy.data(),
                                  sums.data(), dx.data());

      auto d_x = to_dev(f.q, x), d_dy = to_dev(f.q, dy), d_gamma = to_dev(f.q, gamma), d_beta = to_dev(f.q, beta);
      auto d_dgamma = to_dev(f.q, dgamma0), d_dbeta = to_dev(f.q, dbeta0);
      auto d_mean = poisoned<S>(f.q, C), d_rstd = poisoned<S>(f.q, C), d_sums = poisoned<S>(f.q, 2 * C);
      auto d_y = poisoned<T>(f.q, n), d_dx = poisoned<T>(f.q, n);
      const T* dg = affine ? d_gamma.data() : nullptr;
      const T* dbeta_in = affine ? d_beta.data() : nullptr;
      S* ddg = affine ? d_dgamma.data() : nullptr;
      S* ddb = affine ? d_dbeta.data() : nullptr;
      cu::channel_moment(f.q, rows, C, d_x.data(), static_cast<const S*>(nullptr), d_mean.data());
      expect_close(to_host(f.q, d_mean, C), sum_x, tol<S>, "channel_moment (sum)" + what);
      cu::batchnorm_finish(f.q, C, count, eps, d_mean.data(), static_cast<S*>(nullptr));
      expect_close(to_host(f.q, d_mean, C), mean, tol<S>, "batchnorm_finish (mean)" + what);
      cu::channel_moment(f.q, rows, C, d_x.data(), static_cast<const S*>(d_mean.data()), d_rstd.data());
      cu::batchnorm_finish(f.q, C, count, eps, static_cast<S*>(nullptr), d_rstd.data());
      expect_close(to_host(f.q, d_rstd, C), rstd, tol<S>, "channel_moment + batchnorm_finish (rstd)" + what);
      cu::batchnorm_apply(f.q, rows, C, d_x.data(), d_mean.data(), d_rstd.data(), dg, dbeta_in, d_y.data());
      expect_close(to_host(f.q, d_y, n), y, tl, "batchnorm_apply" + what);
      cu::batchnorm_backward_sums(f.q, rows, C, d_x.data(), d_mean.data(), d_rstd.data(), d_dy.data(),
                                  d_sums.data(), ddg, ddb);
      expect_close(to_host(f.q, d_sums, 2 * C), sums, tol<S>, "batchnorm_backward_sums" + what);
      expect_close(to_host(f.q, d_dgamma, C), dgamma, tol<S>, "batchnorm_backward_sums (dgamma)" + what);
      expect_close(to_host(f.q, d_dbeta, C), dbeta, tol<S>, "batchnorm_backward_sums (dbeta)" + what);
      cu::batchnorm_backward_data(f.q, rows, C, count, d_x.data(), d_mean.data(), d_rstd.data(), dg, d_dy.data(),
                                  d_sums.data(), d_dx.data());
      expect_close(to_host(f.q, d_dx, n), dx, tl, "batchnorm_backward_data" + what);
    }
}

#include "doctest_main.hpp"
