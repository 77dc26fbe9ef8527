// Writes a strata checkpoint of a tensor-parallel GPT (Split<2> + sequence parallelism,
// AdamW, 2 steps) into <dir>/ckpt, and the whole model as one reference file
// <dir>/model.safetensors (every tensor gathered, float64), for checkpoint_python.py.
// Run under mpiexec -n 2.
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int V = 32, S = 8, D = 16, H = 4;
using Net = Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>,
                  Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>, LayerNorm<D>, Linear<D, V>>;
using P = Plan<Net, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>, SequenceParallel, Element<double>>;

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  try {
    if (argc != 2) throw agreed_error("usage: checkpoint_python <dir>");
    const std::string dir = argv[1];
    auto t = make_trainer<P>(world, AdamW{.lr = 1e-2});
    std::vector<double> x(4 * S);
    std::vector<std::int32_t> y(4 * S);
    for (int s = 0; s < 2; ++s) {
      verify::random_data<P>(3)(s, std::span<double>(x), std::span<std::int32_t>(y));
      t.step({.inputs = x, .labels = y, .samples = 4});
    }
    t.save_checkpoint(dir + "/ckpt", {{"data.position", "2"}});
    const auto full = t.gather_parameters();
    if (world.rank() == 0) {
      io::writer w;
      for (int i = 0; i < P::num_layers; ++i)
        for (int k = 0; k < P::layer_plans[std::size_t(i)].desc.num_params; ++k)
          w.add(exec::ckpt::tensor_name<P>(i, k),
                exec::ckpt::dims(P::layer_plans[std::size_t(i)].desc.params[std::size_t(k)].shape),
                full[std::size_t(i)][std::size_t(k)]);
      w.write(dir + "/model.safetensors");
      std::printf("checkpoint_python: wrote %s/ckpt and the reference %s/model.safetensors\n", dir.c_str(), dir.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
