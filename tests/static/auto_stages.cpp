// AutoStages<K>: the planner's own cut against a brute force over every cut (small
// cases), with and without a memory budget, and the resulting plans against the
// planner's analyses: each stage's FLOPs are what the cut balanced, and the memory
// estimate the cut was checked with bounds the lowered plan's peak memory from above.
#include <array>
#include <cstdio>
#include <utility>

#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr long long inf = 0x7fffffffffffffffLL;

// Every cut of N units into K stages (positions 1..N-1, K-1 of them, as a bit mask):
// the cheapest bottleneck among those whose every stage fits `budget` (0: any).
template <std::size_t N, std::size_t K>
constexpr long long brute_force(const detail::unit_costs<N>& u, const std::array<long long, K>& in_flight,
                                long long budget) {
  long long best = inf;
  for (unsigned mask = 0; mask < (1u << (N - 1)); ++mask) {
    if (static_cast<std::size_t>(__builtin_popcount(mask)) != K - 1) continue;
    std::array<int, K + 1> cut{};
    int s = 1;
    for (int p = 1; p < static_cast<int>(N); ++p)
      if (mask & (1u << (p - 1))) cut[static_cast<std::size_t>(s++)] = p;
    cut[K] = static_cast<int>(N);
    long long worst = 0;
    bool fits = true;
    for (std::size_t k = 0; k < K; ++k) {
      long long c = 0;
      for (int i = cut[k]; i < cut[k + 1]; ++i) c += u.cost[static_cast<std::size_t>(i)];
      worst = c > worst ? c : worst;
      if (budget > 0 && detail::stage_memory(u, cut[k], cut[k + 1], in_flight[k]) > budget) fits = false;
    }
    if (fits && worst < best) best = worst;
  }
  return best;
}

// A pseudo-random instance (linear congruential), so the cases are not hand-picked.
template <std::size_t N>
constexpr detail::unit_costs<N> instance(unsigned seed) {
  detail::unit_costs<N> u{};
  unsigned x = seed;
  auto next = [&x](unsigned mod) {
    x = x * 1103515245u + 12345u;
    return static_cast<long long>((x >> 8) % mod);
  };
  for (std::size_t i = 0; i < N; ++i) {
    u.cost[i] = 1 + next(100);
    u.state[i] = next(50);
    u.act[i] = next(20);
    u.ping[i] = next(10);
    u.scratch[i] = next(10);
    u.recompute[i] = next(10);
    u.entry[i] = next(5);
    u.exit[i] = next(5);
  }
  return u;
}

// The dynamic programme's cut is feasible and as good as the best of all cuts.
template <std::size_t N, std::size_t K>
constexpr bool agrees(unsigned seed, long long budget) {
  const auto u = instance<N>(seed);
  std::array<long long, K> fl{};
  for (std::size_t k = 0; k < K; ++k) fl[k] = static_cast<long long>(K - k);  // 1F1B's warm-up depth
  const auto r = detail::best_cut(u, fl, budget);
  const long long bf = brute_force(u, fl, budget);
  if (bf == inf) return !r.fits;
  if (!r.fits || r.bottleneck != bf || r.cuts[0] != 0 || r.cuts[K] != static_cast<int>(N)) return false;
  for (std::size_t k = 0; k < K; ++k) {
    if (r.cuts[k] >= r.cuts[k + 1]) return false;
    if (budget > 0 && detail::stage_memory(u, r.cuts[k], r.cuts[k + 1], fl[k]) > budget) return false;
  }
  return true;
}

template <std::size_t N, std::size_t K, unsigned From, unsigned To>
constexpr bool agrees_on_seeds() {  // a few seeds per evaluation: clang counts constexpr steps per static_assert
  for (unsigned seed = From; seed <= To; ++seed)
    for (long long budget : {0LL, 150LL, 250LL, 400LL})
      if (!agrees<N, K>(seed, budget)) return false;
  return true;
}
template <std::size_t N, std::size_t K, unsigned From, unsigned To>
constexpr bool agrees_v = agrees_on_seeds<N, K, From, To>();  // its own constant evaluation
template <std::size_t N, std::size_t K, std::size_t... B>
constexpr bool agrees_on_many(std::index_sequence<B...>) {  // seeds 1..3·sizeof(B), three per evaluation
  constexpr bool each[] = {agrees_v<N, K, 3 * B + 1, 3 * B + 3>...};
  for (bool b : each)
    if (!b) return false;
  return true;
}
static_assert(agrees_on_many<6, 2>(std::make_index_sequence<10>{}));
static_assert(agrees_on_many<7, 3>(std::make_index_sequence<10>{}));
static_assert(agrees_on_many<9, 4>(std::make_index_sequence<4>{}));  // seeds 1..12, 4 budgets, 56 cuts each
static_assert(agrees_on_many<5, 5>(std::make_index_sequence<2>{}));  // one unit per stage: the only cut

