// 2D, 2.5D and 3D tensor parallelism trained on the host: a GPT block (pre-LN causal
// self-attention and GeLU MLP) and a vocabulary head, checked against the same model on one
// device in float64 (losses, parameters, evaluation, and each collective's bytes against
// the planner's communication_of). 4 processes: 2D; 8: 2D x DP2, 2.5D and 3D.
// mpi-ranks: 4 8
#include <cstdio>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

constexpr int D = 16, H = 4, S = 8, V = 32;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using Mlp = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int N, class Mode>
using P = Plan<Split<N, Attn, Mlp, LayerNorm<D>, Linear<D, V>>, Input<S, D>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>,
               NumMicroBatch<2>, Mode>;

// What each device holds: 2D cuts a weight q x q; 3D an eighth of it (q = 2), and each
// Linear turns the layout (the attention's two projections turn it there and back).
static_assert(P<4, Tensor2D>::layer_plans[6].local_params[0] == shape_v<8, 32>);
static_assert(P<8, Tensor3D>::layer_plans[6].local_params[0] == shape_v<4, 32>);
static_assert(!P<8, Tensor3D>::layer_plans[6].turned && P<8, Tensor3D>::layer_plans[7].turned);

template <class Plan>
bool check(auto& world, const char* name) {
  const auto r =
      verify::against_one_device<Plan, double>(world, Adam{.lr = 1e-2}, 4, verify::random_data<Plan>(), 1e-10);
  if (world.rank() == 0) std::printf("%-12s %s", name, r.text().c_str());
  return r.ok() && r.bytes_as_planned;
}

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  bool ok = true;
  if (world.size() == 4) ok = check<P<4, Tensor2D>>(world, "2D");
  if (world.size() == 8) {
    ok = check<P<4, Tensor2D>>(world, "2D x DP2") && ok;
    ok = check<P<8, Tensor2p5D<2>>>(world, "2.5D") && ok;
    ok = check<P<8, Tensor3D>>(world, "3D") && ok;
  }
  return ok ? 0 : 1;
}
