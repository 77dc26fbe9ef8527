// strata's host GEMM (backend::host::gemm: argument checks, C split into one block per
// thread of strata's pool, one single-threaded BLAS call per block) against the same
// BLAS called directly with its own threading at the same thread count, on the shapes of the seed MLP's
// training step and two square sizes, in one run. nccl-tests' protocol: a separate
// correctness pass, a warm-up, then timed blocks alternating the two callers (so both
// see the same machine state), each side's median block reported. `bench_gemm <threads>`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include <strata/backend/host/gemm.hpp>

using strata::backend::trans;
namespace host = strata::backend::host;

// OpenBLAS's own worker threads spin (sched_yield) for about 0.1 s after a threaded
// call: let them fall asleep before the other caller is timed.
void quiet() { std::this_thread::sleep_for(std::chrono::milliseconds(150)); }

struct shape {
  int M, N, K;
  trans ta, tb;
  const char* what;
};

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1u;
  host::queue q(threads);
  const shape shapes[] = {
      {64, 512, 784, trans::N, trans::N, "Linear1 fwd b64"},    {784, 512, 64, trans::T, trans::N, "Linear1 dW b64"},
      {64, 512, 512, trans::N, trans::N, "Linear2 fwd b64"},    {64, 512, 512, trans::N, trans::T, "Linear2 dX b64"},
      {64, 10, 512, trans::N, trans::N, "Linear3 fwd b64"},     {256, 512, 784, trans::N, trans::N, "Linear1 fwd b256"},
      {784, 512, 256, trans::T, trans::N, "Linear1 dW b256"},   {256, 512, 512, trans::N, trans::T, "Linear2 dX b256"},
      {1024, 512, 784, trans::N, trans::N, "Linear1 fwd b1024"}, {784, 512, 1024, trans::T, trans::N, "Linear1 dW b1024"},
      {1024, 512, 512, trans::N, trans::T, "Linear2 dX b1024"}, {512, 512, 1024, trans::T, trans::N, "Linear2 dW b1024"},
      {256, 256, 256, trans::N, trans::N, "square 256"},        {1024, 1024, 1024, trans::N, trans::N, "square 1024"}};
#ifdef OPENBLAS_VERSION
  std::printf("BLAS: %s, kernels for %s\n", openblas_get_config(), openblas_get_corename());
#endif
  std::printf("%-18s %5s %5s %5s  %10s %10s  %s\n", "shape", "M", "N", "K", "strata", "BLAS", "strata/BLAS");
  std::mt19937 g(1);
  std::uniform_real_distribution<float> d(-1, 1);
  double worst = 1e30;
  for (const shape& s : shapes) {
    const int lda = s.ta == trans::N ? s.K : s.M, ldb = s.tb == trans::N ? s.N : s.K;
    std::vector<float> A(std::size_t(s.M) * s.K), B(std::size_t(s.K) * s.N), C1(std::size_t(s.M) * s.N),
        C2(C1.size());
    for (auto& v : A) v = d(g);
    for (auto& v : B) v = d(g);
    auto ours = [&] { host::gemm<float>(q, s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C1.data(), s.N); };
    auto blas = [&] {
#ifdef OPENBLAS_VERSION
      openblas_set_num_threads(int(threads));  // OpenBLAS's own threading (strata's calls reset it to 1)
#endif
      cblas_sgemm(CblasRowMajor, s.ta == trans::N ? CblasNoTrans : CblasTrans,
                  s.tb == trans::N ? CblasNoTrans : CblasTrans, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 0.f,
                  C2.data(), s.N);
    };
    // correctness pass: the same numbers as the BLAS (same thread count, same call)
    ours();
    blas();
    double diff = 0;
    for (std::size_t i = 0; i < C1.size(); ++i) diff = std::max(diff, double(std::abs(C1[i] - C2[i])));
    if (diff > 1e-3) {
      std::printf("%s: strata and the BLAS differ by %g\n", s.what, diff);
      return 1;
    }
    const double flops = 2.0 * s.M * s.N * s.K;
    // warm-up, and a block size of about 0.2 s of work, so the wake-up after each
    // quiet period is noise
    const auto w0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i) ours(), blas();
    const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count() / 6;
    const int per_block = std::clamp(int(0.2 / one), 3, 20000);
    // alternate the callers in blocks; each side's median block is its time
    constexpr int blocks = 5;
    std::vector<double> t_ours, t_blas;
    for (int rep = 0; rep < blocks; ++rep) {
      quiet();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < per_block; ++i) ours();
      auto t1 = std::chrono::steady_clock::now();
      quiet();
      auto t2 = std::chrono::steady_clock::now();
      for (int i = 0; i < per_block; ++i) blas();
      auto t3 = std::chrono::steady_clock::now();
      t_ours.push_back(std::chrono::duration<double>(t1 - t0).count() / per_block);
      t_blas.push_back(std::chrono::duration<double>(t3 - t2).count() / per_block);
    }
    std::nth_element(t_ours.begin(), t_ours.begin() + blocks / 2, t_ours.end());
    std::nth_element(t_blas.begin(), t_blas.begin() + blocks / 2, t_blas.end());
    const double gf_ours = flops / t_ours[blocks / 2] / 1e9, gf_blas = flops / t_blas[blocks / 2] / 1e9;
    worst = std::min(worst, gf_ours / gf_blas);
    std::printf("%-18s %5d %5d %5d  %7.1f GF/s %7.1f GF/s  %.3f\n", s.what, s.M, s.N, s.K, gf_ours, gf_blas,
                gf_ours / gf_blas);
  }
  std::printf("threads %u: worst strata/BLAS ratio %.3f (goal >= 0.95)\n", threads, worst);
}
