// Shared harness: train a plan on the MPI world and the same model on one device
// (a world of one process), from the same seed and data, and compare every step's
// loss and every parameter at the end.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <strata/comm/counting.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

namespace equiv {

using namespace strata;

template <class List>
struct single_device;
template <class... L>
struct single_device<type_list<L...>> {
  using type = Replicate<1, L...>;
};

// The same layers (loss included) on one device, whole global batch in one micro-batch.
template <class P, int GlobalBatch>
using reference_plan =
    Plan<typename single_device<typename P::layers>::type, MicroBatch<GlobalBatch>, InputShape<P::input_shape>>;

struct result {
  double worst_loss = 0.0, worst_param = 0.0;
  bool bytes_match = true;  // every kind of collective moved what the plan says
};

// The bytes one training step of P moves on this rank, per kind of collective, as the
// plan's cost model counts them for compute type T (Plan::communication_of), plus the
// world all-reduce of the step's loss books.
template <class P, class T>
std::array<long long, 7> planned_bytes(int stage, int dp, int world) {
  const auto t = P::communication_of(stage, dp, sizeof(T), sizeof(stat_t<T>), sizeof(master_t<T>));
  std::array<long long, 7> b{};
  for (int i = 0; i < t.size; ++i) b[static_cast<std::size_t>(t.rows[static_cast<std::size_t>(i)].kind)] += t.rows[static_cast<std::size_t>(i)].bytes;
  if (world > 1) b[static_cast<std::size_t>(collective::all_reduce)] += P::loss_books_bytes;
  return b;
}

inline double rel(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-30}); }

// Deterministic data for a step: inputs N(0,1) (or token ids below `vocab`), labels.
template <class T>
void make_batch(int step, std::size_t samples, std::size_t in_elems, std::size_t labels_per, int classes, int vocab,
                std::vector<T>& x, std::vector<std::int32_t>& y) {
  std::mt19937_64 g(1234 + static_cast<unsigned>(step));
  std::normal_distribution<double> nd;
  x.resize(samples * in_elems);
  y.resize(samples * labels_per);
  for (auto& v : x) v = vocab > 0 ? static_cast<T>(g() % static_cast<unsigned>(vocab)) : static_cast<T>(nd(g));
  for (auto& v : y) v = static_cast<std::int32_t>(g() % static_cast<unsigned>(classes));
}

// The parallel run trains in T, the one-device reference in R (R = double checks a
// bf16 plan against exact arithmetic). Both read the same values: the batch is made
// in the parallel run's master type and widened for the reference.
template <class P, class T, class World, class R = T>
result compare(World& w, optimizer opt, int steps, int vocab = 0) {
  using XT = master_t<T>;
  using XR = master_t<R>;
  constexpr int mb = P::micro_batch, m = P::num_micro_batch;
  const int dp = P::data_parallel(w.size());
  const int global = dp * mb * m;
  constexpr std::size_t in_elems = static_cast<std::size_t>(P::input_shape.numel());
  const auto& loss_layer = P::layer_plans[static_cast<std::size_t>(P::num_layers - 1)];
  const std::size_t labels_per = static_cast<std::size_t>(loss_layer.in.numel() / loss_layer.in.last());
  const int classes = loss_layer.in.last();

  // The parallel run counts the bytes its communicators move (a private copy of the world).
  using C = typename World::comm_type;
  comm::counting<C> counted(w.comm().split(0, w.rank()));
  strata::world<typename World::backend_type, comm::counting<C>> cw(nullptr, &counted);
  cw.queue().set_threads(w.queue().threads());
  auto par = make_trainer<P, T>(cw, opt, 77);
  auto local = local_world<typename World::backend_type>();
  result res;
  // the reference needs the global batch size at compile time: dispatch on it
  auto run_reference = [&]<int G>(std::integral_constant<int, G>) {
    using RP = reference_plan<P, G>;
    auto ref = make_trainer<RP, R>(local, opt, 77);
    std::vector<XT> x;
    std::vector<XR> xr;
    std::vector<std::int32_t> y;
    const int d = par.coord().data;
    for (int s = 0; s < steps; ++s) {
      make_batch<XT>(s, std::size_t(global), in_elems, labels_per, classes, vocab, x, y);
      xr.assign(x.begin(), x.end());
      counted.clear();
      const step_result a = par.step({x.data() + std::size_t(d) * mb * m * in_elems,
                                      y.data() + std::size_t(d) * mb * m * labels_per, std::size_t(mb * m), in_elems,
                                      labels_per});
      if (s == 0) {
        // the device holds exactly the lowered buffer plan of its stage
        CHECK(par.activation_bytes() ==
              P::lowering::arena_bytes(par.coord().stage, sizeof(T), sizeof(stat_t<T>)));
        const auto want = planned_bytes<P, T>(par.coord().stage, dp, w.size());
        for (std::size_t k = 1; k < want.size(); ++k)
          if (want[k] != counted.books().bytes[k]) {
            res.bytes_match = false;
            std::printf("rank %d stage %d: %s moved %lld bytes, the plan says %lld\n", w.rank(), par.coord().stage,
                        std::string(to_string(static_cast<collective>(k))).c_str(), counted.books().bytes[k], want[k]);
          }
      }
      const step_result b = ref.step({xr.data(), y.data(), std::size_t(global), in_elems, labels_per});
      res.worst_loss = std::max(res.worst_loss, rel(a.loss, b.loss));
    }
    const auto pa = par.gather_parameters();
    const auto pb = ref.gather_parameters();
    REQUIRE(pa.size() == pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i)
      for (std::size_t k = 0; k < pa[i].size(); ++k) {
        double num = 0, den = 0;
        for (std::size_t e = 0; e < pa[i][k].size(); ++e) {
          num += (pa[i][k][e] - pb[i][k][e]) * (pa[i][k][e] - pb[i][k][e]);
          den += pb[i][k][e] * pb[i][k][e];
        }
        res.worst_param = std::max(res.worst_param, std::sqrt(num / std::max(den, 1e-300)));
      }
  };
  switch (global) {
    case 4: run_reference(std::integral_constant<int, 4>{}); break;
    case 8: run_reference(std::integral_constant<int, 8>{}); break;
    case 16: run_reference(std::integral_constant<int, 16>{}); break;
    case 32: run_reference(std::integral_constant<int, 32>{}); break;
    case 64: run_reference(std::integral_constant<int, 64>{}); break;
    default: FAIL("add global batch " << global << " to the dispatch");
  }
  return res;
}

}  // namespace equiv
