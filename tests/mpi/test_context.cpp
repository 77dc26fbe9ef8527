// Context parallelism (Context<N>: every sample's positions split over N devices, attention
// gathering the whole sequence's keys and values, trading heads for positions, or passing
// key/value blocks around a ring), alone or over tensor parallelism (Context<N, Split<T>>): GPT
// and Llama plans train to the same
// losses and parameters as one device (strata::verify::against_one_device: float64 within
// 1e-9, bytes per collective against the plan, replicas bit for bit), alone and with data
// parallelism, pipelines, ZeRO and recomputation. Positions are global: the learned position
// table, rotary positions, the causal mask and both dropouts see each token's place in the
// whole sequence.
// mpi-ranks: 2 4
#include "check_one_device.hpp"

#include <cmath>
#include <span>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr int V = 32, S = 16, D = 16, H = 4;
using CE = Loss<SoftmaxCrossEntropy>;
using Attn = Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>;
using FullAttn = Residual<LayerNorm<D>, MultiHeadAttention<D, H, S>>;  // not causal
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;

template <template <int, class...> class Strategy, int N, class A, class... Extra>
using gpt = Plan<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, A, MLP>, LayerNorm<D>, Linear<D, V>>,
                 Input<S>, CE, MicroBatch<2>, NumMicroBatch<2>, Extra...>;
template <template <int, class...> class Strategy, int N, class... Extra>
using gpt_pp2 = Plan<Pipeline<Strategy<N, Embedding<V, D>, PositionEmbedding<S, D>, Attn, MLP>,
                              Strategy<N, Attn, MLP, LayerNorm<D>, Linear<D, V>>>,
                     Input<S>, CE, MicroBatch<2>, NumMicroBatch<4>, Extra...>;

// Llama-style: rotary grouped-query attention (4 query heads on 2 kv heads) with 10%
// attention dropout, RMSNorm, SwiGLU, dropout on the branches, tied embeddings
using LlamaAttn = Residual<RMSNorm<D>, LlamaAttention<D, H, 2, S, 10000, 10>, Dropout<10>>;
using LlamaMlp = Residual<RMSNorm<D>, SwiGLU<D, 24>, Dropout<10>>;
template <template <int, class...> class Strategy, int N, class... Extra>
using llama = Plan<Strategy<N, Embedding<V, D>, Repeat<2, LlamaAttn, LlamaMlp>, RMSNorm<D>, TiedHead<V, D>>, Input<S>,
                   CE, MicroBatch<2>, NumMicroBatch<2>, Extra...>;

using CP2 = gpt<Context, 2, Attn>;
using CP4 = gpt<Context, 4, Attn>;
using CP2_FULL = gpt<Context, 2, FullAttn>;
using CP2_RC = gpt<Context, 2, Attn, GradientCheckpoint<checkpoint_mode::automatic>>;
using CP2_Z2 = gpt<Context, 2, Attn, Zero<2>>;
using CP2_PP2 = gpt_pp2<Context, 2>;
using L_CP2 = llama<Context, 2>;
using L_CP4 = llama<Context, 4>;
// ContextAllToAll (DeepSpeed-Ulysses): heads and positions trade places around attention
using A2A_CP2 = gpt<Context, 2, Attn, ContextAllToAll>;
using A2A_CP4 = gpt<Context, 4, Attn, ContextAllToAll>;
using A2A_CP2_FULL_RC = gpt<Context, 2, FullAttn, ContextAllToAll, GradientCheckpoint<checkpoint_mode::automatic>>;
using A2A_CP2_PP2 = gpt_pp2<Context, 2, ContextAllToAll>;
using L_A2A_CP2 = llama<Context, 2, ContextAllToAll>;
// ContextRing (ring attention): k and v blocks around the part's ring, partials merged by lse
using R_CP2 = gpt<Context, 2, Attn, ContextRing>;
using R_CP4 = gpt<Context, 4, Attn, ContextRing>;
using R_CP2_FULL = gpt<Context, 2, FullAttn, ContextRing>;
using R_CP4_FULL_RC = gpt<Context, 4, FullAttn, ContextRing, GradientCheckpoint<checkpoint_mode::automatic>>;
using R_CP2_Z2 = gpt<Context, 2, Attn, ContextRing, Zero<2>>;
using R_CP2_PP2 = gpt_pp2<Context, 2, ContextRing>;
using L_R_CP2 = llama<Context, 2, ContextRing>;
using L_R_CP4 = llama<Context, 4, ContextRing>;

