// Replica consistency and the evaluation's padding across ranks: trained replicas hold
// identical bits; a replica that drifted (here: initialised from another seed) is named,
// with its tensor and ranks, in the same report on every rank; the periodic check stops
// training on every rank; the verifier fails a run that does not match one device; and an
// evaluation whose partial batch lands on a middle replica
// (later replicas holding only padding) equals the one-device evaluation of the valid rows;
// and trainer::share cuts a global batch into the replicas' parts as the hand-written slices do.
// mpi-ranks: 2 4
#include "doctest_world.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

using CE = Loss<SoftmaxCrossEntropy>;
using DP = Plan<Replicate<1, Linear<8, 16>, ReLU, Linear<16, 4>>, CE, MicroBatch<4>>;
// column-parallel then row-parallel: the second Linear's bias is whole on both devices
using TP = Plan<Split<2, Linear<8, 16>, ReLU, Linear<16, 4>>, CE, MicroBatch<4>>;

template <class P>
void train(trainer<P, double, Host, comm::mpi_communicator>& t, int world, int steps) {
  const std::size_t G = std::size_t(P::global_batch(world)), S = std::size_t(P::replica_batch);
  std::vector<double> x(G * 8);
  std::vector<std::int32_t> y(G);
  auto data = verify::random_data<P>();
  for (int s = 0; s < steps; ++s) {
    data(s, std::span<double>(x), std::span<std::int32_t>(y));
    const std::size_t d = std::size_t(t.coord().data);
    t.step({.inputs = std::span<const double>(x).subspan(d * S * 8, S * 8),
            .labels = std::span<const std::int32_t>(y).subspan(d * S, S), .samples = S});
  }
}

// Every rank got the same report (compared through the world).
void same_everywhere(const std::string& text) {
  std::vector<std::int64_t> h{std::int64_t(std::hash<std::string>{}(text) & 0x7fffffffffffLL)};
  std::vector<std::int64_t> all(std::size_t(mpi_test::world().size()));
  mpi_test::world().comm().all_gather(h.data(), all.data(), 1);
  for (auto v : all) CHECK(v == h[0]);
}

}  // namespace

TEST_CASE("trained replicas hold identical bits") {
  auto& w = mpi_test::world();
  if (w.size() == 4) {
    auto t = make_trainer<DP, double>(w, Adam{.lr = 1e-2});
    train(t, w.size(), 5);
    const replica_report r = t.check_replicas();
    CHECK(r.identical);
    CHECK(r.tensors_compared == 4);  // two weights, two biases, each on four replicas
  }
  auto t = make_trainer<TP, double>(w, SGD{.lr = 0.1, .momentum = 0.9});
  train(t, w.size(), 5);
  const replica_report r = t.check_replicas();
  CHECK(r.identical);
  CHECK(r.first_difference.empty());
}

TEST_CASE("a drifted replica is named, with its tensor and ranks, on every rank") {
  auto& w = mpi_test::world();
  if (w.size() == 4) {
    auto t = make_trainer<DP, double>(w, SGD{.lr = 0.1}, w.rank() == 2 ? 99 : 1);
    const replica_report r = t.check_replicas();
    CHECK_FALSE(r.identical);
    CHECK(r.first_difference ==
          "layer 0 (Linear) parameter 'weight': rank 2 (replica 2, stage 0, device 0) holds different bits from "
          "rank 0 (replica 0, stage 0, device 0)");
    same_everywhere(r.first_difference);
    // the periodic check stops training on every rank, before anything else diverges further
    t.check_replicas_every(1);
    CHECK_THROWS_WITH_AS(train(t, w.size(), 1), doctest::Contains("after step 1 the replicas differ: layer 0"),
                         agreed_error);
  }
  if (w.size() == 2) {
    // tensor parallel, one replica: only the whole tensors have copies to compare
    auto t = make_trainer<TP, double>(w, SGD{.lr = 0.1}, w.rank() == 1 ? 99 : 1);
    const replica_report r = t.check_replicas();
    CHECK_FALSE(r.identical);
    CHECK(r.tensors_compared == 1);  // the row-parallel Linear's bias
    CHECK(r.first_difference ==
          "layer 2 (Linear) parameter 'bias': rank 1 (replica 0, stage 0, device 1) holds different bits from "
          "rank 0 (replica 0, stage 0, device 0)");
    same_everywhere(r.first_difference);
  }
}

