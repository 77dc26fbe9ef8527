// Causal attention on the host backend, forward + backward, float32: strata's flash
// attention (backend/attention.hpp) at Seq 512 to 8192, 8 heads of 64, one sequence,
// against the same run of pytorch_attention.py (PyTorch's CPU scaled_dot_product_attention)
// on the same threads (bench/host/run_attention.sh prints the ratios). Also the memory
// each keeps for the backward: flash's o and log-sum-exps against the [Seq, Seq]
// probabilities of attention written as two GEMMs around a softmax.
// `bench_attention <threads> [reps]`.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <strata/backend/host/backend.hpp>

using namespace strata;

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1u;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  backend::host::queue q;
  q.set_threads(threads);
  const std::size_t heads = 8, dh = 64;
  for (std::size_t seq : {512, 1024, 2048, 4096, 8192}) {
    const std::size_t n = heads * seq * dh;
    std::vector<float> qv(n), kv(n), vv(n), o(n), go(n), gq(n), gk(n), gv(n), lse(heads * seq);
    std::mt19937 g(1);
    std::normal_distribution<float> nd;
    for (auto* v : {&qv, &kv, &vv, &go})
      for (auto& x : *v) x = nd(g);
    const backend::flash_shape f{.items = heads, .q_len = seq, .k_len = seq, .dh = dh,
                                 .scale = 1.0 / std::sqrt(double(dh)), .causal = true};
    double best_fwd = 1e30, best_all = 1e30;
    // short lengths get more passes: their few milliseconds are at the mercy of the first
    // wake-ups of the process's threads (one warm-up pass first either way)
    const int passes = seq <= 1024 ? 4 * reps : reps;
    for (int r = 0; r < passes + 1; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      backend::flash_attention_forward(q, f, qv.data(), kv.data(), vv.data(), o.data(), lse.data());
      const auto t1 = std::chrono::steady_clock::now();
      backend::flash_attention_backward(q, f, qv.data(), kv.data(), vv.data(), static_cast<const float*>(o.data()),
                                        static_cast<const float*>(go.data()), static_cast<const float*>(lse.data()),
                                        gq.data(), gk.data(), gv.data());
      const auto t2 = std::chrono::steady_clock::now();
      if (r == 0) continue;
      best_fwd = std::min(best_fwd, std::chrono::duration<double, std::milli>(t1 - t0).count());
      best_all = std::min(best_all, std::chrono::duration<double, std::milli>(t2 - t0).count());
    }
    // causal: half the 4·Seq²·dh forward multiply-adds per head, 2.5x that for the backward
    const double flops = 3.5 * 4.0 * double(seq) * double(seq) * double(dh) * double(heads) / 2.0;
    const double kept = double(heads * seq) * (dh * 4 + 4);  // o and lse (bytes), flash
    const double squares = double(heads * seq * seq) * 4;     // the probabilities, GEMM form
    std::printf("strata seq %zu threads %u forward %.2f ms forward+backward %.2f ms %.1f GFLOP/s kept %.1f MiB "
                "(probabilities would be %.1f MiB)\n",
                seq, threads, best_fwd, best_all, flops / best_all * 1e-6, kept / 1048576.0, squares / 1048576.0);
    std::fflush(stdout);
  }
}
