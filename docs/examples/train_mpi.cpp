// One process per device under MPI:
//   mpicxx -std=c++20 -Iinclude train_mpi.cpp -o train_mpi && mpiexec -n 4 ./train_mpi
// strata::init picks MPI when the program is built with it (a world of one otherwise).
// A world size the plan cannot use is an error on every rank; here it falls back to
// data parallelism. Each run is then checked against the same model on one device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <stdexcept>
#include <vector>

#include <strata/data/sharding.hpp>
#include <strata/runtime/trainer.hpp>
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

// A plan's layers (loss included) on one device, the global batch G in one micro-batch.
template <class List>
struct one_device;
template <class... L>
struct one_device<type_list<L...>> {
  using type = Replicate<1, L...>;
};
template <class P, int G>
using Reference = Plan<typename one_device<typename P::layers>::type, MicroBatch<G>, InputShape<P::input_shape>>;

// The same data on every rank: the label is the argmax of a fixed linear map of the inputs.
void make_data(int n, std::vector<double>& x, std::vector<std::int32_t>& y) {
  std::mt19937 g(5);
  std::normal_distribution<double> nd;
  std::vector<double> w(16 * 4);
  for (double& v : w) v = nd(g);
  x.resize(std::size_t(n) * 16);
  y.assign(std::size_t(n), 0);
  for (double& v : x) v = nd(g);
  for (std::size_t i = 0; i < std::size_t(n); ++i) {
    double best = -1e300;
    for (int c = 0; c < 4; ++c) {
      double s = 0;
      for (std::size_t k = 0; k < 16; ++k) s += x[i * 16 + k] * w[k * 4 + std::size_t(c)];
      if (s > best) best = s, y[i] = c;
    }
  }
}

// Rows `idx` of the data set, as a batch_view over the buffers.
batch_view<double> gather(const std::vector<std::int64_t>& idx, const std::vector<double>& xs,
                          const std::vector<std::int32_t>& ys, std::vector<double>& x, std::vector<std::int32_t>& y) {
  x.resize(idx.size() * 16);
  y.resize(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    std::copy_n(xs.begin() + idx[i] * 16, 16, x.begin() + std::ptrdiff_t(i) * 16);
    y[i] = ys[std::size_t(idx[i])];
  }
  return {x.data(), y.data(), idx.size(), 16, 1};
}

constexpr int samples = 512;
constexpr std::uint64_t data_seed = 9, init_seed = 11;
const SGD sgd{.lr = 0.1, .momentum = 0.9};

// Trains R on this process alone from the same seed on the whole global batches, and
// compares every step's loss and, at the end, every parameter.
template <class R, class Trainer>
bool matches_one_device(Trainer& t, const std::vector<double>& losses, const std::vector<double>& xs,
                        const std::vector<std::int32_t>& ys) {
  auto local = local_world<Host>();
  auto ref = make_trainer<R, double>(local, sgd, init_seed);
  data::shard_plan all(samples, 0, 1, R::micro_batch, data_seed);  // one rank: the whole global batch
  const auto perm = all.permutation(0);
  std::vector<double> x;
  std::vector<std::int32_t> y;
  double worst = 0;
  for (std::size_t s = 0; s < losses.size(); ++s) {
    const step_result r = ref.step(gather(all.indices(perm, std::int64_t(s)), xs, ys, x, y));
    worst = std::max(worst, std::abs(r.loss - losses[s]));
  }
  const auto a = t.gather_parameters(), b = ref.gather_parameters();  // collective on t's world
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t k = 0; k < a[i].size(); ++k)
      for (std::size_t e = 0; e < a[i][k].size(); ++e) worst = std::max(worst, std::abs(a[i][k][e] - b[i][k][e]));
  return worst < 1e-9;
}

template <class P, class World>
int train(World& world) {
  // Throws std::invalid_argument on every rank if world.size() is not a multiple of
  // P::devices_per_replica: no rank is left waiting in a collective.
  auto t = make_trainer<P, double>(world, sgd, init_seed);
  const int dp = t.data_parallel();
  if (world.rank() == 0)
    std::printf("%d processes: %d replicas x %d stages x %d devices per stage, global batch %d\n", world.size(), dp,
                P::stages, P::part_devices, P::global_batch(world.size()));

  std::vector<double> xs, x;
  std::vector<std::int32_t> ys, y;
  make_data(samples, xs, ys);
  // Replica d takes shard d of each global batch: in rank order, they are the global batch.
  data::shard_plan mine(samples, t.coord().data, dp, P::micro_batch * P::num_micro_batch, data_seed);
  const auto perm = mine.permutation(0);
  std::vector<double> losses;
  for (std::int64_t s = 0; s < mine.steps_per_epoch(); ++s)
    losses.push_back(t.step(gather(mine.indices(perm, s), xs, ys, x, y)).loss);  // loss: the same on every rank
  if (world.rank() == 0) std::printf("loss %.4f -> %.4f\n", losses.front(), losses.back());

  // The reference needs the global batch as a constant: check the world sizes listed here.
  constexpr int B = P::micro_batch * P::num_micro_batch;
  bool same = true;
  if (dp == 1) same = matches_one_device<Reference<P, B>>(t, losses, xs, ys);
  else if (dp == 2) same = matches_one_device<Reference<P, 2 * B>>(t, losses, xs, ys);
  // agree: if any rank disagrees, every rank throws the same comm::comm_error
  world.comm().agree(same, "the run does not match the one-device reference");
  if (world.rank() == 0 && dp <= 2) std::printf("matches the same model trained on one device\n");
  return losses.back() < losses.front() ? 0 : 1;
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    try {
      return train<Hybrid>(world);
    } catch (const std::invalid_argument& e) {  // the world-size check, on every rank alike
      if (world.rank() == 0) std::printf("%s\nrunning the data-parallel plan instead\n", e.what());
    }
    return train<DataParallel>(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[strata] rank %d: %s\n", world.rank(), e.what());
    return 1;
  }
}