TEST_CASE("the verifier fails a run that does not train like one device, on every rank") {
  auto& w = mpi_test::world();
  // breaks the verifier's contract: rank 1 sees other data than the others (a loader bug)
  auto skewed = [&](int step, std::span<double> x, std::span<std::int32_t> y) {
    verify::random_data<DP>()(step, x, y);
    if (w.rank() == 1) x[0] += 1.0;
  };
  const verify::report r = verify::against_one_device<DP, double>(w, SGD{.lr = 0.1}, 3, skewed);
  CHECK_FALSE(r.ok());
  CHECK(r.worst_loss > 1e-9);
  // where this rank's own reference differs, the first step already does; a rank whose
  // reference happens to agree says the difference was found on another rank
  CHECK((r.first_difference.rfind("step 1: loss", 0) == 0 || r.first_difference.rfind("on another rank", 0) == 0));
  CHECK(r.bytes_as_planned);                                 // the communication was as planned
}

TEST_CASE("the partial batch of an evaluation may land on any replica") {
  auto& w = mpi_test::world();
  if (w.size() != 4) return;
  // 16 rows, 4 a replica; with 6 valid rows replica 1 holds 2 and replicas 2 and 3 none;
  // with 10, replica 2 holds 2 and replica 3 none.
  auto t = make_trainer<DP, double>(w, SGD{});
  auto one = local_world<Host>();
  auto ref = make_trainer<verify::one_device_plan<DP>, double>(one, SGD{});  // the same seed, the same model
  std::vector<double> x(16 * 8);
  std::vector<std::int32_t> y(16);
  verify::random_data<DP>(5)(0, std::span<double>(x), std::span<std::int32_t>(y));
  const std::size_t d = std::size_t(t.coord().data);
  for (std::size_t valid : {6, 10, 16, 1}) {
    const std::size_t mine = std::min<std::size_t>(4, valid > d * 4 ? valid - d * 4 : 0);
    const step_result a = t.evaluate({.inputs = std::span<const double>(x).subspan(d * 32, 32),
                                      .labels = std::span<const std::int32_t>(y).subspan(d * 4, 4), .samples = 4},
                                     mine);
    // the one-device reference sees the valid rows only (padded to its micro-batch of 4)
    const step_result b = ref.evaluate({.inputs = x, .labels = y, .samples = 16}, valid);
    CHECK(a.rows == static_cast<long long>(valid));
    CHECK(b.rows == static_cast<long long>(valid));
    CHECK(std::abs(a.loss - b.loss) <= 1e-14 * b.loss);
    CHECK(a.correct == b.correct);
  }
}

TEST_CASE("share gives each replica its part of a global batch, for training and evaluation") {
  auto& w = mpi_test::world();
  auto by_hand = make_trainer<DP, double>(w, SGD{.lr = 0.1});
  auto shared = make_trainer<DP, double>(w, SGD{.lr = 0.1});
  const std::size_t G = std::size_t(DP::global_batch(w.size()));
  std::vector<double> x(G * 8);
  std::vector<std::int32_t> y(G);
  auto data = verify::random_data<DP>();  // train()'s batches
  train(by_hand, w.size(), 3);
  for (int s = 0; s < 3; ++s) {
    data(s, std::span<double>(x), std::span<std::int32_t>(y));
    shared.step(shared.share({.inputs = x, .labels = y, .samples = G}));
  }
  CHECK(shared.gather_parameters() == by_hand.gather_parameters());
  // evaluation of a partial global batch: the valid rows land on the first replicas
  for (std::size_t valid : {std::size_t(1), G / 2 + 1, G}) {
    const auto mine = shared.share({.inputs = x, .labels = y, .samples = G}, valid);
    const std::size_t d = std::size_t(shared.coord().data), per = G / std::size_t(w.size());
    CHECK(mine.batch.samples == per);
    CHECK(mine.valid == std::min(per, valid > d * per ? valid - d * per : 0));
    CHECK(shared.evaluate(mine.batch, mine.valid).rows == static_cast<long long>(valid));
  }
  // a global batch the replicas cannot divide: the same message on every rank
  std::string what;
  try {
    (void)shared.share({.inputs = std::span<const double>(x).first((G - 1) * 8),
                        .labels = std::span<const std::int32_t>(y).first(G - 1), .samples = G - 1});
  } catch (const agreed_error& e) {
    what = e.what();
  }
  CHECK(what == "strata: share: the global batch holds " + std::to_string(G - 1) +
                    " samples, not a multiple of the " + std::to_string(w.size()) + " data-parallel replicas");
}
