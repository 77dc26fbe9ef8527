#pragma once
// The Layer concept: what a type must expose to be placed, sharded, costed and laid
// out in memory by the planner — and, optionally, run by the executor. A layer is one
// header: its description, how it shards under Split<N>, the memory its execution
// needs, and its forward and backward written against the kernel families (found by
// argument-dependent lookup on the queue, so the same code runs on every backend).
#include <array>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "strata/core/diagnosis.hpp"
#include "strata/core/kernel_args.hpp"
#include "strata/core/precision.hpp"
#include "strata/core/sbp.hpp"
#include "strata/core/shape.hpp"
#include "strata/layers/role_defaults.hpp"

namespace strata {

// A parameter that is another layer's: parameter `param` of this layer is parameter
// `owner_param` of the model's one layer of role `owner` with the same shape (a tied
// output head reads the Embedding's table). Each holder keeps a copy; the plan sums the
// copies' gradients after the reduction, so they stay equal, and counts the tensor once.
struct tied_param {
  int param = -1;  // −1: nothing tied
  layer_role owner = layer_role::embedding;
  int owner_param = 0;
};

namespace detail {
template <class L> concept has_name = requires { { L::name } -> std::convertible_to<std::string_view>; };
template <class L> concept has_role = requires { { L::role } -> std::convertible_to<layer_role>; };
template <class L> concept has_in_shape = requires { { L::in_shape } -> std::convertible_to<shape_t>; };
template <class L> concept has_out_shape = requires(shape_t s) { { L::out_shape(s) } -> std::same_as<shape_t>; };
template <class L> concept has_params = requires {
  L::params.size();
  requires std::convertible_to<typename std::remove_cvref_t<decltype(L::params)>::value_type, param_t>;
};
template <class L> concept has_flops = requires(shape_t s) {
  { L::forward_flops(s) } -> std::convertible_to<long long>;
  { L::backward_flops(s) } -> std::convertible_to<long long>;
};
template <class L> concept has_memory = requires(local_dims d) { { L::memory(d) } -> std::convertible_to<buffer_needs>; };
template <class L> concept has_shard = requires(shard_query q) { { L::shard(q) } -> std::convertible_to<shard_choice>; };
template <class L> concept has_mesh_shard = requires(mesh_query q) {
  { L::mesh_shard(q) } -> std::convertible_to<mesh_choice>;
};
template <class L> concept has_init = requires(init_site s) { { L::init(s) } -> std::convertible_to<double>; };
template <class L> concept has_gemms = requires(local_dims d) { { L::gemms(d) } -> std::convertible_to<call_gemms>; };
template <class L> concept has_reads_ids = requires { { L::reads_ids } -> std::convertible_to<bool>; };
template <class L> concept has_aux_loss = requires { { L::aux_loss_stats } -> std::convertible_to<long long>; };
template <class L> concept has_tie = requires { { L::tie } -> std::convertible_to<tied_param>; };
template <class L> concept has_state = requires {
  L::state.size();
  requires std::convertible_to<typename std::remove_cvref_t<decltype(L::state)>::value_type, param_t>;
};
// Stands for the executor's per-layer context when asking whether a layer can run.
struct exec_probe;
}  // namespace detail

// A layer is a type with static shapes (per sample), parameters, costs, memory and a role.
//   name            std::string_view
//   role            layer_role (the defaults of the optional members; user layers use layer_role::opaque)
//   in_shape        shape_t; rank 0 = accepts any shape; otherwise its trailing dims are checked
//   out_shape(in)   shape_t out for a given per-sample input
//   params          std::array<param_t, K> (K may be 0)
//   forward_flops(in), backward_flops(in)   per sample
//   memory(local_dims)   buffer_needs: what its forward keeps for backward, its scratch
// Optional (absent: the role's default, layers/role_defaults.hpp):
//   shard(shard_query)        shard_choice under Split<N> (1D)
//   mesh_shard(mesh_query)    mesh_choice under 2D/2.5D/3D: signature, projections, parameters cut
//   init(init_site)           double: a parameter element's initial value
//   gemms(local_dims)         call_gemms: the GEMMs the cost model times for one call
//   reads_ids                 bool: first in the model, it reads the batch's token ids
//   aux_loss_stats            long long: statistics of an auxiliary loss (MoE's load balance),
//                             summed over a data-parallel part; 0: no auxiliary loss
//   tie                       tied_param: one of its parameters is another layer's (a tied head)
//   input_problem(in)         diagnosis: a rule its per-sample input breaks beyond the feature
//                             axis (a convolution's window wider than the padded image); the
//                             planner fills in the layer's index (the diagnosis's first number)
//   data_shard(shard_query)   shard_choice: the collectives it needs when a Replicate<N> part
//                             splits the micro-batch's samples (batch normalisation's statistics)
//   state                     std::array<param_t, K ≤ 2>: the statistics it keeps across steps
//                             (memory()'s state_stats, in this order), as named in checkpoints;
//                             with state_init(k), fold_state(c) (exec/layer_state.hpp)
//   template <class C> static void forward(C&), backward(C&)   execution (see exec/context.hpp)
template <class L>
concept Layer = detail::has_name<L> && detail::has_role<L> && detail::has_in_shape<L> &&
                detail::has_out_shape<L> && detail::has_params<L> && detail::has_flops<L> &&
                detail::has_memory<L>;

// A layer the executor can run: it has forward and backward for any context.
template <class L>
concept ExecutableLayer = Layer<L> && requires(detail::exec_probe& c) {
  L::forward(c);
  L::backward(c);
};

// A layer whose backward also runs as two halves, for zero-bubble schedules:
// backward_data (the input's gradient, c.dx) and, later, backward_weights (the
// parameters' gradients from the kept input, c.dy and what backward_data left in c.keep).
// Its memory() says weight_pass (and weight_keep) where the split applies.
template <class L>
concept SplitBackwardLayer = ExecutableLayer<L> && requires(detail::exec_probe& c) {
  L::backward_data(c);
  L::backward_weights(c);
};

namespace detail {
constexpr shape_t same_shape(shape_t s) { return s; }
constexpr long long no_cost(shape_t) { return 0; }
constexpr buffer_needs no_memory(const local_dims&) { return {}; }
constexpr shard_choice whole(const shard_query& q) { return sharding::whole_features(q); }
constexpr mesh_choice no_mesh(const mesh_query&) { return {.supported = false}; }
constexpr shard_choice per_row(const shard_query&) { return {}; }
constexpr diagnosis no_problem(shape_t) { return {}; }
inline double no_init(const init_site&) { return 0; }
constexpr call_gemms no_gemms(const local_dims&) { return {}; }
template <class L>
constexpr shard_choice shard_of(const shard_query& q) {
  if constexpr (has_shard<L>) return L::shard(q);
  else return sharding::by_role(L::role, q);
}
template <class L>
constexpr mesh_choice mesh_shard_of(const mesh_query& q) {
  if constexpr (has_mesh_shard<L>) return L::mesh_shard(q);
  else return sharding::mesh_by_role(L::role, q);
}
template <class L>
constexpr shard_choice context_shard_of(const shard_query& q) {
  if constexpr (requires { L::context_shard(q); }) return L::context_shard(q);
  else return per_row(q);
}
template <class L>
constexpr shard_choice data_shard_of(const shard_query& q) {
  if constexpr (requires { L::data_shard(q); }) return L::data_shard(q);
  else return per_row(q);
}
template <class L>
constexpr diagnosis input_problem_of(shape_t in) {
  if constexpr (requires { L::input_problem(in); }) return L::input_problem(in);
  else return no_problem(in);
}
template <class L>
double init_of(const init_site& s) {
  if constexpr (has_init<L>) return L::init(s);
  else if constexpr (L::params.size() == 0) return 0;
  else return init_rules::by_role(L::role, L::in_shape, L::params[static_cast<std::size_t>(s.tensor)], s);
}
template <class L>
constexpr call_gemms gemms_of(const local_dims& d) {
  if constexpr (has_gemms<L>) return L::gemms(d);
  else return gemm_rules::by_role(L::role, d);
}
}  // namespace detail

// Every layer the planner sees is turned into this value, so that the rest of the
// planner is plain constexpr loops over arrays instead of type recursion.
struct layer_desc {
  std::string_view name{};
  layer_role role = layer_role::opaque;
  shape_t in_shape{};
  // Callable defaults: a non-Layer entry (already reported) must not break constant evaluation.
  shape_t (*out_shape)(shape_t) = &detail::same_shape;
  long long (*forward_flops)(shape_t) = &detail::no_cost;
  long long (*backward_flops)(shape_t) = &detail::no_cost;
  buffer_needs (*memory)(const local_dims&) = &detail::no_memory;
  shard_choice (*shard)(const shard_query&) = &detail::whole;
  mesh_choice (*mesh_shard)(const mesh_query&) = &detail::no_mesh;
  // Context<N>: the collectives a layer that mixes a sample's positions needs when each device
  // holds 1/N of them (attention); per-row layers need none.
  shard_choice (*context_shard)(const shard_query&) = &detail::per_row;
  // Replicate<N>: the collectives a layer whose result depends on the whole micro-batch
  // (batch normalisation) needs when each device holds 1/N of its samples.
  shard_choice (*data_shard)(const shard_query&) = &detail::per_row;
  diagnosis (*input_problem)(shape_t) = &detail::no_problem;  // a rule the input breaks
  double (*init)(const init_site&) = &detail::no_init;  // run time only (not constexpr)
  call_gemms (*gemms)(const local_dims&) = &detail::no_gemms;
  std::array<param_t, max_layer_params> params{};
  int num_params = 0;
  // The dimension tensor parallelism cuts, for divisibility rules and shard sizes:
  // heads (attention), vocabulary (embedding), experts (moe); linear layers use in/out.
  int split_extent = 0;
  bool reads_ids = false;         // first in the model, it reads the batch's token ids
  long long aux_loss_stats = 0;   // > 0: it adds an auxiliary loss from this many statistics
  tied_param tie{};               // a parameter that is another layer's
  std::array<param_t, 2> state{}; // statistics kept across steps (BatchNorm2d's running ones)
  int num_state = 0;
  bool executable = false;
};

// Requirement-by-requirement check so a type that is not a layer is told which
// member it lacks (a bare concept failure only says "constraints not satisfied").
template <class L>
struct layer_requirements {
  static_assert(detail::has_name<L>,
                "strata concept Layer: missing 'static constexpr std::string_view name'");
  static_assert(detail::has_role<L>,
                "strata concept Layer: missing 'static constexpr strata::layer_role role'");
  static_assert(detail::has_in_shape<L>,
                "strata concept Layer: missing 'static constexpr strata::shape_t in_shape'");
  static_assert(detail::has_out_shape<L>,
                "strata concept Layer: missing 'static constexpr strata::shape_t out_shape(strata::shape_t)'");
  static_assert(detail::has_params<L>,
                "strata concept Layer: missing 'static constexpr std::array<strata::param_t, K> params'");
  static_assert(detail::has_flops<L>,
                "strata concept Layer: missing 'forward_flops(shape_t)' / 'backward_flops(shape_t)'");
  static_assert(detail::has_memory<L>,
                "strata concept Layer: missing 'static constexpr strata::buffer_needs memory(const strata::local_dims&)'");
  static constexpr bool value = Layer<L>;
};

namespace detail {
template <class L>
constexpr int split_extent_of() {
  if constexpr (requires { L::split_extent; }) return L::split_extent;
  else return 0;
}
}  // namespace detail

template <class L>
constexpr layer_desc describe() {
  layer_desc d;
  d.name = L::name;
  d.role = L::role;
  d.in_shape = L::in_shape;
  d.out_shape = &L::out_shape;
  d.forward_flops = &L::forward_flops;
  d.backward_flops = &L::backward_flops;
  d.memory = &L::memory;
  d.shard = &detail::shard_of<L>;
  d.mesh_shard = &detail::mesh_shard_of<L>;
  d.context_shard = &detail::context_shard_of<L>;
  d.data_shard = &detail::data_shard_of<L>;
  d.input_problem = &detail::input_problem_of<L>;
  d.init = &detail::init_of<L>;
  d.gemms = &detail::gemms_of<L>;
  static_assert(L::params.size() <= static_cast<std::size_t>(max_layer_params),
                "strata: a layer has at most 6 parameter tensors");
  d.num_params = static_cast<int>(L::params.size());
  if constexpr (L::params.size() > 0)
    for (std::size_t i = 0; i < L::params.size(); ++i) d.params[i] = L::params[i];
  d.split_extent = detail::split_extent_of<L>();
  if constexpr (detail::has_reads_ids<L>) d.reads_ids = L::reads_ids;
  else d.reads_ids = reads_ids_by_role(L::role);
  if constexpr (detail::has_aux_loss<L>) d.aux_loss_stats = L::aux_loss_stats;
  if constexpr (detail::has_tie<L>) d.tie = L::tie;
  if constexpr (detail::has_state<L>) {
    static_assert(L::state.size() <= 2, "strata: a layer keeps at most 2 state tensors");
    d.num_state = static_cast<int>(L::state.size());
    for (std::size_t i = 0; i < L::state.size(); ++i) d.state[i] = L::state[i];
  }
  d.executable = ExecutableLayer<L>;
  return d;
}

}  // namespace strata