// A budget makes the cut change: two heavy units of memory, one of cost.
constexpr detail::unit_costs<4> skewed = [] {
  detail::unit_costs<4> u{};
  u.cost = {10, 10, 10, 30};
  u.state = {100, 100, 1, 1};
  return u;
}();
static_assert(detail::best_cut(skewed, std::array<long long, 2>{1, 1}, 0).cuts[1] == 3);    // {0,1,2} {3}: 30
static_assert(detail::best_cut(skewed, std::array<long long, 2>{1, 1}, 150).cuts[1] == 1);  // {0} {1,2,3}: 50
static_assert(detail::best_cut(skewed, std::array<long long, 2>{1, 1}, 150).bottleneck == 50);
static_assert(!detail::best_cut(skewed, std::array<long long, 2>{1, 1}, 99).fits);
static_assert(detail::best_cut(skewed, std::array<long long, 2>{1, 1}, 0, detail::cut_goal::least_memory).fullest == 102);

// ---- plans --------------------------------------------------------------------------------
constexpr int V = 64, S = 16, D = 32, H = 4;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
using GPT = Model<Embedding<V, D>, PositionEmbedding<S, D>, Repeat<4, Attn, MLP>, LayerNorm<D>, Linear<D, V>>;

template <class Net, class... O>
struct check_plan {
  using P = Plan<Net, O...>;
  using A = detail::auto_stages<Net, O...>;
  static constexpr int units = A::num_units;
  static constexpr bool value = [] {
    if (!P::valid || P::stages != A::K) return false;
    // each stage's FLOPs per step (the planner's analysis) = the cost the cut balanced
    long long most = 0;
    for (int s = 0; s < P::stages; ++s) {
      const long long f = P::device_flops_per_step(s);
      if (P::recompute == checkpoint_mode::collection && f != detail::stage_cost(A::costs, A::cuts[s], A::cuts[s + 1]))
        return false;
      most = f > most ? f : most;
      // the estimate bounds the lowered plan's memory from above, within 40%
      const long long est = detail::stage_memory(A::costs, A::cuts[s], A::cuts[s + 1], A::in_flight[s]);
      const long long exact = P::peak_memory_bytes(s, 1);
      if (est < exact || est > exact + exact * 2 / 5) return false;
      if (A::budget > 0 && est > A::budget) return false;
    }
    if (P::recompute == checkpoint_mode::collection && most != A::cut.bottleneck) return false;
    // and no cut of the same units is better: the brute force
    return brute_force(A::costs, A::in_flight, A::budget) == A::cut.bottleneck;
  }();
};

using CE = Loss<SoftmaxCrossEntropy>;
// 12 units: 2 embeddings, 4 x (attention block, MLP block), LayerNorm, head (+ the loss)
static_assert(check_plan<GPT, AutoStages<2>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<4>>::units == 12);
static_assert(check_plan<GPT, AutoStages<2>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<4>>::value);
static_assert(check_plan<GPT, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>>::value);
static_assert(check_plan<GPT, AutoStages<4>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<8>, Schedule<PreferForward>>::value);
static_assert(check_plan<GPT, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>,
                         GradientCheckpoint<checkpoint_mode::automatic>>::value);
// tensor parallel stages: Default<Split<2>> for a Model, or the Split written around it
static_assert(check_plan<GPT, AutoStages<2>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<4>, Default<Split<2>>>::value);
using SplitGPT = Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<4, Attn, MLP>, LayerNorm<D>, Linear<D, V>>;
static_assert(check_plan<SplitGPT, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>, SequenceParallel>::value);
static_assert(Plan<SplitGPT, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>>::devices_per_replica == 6);

// The 3-stage GPT: the balanced cut is {embeddings, block 1, attention 2} {MLP 2, block 3}
// {block 4, LayerNorm, head}, and the plan is that Pipeline, written by hand.
using G3 = detail::auto_stages<GPT, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>>;
static_assert(G3::cuts == std::array<int, 4>{0, 5, 8, 12});
using Hand = Pipeline<Colocate<Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP, Attn>, Colocate<MLP, Attn, MLP>,
                      Colocate<Attn, MLP, LayerNorm<D>, Linear<D, V>>>;
static_assert(std::is_same_v<G3::type, Hand>);

