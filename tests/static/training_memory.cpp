// The memory options in the analyses. ZeRO (Zero<1>): the optimizer state of a device is its chunk of every
// gradient bucket plus the bucket's tail (exec/zero.hpp), so dp replicas divide it by dp
// up to the tails; a group that spans the part's devices (whole tensors under Split<N>)
// divides by devices × dp. The gradient buckets are reduce-scattered and all-gathered
// instead of all-reduced, with the same bytes each way as the all-reduce they replace.
#include <strata/strata.hpp>

using namespace strata;

using MLP = Replicate<1, Flatten, Linear<784, 512>, ReLU, Linear<512, 10>>;
constexpr long long mlp_params = 784LL * 512 + 512 + 512 * 10 + 10;
using Plain = Plan<MLP, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, World<4>>;
using Z = Plan<MLP, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, World<4>, Zero<1>>;

static_assert(Plain::zero == 0 && Z::zero == 1);
static_assert(Plain::adam_state_bytes(0) == 2 * mlp_params * 4);
// 5 buckets of ⌈mlp_params / 5⌉ (the last shorter), each cut into 4 chunks and a tail < 4
static_assert(Z::optimizer_state_elems(0) >= mlp_params / 4 && Z::optimizer_state_elems(0) < mlp_params / 4 + 5 * 4);
static_assert(Z::adam_state_bytes(0) == 2 * Z::optimizer_state_elems(0) * 4);
// dp given explicitly: the state shrinks with the replicas
static_assert(Z::adam_state_bytes(0, 1) == Plain::adam_state_bytes(0));
static_assert(Z::adam_state_bytes(0, 8) < Z::adam_state_bytes(0, 4) && Z::adam_state_bytes(0, 8) > Plain::adam_state_bytes(0) / 9);
// parameters and gradients are kept whole (the layers read and write whole tensors)
static_assert(Z::parameter_bytes(0) == Plain::parameter_bytes(0) && Z::gradient_bytes(0) == Plain::gradient_bytes(0));
static_assert(Z::peak_memory_bytes(0) == Plain::peak_memory_bytes(0) - Plain::adam_state_bytes(0) + Z::adam_state_bytes(0));

// communication: all-reduce of the buckets -> reduce-scatter + all-gather of their chunks
// (+ an all-reduce of the tails), the same total bytes per direction
constexpr auto plain_comm = Plain::communication(0);
constexpr auto zero_comm = Z::communication(0);
static_assert(plain_comm.size == 1 && plain_comm.rows[0].kind == collective::all_reduce &&
              plain_comm.rows[0].bytes == mlp_params * 4);
template <class Table>
constexpr long long bytes_of(const Table& t, collective k) {
  long long b = 0;
  for (int i = 0; i < t.size; ++i)
    if (t.rows[static_cast<std::size_t>(i)].kind == k) b += t.rows[static_cast<std::size_t>(i)].bytes;
  return b;
}
static_assert(bytes_of(zero_comm, collective::reduce_scatter) == bytes_of(zero_comm, collective::all_gather));
static_assert(bytes_of(zero_comm, collective::reduce_scatter) + bytes_of(zero_comm, collective::all_reduce) ==
              mlp_params * 4);

// Split<2> + sequence parallelism: LayerNorm works on a row split, so its whole tensors'
// gradients are reduced over the part's devices and the data group (group 1): with ZeRO
// their state is divided by 2 × dp
constexpr int D = 256;
using TP = Plan<Split<2, LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>, LayerNorm<D>, Linear<D, 10>>,
                Loss<SoftmaxCrossEntropy>, Input<8, D>, MicroBatch<2>, World<4>, Zero<1>, Buckets<1>, SequenceParallel>;
using TPplain = Plan<Split<2, LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>, LayerNorm<D>, Linear<D, 10>>,
                     Loss<SoftmaxCrossEntropy>, Input<8, D>, MicroBatch<2>, World<4>, Buckets<1>, SequenceParallel>;
constexpr long long g0 = TP::lowering::tables.group_elems[0][0], g1 = TP::lowering::tables.group_elems[0][1];
static_assert(g1 > 0 && g0 > 0);
static_assert(TP::optimizer_state_elems(0) == g0 / 2 + g0 % 2 + g1 / 4 + g1 % 4);
static_assert(TPplain::optimizer_state_elems(0) == g0 + g1);

