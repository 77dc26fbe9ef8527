// The cost model's GEMM time (plan/cost.hpp, cost::gemm_s) against the GEMMs we timed on an
// H100 (bench/results/gpu_nvidia_h100_80gb_hbm3_2026-11-24.md, "GEMMs of one step": each call
// timed alone, median per call; where a shape was timed more than once, the median of those).
// hw::H100_80GB's gemm_efficiency was derived from the large bf16 rows, so those rows check the
// wave arithmetic only; the other rows (other shapes, TF32, FP32) are out of sample.
//
//   bash bench/megatron/run.sh        # prints this table into bench/results/megatron_a100.md
#include <algorithm>
#include <array>
#include <cstdio>
#include <vector>

#include <strata/plan/cost.hpp>

using namespace strata;

namespace {

struct measured {
  const char* what;
  const char* math;
  double m, n, k;
  std::vector<double> ms;  // the result file's per-call medians of this shape
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main() {
  constexpr hardware h = hw::H100_80GB::value;
  // H100 SXM5 data sheet, dense: bf16 989, TF32 494.7 (989.4 with sparsity), FP32 (non-tensor) 67 TFLOP/s
  auto peak = [&](const char* math) {
    return math[0] == 'b' ? h.flops_bf16 : math[1] == 'f' ? 494.7e12 : h.flops_fp32;
  };
  const std::array<measured, 13> rows{{
      {"forward L1-L4", "bf16", 8192, 4096, 4096, {0.3506, 0.3707, 0.4002, 0.3723}},
      {"dgrad L2-L4", "bf16", 8192, 4096, 4096, {0.3570, 0.4290, 0.4150}},
      {"wgrad L1-L4", "bf16", 4096, 4096, 8192, {0.3684, 0.3700, 0.4283, 0.4017}},
      {"forward L5", "bf16", 8192, 10, 4096, {0.0412}},
      {"wgrad L5", "bf16", 4096, 10, 8192, {0.0376}},
      {"dgrad L5", "bf16", 8192, 4096, 10, {0.0462}},
      {"forward L1-L4", "tf32", 8192, 4096, 4096, {0.8272, 0.8951, 0.8943, 0.9067}},
      {"dgrad L2-L4", "tf32", 8192, 4096, 4096, {0.7542, 0.7550, 0.7873}},
      {"wgrad L1-L4", "tf32", 4096, 4096, 8192, {1.1220, 1.2854, 1.3217, 1.3057}},
      {"forward L1-L4", "fp32", 8192, 4096, 4096, {5.3762, 5.4033, 5.3711, 5.3723}},
      {"wgrad L1-L4", "fp32", 4096, 4096, 8192, {5.2800, 5.2716, 5.2707, 5.2738}},
      {"forward L1 (demo MLP)", "fp32", 64, 512, 784, {0.0133}},
      {"wgrad L1 (demo MLP)", "fp32", 784, 512, 64, {0.0119}},
  }};
  std::printf("| GEMM | math | M × N × K | measured ms | model ms | model / measured |\n|---|---|---|---:|---:|---:|\n");
  for (const measured& r : rows) {
    const double eb = r.math[0] == 'b' ? 2 : 4;
    const double t = median(r.ms), model = 1e3 * cost::gemm_s(1, r.m, r.n, r.k, eb, peak(r.math), h);
    std::printf("| %s | %s | %.0f × %.0f × %.0f | %.4f | %.4f | %.2f |\n", r.what, r.math, r.m, r.n, r.k, t, model,
                model / t);
  }
  return 0;
}
