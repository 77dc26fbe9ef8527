#pragma once
// Plan options as types. Each option belongs to one category and may be given once.
#include <concepts>

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
  gradient_checkpoint
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

enum class schedule_kind : unsigned char { gpipe, one_f_one_b, interleaved, custom };

struct PreferForward {  // GPipe: all forwards, then all backwards
  static constexpr schedule_kind kind = schedule_kind::gpipe;
  static constexpr int chunks = 1;
};
struct PreferBackward {  // 1F1B (PipeDream-flush): warm-up, one forward one backward, cool-down
  static constexpr schedule_kind kind = schedule_kind::one_f_one_b;
  static constexpr int chunks = 1;
};
// Interleaved 1F1B with V model chunks per device (Colossal-AI num_model_chunks):
// Pipeline part k runs on stage k mod (parts / V).
template <int V>
struct Interleaved {
  static constexpr schedule_kind kind = schedule_kind::interleaved;
  static constexpr int chunks = V;
};

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
// layer: those regions hold 1/N of the activations each.
struct SequenceParallel {
  static constexpr option_kind option = option_kind::sequence_parallel;
  static constexpr bool value = true;
};
struct NoSequenceParallel {  // the default (not an option)
  static constexpr bool value = false;
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

namespace detail {
template <class T>
concept plan_option = requires { { T::option } -> std::convertible_to<option_kind>; };
}  // namespace detail

}  // namespace strata