// Offload<weights>: the masters move to host memory; the device keeps two TaskGraph
// staging slots in the compute type and, during the update, one ApplyGroups group of the
// masters (three arrays with the state offloaded too). Three TaskGraphs on one device:
using Off = Plan<Colocate<Replicate<1, Flatten, Linear<784, 512>, ReLU>, Replicate<1, Linear<512, 512>, ReLU>,
                          Replicate<1, Linear<512, 10>>>,
                 Loss<SoftmaxCrossEntropy>, MicroBatch<32>, Offload<offload_level::weights>>;
using OffAll = Plan<Colocate<Replicate<1, Flatten, Linear<784, 512>, ReLU>, Replicate<1, Linear<512, 512>, ReLU>,
                             Replicate<1, Linear<512, 10>>>,
                    Loss<SoftmaxCrossEntropy>, MicroBatch<32>, Offload<offload_level::weights_and_state>, ApplyGroups<4>>;
constexpr long long all_params = 784LL * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10;
static_assert(Off::staged_weights && OffAll::staged_weights && !Plain::staged_weights);
static_assert(Off::num_taskgraphs == 3 && Off::stages == 1);
static_assert(Off::staging_elems(0) == 784LL * 512 + 512);  // the largest TaskGraph
static_assert(Off::parameter_bytes(0) == 2 * (784LL * 512 + 512) * 4);
static_assert(Off::host_bytes(0) == all_params * 4 && Off::adam_state_bytes(0) == 2 * all_params * 4);
static_assert(Off::update_buffer_bytes(0) == all_params * 4);  // one group: every master once
static_assert(OffAll::adam_state_bytes(0) == 0 && OffAll::host_bytes(0) == 3 * all_params * 4);
static_assert(OffAll::update_buffer_bytes(0) == (all_params + 3) / 4 * 4 * 3);
static_assert(OffAll::peak_memory_bytes(0) < Off::peak_memory_bytes(0) - 2 * all_params * 4);
// CastWeightsPerUse with bf16: the masters stay, the whole-model bf16 copy becomes two slots
using Copies = Plan<Colocate<Replicate<1, Flatten, Linear<784, 512>, ReLU>, Replicate<1, Linear<512, 512>, ReLU>,
                             Replicate<1, Linear<512, 10>>>,
                    Loss<SoftmaxCrossEntropy>, MicroBatch<32>, Element<bf16>>;
using PerUse = Plan<Colocate<Replicate<1, Flatten, Linear<784, 512>, ReLU>, Replicate<1, Linear<512, 512>, ReLU>,
                             Replicate<1, Linear<512, 10>>>,
                    Loss<SoftmaxCrossEntropy>, MicroBatch<32>, Element<bf16>, CastWeightsPerUse>;
static_assert(Copies::parameter_bytes(0) == all_params * (4 + 2));
static_assert(PerUse::parameter_bytes(0) == all_params * 4 + 2 * (784LL * 512 + 512) * 2);

// Zero<2>: the gradients are kept as this device's chunks (as the optimizer state) plus
// two TaskGraph slots that a backward writes; Zero<3>: the masters too, plus two staging
// slots that a TaskGraph's weights are all-gathered into. Eight TaskGraphs of a GPT-like
// width on 8 data-parallel devices: the finer the TaskGraphs, the smaller the slots.
using Hid = Replicate<1, Linear<1024, 1024>, ReLU>;
template <int Z, class... Extra>
using Eight = Plan<Colocate<Hid, Hid, Hid, Hid, Hid, Hid, Hid, Replicate<1, Linear<1024, 10>>>, Loss<SoftmaxCrossEntropy>,
                   Input<1024>, MicroBatch<8>, World<8>, Zero<Z>, Extra...>;
