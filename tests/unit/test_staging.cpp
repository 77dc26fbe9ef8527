// The staging of weight reads (plan/lower/device_program.hpp) against a replay: fills take
// effect when they are issued, and every read must then find its TaskGraph in the slot
// the plan names — so no early fill overwrites a slot that a read before it still uses.
// The fills are the misses of two first-in-first-out slots (counted by an independent
// queue), each issued no later than its read; on a pipeline's program most are issued
// well before it. Then the device program of an offloaded plan, proven by the checker
// (plan/lower/check.hpp), and programs broken on purpose, which the checker refuses.
#include <doctest/doctest.h>

#include <deque>
#include <random>
#include <vector>

#include <strata/plan/lower/check.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr int Cap = 64;
using staging = lower::detail::staging_plan<Cap>;

int fifo_misses(const std::vector<int>& uses) {
  std::deque<int> q;
  int misses = 0;
  for (int t : uses) {
    if (q.size() > 0 && (q[0] == t || (q.size() > 1 && q[1] == t))) continue;
    ++misses;
    q.push_back(t);
    if (q.size() > 2) q.pop_front();
  }
  return misses;
}

staging plan_of(const std::vector<int>& uses) {
  staging s{};
  for (int t : uses) s.tg[static_cast<std::size_t>(s.uses++)] = t;
  lower::detail::plan_staging(s);
  return s;
}

// Replays the plan; returns how many fills go out at least one read before theirs.
int replay(const std::vector<int>& uses, const staging& s) {
  int content[2] = {-1, -1};
  int early = 0;
  for (std::size_t j = 0; j < uses.size(); ++j) {
    for (int f : s.issue[j]) {
      if (f < 0) continue;
      REQUIRE(f >= static_cast<int>(j));  // never after its read
      REQUIRE(s.miss[static_cast<std::size_t>(f)]);
      content[s.slot[static_cast<std::size_t>(f)]] = uses[static_cast<std::size_t>(f)];
      early += f > static_cast<int>(j);
    }
    REQUIRE(content[s.slot[j]] == uses[j]);
  }
  return early;
}

int misses(const staging& s) {
  int n = 0;
  for (int j = 0; j < s.uses; ++j) n += s.miss[static_cast<std::size_t>(j)];
  return n;
}

}  // namespace

TEST_CASE("staging plan: random read sequences replay correctly") {
  std::mt19937 g(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int graphs = 1 + static_cast<int>(g() % 6);
    std::vector<int> uses(g() % 40);
    for (int& u : uses) u = static_cast<int>(g() % static_cast<unsigned>(graphs));
    const staging s = plan_of(uses);
    CHECK(misses(s) == fifo_misses(uses));
    replay(uses, s);
  }
}

TEST_CASE("staging plan: a training step's fills go out ahead of their read") {
  // five TaskGraphs, two micro-batches of forward 0..4 then backward 4..0
  std::vector<int> uses;
  for (int mb = 0; mb < 2; ++mb) {
    for (int t = 0; t < 5; ++t) uses.push_back(t);
    for (int t = 4; t >= 0; --t) uses.push_back(t);
  }
  const staging s = plan_of(uses);
  // micro-batch 0: 5 + 3 (4 and 3 still staged for the backward); micro-batch 1: 1 and 0
  // are still staged from the backward, then 2, 3, 4 and 3, 2, 1: 14
  CHECK(misses(s) == 14);
  const int early = replay(uses, s);
  CHECK(2 * early > misses(s));  // most overlap at least one layer call
}

// The offload plan of the MPI tests' GPT (four TaskGraphs), one pipeline stage per device
// with 1F1B over four micro-batches, and its Zero<3> twin.
constexpr int V = 11, S = 4, D = 8, H = 2;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>>;
template <class... O>
using Four = Plan<Colocate<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>>, Replicate<1, Attn, MLP>,
                           Replicate<1, Attn, MLP>, Replicate<1, LayerNorm<D>, Linear<D, V>>>,
                  Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>, O...>;
using Offloaded = Four<Offload<offload_level::weights>>;
using Sharded = Four<Zero<3>>;

