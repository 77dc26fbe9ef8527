// A user layer whose backward needs values from its forward, and a user loss, written
// against the layer contract (docs/concepts.md, "The layer contract"):
//   MyRMSNorm<D>  y = γ · x / rms(x), rms(x) = √(mean_j x_j² + eps) per row. Forward keeps x
//               (keep_input) and stashes each row's 1/rms (stash_stats) for backward.
//   BrierLoss   ½ Σ_j (x_j − onehot(label)_j)² per row, booked as the built-in loss books.
// Both call kernel-family entry points only, so the same code runs on every backend.
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

// MyRMSNorm (strata ships RMSNorm<D>, layers/rmsnorm.hpp; this is one written by hand against
// the contract) is LayerNorm with the row mean fixed at 0. normalization.hpp's pieces for rows
// spread over devices take the row moments [Σx | Σx²] from the caller: with Σx set to 0
// they give mean 0, 1/σ = 1/rms and y = x/rms·γ; backward likewise, with Σg set to 0.
template <int D>
struct MyRMSNorm {
  static constexpr std::string_view name = "MyRMSNorm";
  static constexpr layer_role role = layer_role::opaque;  // whole features, whole γ
  static constexpr double eps = 1e-6;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 1> params{{{"gain", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t in) { return 4 * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 8 * in.numel(); }
  // Stash per row: [0 | 1/rms] (the kernels read a mean); scratch: backward's two row sums.
  static constexpr buffer_needs memory(const local_dims& d) {
    return {.keep_input = true, .stash_stats = 2 * d.rows, .scratch_stats = 2 * d.rows};
  }
  static double init(const init_site&) { return 1.0; }  // γ = 1, not opaque's U(±1/√D)

  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    using S = typename C::stat_type;
    S* st = c.stash_stats;
    layernorm_partial_moments(c.q, c.rows, std::size_t(D), c.x, st);  // [Σx | Σx²]
    fill(c.q, c.rows, S(0), st);                                       // [0 | Σx²]
    layernorm_forward_moments(c.q, c.rows, std::size_t(D), std::size_t(D), eps, c.x, c.w[0],
                              static_cast<const T*>(nullptr), st, c.y);  // st = [0 | 1/rms]
  }
  template <class C>
  static void backward(C& c) {
    using T = typename C::value_type;
    using S = typename C::stat_type;
    using G = typename C::master_type;
    const S* zero = c.stash_stats;
    const S* rstd = c.stash_stats + c.rows;
    if (c.dx) {  // dx = r·(g − x̂·mean_j(g·x̂)), g = dy·γ, x̂ = x·r: LayerNorm's with Σg = 0
      layernorm_backward_partial(c.q, c.rows, std::size_t(D), c.x, c.w[0], zero, rstd, c.dy, c.scratch_stats);
      fill(c.q, c.rows, S(0), c.scratch_stats);
      layernorm_backward_moments(c.q, c.rows, std::size_t(D), std::size_t(D), c.x, c.w[0], zero, rstd, c.dy,
                                 static_cast<const S*>(c.scratch_stats), c.dx);
    }
    // dγ += Σ_rows dy·x̂: added, since every micro-batch of the step adds to one gradient
    layernorm_backward(c.q, c.rows, std::size_t(D), c.x, c.w[0], zero, rstd, c.dy, static_cast<T*>(nullptr), c.g[0],
                       static_cast<G*>(nullptr), /*accumulate=*/true);
  }
};

struct brier_row {  // ½(Σx² − 2·x_label + 1) = ½ Σ_j (x_j − onehot_j)²
  template <class V>
  STRATA_HD V operator()(V sum_sq, V target) const {
    return V(0.5) * (sum_sq - V(2) * target + V(1));
  }
};

struct BrierLoss {
  static constexpr std::string_view name = "BrierLoss";
  static constexpr layer_role role = layer_role::loss;  // last; under Split<N> it gets whole rows
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t) { return shape_v<1>; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return 4 * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 2 * in.numel(); }
  // x for the gradient; scratch per row: [Σx | Σx² | x_label | max_j x_j]
  static constexpr buffer_needs memory(const local_dims& d) { return {.keep_input = true, .scratch_stats = 4 * d.rows}; }
  // The loss role's mesh default is the vocabulary-parallel cross-entropy's: refuse meshes.
  static constexpr mesh_choice mesh_shard(const mesh_query&) { return {.supported = false}; }

  template <class C>
  static void forward(C& c) {
    const std::size_t R = c.rows, K = c.in_cols;
    auto& L = *c.loss;
    auto* s = c.scratch_stats;
    auto *loss = s, *sum_sq = s + R, *target = s + 2 * R, *row_max = s + 3 * R;
    layernorm_partial_moments(c.q, R, K, c.x, s);
    xent_target_logit(c.q, R, K, c.x, L.labels, 0, target);
    xent_local_max(c.q, R, K, c.x, row_max);  // a row is correct when its label's score is the max
    map(c.q, R, brier_row{}, loss, sum_sq, target);
    // the books: Σ loss, correct rows, counted rows (the valid rows; by one device of the part)
    if (L.counts) book_loss_rows(c, loss, target, row_max);
  }
  template <class C>
  static void backward(C& c) {  // dx = scale · (x − onehot): the cross-entropy kernel with p = x
    if (c.dx) softmax_cross_entropy_backward(c.q, c.rows, c.in_cols, c.x, c.loss->labels, c.loss->scale, c.dx);
  }
};
static_assert(ExecutableLayer<MyRMSNorm<16>> && ExecutableLayer<BrierLoss>);

