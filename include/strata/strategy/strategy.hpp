#pragma once
// Strategy annotations (EPL's replicate / split / pipeline / colocate). Pure types:
// the planner reads them, nothing here runs.
#include "strata/core/typelist.hpp"

namespace strata {

enum class strategy_kind : unsigned char { replicate, split };

// Replicate<N, L...>: one TaskGraph, parameters replicated. N devices hold one replica
// and share its micro-batch (N > 1 cuts the micro-batch into N parts, as in EPL).
// Extra data parallelism comes from the world size: DP = world / devices per replica.
template <int N, class... L>
struct Replicate {
  static constexpr strategy_kind kind = strategy_kind::replicate;
  static constexpr int devices = N;
  using layers = type_list<L...>;
};

// Split<N, L...>: one TaskGraph whose layers are sharded over N devices (tensor,
// vocabulary, head or expert parallel); the planner derives every collective.
template <int N, class... L>
struct Split {
  static constexpr strategy_kind kind = strategy_kind::split;
  static constexpr int devices = N;
  using layers = type_list<L...>;
};

// Context<N, L...>: one TaskGraph whose sequences are split over N devices (context
// parallelism, Colossal-AI's sequence parallelism): parameters replicated, each device holds
// 1/N of every sample's positions through the whole model, attention gathers the keys and
// values of the whole sequence. A plan that has one has only Context<N> TaskGraphs.
template <int N, class... L>
struct Context {
  static constexpr strategy_kind kind = strategy_kind::replicate;
  static constexpr int devices = N;
  static constexpr bool context = true;
  static constexpr int tensor = 1;
  using layers = type_list<L...>;
};

// Context<N, Split<T, L...>>: context parallelism over tensor parallelism (Megatron's CP × TP):
// a part of N·T devices, device c·T + t (tensor-parallel groups are consecutive devices), the
// N groups of T each holding 1/N of every sample's positions and sharding the layers T ways
// as Split<T> does; attention exchanges over the N devices of one tensor index.
template <int N, int T, class... L>
struct Context<N, Split<T, L...>> {
  static constexpr strategy_kind kind = T > 1 ? strategy_kind::split : strategy_kind::replicate;  // T = 1: Context<N>
  static constexpr int devices = N * T;
  static constexpr bool context = true;
  static constexpr int tensor = T;
  using layers = type_list<L...>;
};

// Pipeline<Parts...>: each part runs on its own devices; a part is a strategy, a
// Colocate group or a bare layer (which takes the Default strategy).
template <class... Parts>
struct Pipeline {};

// Colocate<Items...>: TaskGraphs that share the same devices (EPL's
// cluster.colocate_split_and_replicate); bare layers take the Default strategy.
template <class... Items>
struct Colocate {};

// Model<Items...>: a sequence of strategies and bare layers with EPL's default
// placement: every TaskGraph on its own devices, i.e. a pipeline of TaskGraphs.
template <class... Items>
struct Model {};

namespace detail {
template <class T> struct is_strategy_t { static constexpr bool value = false; };
template <int N, class... L> struct is_strategy_t<Replicate<N, L...>> { static constexpr bool value = true; };
template <int N, class... L> struct is_strategy_t<Split<N, L...>> { static constexpr bool value = true; };
template <int N, class... L> struct is_strategy_t<Context<N, L...>> { static constexpr bool value = true; };
template <class T> struct is_group_t { static constexpr bool value = false; };
template <class... T> struct is_group_t<Pipeline<T...>> { static constexpr bool value = true; };
template <class... T> struct is_group_t<Colocate<T...>> { static constexpr bool value = true; };
template <class... T> struct is_group_t<Model<T...>> { static constexpr bool value = true; };
}  // namespace detail

template <class T>
inline constexpr bool is_strategy_v = detail::is_strategy_t<T>::value;
// A strategy that splits the sequence (Context<N>).
template <class T>
inline constexpr bool is_context_v = requires { T::context; };
// Anything that is not a plain layer: a strategy or a grouping construct.
template <class T>
inline constexpr bool is_annotation_v = detail::is_strategy_t<T>::value || detail::is_group_t<T>::value;

}  // namespace strata
