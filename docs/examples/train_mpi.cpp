// One process per device under MPI:
//   mpicxx -std=c++20 -Iinclude -DSTRATA_WITH_MPI train_mpi.cpp -o train_mpi -lopenblas && mpiexec -n 4 ./train_mpi
// strata::init picks MPI when the program is built with it (a world of one otherwise).
// A world size the plan cannot use is an error on every rank; here it falls back to
// data parallelism. Each run is then checked against the same model on one device.
// mpi-ranks: 1 2 4
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <span>
#include <vector>

#include <strata/data/sharding.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

using CE = Loss<SoftmaxCrossEntropy>;
// DP × PP2 × TP2: two pipeline stages, each a Megatron pair over 2 devices (4 a replica).
using Hybrid = Plan<Pipeline<Split<2, Linear<16, 32>, ReLU, Linear<32, 16>>, Split<2, Linear<16, 32>, ReLU, Linear<32, 4>>>,
                    CE, MicroBatch<4>, NumMicroBatch<4>>;
// The same layers, one device a replica: runs on any number of processes.
using DataParallel = Plan<Replicate<1, Linear<16, 32>, ReLU, Linear<32, 16>, Linear<16, 32>, ReLU, Linear<32, 4>>, CE,
                          MicroBatch<4>, NumMicroBatch<4>>;
static_assert(Hybrid::devices_per_replica == 4 && DataParallel::devices_per_replica == 1);
static_assert(Hybrid::input_elems == 16 && Hybrid::classes == 4 && Hybrid::labels_per_sample == 1);

// The same data on every rank: the label is the argmax of a fixed linear map of the inputs.
struct dataset {
  std::vector<double> x;
  std::vector<std::int32_t> y;
  explicit dataset(int n) : x(std::size_t(n) * 16), y(std::size_t(n)) {
    std::mt19937 g(5);
    std::normal_distribution<double> nd;
    std::vector<double> w(16 * 4);
    for (double& v : w) v = nd(g);
    for (double& v : x) v = nd(g);
    for (std::size_t i = 0; i < y.size(); ++i) {
      double best = -1e300;
      for (int c = 0; c < 4; ++c) {
        double s = 0;
        for (std::size_t k = 0; k < 16; ++k) s += x[i * 16 + k] * w[k * 4 + std::size_t(c)];
        if (s > best) best = s, y[i] = c;
      }
    }
  }
  // rows `idx` into x and y
  void gather(std::span<const std::int64_t> idx, std::span<double> xo, std::span<std::int32_t> yo) const {
    for (std::size_t i = 0; i < idx.size(); ++i) {
      std::copy_n(x.begin() + idx[i] * 16, 16, xo.begin() + std::ptrdiff_t(i) * 16);
      yo[i] = y[std::size_t(idx[i])];
    }
  }
};

constexpr int samples = 512;
constexpr std::uint64_t data_seed = 9;
const SGD sgd{.lr = 0.1, .momentum = 0.9};

template <class P, class World>
int train(World& world, const dataset& data) {
  // Throws an agreed_error on every rank if world.size() is not a multiple of
  // P::devices_per_replica: no rank is left waiting in a collective.
  auto t = make_trainer<P, double>(world, sgd);
  const int dp = t.data_parallel();
  if (world.rank() == 0)
    std::printf("%d processes: %d replicas x %d stages x %d devices per stage, global batch %d\n", world.size(), dp,
                P::stages, P::part_devices, P::global_batch(world.size()));
  // Replica d takes shard d of each global batch: in rank order, they are the global batch.
  data::shard_plan mine(samples, t.coord().data, dp, P::replica_batch, data_seed);
  const auto perm = mine.permutation(0);
  std::vector<std::int64_t> idx(P::replica_batch);
  std::vector<double> x(idx.size() * 16);
  std::vector<std::int32_t> y(idx.size());
  std::vector<double> losses;
  for (std::int64_t s = 0; s < mine.steps_per_epoch(); ++s) {
    mine.indices(perm, s, idx);
    data.gather(idx, x, y);
    losses.push_back(t.step({.inputs = x, .labels = y, .samples = idx.size()}).loss);  // the same on every rank
  }
  if (world.rank() == 0) std::printf("loss %.4f -> %.4f\n", losses.front(), losses.back());

  // The same model on one device, trained on the same global batches, whatever the world:
  data::shard_plan all(samples, 0, 1, P::global_batch(world.size()), data_seed);
  const auto order = all.permutation(0);
  auto batches = [&](int step, std::span<double> xs, std::span<std::int32_t> ys) {
    data.gather(all.indices(order, step % all.steps_per_epoch()), xs, ys);
  };
  const verify::report r = verify::against_one_device<P, double>(world, sgd, 4, batches);
  if (world.rank() == 0) std::printf("%s", r.text().c_str());
  return r.ok() && losses.back() < losses.front() ? 0 : 1;
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const dataset data(samples);
    try {
      return train<Hybrid>(world, data);
    } catch (const agreed_error& e) {  // the world-size check, on every rank alike
      if (world.rank() == 0) std::printf("%s\nrunning the data-parallel plan instead\n", e.what());
    }
    return train<DataParallel>(world, data);
  } catch (const std::exception& e) {
    return world.fail(e);  // agreed: every rank returns 1; otherwise every rank is ended
  }
}