// Under Split<2> both keep whole features: their inputs arrive column-split and are gathered.
using Tp = Plan<Split<2, Linear<8, 16>, MyRMSNorm<16>, Linear<16, 4>>, Loss<BrierLoss>, MicroBatch<8>>;
static_assert(Tp::layer_plans[1].in_layout == sbp::broadcast && Tp::layer_plans[3].in_layout == sbp::broadcast);

// One call as the executor makes it, on one host device in double.
using ctx_t = exec::layer_ctx<Host, double, comm::self_communicator>;
template <class L>
double run(std::vector<double>& x, std::vector<double>& w, std::vector<double>& g, std::vector<double>& y,
           exec::loss_io<double>* loss, const std::vector<double>* dy, std::vector<double>* dx, std::size_t rows) {
  static Host::queue q;
  static comm::self_communicator self;
  const std::size_t cols = x.size() / rows;
  const buffer_needs m = L::memory({.rows = static_cast<long long>(rows), .in_cols = static_cast<long long>(cols)});
  std::vector<double> stash(static_cast<std::size_t>(m.stash_stats)), scratch(static_cast<std::size_t>(m.scratch_stats));
  ctx_t c{q, self};
  c.rows = rows, c.in_cols = cols, c.out_cols = cols;
  c.x = x.data(), c.y = y.data(), c.w[0] = w.data(), c.g[0] = g.data(), c.loss = loss;
  c.stash_stats = stash.data(), c.scratch_stats = scratch.data();
  double books[3] = {0, 0, 0};
  if (loss) loss->acc = books;
  L::forward(c);
  if (dx) {  // then backward (a loss has no dy)
    c.dy = dy ? dy->data() : nullptr, c.dx = dx->data();
    L::backward(c);
  }
  return books[0];
}

int main() {
  std::mt19937 gen(7);
  std::normal_distribution<double> nd;
  const std::size_t R = 4, F = 6;
  std::vector<double> x(R * F), gain(F), y(R * F), dy(R * F), dx(R * F), dgain(F, 0.25), none;
  for (auto* v : {&x, &gain, &dy})
    for (auto& e : *v) e = nd(gen);
  // MyRMSNorm: backward against central differences of Σ dy·y, and dγ added to what was there.
  run<MyRMSNorm<6>>(x, gain, dgain, y, nullptr, &dy, &dx, R);
  auto objective = [&] {
    std::vector<double> out(R * F), g0(F);
    run<MyRMSNorm<6>>(x, gain, g0, out, nullptr, nullptr, nullptr, R);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += dy[i] * out[i];
    return s;
  };
  auto central = [&](double& v) {
    const double keep = v, h = 1e-6;
    v = keep + h;
    const double up = objective();
    v = keep - h;
    const double down = objective();
    v = keep;
    return (up - down) / (2 * h);
  };
  double err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) err = std::fmax(err, std::abs(central(x[i]) - dx[i]));
  for (std::size_t j = 0; j < F; ++j) err = std::fmax(err, std::abs(central(gain[j]) - (dgain[j] - 0.25)));
  // BrierLoss: its books against a direct sum, its gradient against central differences.
  std::vector<std::int32_t> labels{0, 5, 2, 3};
  exec::loss_io<double> io{.labels = labels.data(), .scale = 1.0 / R};
  const double booked = run<BrierLoss>(x, none, none, none, &io, nullptr, &dx, R);
  double direct = 0;
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t j = 0; j < F; ++j) direct += 0.5 * std::pow(x[r * F + j] - (int(j) == labels[r]), 2);
  double loss_err = std::abs(booked - direct);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + 1e-6;
    const double up = run<BrierLoss>(x, none, none, none, &io, nullptr, nullptr, R) * io.scale;
    x[i] = keep - 1e-6;
    const double down = run<BrierLoss>(x, none, none, none, &io, nullptr, nullptr, R) * io.scale;
    x[i] = keep;
    loss_err = std::fmax(loss_err, std::abs((up - down) / 2e-6 - dx[i]));
  }
  std::printf("MyRMSNorm max |fd − analytic| %.2e, BrierLoss %.2e\n", err, loss_err);

  // Both train in a plan on one device.
  using One = Plan<Replicate<1, Linear<8, 16>, MyRMSNorm<16>, Linear<16, 3>>, Loss<BrierLoss>, MicroBatch<32>>;
  auto world = local_world<Host>();
  auto train = make_trainer<One, double>(world, Adam{.lr = 1e-2}, /*seed=*/1);
  std::vector<double> in(32 * 8);
  std::vector<std::int32_t> cls(32);
  double first = 0, last = 0;
  long long correct = 0;
  for (int step = 0; step < 60; ++step) {
    for (auto& v : in) v = nd(gen);
    for (std::size_t i = 0; i < cls.size(); ++i) cls[i] = in[i * 8] > 0 ? (in[i * 8 + 1] > 0 ? 2 : 1) : 0;
    const auto r = train.step({.inputs = in, .labels = cls, .samples = 32});
    if (step == 0) first = r.loss;
    last = r.loss, correct = r.correct;
  }
  std::printf("Brier loss %.3f -> %.3f, last step %lld/32 correct\n", first, last, correct);
  return err < 1e-6 && loss_err < 1e-6 && last < 0.7 * first ? 0 : 1;
}