// Six blocks probed as four (plan/units.hpp): every unit costs what the whole model's probe
// says, to the byte and FLOP, and the plans check as above; a block whose copies are entered
// unlike (Linear, ReLU under Split<2>: column and row cuts alternate) is probed whole.
template <class A>
constexpr bool costs_as_whole() {
  const auto whole = detail::unit_costs_of<typename A::whole_probe, A::NU>(A::first, A::num_units);
  const auto& c = A::costs;
  for (std::size_t u = 0; u < A::NU; ++u)
    if (!(c.cost[u] == whole.cost[u] && c.state[u] == whole.state[u] && c.act[u] == whole.act[u] &&
          c.ping[u] == whole.ping[u] && c.scratch[u] == whole.scratch[u] &&
          c.scratch_stats[u] == whole.scratch_stats[u] && c.recompute[u] == whole.recompute[u] &&
          c.recompute_stats[u] == whole.recompute_stats[u] && c.entry[u] == whole.entry[u] &&
          c.exit[u] == whole.exit[u] && c.tail[u] == whole.tail[u]))
      return false;
  return true;
}
using GPT6 = Model<Embedding<V, D>, PositionEmbedding<S, D>, Repeat<6, Attn, MLP>, LayerNorm<D>, Linear<D, V>>;
using A6 = check_plan<GPT6, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>>;
static_assert(A6::A::shortened && A6::A::NP == 12 && A6::units == 16 && costs_as_whole<A6::A>() && A6::value);
using A6rc = check_plan<GPT6, AutoStages<4>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<8>,
                        GradientCheckpoint<checkpoint_mode::automatic>>;
static_assert(A6rc::A::shortened && costs_as_whole<A6rc::A>() && A6rc::value);
using A6sp = check_plan<GPT6, AutoStages<4>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<8>,
                        GradientCheckpoint<checkpoint_mode::automatic>, Default<Split<2>>, SequenceParallel>;
static_assert(A6sp::A::shortened && costs_as_whole<A6sp::A>() && A6sp::value);
using Alternating = Model<Repeat<5, Linear<D, D>, ReLU>, Linear<D, V>>;
using Alt = detail::auto_stages<Alternating, AutoStages<2>, Input<S, D>, CE, MicroBatch<4>, NumMicroBatch<4>, Default<Split<2>>>;
static_assert(!Alt::shortened && costs_as_whole<Alt>());
static_assert(detail::auto_stages<Alternating, AutoStages<2>, Input<S, D>, CE, MicroBatch<4>, NumMicroBatch<4>>::shortened);

// A memory budget moves the cut: the fullest stage of the balanced cut no longer fits.
using Unbudgeted = check_plan<GPT, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>>::A;
constexpr long long fullest = Unbudgeted::cut.fullest;
constexpr long long tight_mib = fullest / (1 << 20) + 0;  // below the balanced cut's fullest stage
using Tight = check_plan<GPT, AutoStages<3>, Input<S>, CE, MicroBatch<4>, NumMicroBatch<6>, MemoryBudget<1>>;
static_assert(tight_mib == 1 && fullest > (1 << 20));  // the balanced cut needs more than 1 MiB on stage 0
static_assert(Tight::value);
static_assert(Tight::A::cut.fits && Tight::A::cut.fullest <= (1 << 20));
static_assert(Tight::A::cut.bottleneck > Unbudgeted::cut.bottleneck);  // it costs balance

// The loss written as the model's last item, bf16 (fp32 masters), a fixed world of two replicas.
using WithLoss = Model<Linear<16, 64>, ReLU, Repeat<3, Residual<LayerNorm<64>, Linear<64, 64>, GeLU>>, Linear<64, 4>,
                       SoftmaxCrossEntropy>;
static_assert(check_plan<WithLoss, AutoStages<3>, MicroBatch<4>, NumMicroBatch<6>, Element<bf16>, World<6>>::units == 7);
static_assert(check_plan<WithLoss, AutoStages<3>, MicroBatch<4>, NumMicroBatch<6>, Element<bf16>, World<6>>::value);
static_assert(Plan<WithLoss, AutoStages<3>, MicroBatch<4>, NumMicroBatch<6>, Element<bf16>, World<6>>::data_parallel() == 2);

// Repeat<N, Block> as the whole model: each copy of each item is a unit.
using Blocks = check_plan<Repeat<6, Linear<64, 64>, ReLU>, AutoStages<3>, Input<64>, CE, MicroBatch<8>, NumMicroBatch<6>>;
static_assert(Blocks::units == 12 && Blocks::value);
// equal units: the cut is even, 4 units a stage
static_assert(Blocks::A::cuts == std::array<int, 4>{0, 4, 8, 12});

}  // namespace

int main() {
  std::printf("auto_stages: 3-stage GPT cut at units %d, %d; bottleneck %lld FLOPs/step; 1 MiB budget: bottleneck %lld\n",
              G3::cuts[1], G3::cuts[2], G3::cut.bottleneck, Tight::A::cut.bottleneck);
  return 0;
}
