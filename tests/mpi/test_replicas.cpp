// Replica consistency and the evaluation's padding across ranks: trained replicas hold
// identical bits; a replica that drifted (here: initialised from another seed) is named,
// with its tensor and ranks, in the same report on every rank; the periodic check stops
// training on every rank; the verifier fails a run that does not match one device; and an
// evaluation whose partial batch lands on a middle replica
// (later replicas holding only padding) equals the one-device evaluation of the valid rows;
// and trainer::share cuts a global batch into the replicas' parts as the hand-written slices do.
// mpi-ranks: 2 4
// strata-test: optimized
#include "doctest_world.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
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

// The first plan a new user checks (issue: a GPT of one's own on DP2 x TP2 with sequence
// parallelism, ZeRO-1, AdamW, clipping and a cosine schedule): the verifier's verdict is
// the plan's arithmetic in float64 whatever the element type, so float32 and bf16 runs
// are OK, with their own comparison reported against the precision's bound; a planted
// bug — a wrong reduction or a wrong scale in the communicator — fails in every precision.
namespace first_hour {
constexpr int V = 512, S = 64, D = 96, H = 6;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <class E>
using GPT = Plan<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<3, Attn, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<2>, SequenceParallel, Zero<1>,
                 Element<E>>;
const AdamW adamw{.lr = 1e-3, .weight_decay = 0.1};
const training_options recipe{.schedule = {.kind = lr_schedule::decay::cosine, .warmup = 2, .total = 10},
                              .decay = decay_on::matrices, .clip_norm = 1.0};

// A communicator with a bug planted in its floating-point reductions of more than 16
// elements (gradients, not the loss's books): summed twice (a wrong scale) or reduced
// by max (a wrong collective).
enum class bug { scale, max };
template <class C>
class planted {
 public:
  planted(C inner, bug b) : inner_(std::move(inner)), bug_(b) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  std::string_view name() const { return inner_.name(); }
  void barrier() { inner_.barrier(); }
  void synchronize() { inner_.synchronize(); }
  void agree(bool ok, std::string_view msg) { inner_.agree(ok, msg); }
  template <comm::comm_scalar T>
  void all_reduce(T* buf, std::size_t n, comm::reduce_op op) {
    inner_.all_reduce(buf, n, wrong(op, n, buf));
    if (hit(op, n, buf) && bug_ == bug::scale)
      for (std::size_t i = 0; i < n; ++i) buf[i] = T(2 * double(buf[i]));
  }
  template <comm::comm_scalar T>
  void reduce_scatter(const T* send, T* recv, std::size_t n, comm::reduce_op op) {
    inner_.reduce_scatter(send, recv, n, wrong(op, n, recv));
    if (hit(op, n, recv) && bug_ == bug::scale)
      for (std::size_t i = 0; i < n; ++i) recv[i] = T(2 * double(recv[i]));
  }
  template <comm::comm_scalar T>
  void all_gather(const T* send, T* recv, std::size_t n) { inner_.all_gather(send, recv, n); }
  template <comm::comm_scalar T>
  void all_to_all(const T* send, T* recv, std::size_t n) { inner_.all_to_all(send, recv, n); }
  template <comm::comm_scalar T>
  void broadcast(T* buf, std::size_t n, int root) { inner_.broadcast(buf, n, root); }
  template <comm::comm_scalar T>
  void send(const T* buf, std::size_t n, int peer, int tag = 0) { inner_.send(buf, n, peer, tag); }
  template <comm::comm_scalar T>
  void recv(T* buf, std::size_t n, int peer, int tag = 0) { inner_.recv(buf, n, peer, tag); }
  template <comm::comm_scalar T>
  void sendrecv(const T* s, std::size_t sn, int dest, T* r, std::size_t rn, int source, int tag = 0) {
    inner_.sendrecv(s, sn, dest, r, rn, source, tag);
  }
  void group(std::span<const comm::p2p_op> ops) { inner_.group(ops); }
  planted split(int color, int key) { return planted(inner_.split(color, key), bug_); }
  planted group_of(std::span<const int> ranks) { return planted(inner_.group_of(ranks), bug_); }