// Context<N, Split<T>> (CP × TP): two context groups of two tensor-parallel devices, device
// c·T + t; every layer sharded as under Split<T>, every layout holding 1/N of the rows
template <class... Extra>
using gpt_cp2_tp2 = Plan<Context<2, Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>,
                                          Linear<D, V>>>,
                         Input<S>, CE, MicroBatch<2>, NumMicroBatch<2>, Extra...>;
template <class... Extra>
using llama_cp2_tp2 = Plan<Context<2, Split<2, Embedding<V, D>, Repeat<2, LlamaAttn, LlamaMlp>, RMSNorm<D>, TiedHead<V, D>>>,
                           Input<S>, CE, MicroBatch<2>, NumMicroBatch<2>, Extra...>;
using CT = gpt_cp2_tp2<>;

// The plan: every layer holds 1/N of the rows, attention brings three collectives over the
// part (k and v gathered forward and backward, their gradients reduce-scattered)
constexpr auto& cp_attn = CP2::layer_plans[4];
static_assert(cp_attn.desc.name == "CausalSelfAttention" && cp_attn.context == 2 &&
              cp_attn.sig == signature::data_parallel && cp_attn.in_layout == sbp::split_batch);
static_assert(cp_attn.num_comms - cp_attn.num_conversion_comms == 3);
static_assert(A2A_CP2::layer_plans[4].num_comms == 4 && A2A_CP2::layer_plans[4].exchange == context_mode::all_to_all);
// ContextRing: three send/recv lists — k and v on N − 1 times forward and backward, their
// gradients N times — each a device's share, micro-batch 2 × 16/N positions × 2 × 16 features
static_assert(R_CP4::layer_plans[4].num_comms == 3 && R_CP4::layer_plans[4].exchange == context_mode::ring);
static_assert(R_CP4::layer_plans[4].comms[0].kind == collective::send_recv &&
              R_CP4::layer_plans[4].comms[0].elems == 2 * 16 / 4 * 2 * 16 && R_CP4::layer_plans[4].comms[0].calls == 3 &&
              R_CP4::layer_plans[4].comms[2].calls == 4);
static_assert(CP2::context == 2 && CP2::devices_per_replica == 2 && CP2_PP2::devices_per_replica == 4);
// CP × TP: attention head-parallel on the tensor group, its k and v gathered over the context
// group at its own heads' width (micro-batch 2 × 16 positions × k, v × 2 of 4 heads × 4 / 2
// pieces), its partial output all-reduced over the tensor group; its shards' gradients summed
// over the context group (× replicas)
constexpr auto& ct_attn = CT::layer_plans[4];
static_assert(CT::context == 2 && CT::context_tensor == 2 && CT::part_devices == 4 && CT::layout_devices == 2);
static_assert(ct_attn.sig == signature::head_parallel && ct_attn.context == 2 && ct_attn.in_layout == sbp::broadcast &&
              ct_attn.out_layout == sbp::partial);
static_assert(ct_attn.num_comms - ct_attn.num_conversion_comms == 3 &&
              ct_attn.comms[std::size_t(ct_attn.num_conversion_comms)].group == group_axis::context &&
              ct_attn.comms[std::size_t(ct_attn.num_conversion_comms)].elems == 2 * 16 * 2 * 2 * 4 / 2);
static_assert(CT::layer_plans[5].comms[0].kind == collective::all_reduce &&
              CT::layer_plans[5].comms[0].group == group_axis::tensor && CT::layer_plans[5].comms[0].elems == 2 * 16 / 2 * 16);
