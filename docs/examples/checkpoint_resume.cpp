// Checkpoints: save after some steps, then continue — in this plan or in another. Under 2
// processes the checkpoint written by data parallelism (DP2) is resumed as tensor
// parallelism (Split<2>), and both continuations end with the same parameters (float64).
// The directory holds one safetensors file per rank and index.json.
// mpi-ranks: 1 2
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

using DP = Plan<Replicate<1, Linear<16, 64>, GeLU, LayerNorm<64>, Linear<64, 4>>, Loss<SoftmaxCrossEntropy>,
                MicroBatch<8>, Element<double>>;
using TP = Plan<Split<2, Linear<16, 64>, GeLU, LayerNorm<64>, Linear<64, 4>>, Loss<SoftmaxCrossEntropy>,
                MicroBatch<16>, Element<double>>;

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  const std::string dir = "checkpoint_resume_example";
  const AdamW opt{.lr = 1e-2};
  // 16 samples per step in both plans; each replica takes its share of the global batch
  auto batch = [](int step, std::vector<double>& x, std::vector<std::int32_t>& y) {
    x.resize(16 * 16), y.resize(16);
    verify::random_data<DP>(42)(step, std::span<double>(x), std::span<std::int32_t>(y));
  };
  auto train = [&](auto& t, int from, int to) {
    std::vector<double> x;
    std::vector<std::int32_t> y;
    const std::size_t n = 16 / std::size_t(t.data_parallel()), first = std::size_t(t.coord().data) * n;
    for (int s = from; s < to; ++s) {
      batch(s, x, y);
      t.step({.inputs = std::span<const double>(x).subspan(first * 16, n * 16),
              .labels = std::span<const std::int32_t>(y).subspan(first, n),
              .samples = n});
    }
  };
  if (world.size() == 1) {  // one process: stop and resume in the same plan
    auto a = make_trainer<DP>(world, opt);
    train(a, 0, 5);
    a.save_checkpoint(dir, {{"data.position", "5"}});
    train(a, 5, 10);
    auto b = make_trainer<DP>(world, opt);
    const checkpoint_info info = b.load_checkpoint(dir);
    train(b, std::stoi(info.user.at("data.position")), 10);
    std::filesystem::remove_all(dir);
    const bool same = a.gather_parameters() == b.gather_parameters();  // bit for bit
    std::printf("resumed after step %lld: %s\n", info.step, same ? "bit-identical" : "DIFFERENT");
    return same ? 0 : 1;
  }
  auto dp = make_trainer<DP>(world, opt);
  train(dp, 0, 5);
  dp.save_checkpoint(dir);
  train(dp, 5, 10);
  auto tp = make_trainer<TP>(world, opt);
  tp.load_checkpoint_from<DP>(dir);  // the reading map from DP's layout, at compile time
  train(tp, 5, 10);
  const auto a = dp.gather_parameters(), b = tp.gather_parameters();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].size(); ++k)
      for (std::size_t j = 0; j < a[i][k].size(); ++j) worst = std::max(worst, std::abs(a[i][k][j] - b[i][k][j]));
  world.comm().agree(true, "");
  if (world.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::printf("DP2 checkpoint resumed as Split<2>: largest parameter difference %.2e\n", worst);
  }
  return worst < 1e-12 ? 0 : 1;
}