constexpr long long eight_params = 7 * (1024LL * 1024 + 1024) + 1024 * 10 + 10, eight_slot = 1024LL * 1024 + 1024;
static_assert(Eight<3>::num_taskgraphs == 8 && Eight<3>::staged_weights && !Eight<2>::staged_weights);
static_assert(Eight<3>::staging_elems(0) == eight_slot);
// this device's chunks: Zero<2/3> cut the buckets at TaskGraph boundaries too (more tails)
constexpr long long shard = Eight<2>::optimizer_state_elems(0);
constexpr int nb = Eight<2>::lowering::tables.num_buckets[0];
static_assert(shard == Eight<3>::optimizer_state_elems(0) && nb == 8);
static_assert(shard >= eight_params / 8 && shard < eight_params / 8 + 8 * nb);
static_assert(Eight<1>::optimizer_state_elems(0) >= eight_params / 8 && Eight<1>::optimizer_state_elems(0) < shard + 64);
// Zero<1>: whole masters and gradients
static_assert(Eight<1>::parameter_bytes(0) == eight_params * 4 && Eight<1>::gradient_bytes(0) == eight_params * 4);
// Zero<2>: gradients divided (plus two slots)
static_assert(Eight<2>::parameter_bytes(0) == eight_params * 4);
static_assert(Eight<2>::gradient_bytes(0) == (shard + 2 * eight_slot) * 4);
static_assert(Eight<2>::gradient_bytes(0) * 2 < Eight<1>::gradient_bytes(0));  // 0.41
// Zero<3>: masters divided too (plus two slots)
static_assert(Eight<3>::parameter_bytes(0) == (shard + 2 * eight_slot) * 4);
static_assert(Eight<3>::gradient_bytes(0) == Eight<2>::gradient_bytes(0));
static_assert(Eight<3>::peak_memory_bytes(0) * 2 < Eight<1>::peak_memory_bytes(0));
// bf16 under Zero<3>: fp32 shard, two bf16 slots and one fp32 slot the all-gather lands in
static_assert(Eight<3, Element<bf16>>::parameter_bytes(0) == shard * 4 + 2 * eight_slot * 2 + eight_slot * 4);
// offloaded: the shard (and its optimizer state) in host memory
static_assert(Eight<3, Offload<offload_level::weights_and_state>>::host_bytes(0) == 3 * shard * 4);
static_assert(Eight<3, Offload<offload_level::weights_and_state>>::parameter_bytes(0) == 2 * eight_slot * 4);
// one TaskGraph with parameters: one gradient slot (nothing to overlap)
using Z2one = Plan<MLP, Loss<SoftmaxCrossEntropy>, MicroBatch<32>, World<4>, Zero<2>>;
static_assert(Z2one::gradient_bytes(0) == (Z2one::optimizer_state_elems(0) + mlp_params) * 4);
static_assert(detail::gradient_slots<Z2one>(0) == 1 && detail::gradient_slots<Eight<2>>(0) == 2);
// a dp the plan was not fixed for: the shard follows
static_assert(Eight<3>::parameter_bytes(0, 2) > Eight<3>::parameter_bytes(0, 8));

// Communication of one step (one micro-batch): Zero<2> reduce-scatters (and all-reduces
// the tails of) every gradient once, as Zero<1>; Zero<3> all-gathers each TaskGraph's
// weights whenever it is staged: forward 0..7, backward 7 6 (still staged) 5..0.
static_assert(bytes_of(Eight<2>::communication(0), collective::reduce_scatter) +
                  bytes_of(Eight<2>::communication(0), collective::all_reduce) ==
              eight_params * 4);
static_assert(bytes_of(Eight<2>::communication(0), collective::all_gather) ==
              bytes_of(Eight<2>::communication(0), collective::reduce_scatter));
// how often the device program gathers TaskGraph tg
constexpr int gathers(int tg) {
  const auto& d = lower::device_program<Eight<3>>::train;
  int n = 0;
  for (int i = 0; i < d.length[0]; ++i) n += d.at(0, i).kind == lower::act::gather_weights && d.at(0, i).index == tg;
  return n;
}
static_assert(gathers(0) == 2 && gathers(5) == 2 && gathers(6) == 1 && gathers(7) == 1);
static_assert(bytes_of(Eight<3>::communication(0), collective::all_gather) >
              bytes_of(Eight<2>::communication(0), collective::all_gather) * 7 / 4);
// two micro-batches: Zero<2> reduces after each backward
template <int Z>
using Eight2 = Plan<Colocate<Hid, Hid, Hid, Hid, Hid, Hid, Hid, Replicate<1, Linear<1024, 10>>>, Loss<SoftmaxCrossEntropy>,
                    Input<1024>, MicroBatch<8>, NumMicroBatch<2>, World<8>, Zero<Z>>;
static_assert(bytes_of(Eight2<2>::communication(0), collective::reduce_scatter) ==
              2 * bytes_of(Eight<2>::communication(0), collective::reduce_scatter));
static_assert(bytes_of(Eight2<1>::communication(0), collective::reduce_scatter) ==
              bytes_of(Eight<1>::communication(0), collective::reduce_scatter));

int main() { return 0; }