static_assert(ct_attn.grad_group[0] == group_axis::context_data && CT::reduction_devices(group_axis::context_data) == 2);
static_assert(CT::coord(1).cp == 0 && CT::coord(1).tp == 1 && CT::coord(2).cp == 1 && CT::coord(2).tp == 0);
// each device does a quarter of the attention's work; Context<1, Split<2>> is Split<2>
static_assert(4 * ct_attn.local_flops_per_sample == gpt<Replicate, 1, Attn>::layer_plans[4].local_flops_per_sample);
using CT1 = Plan<Context<1, Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Repeat<2, Attn, MLP>, LayerNorm<D>,
                                  Linear<D, V>>>,
                 Input<S>, CE, MicroBatch<2>, NumMicroBatch<2>>;
static_assert(CT1::context == 1 && CT1::context_tensor == 1 && CT1::layer_plans[4].context == 1 &&
              CT1::layer_plans[4].num_comms == CT1::layer_plans[4].num_conversion_comms &&
              CT1::layer_plans[4].comms[0].group == group_axis::part &&
              CT1::layer_plans[5].comms[0].group == group_axis::part);
static_assert(CT::same_group(group_axis::tensor, 0, 1, 4) && !CT::same_group(group_axis::tensor, 0, 2, 4) &&
              CT::same_group(group_axis::context, 1, 3, 4) && !CT::same_group(group_axis::context, 0, 1, 4));
// each device: 16/2 positions of both samples (pieces c and 3 − c of 4), its tensor index's heads
constexpr auto& ct_origins = strata::lower::lowered<CT>::tables.origins[4];
static_assert(strata::lower::lowered<CT>::tables.calls[4].dims.rows == 2 * 16 / 2 &&
              strata::lower::lowered<CT>::tables.calls[4].dims.n == 2);
static_assert(ct_origins[1].pos0 == 0 && ct_origins[1].pos1 == 12 && ct_origins[2].pos0 == 4 && ct_origins[3].pos1 == 8 &&
              ct_origins[3].index == 1 && ct_origins[3].context_index == 1);
static_assert(gpt<Replicate, 2, Attn>::context == 1 && gpt<Replicate, 2, Attn>::layer_plans[4].context == 1);

// Causal load balance (ContextAllGather): each sequence cut into 2N pieces, device k holding
// pieces k and 2N − 1 − k as [piece][sample] rows. CP2, micro-batch 2: sample b's pieces j
// 0..3 land at device-major places (k·2 + h)·2 + b.
constexpr auto& moves = strata::lower::lowered<CP2>::arrangement;
static_assert(moves.size() == 8 && moves[0].to == 0 && moves[3].to == 2 && moves[1].to == 4 && moves[2].to == 6 &&
              moves[4].to == 1 && moves[7].to == 3);
static_assert(strata::lower::lowered<A2A_CP2>::arrangement.size() == 4);  // all-to-all: one piece per device
// Every device's queries see as many keys under the causal mask: Σ over its pieces' rows of
// (position + 1), from the pieces' first positions in the lowered program.
template <class P>
constexpr bool causal_work_balanced() {
  constexpr auto& origins = strata::lower::lowered<P>::tables.origins[4];
  constexpr long long len = S / (2 * P::context);
  long long first = -1;
  for (int k = 0; k < P::context; ++k) {
    long long keys = 0;
    for (long long p : {origins[std::size_t(k * P::context_tensor)].pos0, origins[std::size_t(k * P::context_tensor)].pos1})
      for (long long i = 0; i < len; ++i) keys += p + i + 1;
    if (first < 0) first = keys;
    if (keys != first) return false;
  }
  return true;
}
static_assert(causal_work_balanced<CP2>() && causal_work_balanced<CP4>() && causal_work_balanced<CT>());

// Attention's stash is linear in the sequence, and Context<N> divides it by N: the per-layer
// stash at Seq 1k, 4k and 16k grows 4x per 4x, and CP4 holds a quarter of one device's
template <int Seq, template <int, class...> class Strategy, int N>
using long_attn = Plan<Strategy<N, Embedding<V, 64>, CausalSelfAttention<64, 4, Seq>, Linear<64, V>>, Input<Seq>, CE,
                       MicroBatch<1>>;
