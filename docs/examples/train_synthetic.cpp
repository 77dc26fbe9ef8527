// Training on the host in one process: local_world<Host>() is a world of one, so the
// plan's replica must be one device. NumMicroBatch<4> runs as gradient accumulation.
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include <strata/data/sharding.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

using Layers = Replicate<1, Linear<16, 32>, ReLU, Linear<32, 16>, Linear<16, 32>, ReLU, Linear<32, 4>>;
using P = Plan<Layers, Loss<SoftmaxCrossEntropy>, MicroBatch<8>, NumMicroBatch<4>>;
static_assert(P::devices_per_replica == 1 && P::global_batch(1) == 32);

// The same layers as DP × PP2 × TP2: one replica is 4 processes (mpiexec -n 4, 8, ...).
using Hybrid = Plan<Pipeline<Split<2, Linear<16, 32>, ReLU, Linear<32, 16>>, Split<2, Linear<16, 32>, ReLU, Linear<32, 4>>>,
                    Loss<SoftmaxCrossEntropy>, MicroBatch<4>, NumMicroBatch<4>>;
static_assert(Hybrid::devices_per_replica == 4 && Hybrid::global_batch(8) == 2 * 16);

// A learnable task: the label is the argmax of a fixed linear map of the 16 inputs.
void make_data(int n, unsigned seed, std::vector<float>& x, std::vector<std::int32_t>& y) {
  std::mt19937 teacher(7), g(seed);
  std::normal_distribution<float> nd;
  std::vector<float> w(16 * 4);
  for (float& v : w) v = nd(teacher);
  x.resize(std::size_t(n) * 16);
  y.resize(std::size_t(n));
  for (float& v : x) v = nd(g);
  for (int i = 0; i < n; ++i) {
    float best = -1e30f;
    for (int c = 0; c < 4; ++c) {
      float s = 0;
      for (int k = 0; k < 16; ++k) s += x[std::size_t(i) * 16 + k] * w[std::size_t(k) * 4 + c];
      if (s > best) best = s, y[std::size_t(i)] = c;
    }
  }
}

int main() {
  auto world = local_world<Host>();

  // A plan whose replica needs 4 devices cannot run on a world of one: make_trainer says so.
  bool refused = false;
  try {
    auto t = make_trainer<Hybrid>(world, SGD{});
  } catch (const agreed_error& e) {  // thrown alike on every rank of a job
    std::printf("%s\n", e.what());  // "strata: world size 1 is not a multiple of the 4 devices ..."
    refused = true;
  }
  if (!refused) return 1;

  auto train = make_trainer<P>(world, AdamW{.lr = 1e-2}, /*seed=*/42);
  std::vector<float> xs, xt, x(32 * 16);
  std::vector<std::int32_t> ys, yt, y(32);
  make_data(1024, 1, xs, ys);  // training set
  make_data(250, 2, xt, yt);   // test set

  // Shuffled each epoch, cut into global batches of 32 (one replica: all of it).
  data::shard_plan shards(1024, /*dp_rank=*/0, /*dp_size=*/1, /*batch_per_rank=*/32, /*seed=*/3);
  double first = 0, last = 0;  // mean loss of the first and the last epoch
  for (int epoch = 0; epoch < 4; ++epoch) {
    double sum = 0;
    const auto perm = shards.permutation(std::uint64_t(epoch));
    for (std::int64_t s = 0; s < shards.steps_per_epoch(); ++s) {
      const auto idx = shards.indices(perm, s);
      for (std::size_t i = 0; i < idx.size(); ++i) {
        for (std::size_t k = 0; k < 16; ++k) x[i * 16 + k] = xs[std::size_t(idx[i]) * 16 + k];
        y[i] = ys[std::size_t(idx[i])];
      }
      const step_result r = train.step({.inputs = x, .labels = y, .samples = 32});  // mean over the 32 samples
      sum += r.loss;
    }
    last = sum / double(shards.steps_per_epoch());
    if (epoch == 0) first = last;
    std::printf("epoch %d: mean loss %.4f\n", epoch + 1, last);
  }

  // Evaluation: samples a multiple of the micro-batch; the rows past `valid` are padding.
  xt.resize(256 * 16, 0.0f);
  yt.resize(256, 0);
  const step_result test = train.evaluate({.inputs = xt, .labels = yt, .samples = 256}, /*valid=*/250);
  std::printf("test: loss %.4f, accuracy %.3f over %lld samples\n", test.loss, double(test.correct) / double(test.rows),
              test.rows);

  // Every logical parameter, whole: [layer][tensor] → values (Linear<16, 32>: weight, bias).
  const auto params = train.gather_parameters();
  const bool shapes = params[0].size() == 2 && params[0][0].size() == 16 * 32 && params[0][1].size() == 32;

  return shapes && train.steps() == 4 * 32 && last < first && test.rows == 250 && test.correct > 150 ? 0 : 1;
}