 private:
  template <class T>
  static bool hit(comm::reduce_op op, std::size_t n, T*) {
    return op == comm::reduce_op::sum && n > 16 && !std::is_integral_v<T>;
  }
  template <class T>
  comm::reduce_op wrong(comm::reduce_op op, std::size_t n, T* p) const {
    return hit(op, n, p) && bug_ == bug::max ? comm::reduce_op::max : op;
  }
  C inner_;
  bug bug_;
};
}  // namespace first_hour

TEST_CASE("the verifier's verdict is float64 whatever the precision, and never cries wolf") {
  using namespace first_hour;
  auto& w = mpi_test::world();
  if (w.size() != 4) return;
  // as README writes it, in float32 and in bf16
  const verify::report f = verify::against_one_device<GPT<float>>(w, adamw, 10, verify::random_data<GPT<float>>(),
                                                                  verify::default_tolerance<float>(), 0x5eed, recipe);
  const verify::report b = verify::against_one_device<GPT<bf16>>(w, adamw, 10, verify::random_data<GPT<bf16>>(),
                                                                 verify::default_tolerance<bf16>(), 0x5eed, recipe);
  // bf16 against exact arithmetic, as the issue tried it
  const verify::report bd = verify::against_one_device<GPT<bf16>, bf16, double>(w, adamw, 10,
                                                                                 verify::random_data<GPT<bf16>>());
  for (const verify::report* r : {&f, &b, &bd}) {
    if (w.rank() == 0) std::printf("%s", r->text().c_str());
    CHECK(r->ok());
    CHECK(r->element == "float64");
    CHECK(r->worst_loss <= 1e-9);
    CHECK(r->worst_param <= 1e-9);
    REQUIRE(r->precision.has_value());
    CHECK(r->precision->element_bound > 0);  // AdamW: a per-element bound, and why
    CHECK(r->precision->bound_reason.find("AdamW moves every element") == 0);
    CHECK(r->text().find("in float64 against one device in float64") != std::string::npos);
  }
  CHECK(f.precision->element == "float32");
  CHECK(b.precision->element == "bf16");
  CHECK(bd.precision->reference == "float64");
  // the element bound: 2 lr Σ factor(s) c_s, c_1 = 1 — one update of lr 1e-3 at warm-up's half
  CHECK(verify::adam_update_bound(0.9, 0.999, 1) == doctest::Approx(1.0));
  CHECK(verify::element_bound_of(Adam{.lr = 1e-3}, 1, {}).bound == doctest::Approx(2e-3));
  CHECK(verify::element_bound_of(SGD{.lr = 0.1}, 10, {}).bound == 0.0);
}

TEST_CASE("a planted bug fails the verifier in every precision") {
  using namespace first_hour;
  auto& w = mpi_test::world();
  if (w.size() != 4) return;
  for (bug which : {bug::scale, bug::max}) {
    planted<comm::mpi_communicator> pc(w.comm().split(0, w.rank()), which);
    world<Host, planted<comm::mpi_communicator>> pw(nullptr, &pc);
    const verify::report d = verify::against_one_device<GPT<double>>(pw, adamw, 3, verify::random_data<GPT<double>>());
    const verify::report f = verify::against_one_device<GPT<float>>(pw, adamw, 3, verify::random_data<GPT<float>>());
    const verify::report b = verify::against_one_device<GPT<bf16>>(pw, adamw, 3, verify::random_data<GPT<bf16>>());
    for (const verify::report* r : {&d, &f, &b}) {
      CHECK_FALSE(r->ok());
      CHECK_FALSE(r->comparison::ok());  // the float64 verdict itself
      CHECK(r->text().find("DIFFERENT") != std::string::npos);
    }
    if (w.rank() == 0) std::printf("planted %s:\n%s", which == bug::scale ? "scale" : "max", f.text().c_str());
  }
}
