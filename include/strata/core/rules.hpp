#pragma once
// Every rule a configuration can break. Each rule is a class template whose template
// arguments carry the numbers involved, so the compiler's "in instantiation of
// rule::X<...>" note prints them next to the message (g++, clang and nvcc all do).
// `value` is true when the rule holds; using `value` instantiates the check.

namespace strata::rule {

// Dependent `false`: a rule that can only fail must not fire before it is instantiated.
template <auto...>
inline constexpr bool never = false;
template <class...>
inline constexpr bool never_type = false;

// ---- layers ---------------------------------------------------------------------------
template <int A, int B>
struct layer_dim_positive {
  static constexpr bool value = A > 0 && B > 0;
  static_assert(value, "strata rule [layer-dims]: layer dimensions must be positive");
};

template <int D, int Heads>
struct attention_heads_divide_dim {
  static constexpr bool value = Heads > 0 && D % Heads == 0;
  static_assert(value, "strata rule [attention-heads]: MultiHeadAttention<D, Heads, Seq>: D is not divisible by Heads");
};

template <int TopK, int Experts>
struct moe_topk_within_experts {
  static constexpr bool value = TopK <= Experts;
  static_assert(value, "strata rule [moe-topk]: MoE<Experts, D, Hidden, TopK>: TopK exceeds the number of experts");
};

template <int CapacityPercent, int AuxPercentMille>
struct moe_capacity_valid {
  static constexpr bool value = CapacityPercent > 0 && AuxPercentMille >= 0;
  static_assert(value, "strata rule [moe-capacity]: MoE<Experts, D, Hidden, TopK, CapacityPercent, AuxPercentMille>: "
                       "the capacity must be positive and the load-balancing weight non-negative "
                       "(moe_capacity_valid<CapacityPercent, AuxPercentMille>)");
};

// Layer `Index` (0-based, over the whole model) expects `Expected` input features but
// the layer before it (or the plan's input) produces `Produced`.
template <int Index, int Produced, int Expected>
struct shapes_chain {
  static constexpr bool value = Produced == Expected;
  static_assert(value, "strata rule [shapes-chain]: layer input features do not match the features produced "
                       "before it (shapes_chain<layer index, produced, expected>)");
};

template <int Index, int NumLayers>
struct loss_last {
  static constexpr bool value = Index == NumLayers - 1;
  static_assert(value, "strata rule [loss-last]: a loss layer must be the last layer of the model "
                       "(loss_last<layer index, number of layers>)");
};

template <bool HasLoss>
struct plan_needs_loss {
  static constexpr bool value = HasLoss;
  static_assert(value, "strata rule [plan-needs-loss]: a training plan needs a loss: end the model with a loss "
                       "layer or pass Loss<SoftmaxCrossEntropy>");
};

template <int LossesInModel, int LossOptions>
struct loss_once {
  static constexpr bool value = LossesInModel + LossOptions <= 1;
  static_assert(value, "strata rule [loss-once]: the loss is given both as a layer and as Loss<...> "
                       "(loss_once<losses in model, Loss options>)");
};

// Layer `Index` fixes its input's trailing `Expected` axes (attention: [Seq, D]) but
// receives a rank-`Got` input (for example vectors, or a plan whose input shape was
// inferred from a [D] layer: pass Input<Seq, D>).
template <int Index, int Got, int Expected>
struct input_rank {
  static constexpr bool value = Got >= Expected;
  static_assert(value, "strata rule [input-rank]: a layer receives an input of lower rank than it needs, e.g. "
                       "attention after a layer that produces vectors; give the plan Input<dims...> "
                       "(input_rank<layer index, rank received, rank expected>)");
};

// Residual<L...>: y = x + f(x) needs f to return x's shape.
template <int EndLayer, int BranchElems, int InputElems>
struct residual_shape {
  static constexpr bool value = BranchElems == InputElems;
  static_assert(value, "strata rule [residual-shape]: a Residual<...> branch must return its input's shape "
                       "(residual_shape<layer index of the residual's end, elements per sample of the branch's "
                       "output, of its input>)");
};

// The skip connection is a buffer of one device group: both ends in one pipeline part.
template <int BeginLayer, int BeginPart, int EndPart>
struct residual_part {
  static constexpr bool value = BeginPart == EndPart;
  static_assert(value, "strata rule [residual-part]: a Residual<...> must lie within one pipeline part "
                       "(residual_part<layer index of its start, part of its start, part of its end>)");
};

// ResidualBegin / ResidualEnd written by hand must pair up like brackets.
template <int Layer, int Unclosed>
struct residual_pairs {
  static constexpr bool value = Layer < 0;  // raised only when broken (dependent, so not at definition)
  static_assert(value, "strata rule [residual-pairs]: a ResidualEnd without its ResidualBegin, or a ResidualBegin "
                       "never ended (residual_pairs<layer index, 1 if a begin is left open>); write Residual<...>");
};

template <bool Known>
struct input_shape_known {
  static constexpr bool value = Known;
  static_assert(value, "strata rule [input-shape]: the model's input shape cannot be inferred (the first "
                       "shape-fixing layer is preceded by a shape-changing one): pass Input<dims...>");
};

// ---- strategies -----------------------------------------------------------------------
template <int N>
struct device_count_positive {
  static constexpr bool value = N >= 1;
  static_assert(value, "strata rule [devices-positive]: Replicate<N>/Split<N> needs N >= 1");
};

// Item `Index` of the model is a Pipeline, Colocate or Model where a strategy or a layer
// belongs (inside a pipeline part, a Colocate or a strategy).
template <int Index>
struct nested_group {
  static constexpr bool value = never<Index>;
  static_assert(value, "strata rule [no-nesting]: Pipeline<...>, Colocate<...> and Model<...> cannot be nested: "
                       "a pipeline part is a strategy, a Colocate group or a layer (nested_group<item index>)");
};

// Position `Index` inside a Replicate/Split of `N` devices holds another strategy.
template <int N, int Index>
struct no_nested_strategy {
  static constexpr bool value = never<N, Index>;
  static_assert(value, "strata rule [no-nesting]: a strategy annotation cannot contain another strategy "
                       "(EPL forbids nesting); put TaskGraphs side by side in Pipeline<...> or Colocate<...> "
                       "(no_nested_strategy<outer devices, position>)");
};

template <int TaskGraph>
struct taskgraph_not_empty {
  static constexpr bool value = never<TaskGraph>;
  static_assert(value, "strata rule [empty-taskgraph]: a strategy or pipeline stage has no layers "
                       "(taskgraph_not_empty<taskgraph index>)");
};

template <int Stage>
struct stage_not_empty {
  static constexpr bool value = never<Stage>;
  static_assert(value, "strata rule [empty-stage]: a pipeline stage has no layers (stage_not_empty<stage>)");
};

// TaskGraph `TaskGraph` of a Colocate group uses `Devices`, the group's first uses `First`.
template <int TaskGraph, int Devices, int First>
struct colocate_equal_devices {
  static constexpr bool value = Devices == First;
  static_assert(value, "strata rule [colocate-devices]: colocated TaskGraphs must use the same number of devices "
                       "(colocate_equal_devices<taskgraph, its devices, first taskgraph's devices>)");
};

template <int Stage, int Devices, int First>
struct pipeline_equal_devices {
  static constexpr bool value = Devices == First;
  static_assert(value, "strata rule [stage-devices]: every pipeline stage must use the same number of devices "
                       "(pipeline_equal_devices<stage, its devices, stage 0's devices>)");
};

// Split<N> cuts the features of a Linear layer (column- or row-parallel).
template <int Index, int Features, int N>
struct split_features_divisible {
  static constexpr bool value = N > 0 && Features % N == 0;
  static_assert(value, "strata rule [split-features]: Split<N>: the layer's split feature dimension is not "
                       "divisible by N (split_features_divisible<layer index, features, N>)");
};

template <int Index, int Heads, int N>
struct split_heads_divisible {
  static constexpr bool value = N > 0 && Heads % N == 0;
  static_assert(value, "strata rule [split-heads]: Split<N>: attention heads are not divisible by N "
                       "(split_heads_divisible<layer index, heads, N>)");
};

template <int Index, int Vocab, int N>
struct split_vocab_divisible {
  static constexpr bool value = N > 0 && Vocab % N == 0;
  static_assert(value, "strata rule [split-vocab]: Split<N>: the vocabulary is not divisible by N "
                       "(split_vocab_divisible<layer index, vocabulary, N>)");
};

// An expert-parallel layer gives each device an equal share of a micro-batch's tokens.
template <int Index, int Tokens, int N>
struct split_tokens_divisible {
  static constexpr bool value = N > 0 && Tokens % N == 0;
  static_assert(value, "strata rule [split-tokens]: Split<N>: an expert-parallel layer's tokens per micro-batch "
                       "are not divisible by N (split_tokens_divisible<layer index, tokens, N>)");
};

// A row split (sequence parallelism, or a Replicate<N> cutting the micro-batch) keeps
// whole rows: the micro-batch's rows (samples x tokens) must divide among the devices.
template <int Layer, int Rows, int N>
struct split_rows_divisible {
  static constexpr bool value = N > 0 && Rows % N == 0;
  static_assert(value, "strata rule [split-rows]: a layer whose rows are split over N devices (sequence "
                       "parallelism) receives a micro-batch whose rows are not divisible by N "
                       "(split_rows_divisible<layer index, rows per micro-batch, N>)");
};

template <int Index, int Experts, int N>
struct split_experts_divisible {
  static constexpr bool value = N > 0 && Experts % N == 0;
  static_assert(value, "strata rule [split-experts]: Split<N>: the number of experts is not divisible by N "
                       "(split_experts_divisible<layer index, experts, N>)");
};

// Replicate<N> with N > 1 cuts one replica's micro-batch into N parts (EPL).
template <int MicroBatch, int N>
struct replicate_batch_divisible {
  static constexpr bool value = N > 0 && MicroBatch % N == 0;
  static_assert(value, "strata rule [replicate-batch]: Replicate<N> splits the micro-batch over N devices, but the "
                       "micro-batch is not divisible by N (replicate_batch_divisible<micro-batch, N>)");
};

// ---- options ---------------------------------------------------------------------------
template <class Option>
struct is_known_option {
  static constexpr bool value = never_type<Option>;
  static_assert(value, "strata rule [unknown-option]: this type is not a Plan option (is_known_option<type>)");
};

template <class First, class Second>
struct option_once {
  static constexpr bool value = never_type<First, Second>;
  static_assert(value, "strata rule [option-once]: an option is given twice (option_once<first, second>)");
};

template <int MicroBatch>
struct micro_batch_positive {
  static constexpr bool value = MicroBatch >= 1;
  static_assert(value, "strata rule [micro-batch]: MicroBatch<B> needs B >= 1");
};

template <int NumMicroBatch>
struct num_micro_batch_positive {
  static constexpr bool value = NumMicroBatch >= 1;
  static_assert(value, "strata rule [num-micro-batch]: NumMicroBatch<M> needs M >= 1");
};

template <int World, int DevicesPerReplica>
struct world_multiple_of_replica {
  static constexpr bool value = World >= DevicesPerReplica && World % DevicesPerReplica == 0;
  static_assert(value, "strata rule [world-size]: World<N> is not a positive multiple of the devices one replica "
                       "uses (world_multiple_of_replica<world, devices per replica>)");
};

// Element<T>: the supported training precisions.
template <class T>
struct element_type_supported {
  static constexpr bool value = never_type<T>;
  static_assert(value, "strata rule [element-type]: Element<T> takes float, double, strata::bf16 or strata::f16 "
                       "(element_type_supported<type>)");
};

template <class T>
struct default_is_strategy {
  static constexpr bool value = never_type<T>;
  static_assert(value, "strata rule [default-strategy]: Default<S> needs S = Replicate<N> or Split<N> with no layers");
};

template <int N>
struct buckets_positive {
  static constexpr bool value = N >= 1;
  static_assert(value, "strata rule [buckets]: Buckets<N> needs N >= 1 (buckets_positive<N>)");
};

template <int Level>
struct zero_level_known {
  static constexpr bool value = Level >= 0 && Level <= 3;
  static_assert(value, "strata rule [zero-level]: Zero<Level> needs Level 0 (off), 1 (optimizer state "
                       "partitioned), 2 (and gradients) or 3 (and parameters) (zero_level_known<Level>)");
};

template <int Kind, int Log2Init, int Growth, long long Fixed>
struct loss_scale_valid {
  // Kind: 1 fixed, 2 dynamic (loss_scale_kind)
  static constexpr bool value =
      Kind == 0 || (Kind == 1 && Fixed >= 1) || (Kind == 2 && Log2Init >= 0 && Log2Init <= 40 && Growth >= 1);
  static_assert(value, "strata rule [loss-scale]: FixedScale<S> needs S >= 1; DynamicScale<Log2Init, GrowthInterval> "
                       "needs 0 <= Log2Init <= 40 and GrowthInterval >= 1 (loss_scale_valid<kind, log2 init, growth "
                       "interval, fixed scale>)");
};

template <int N>
struct apply_groups_positive {
  static constexpr bool value = N >= 1;
  static_assert(value, "strata rule [apply-groups]: ApplyGroups<N> needs N >= 1 (apply_groups_positive<N>)");
};

template <int Scale>
struct half_reduce_scale {
  static constexpr bool value = Scale >= 1 && (Scale & (Scale - 1)) == 0;
  static_assert(value, "strata rule [half-reduce-scale]: HalfGradientReduce<Scale> needs a power of two >= 1, so "
                       "that scaling is exact (half_reduce_scale<Scale>)");
};

// A checkpoint written by one plan loads into another of the same model: the same
// tensors, names and shapes. `Layer` is the first layer that differs.
template <int Layer>
struct checkpoint_same_model {
  static constexpr bool value = Layer < 0;
  static_assert(value, "strata rule [checkpoint-model]: load_checkpoint<From>: the two plans hold different models "
                       "(checkpoint_same_model<first layer that differs>)");
};

// ---- schedules --------------------------------------------------------------------------
template <int Chunks>
struct interleave_chunks_positive {
  static constexpr bool value = Chunks >= 1;
  static_assert(value, "strata rule [interleave-chunks]: Interleaved<V> needs V >= 1");
};

template <int PipelineParts, int Chunks>
struct interleave_parts_divisible {
  static constexpr bool value = Chunks > 0 && PipelineParts % Chunks == 0;
  static_assert(value, "strata rule [interleave-parts]: Interleaved<V> needs the number of Pipeline parts to be a "
                       "multiple of V (interleave_parts_divisible<parts, V>)");
};

template <int NumMicroBatch, int Stages>
struct interleave_micro_batches {
  static constexpr bool value = Stages > 0 && NumMicroBatch % Stages == 0;
  static_assert(value, "strata rule [interleave-micro-batches]: an interleaved schedule needs the number of "
                       "micro-batches to be a multiple of the number of stages "
                       "(interleave_micro_batches<micro-batches, stages>)");
};

// ZeroBubbleV places two Pipeline parts on each stage in a V: stage s runs parts s and
// 2p − 1 − s of 2p.
template <int PipelineParts>
struct zero_bubble_v_parts {
  static constexpr bool value = PipelineParts >= 2 && PipelineParts % 2 == 0;
  static_assert(value, "strata rule [zero-bubble-v]: ZeroBubbleV runs stage s's parts s and 2p - 1 - s, so it needs "
                       "an even number of Pipeline parts, at least 2 (zero_bubble_v_parts<parts>)");
};

// ZeroBubbleH1 and ZeroBubbleV keep each micro-batch's stash until its W; what would
// overwrite or drop it before then is refused.
template <int RecomputedRegions, int ZeroLevel, int StagedWeights>
struct zero_bubble_options {
  static constexpr bool value = RecomputedRegions == 0 && ZeroLevel <= 1 && StagedWeights == 0;
  static_assert(value, "strata rule [zero-bubble]: ZeroBubbleH1/ZeroBubbleV run each weight-gradient pass (W) after the "
                       "input-gradient pass (B) and keep the micro-batch's stash until then: they need no recomputed "
                       "region, Zero<0> or Zero<1>, and weights that are not staged (no Offload, KeepWeightCopies off, "
                       "no Zero<3>) (zero_bubble_options<recomputed regions, ZeRO level, staged weights>)");
};

// Stage `Stage` blocks forever at instruction `Instruction` of its program.
template <int Stage, int Instruction>
struct deadlock_free {
  static constexpr bool value = never<Stage, Instruction>;
  static_assert(value, "strata rule [deadlock-free]: the schedule's sends and receives do not pair up: a stage "
                       "blocks forever (deadlock_free<stage, instruction index>)");
};

template <int Stage, int Instruction>
struct schedule_complete {
  static constexpr bool value = never<Stage, Instruction>;
  static_assert(value, "strata rule [schedule-complete]: a stage's program does not run forward and backward of "
                       "every micro-batch exactly once (schedule_complete<stage, instruction index>)");
};

// ---- tensor modes (Colossal-AI) ---------------------------------------------------------
template <int N>
struct tensor_2d_square {
  static constexpr bool value = never<N>;
  static_assert(value, "strata rule [tensor-2d]: 2D tensor parallelism needs Split<N> with N = q*q "
                       "(tensor_2d_square<N>)");
};

template <int N, int Depth>
struct tensor_2p5d_shape {
  static constexpr bool value = never<N, Depth>;
  static_assert(value, "strata rule [tensor-2.5d]: 2.5D tensor parallelism needs Split<N> with N = q*q*depth "
                       "(tensor_2p5d_shape<N, depth>)");
};

template <int N>
struct tensor_3d_cube {
  static constexpr bool value = never<N>;
  static_assert(value, "strata rule [tensor-3d]: 3D tensor parallelism needs Split<N> with N = q*q*q "
                       "(tensor_3d_cube<N>)");
};

// ZeRO partitions each reduction group's update over that group's devices; 2D/2.5D/3D
// gradients are reduced over groups of several sizes (mesh columns, depth layers, planes)
// that one partition of a flat group cannot follow.
template <int Mode, int ZeroLevel>
struct tensor_mode_without_zero {
  static constexpr bool value = never<Mode, ZeroLevel>;
  static_assert(value, "strata rule [tensor-zero]: 2D/2.5D/3D tensor parallelism runs without ZeRO "
                       "(tensor_mode_without_zero<mode, zero level>)");
};

template <int Index, int Mode>
struct tensor_mode_supports_layer {
  static constexpr bool value = never<Index, Mode>;
  static_assert(value, "strata rule [tensor-mode-layer]: 2D/2.5D/3D tensor parallelism supports Linear, "
                       "activations, LayerNorm, attention, residuals and the loss only "
                       "(tensor_mode_supports_layer<layer index, mode>)");
};

// 2D/2.5D/3D: a LayerNorm's features are spread over a mesh row of Q devices.
template <int Index, int Features, int Q>
struct tensor_features_divisible {
  static constexpr bool value = Q > 0 && Features % Q == 0;
  static_assert(value, "strata rule [tensor-features]: the tensor mesh splits a LayerNorm's features over Q devices, "
                       "but its features are not divisible by Q (tensor_features_divisible<layer index, features, Q>)");
};

// 3D: every Linear moves the features to another cube axis, so a residual branch must hold
// an even number of Linears (an attention counts two) to add up with its skip.
template <int Index>
struct tensor_3d_residual_even {
  static constexpr bool value = never<Index>;
  static_assert(value, "strata rule [tensor-residual]: under 3D tensor parallelism a residual branch needs an even "
                       "number of Linears, or its output's features lie along another mesh axis than its skip's "
                       "(tensor_3d_residual_even<layer index of the residual's end>)");
};

// Mesh axis of size Q cuts the micro-batch (2D / 2.5D / 3D activations are batch-split).
template <int MicroBatch, int Q>
struct tensor_batch_divisible {
  static constexpr bool value = Q > 0 && MicroBatch % Q == 0;
  static_assert(value, "strata rule [tensor-batch]: the tensor mesh splits the micro-batch, which is not divisible "
                       "by its size (tensor_batch_divisible<micro-batch, mesh batch split>)");
};


// ---- automatic stage partitioning (plan/auto_stages.hpp) --------------------------------
template <int Stages, int Units>
struct auto_stages_count {
  static constexpr bool value = Stages >= 1 && Stages <= Units;
  static_assert(value, "strata rule [auto-stages-count]: AutoStages<K> needs 1 <= K <= the units it can cut "
                       "between (top-level items, each copy of a Repeat counted) "
                       "(auto_stages_count<K, units>)");
};

template <int Stages, long long NeededMiB, long long BudgetMiB>
struct auto_stages_memory {
  static constexpr bool value = NeededMiB <= BudgetMiB;
  static_assert(value, "strata rule [auto-stages-memory]: no cut into AutoStages<K> stages fits MemoryBudget<MiB>: "
                       "the cut with the smallest fullest stage still needs more "
                       "(auto_stages_memory<K, MiB the best cut needs, MiB budget>)");
};

template <bool Unannotated>
struct auto_stages_model {
  static constexpr bool value = Unannotated;
  static_assert(value, "strata rule [auto-stages-model]: AutoStages<K> cuts an unannotated model: Model<items...> of "
                       "bare layers, Repeat<N, Block>, a bare layer, or one Replicate<N, ...> / Split<N, ...>; "
                       "a Pipeline or Colocate is already placed");
};

// AutoStages<K> cuts K parts, one per stage.
template <int Chunks>
struct auto_stages_schedule {
  static constexpr bool value = Chunks == 1;
  static_assert(value, "strata rule [auto-stages-schedule]: AutoStages<K> cuts one part per stage, so it plans a "
                       "schedule of one chunk per stage (Schedule<PreferForward>, Schedule<PreferBackward>, "
                       "Schedule<ZeroBubbleH1> or a user schedule of one chunk), not Interleaved<V> or ZeroBubbleV "
                       "(auto_stages_schedule<chunks per stage>)");
};

template <bool Found, int Devices, long long BudgetMiB>
struct search_fits {
  static constexpr bool value = Found;
  static_assert(value, "strata rule [search-fits]: no configuration the search tries fits the memory budget on "
                       "these devices (search_fits<found, devices, MiB per device>)");
};

}  // namespace strata::rule