template <class P>
constexpr long long attn_stash() {
  return strata::lower::lowered<P>::tables.calls[1].needs.stash_values;
}
static_assert(attn_stash<long_attn<4096, Replicate, 1>>() == 4 * attn_stash<long_attn<1024, Replicate, 1>>());
static_assert(attn_stash<long_attn<16384, Replicate, 1>>() == 4 * attn_stash<long_attn<4096, Replicate, 1>>());
static_assert(4 * attn_stash<long_attn<16384, Context, 4>>() == attn_stash<long_attn<16384, Replicate, 1>>());
// ... and the ring's scratch is the device's share too: linear in Seq at a given N, and a
// quarter of the sequence's under CP4 where the all-gather holds the whole sequence's k and v
template <int Seq, int N, class... Mode>
using cp_attn_plan = Plan<Context<N, Embedding<V, 64>, CausalSelfAttention<64, 4, Seq>, Linear<64, V>>, Input<Seq>, CE,
                          MicroBatch<1>, Mode...>;
template <class P>
constexpr long long attn_scratch() {
  return strata::lower::lowered<P>::tables.calls[1].needs.scratch_values;
}
static_assert(attn_scratch<cp_attn_plan<16384, 4, ContextRing>>() == 4 * attn_scratch<cp_attn_plan<4096, 4, ContextRing>>());
static_assert(attn_scratch<cp_attn_plan<16384, 8, ContextRing>>() * 2 == attn_scratch<cp_attn_plan<16384, 4, ContextRing>>());
static_assert(attn_scratch<cp_attn_plan<16384, 4>>() > 2 * attn_scratch<cp_attn_plan<16384, 4, ContextRing>>());

template <class P>
void check(const char* name, optimizer opt = Adam{.lr = 1e-2}, double tol = 1e-9) {
  mpi_test::check_one_device<P>("context", name, opt, tol, 6);
}
bool world_is(int n) { return mpi_test::world().size() == n; }

}  // namespace

TEST_CASE("Context<N>: a GPT with its sequence split equals one device") {
  if (world_is(2)) {
    check<CP2>("GPT: CP2, causal");
    check<CP2_FULL>("GPT: CP2, not causal");
    check<CP2_RC>("GPT: CP2, recompute blocks");
  }
  if (world_is(4)) {
    check<CP4>("GPT: CP4, causal");
    check<CP2>("GPT: CP2 x DP2");
    check<CP2_Z2>("GPT: CP2 x DP2 ZeRO-2");
    check<CP2_PP2>("GPT: PP2 x CP2 1F1B");
  }
}

TEST_CASE("Context<N> with ContextAllToAll (Ulysses): sequence and heads trade places, equal to one device") {
  if (world_is(2)) {
    check<A2A_CP2>("GPT: CP2 all-to-all, causal");
    check<A2A_CP2_FULL_RC>("GPT: CP2 all-to-all, not causal, recompute");
    check<L_A2A_CP2>("Llama: CP2 all-to-all (2 kv heads)");
  }
  if (world_is(4)) {
    check<A2A_CP4>("GPT: CP4 all-to-all");
    check<A2A_CP2>("GPT: CP2 all-to-all x DP2");
    check<A2A_CP2_PP2>("GPT: PP2 x CP2 all-to-all");
  }
}

TEST_CASE("Context<N> with ContextRing (ring attention): k and v around the ring, equal to one device") {
  if (world_is(2)) {
    check<R_CP2>("GPT: CP2 ring, causal");
    check<R_CP2_FULL>("GPT: CP2 ring, not causal");
    check<L_R_CP2>("Llama: CP2 ring (2 kv heads, attention dropout)");
  }
  if (world_is(4)) {
    check<R_CP4>("GPT: CP4 ring, causal");
    check<R_CP4_FULL_RC>("GPT: CP4 ring, not causal, recompute");
    check<L_R_CP4>("Llama: CP4 ring");
    check<R_CP2_Z2>("GPT: CP2 ring x DP2 ZeRO-2");
    check<R_CP2_PP2>("GPT: PP2 x CP2 ring 1F1B");
  }
}

