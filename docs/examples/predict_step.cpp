// A plan's predicted step time: on a data sheet's description at compile time, and on this
// machine's own, measured at run time (runtime/calibrate.hpp), beside the measured step.
//   g++ -std=c++20 -O2 -Iinclude predict_step.cpp -o predict_step -lopenblas -pthread
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include <strata/plan/predict.hpp>
#include <strata/runtime/calibrate.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>
using namespace strata;

constexpr int V = 64, S = 64, D = 64;
using Block = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using P = Plan<Replicate<1, Embedding<V, D>, Repeat<2, Block>, Linear<D, V>>, Input<S>, Loss<SoftmaxCrossEntropy>,
               MicroBatch<4>, NumMicroBatch<2>>;

// A compile-time number on the A100's description: where its time goes.
constexpr cost::step_estimate on_a100 = cost::predict<P>(hw::A100_80GB::value);
static_assert(on_a100.step_s > 0 && on_a100.compute_s < on_a100.step_s && on_a100.tensor_comm_s == 0);

int main(int argc, char** argv) {
  auto w = strata::init<Host>(argc, argv);
  // products of this model's size: 4 sequences of 64 rows by 64 features
  const hardware here = calibrate(w, {.gemm_size = 256});
  const double predicted = cost::predict<P>(here).step_s;

  auto train = make_trainer<P>(w, Adam{.lr = 1e-3});
  std::vector<float> x(std::size_t(P::replica_batch) * S);
  std::vector<std::int32_t> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % V), y[i] = std::int32_t((i + 1) % V);
  const batch_view<float> batch{.inputs = x, .labels = y, .samples = std::size_t(P::replica_batch)};
  train.step(batch);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) train.step(batch);
  const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;
  std::printf("this machine: GEMM %.1f GFLOP/s, copy %.1f GB/s; step predicted %.3f ms, measured %.3f ms\n",
              here.flops_fp32 * 1e-9, here.hbm_bytes_per_s * 1e-9, predicted * 1e3, measured * 1e3);
  std::printf("on the A100 description: %.1f us\n", on_a100.step_s * 1e6);
  return std::isfinite(predicted) && predicted > 0 ? 0 : 1;
}
