#pragma once
// The Layer concept: what a type must expose to be placed, sharded and costed by the planner.
#include <concepts>
#include <cstddef>
#include <type_traits>

#include "strata/layers/shape.hpp"

namespace strata {

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
template <class L> concept has_stash = requires(shape_t s) { { L::stash_elems(s) } -> std::convertible_to<long long>; };
}  // namespace detail

// A layer is a type with static shapes (per sample), parameters, costs and a role.
//   name            std::string_view
//   role            layer_role (how it shards; user layers use layer_role::opaque)
//   in_shape        shape_t; rank 0 = accepts any shape; otherwise the last dim is checked
//   out_shape(in)   shape_t out for a given per-sample input
//   params          std::array<param_t, K> (K may be 0)
//   forward_flops(in), backward_flops(in)   per sample
//   stash_elems(in) activation elements per sample kept for backward
template <class L>
concept Layer = detail::has_name<L> && detail::has_role<L> && detail::has_in_shape<L> &&
                detail::has_out_shape<L> && detail::has_params<L> && detail::has_flops<L> &&
                detail::has_stash<L>;

namespace detail {
constexpr shape_t same_shape(shape_t s) { return s; }
constexpr long long no_cost(shape_t) { return 0; }
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
  long long (*stash_elems)(shape_t) = &detail::no_cost;
  std::array<param_t, 6> params{};
  int num_params = 0;
  // The dimension tensor parallelism cuts, for divisibility rules and shard sizes:
  // heads (attention), vocabulary (embedding), experts (moe); linear layers use in/out.
  int split_extent = 0;
  int top_k = 1;  // copies of each token an expert layer routes
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
  static_assert(detail::has_stash<L>,
                "strata concept Layer: missing 'static constexpr long long stash_elems(shape_t)'");
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
  d.stash_elems = &L::stash_elems;
  d.num_params = static_cast<int>(L::params.size());
  if constexpr (L::params.size() > 0)
    for (std::size_t i = 0; i < L::params.size(); ++i) d.params[i] = L::params[i];
  d.split_extent = detail::split_extent_of<L>();
  if constexpr (requires { L::top_k; }) d.top_k = L::top_k;
  return d;
}

}  // namespace strata
