// Megatron tensor parallelism, derived: Split<4> over Linear, GeLU, Linear becomes
// column-parallel -> pointwise -> row-parallel with one all-reduce each way.
#include <strata/strata.hpp>

using namespace strata;

using Block = Split<4, LayerNorm<1024>, Linear<1024, 4096>, GeLU, Linear<4096, 1024>>;
using P = Plan<Block, Loss<SoftmaxCrossEntropy>, MicroBatch<8>, NumMicroBatch<2>>;

constexpr auto& norm = P::layer_plans[0];
constexpr auto& up = P::layer_plans[1];
constexpr auto& act = P::layer_plans[2];
constexpr auto& down = P::layer_plans[3];
constexpr auto& loss = P::layer_plans[4];

// Column-parallel: input whole (B), weight cut by output features, output S(-1).
static_assert(up.sig == signature::column_parallel);
static_assert(up.in_layout == sbp::broadcast && up.out_layout == sbp::split_feature);
static_assert(up.local_params[0] == shape_v<1024, 1024> && up.local_params[1] == shape_v<1024>);
// The activation runs on the shard it is given.
static_assert(act.sig == signature::pointwise && act.in_layout == sbp::split_feature && act.num_comms == 0);
// Row-parallel: weight cut by input features, output a partial sum (P); bias kept whole.
static_assert(down.sig == signature::row_parallel && down.out_layout == sbp::partial);
static_assert(down.local_params[0] == shape_v<1024, 1024> && down.local_params[1] == shape_v<1024>);
// LayerNorm needs whole features: it stays replicated.
static_assert(norm.sig == signature::replicated);

// Forward: the partial sum is all-reduced where a layer needs it whole (here the loss).
static_assert(loss.arrives == sbp::partial && loss.in_layout == sbp::broadcast);
static_assert(loss.comms[0].kind == collective::all_reduce && loss.comms[0].when == pass::forward);
// Backward: the column-parallel layer's input gradient is partial; all-reduced once.
static_assert(up.num_comms == 1 && up.comms[0].kind == collective::all_reduce && up.comms[0].when == pass::backward);
static_assert(up.comms[0].elems == 8 * 1024);  // micro-batch x features

// Per step: exactly one all-reduce per micro-batch in each direction inside the part.
constexpr int part_all_reduces(pass when) {
  const auto t = P::communication(0);
  int calls = 0;
  for (int i = 0; i < t.size; ++i)
    if (t.rows[i].kind == collective::all_reduce && t.rows[i].group == group_axis::part && t.rows[i].when == when)
      calls += t.rows[i].calls;
  return calls;
}
static_assert(part_all_reduces(pass::forward) == P::num_micro_batch);
static_assert(part_all_reduces(pass::backward) == P::num_micro_batch);

int main() { return 0; }