TEST_CASE("Context<N, Split<T>> (CP x TP): sequence and tensor split in one plan, equal to one device") {
  if (!world_is(4)) return;
  check<CT>("GPT: CP2 x TP2, all-gather");
  check<gpt_cp2_tp2<ContextAllToAll>>("GPT: CP2 x TP2, all-to-all");
  check<gpt_cp2_tp2<ContextRing, GradientCheckpoint<checkpoint_mode::automatic>>>("GPT: CP2 x TP2, ring, recompute");
  check<gpt_cp2_tp2<Zero<2>>>("GPT: CP2 x TP2, ZeRO-2 over the context group");
  check<llama_cp2_tp2<>>("Llama: CP2 x TP2 (1 kv head per device)");
  check<llama_cp2_tp2<ContextRing>>("Llama: CP2 x TP2, ring");
  // SequenceParallel: each tensor-parallel device holds one of its group's two pieces (or half
  // of the one piece under all-to-all) between the partial sums and the next gathers
  check<gpt_cp2_tp2<SequenceParallel>>("GPT: CP2 x TP2 + SP");
  check<gpt_cp2_tp2<ContextAllToAll, SequenceParallel>>("GPT: CP2 x TP2 + SP, all-to-all");
  check<llama_cp2_tp2<ContextRing, SequenceParallel>>("Llama: CP2 x TP2 + SP, ring (dropout on pieces)");
}

TEST_CASE("Context<N>: bf16 against float64 on one device") {
  // SGD: bf16's rounding noise in zero gradients would be scaled to lr-sized steps by Adam
  const SGD sgd{.lr = 0.1, .momentum = 0.9};
  if (world_is(2)) {
    mpi_test::check_one_device<CP2, bf16, double>("context", "GPT: bf16 CP2 against float64", sgd, 3e-2, 6);
    mpi_test::check_one_device<L_A2A_CP2, bf16, double>("context", "Llama: bf16 CP2 all-to-all against float64", sgd,
                                                        3e-2, 6);
  }
  if (world_is(4)) {  // the ring's partial outputs and travelling gradients are bf16: three merges, four sums
    mpi_test::check_one_device<L_R_CP4, bf16, double>("context", "Llama: bf16 CP4 ring against float64", sgd, 3e-2, 6);
    mpi_test::check_one_device<llama_cp2_tp2<ContextRing>, bf16, double>(
        "context", "Llama: bf16 CP2 x TP2 ring against float64", sgd, 3e-2, 6);
  }
}

// An evaluation whose last samples are padding: each device counts its chunk of the valid
// samples only (the loss layer's valid rows, counted in the device's rows per sample).
template <class P>
void check_padded_evaluation() {
  auto& w = mpi_test::world();
  if (w.size() != P::devices_per_replica) return;
  auto t = make_trainer<P, double>(w, SGD{});
  auto one = local_world<Host>();
  auto ref = make_trainer<verify::one_device_plan<P>, double>(one, SGD{});  // the same seed, the same model
  const std::size_t n = std::size_t(P::replica_batch);
  std::vector<double> x(n * S);
  std::vector<std::int32_t> y(n * S);
  verify::random_data<P>(5)(0, std::span<double>(x), std::span<std::int32_t>(y));
  for (std::size_t valid = 1; valid <= n; ++valid) {
    const step_result a = t.evaluate({.inputs = x, .labels = y, .samples = n}, valid);
    const step_result b = ref.evaluate({.inputs = x, .labels = y, .samples = n}, valid);
    CHECK(a.rows == static_cast<long long>(valid * S));
    CHECK(b.rows == a.rows);
    CHECK(std::abs(a.loss - b.loss) <= 1e-13 * b.loss);
    CHECK(a.correct == b.correct);
  }
}

TEST_CASE("Context<N>: a padded evaluation counts the valid samples' positions on every device") {
  check_padded_evaluation<CP2>();
  check_padded_evaluation<A2A_CP4>();
  check_padded_evaluation<R_CP4>();
}

TEST_CASE("Context<N>: a Llama (rotary GQA, both dropouts, tied) with its sequence split equals one device") {
  if (world_is(2)) check<L_CP2>("Llama: CP2");
  if (world_is(4)) check<L_CP4>("Llama: CP4");
}