template <class P>
int count(lower::act k) {
  const auto& d = lower::device_program<P>::train;
  int n = 0;
  for (int i = 0; i < d.length[0]; ++i) n += d.at(0, i).kind == k;
  return n;
}

TEST_CASE("device program: an offloaded plan's fills, waits and reads") {
  using Dp = lower::device_program<Offloaded>;
  static_assert(lower::device_check<Offloaded>::train.ok() && lower::device_check<Offloaded>::eval.ok());
  // per micro-batch every layer with parameters reads its weights forward, then backward
  int params_layers = 0;
  for (const auto& lp : Offloaded::layer_plans) params_layers += lp.desc.num_params > 0;
  std::vector<int> uses;
  for (int i = 0; i < Dp::train.length[0]; ++i) {
    const lower::action& a = Dp::train.at(0, i);
    if (lower::is_layer_call(a.kind) && lower::lowered<Offloaded>::tables.calls[a.index].num_params > 0) {
      CHECK(a.wslot >= 0);
      uses.push_back(lower::lowered<Offloaded>::tables.calls[a.index].taskgraph);
    }
  }
  CHECK(uses.size() == static_cast<std::size_t>(2 * params_layers * 4));
  // one fill per first-in-first-out miss, each waited for once
  CHECK(count<Offloaded>(lower::act::fill_weights) == fifo_misses(uses));
  CHECK(count<Offloaded>(lower::act::wait_weights) == fifo_misses(uses));
  // Zero<3> gathers where the offloaded plan fills: the same misses
  CHECK(count<Sharded>(lower::act::gather_weights) == fifo_misses(uses));
  CHECK(count<Sharded>(lower::act::open_grads) > 0);
  static_assert(lower::device_check<Sharded>::train.ok());
}

TEST_CASE("device check: programs broken on purpose are refused") {
  using Dp = lower::device_program<Offloaded>;
  using Chk = lower::device_check<Offloaded>;
  const auto& prog = lower::lowered<Offloaded>::train.prog;
  auto first = [](const auto& list, lower::act k) {
    for (int i = 0; i < list.length[0]; ++i)
      if (list.at(0, i).kind == k) return i;
    return -1;
  };
  {  // a read before its fill is waited for (the wait is for the other slot)
    auto broken = Dp::train;
    broken.acts[0][static_cast<std::size_t>(first(broken, lower::act::wait_weights))].wslot ^= 1;
    CHECK(Chk::stage(broken, prog, 0, true).what == lower::flaw::weights_unready);
  }
  {  // a fill into the slot that holds the TaskGraph still read
    auto broken = Dp::train;
    const int f = first(broken, lower::act::fill_weights);
    auto& a = broken.acts[0][static_cast<std::size_t>(f)];
    a.index = (a.index + 1) % Offloaded::num_taskgraphs;
    CHECK(!Chk::stage(broken, prog, 0, true).ok());
  }
  {  // a bucket reduced before the last gradient write of its tensors
    using Plain = Four<>;
    using Pd = lower::device_program<Plain>;
    auto broken = Pd::train;
    const int r = first(broken, lower::act::reduce_bucket);
    REQUIRE(r > 0);
    // move the reduction to the front of the program
    const lower::action red = broken.at(0, r);
    for (int i = r; i > 0; --i) broken.acts[0][static_cast<std::size_t>(i)] = broken.acts[0][static_cast<std::size_t>(i - 1)];
    broken.acts[0][0] = red;
    CHECK(lower::device_check<Plain>::stage(broken, lower::lowered<Plain>::train.prog, 0, true).what ==
          lower::flaw::bucket_early);
  }
  {  // a message out of the schedule's order
    using Pipe = Plan<Pipeline<Replicate<1, Linear<8, 8>, ReLU>, Replicate<1, Linear<8, 4>>>,
                      Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>>;
    auto broken = lower::device_program<Pipe>::train;
    const int m = first(broken, lower::act::send_act);
    REQUIRE(m >= 0);
    broken.acts[0][static_cast<std::size_t>(m)].mb += 1;
    CHECK(lower::device_check<Pipe>::stage(broken, lower::lowered<Pipe>::train.prog, 0, true).what ==
          lower::flaw::messages);
  }
}
