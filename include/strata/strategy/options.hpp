#pragma once
// Plan options as types. Each option belongs to one category and may be given once.
#include <concepts>

#include "strata/core/sbp.hpp"
#include "strata/core/shape.hpp"
#include "strata/strategy/strategy.hpp"

namespace strata {

enum class option_kind : unsigned char {
  micro_batch,
  num_micro_batch,
  schedule,
  loss,
  world,
  input,
  tensor_mode,
  default_strategy,
  gradient_reduce,
  buckets,
  element,
  sequence_parallel,
  gradient_checkpoint,
  zero,
  loss_scale,
  apply_groups,
  offload,
  weight_copies,
  half_reduce,
  auto_stages,
  memory_budget,
  context_exchange
};

// Samples one replica consumes per micro-batch (EPL's "micro batch size").
template <int B>
struct MicroBatch {
  static constexpr option_kind option = option_kind::micro_batch;
  static constexpr int value = B;
};

// Micro-batches per step: pipeline depth or gradient accumulation steps
// (EPL pipeline.num_micro_batch, OneFlow set_gradient_accumulation_steps).
template <int M>
struct NumMicroBatch {
  static constexpr option_kind option = option_kind::num_micro_batch;
  static constexpr int value = M;
};

// The pipeline schedule: a tag type carrying its builder, name and traits
// (plan/schedule_traits.hpp). Built in (plan/schedules/): PreferForward (GPipe),
// PreferBackward (1F1B, the default), Interleaved<V>, ZeroBubbleH1, ZeroBubbleV, DualPipeV.
template <class S>
struct Schedule {
  static constexpr option_kind option = option_kind::schedule;
  using type = S;
};

template <class L>
struct Loss {
  static constexpr option_kind option = option_kind::loss;
  using type = L;
};

// Fixes the world size at compile time; otherwise it is read at run time.
template <int N>
struct World {
  static constexpr option_kind option = option_kind::world;
  static constexpr int value = N;
};

// Per-sample input shape, when the first layers do not fix it.
template <int... D>
struct Input {
  static constexpr option_kind option = option_kind::input;
  static constexpr shape_t shape = shape_v<D...>;
};

// The same, from a shape value (generic code that forwards another plan's input).
template <shape_t S>
struct InputShape {
  static constexpr option_kind option = option_kind::input;
  static constexpr shape_t shape = S;
};

// Colossal-AI tensor parallel modes for Split<N>.
enum class tensor_mode : unsigned char { d1 = 1, d2 = 2, d2p5 = 25, d3 = 3 };
struct Tensor1D {
  static constexpr option_kind option = option_kind::tensor_mode;
  static constexpr tensor_mode mode = tensor_mode::d1;
  static constexpr int depth = 1;
};
struct Tensor2D {
  static constexpr option_kind option = option_kind::tensor_mode;
  static constexpr tensor_mode mode = tensor_mode::d2;
  static constexpr int depth = 1;
};
template <int Depth>
struct Tensor2p5D {
  static constexpr option_kind option = option_kind::tensor_mode;
  static constexpr tensor_mode mode = tensor_mode::d2p5;
  static constexpr int depth = Depth;
};
struct Tensor3D {
  static constexpr option_kind option = option_kind::tensor_mode;
  static constexpr tensor_mode mode = tensor_mode::d3;
  static constexpr int depth = 1;
};

// Strategy of layers written without an annotation (EPL set_default_strategy).
template <class S>
struct Default {
  static constexpr option_kind option = option_kind::default_strategy;
  using type = S;
};

// Data-parallel gradient reduction (EPL communication.gradients_reduce_method).
enum class reduce_method : unsigned char { mean, sum };
struct ReduceMean { static constexpr reduce_method method = reduce_method::mean; };
struct ReduceSum { static constexpr reduce_method method = reduce_method::sum; };
template <class M>
struct GradientReduce {
  static constexpr option_kind option = option_kind::gradient_reduce;
  static constexpr reduce_method method = M::method;
};

// Gradient all-reduce fused into at most N buckets (EPL communication.max_splits).
template <int N>
struct Buckets {
  static constexpr option_kind option = option_kind::buckets;
  static constexpr int value = N;
};

// Element type of parameters and activations, for the memory analysis.
template <class T>
struct Element {
  static constexpr option_kind option = option_kind::element;
  using type = T;
};

// Megatron's sequence parallelism for Split<N> TaskGraphs: where a partial sum (a
// row-parallel output) meets a layer that works row by row (LayerNorm, a residual add,
// position embeddings, activations), it is reduce-scattered to a row split instead of
// all-reduced, and the rows are all-gathered before the next column- or head-parallel
// layer: those regions hold 1/N of the activations each. Such a layer that keeps its input
// keeps the row split and gathers it again before its backward (Megatron-LM's; Korthikanti
// et al. 2022): 1/N of that input kept, for one all-gather more per micro-batch (two under a
// zero-bubble schedule, whose W reads the input again).
struct SequenceParallel {
  static constexpr option_kind option = option_kind::sequence_parallel;
  static constexpr bool value = true;
};
struct NoSequenceParallel {  // the default (not an option)
  static constexpr bool value = false;
};

// How attention exchanges under Context<N>. ContextAllGather (the default): every device
// all-gathers the whole sequence's keys and values and keeps its own queries (Megatron's
// all-gather context parallelism). ContextAllToAll (DeepSpeed-Ulysses): an all-to-all trades
// the sequence split for a head split, each device attends whole sequences with Heads/N
// heads, and a second all-to-all trades back; it needs Heads and KVHeads divisible by N.
// ContextRing below.
struct ContextAllGather {
  static constexpr option_kind option = option_kind::context_exchange;
  static constexpr context_mode value = context_mode::all_gather;
};
struct ContextAllToAll {
  static constexpr option_kind option = option_kind::context_exchange;
  static constexpr context_mode value = context_mode::all_to_all;
};
// ContextRing (ring attention; Li et al.'s sequence parallelism, Megatron's p2p context
// parallelism): each device keeps its own queries and the key/value blocks travel around
// the part's ring, one neighbour exchange per step posted before that step's attention (so
// that, with a communicator that can wait for a posted group later — MPI —, the transfer
// overlaps it); the partial outputs merge by their log-sum-exps. Besides its own, a device
// holds two blocks of keys and values in flight and, in the backward, two of their
// gradients (memory O(Seq/N), the all-gather's O(Seq)); the gradients travel with the blocks
// and arrive home after N steps. Load-balanced under a causal mask as ContextAllGather is.
struct ContextRing {
  static constexpr option_kind option = option_kind::context_exchange;
  static constexpr context_mode value = context_mode::ring;
};

// Activation recomputation (EPL's gradient_checkpoint): which layers' activations are
// dropped after the forward and computed again, one region at a time, in the backward.
//  collection     the regions written as Checkpoint<...> (the default: none unless written)
//  automatic      every outermost Residual<...> block (a transformer's attention and MLP halves)
//  end_taskgraph  every TaskGraph: only what enters a TaskGraph is kept
// A region stops before a pipeline part's last layer (its output is a message) and the loss.
enum class checkpoint_mode : unsigned char { collection, automatic, end_taskgraph };
template <checkpoint_mode M>
struct GradientCheckpoint {
  static constexpr option_kind option = option_kind::gradient_checkpoint;
  static constexpr checkpoint_mode value = M;
};

// ZeRO (EPL's zero.level "v1", DeepSpeed's stage 1/2 communication): the optimizer state
// is partitioned over the group each gradient is reduced in (the data-parallel group, or
// the part's devices and the data group for tensors every device of a part holds). The
// gradient buckets are reduce-scattered, each device updates the chunk of every bucket
// it owns, and the parameters are all-gathered after the update. Level 0 is plain data
// parallelism (the default); level 1 is the only other level so far.
template <int Level>
struct Zero {
  static constexpr option_kind option = option_kind::zero;
  static constexpr int value = Level;
};

// Loss scaling (EPL's amp.loss_scale; PyTorch's GradScaler): the loss's gradient is
// multiplied by a scale S before the backward, so small fp16 gradients do not flush to
// zero, and the gradients are divided by S before the update.
//  DynamicScale<Log2Init, GrowthInterval>  S starts at 2^Log2Init; a step whose gradients
//      hold Inf/NaN anywhere in the world is skipped by every rank and halves S; after
//      GrowthInterval clean steps in a row S doubles ("dynamic"; PyTorch's defaults).
//  FixedScale<S>  a fixed scale; a step with Inf/NaN gradients is still skipped (a number).
enum class loss_scale_kind : unsigned char { none, fixed, dynamic };
template <int Log2Init = 16, int GrowthInterval = 2000>
struct DynamicScale {
  static constexpr loss_scale_kind kind = loss_scale_kind::dynamic;
  static constexpr int log2_init = Log2Init, growth_interval = GrowthInterval;
  static constexpr double initial = double(1ULL << (Log2Init >= 0 && Log2Init < 63 ? Log2Init : 0));
};
template <int S>
struct FixedScale {
  static constexpr loss_scale_kind kind = loss_scale_kind::fixed;
  static constexpr int log2_init = 0, growth_interval = 0;
  static constexpr double initial = double(S);
};
struct NoScale {
  static constexpr loss_scale_kind kind = loss_scale_kind::none;
  static constexpr int log2_init = 0, growth_interval = 0;
  static constexpr double initial = 1.0;
};
template <class S>
struct LossScale {
  static constexpr option_kind option = option_kind::loss_scale;
  using type = S;
};

// The optimizer's update in N groups of about equal size (EPL optimizer.num_apply_group):
// what the update needs besides the state it updates in place — the device copies of
// offloaded parameters and state — is one group's, not the whole stage's.
template <int N>
struct ApplyGroups {
  static constexpr option_kind option = option_kind::apply_groups;
  static constexpr int value = N;
};

// Offload (EPL offload.level "v0"): the master parameters live in host memory (pinned on
// GPUs) and each TaskGraph's weights are brought to the device right before its layers run
// (forward, backward, recomputation); `weights_and_state` keeps the optimizer state in host
// memory too. The update brings one ApplyGroups group at a time to the device.
enum class offload_level : unsigned char { none, weights, weights_and_state };
template <offload_level L>
struct Offload {
  static constexpr option_kind option = option_kind::offload;
  static constexpr offload_level value = L;
};

// EPL's memory-efficient AMP: mixed precision keeps no compute-type (bf16/fp16) copy of the
// weights between uses; each TaskGraph's weights are cast from the FP32 masters right before
// its layers run. Without it the copies are made once per update and kept.
struct CastWeightsPerUse {
  static constexpr option_kind option = option_kind::weight_copies;
  static constexpr bool value = true;
};
struct KeepWeightCopies {  // the default (not an option)
  static constexpr bool value = false;
};

// Gradient reduction in fp16 (EPL's communication.fp16 and communication.fp16_scale):
// each bucket is divided by Scale, rounded to fp16, reduced in fp16 (half the bytes) and
// multiplied by Scale again. Scale is a power of two, so only the fp16 rounding (and fp16
// partial sums) change values.
template <int Scale = 128>
struct HalfGradientReduce {
  static constexpr option_kind option = option_kind::half_reduce;
  static constexpr int value = Scale;
};
struct FullGradientReduce {  // the default (not an option): master precision
  static constexpr int value = 0;
};


// EPL's auto.auto_parallel with pipeline.num_stages: the planner cuts an unannotated model
// (Model<layers...>, Repeat<N, Block>, or one Replicate/Split whose items it cuts) into K
// pipeline stages itself, balancing each stage's forward + backward FLOPs (recomputed
// forwards included) under MemoryBudget, if one is given (plan/auto_stages.hpp).
template <int K>
struct AutoStages {
  static constexpr option_kind option = option_kind::auto_stages;
  static constexpr int value = K;
};

// Memory of one device, in MiB, that AutoStages must keep every stage under (its
// estimate: parameters, gradients and Adam state without ZeRO's division, plus the
// stash of every micro-batch in flight and the largest layer's work buffers).
template <long long MiB>
struct MemoryBudget {
  static constexpr option_kind option = option_kind::memory_budget;
  static constexpr long long value = MiB;
  static constexpr long long bytes = MiB * 1024 * 1024;
};

namespace detail {
template <class T>
concept plan_option = requires { { T::option } -> std::convertible_to<option_kind>; };
}  // namespace detail

}  // namespace strata
