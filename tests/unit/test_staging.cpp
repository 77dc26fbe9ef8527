// The staging schedule (exec/staging.hpp) against a replay: fills take effect when they
// are issued, and every use must then find its TaskGraph in the slot the schedule names —
// so no early fill overwrites a slot that a use before it still reads. The fills are the
// misses of two first-in-first-out slots (counted by an independent queue), each issued no
// later than its use; and on a pipeline's program most are issued well before it.
#include <doctest/doctest.h>

#include <deque>
#include <random>
#include <vector>

#include <strata/exec/staging.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

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

// Replays the schedule; returns how many fills go out at least one use before theirs.
int replay(const std::vector<int>& uses, const exec::staging::schedule& s) {
  int content[2] = {-1, -1};
  int early = 0;
  for (std::size_t j = 0; j < uses.size(); ++j) {
    for (int f : s.issue[j]) {
      if (f < 0) continue;
      REQUIRE(f >= static_cast<int>(j));  // never after its use
      REQUIRE(s.fills[static_cast<std::size_t>(f)]);
      content[s.slot[static_cast<std::size_t>(f)]] = uses[static_cast<std::size_t>(f)];
      early += f > static_cast<int>(j);
    }
    REQUIRE(content[s.slot[j]] == uses[j]);
  }
  return early;
}

}  // namespace

TEST_CASE("staging schedule: random use sequences replay correctly") {
  std::mt19937 g(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int graphs = 1 + static_cast<int>(g() % 6);
    std::vector<int> uses(g() % 40);
    for (int& u : uses) u = static_cast<int>(g() % static_cast<unsigned>(graphs));
    const auto s = exec::staging::plan(uses);
    CHECK(s.num_fills == fifo_misses(uses));
    int counted = 0;
    for (std::size_t j = 0; j < uses.size(); ++j) counted += s.fills[j];
    CHECK(counted == s.num_fills);
    replay(uses, s);
  }
}

TEST_CASE("staging schedule: a training step's fills go out ahead of their use") {
  // five TaskGraphs, two micro-batches of forward 0..4 then backward 4..0
  std::vector<int> uses;
  for (int mb = 0; mb < 2; ++mb) {
    for (int t = 0; t < 5; ++t) uses.push_back(t);
    for (int t = 4; t >= 0; --t) uses.push_back(t);
  }
  const auto s = exec::staging::plan(uses);
  // micro-batch 0: 5 + 3 (4 and 3 still staged for the backward); micro-batch 1: 1 and 0
  // are still staged from the backward, then 2, 3, 4 and 3, 2, 1: 14
  CHECK(s.num_fills == 14);
  const int early = replay(uses, s);
  CHECK(2 * early > s.num_fills);  // most overlap at least one layer call
}

// The uses of a plan's program: the offload plan of the MPI tests' GPT (four TaskGraphs),
// one pipeline stage per device with 1F1B over four micro-batches.
constexpr int V = 11, S = 4, D = 8, H = 2;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 2 * D>, GeLU, Linear<2 * D, D>>;
using Four = Plan<Colocate<Replicate<1, Embedding<V, D>, PositionEmbedding<S, D>>, Replicate<1, Attn, MLP>,
                           Replicate<1, Attn, MLP>, Replicate<1, LayerNorm<D>, Linear<D, V>>>,
                  Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>,
                  Offload<offload_level::weights>>;

TEST_CASE("staging schedule: a plan's training uses") {
  const std::vector<int> uses = exec::staging::training_uses<Four>(0);
  // per micro-batch: every layer with parameters forward, then backward
  int params_layers = 0;
  for (const auto& lp : Four::layer_plans) params_layers += lp.desc.num_params > 0;
  CHECK(uses.size() == static_cast<std::size_t>(2 * params_layers * 4));
  const auto s = exec::staging::plan(uses);
  // the fills equal the stagings the communication analysis counts for Zero<3>
  int analysed = 0;
  for (int n : detail::taskgraph_stagings<Four>(0)) analysed += n;
  CHECK(s.num_fills == analysed);
  CHECK(replay(uses, s) > 0);
}
