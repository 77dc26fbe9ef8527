#pragma once
// Residual<L...>: y = x + f(x) for the chain f = L... (a pre-LN transformer block is
// Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>> then Residual<LayerNorm<D>,
// Linear<D, 4D>, GeLU, Linear<4D, D>>), and Repeat<N, L...>: L... written once, N times.
// Residual<Shortcut<S...>, L...>: y = s(x) + f(x), the skip path a chain too (ResNet's
// projection shortcut, Conv2d 1×1 with stride and BatchNorm2d, where a block changes the
// image's size or channels).
//
// Checkpoint<L...> marks L... as one region of activation recomputation (EPL's
// gradient_checkpoint "collection"): its forward keeps only the region's input, and its
// backward runs the region's forward again first. GradientCheckpoint<...> (a plan option)
// picks regions automatically instead.
//
// All three are expanded into the flat layer list the planner works on: a Residual becomes
// ResidualBegin, the branch's layers, ResidualEnd; one with a Shortcut becomes
// ResidualBegin, the shortcut's layers, ShortcutEnd, the branch's layers, ResidualEnd. The planner pairs them, gives the
// skip connection the layout of the residual's input and converts the branch's output
// into it (a row-parallel branch's partial sum is all-reduced once — or reduce-scattered
// to a row split under SequenceParallel); the lowering keeps the skip and its gradient in
// the micro-batch's buffers. Rules: [residual-shape], [residual-part].
#include <array>
#include <cstddef>
#include <utility>

#include <algorithm>

#include "strata/core/rules.hpp"
#include "strata/core/typelist.hpp"
#include "strata/layers/layer.hpp"

namespace strata {

template <class... L>
struct Residual {};
// The skip path of a Residual, written first: Residual<Shortcut<S...>, L...>.
template <class... S>
struct Shortcut {};

// Rule [repeat-count] is checked where the copies are made (layers::expand), since a
// Repeat is named, never instantiated; a count below 1 is planned as 1 copy after it.
template <int N, class... L>
struct Repeat {};
template <int N>
inline constexpr int repeat_copies = N >= 1 ? N : 1;

template <class... L>
struct Checkpoint {};

namespace layers {

// Where a skip connection leaves: its input (the skip) is kept; forward is a view.
// Backward adds the skip's gradient (saved by the matching ResidualEnd) to the branch's.
struct ResidualBegin {
  static constexpr std::string_view name = "ResidualBegin";
  static constexpr layer_role role = layer_role::residual_begin;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t) { return 0; }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }
  static constexpr shard_choice shard(const shard_query& q) { return sharding::pointwise(q); }
  static constexpr buffer_needs memory(const local_dims&) { return {.keep_input = true, .view = true, .backward_kernel = true}; }
  template <class C>
  static void forward(C&) {}
  template <class C>
  static void backward(C& c) {
    if (c.dx) add(c.q, c.rows * c.in_cols, c.dy, c.skip_grad, c.dx);
  }
};

// Where it is added back: y = branch + skip, in the skip's layout. Backward hands dy to
// the branch unchanged (the lowering aliases it) and keeps a copy for the skip.
struct ResidualEnd {
  static constexpr std::string_view name = "ResidualEnd";
  static constexpr layer_role role = layer_role::residual_end;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t) { return 0; }
  static constexpr shard_choice shard(const shard_query& q) { return sharding::pointwise(q); }  // the planner sets the skip's layout
  // the skip's gradient, held from this backward until the ResidualBegin's
  static constexpr buffer_needs memory(const local_dims& d) { return {.backward_values = d.rows * d.in_cols}; }
  template <class C>
  static void forward(C& c) {
    add(c.q, c.rows * c.in_cols, c.x, c.skip, c.y);
  }
  template <class C>
  static void backward(C& c) {
    copy(c.q, c.rows * c.in_cols, c.dy, c.backward_values);
  }
};

// Where a shortcut ends and the branch begins: the shortcut's output s(x) is kept as the
// skip ResidualEnd adds, and the residual's input x (the ResidualBegin's kept input) goes on
// into the branch. Backward hands the skip's gradient (ResidualEnd's copy) down the
// shortcut and keeps the branch's gradient for the ResidualBegin to add. The planner gives
// its output the residual input's shape and layout. One device or a Replicate<N>: rule
// [shortcut-split] under Split<N>.
struct ShortcutEnd {
  static constexpr std::string_view name = "ShortcutEnd";
  static constexpr layer_role role = layer_role::shortcut_end;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t in) { return in; }  // the planner sets the residual input's
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t) { return 0; }
  static constexpr long long backward_flops(shape_t) { return 0; }
  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.violate(rule_id::shortcut_split, q.n);
    return c;
  }
  // its input (the skip ResidualEnd reads) kept; the branch's gradient held for ResidualBegin
  static constexpr buffer_needs memory(const local_dims& d) {
    return {.keep_input = true, .backward_values = d.out_rows * d.out_cols};
  }
  // local elements of the output (the residual's input) for the rows of the input (under
  // Context<N> a device's rows may hold a fraction of a sample: multiply first)
  template <class C>
  static std::size_t out_elems(const C& c) {
    return c.rows * c.in_cols * static_cast<std::size_t>(c.out_shape.numel()) /
           static_cast<std::size_t>(c.in_shape.numel());
  }
  template <class C>
  static void forward(C& c) {
    copy(c.q, out_elems(c), c.skip, c.y);
  }
  template <class C>
  static void backward(C& c) {
    // the skip's gradient first: the branch's takes the same slot (plan/lower/parts.hpp)
    if (c.dx) copy(c.q, c.rows * c.in_cols, c.skip_grad, c.dx);
    copy(c.q, out_elems(c), c.dy, c.backward_values);
  }
};

}  // namespace layers

namespace detail {

template <std::size_t I, class L>
struct always {
  using type = L;
};
template <int N, class List>
struct repeat_list {
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>) -> concat_t<typename always<I, List>::type...>;
  using type = decltype(make(std::make_index_sequence<static_cast<std::size_t>(N)>{}));
};

// The flat layers a written item stands for.
template <class T>
struct expand {
  using type = type_list<T>;
};
template <class... L>
struct expand<Residual<L...>> {
  using type = concat_t<type_list<layers::ResidualBegin>, typename expand<L>::type..., type_list<layers::ResidualEnd>>;
};
template <class... S, class... L>
struct expand<Residual<Shortcut<S...>, L...>> {
  using type = concat_t<type_list<layers::ResidualBegin>, typename expand<S>::type..., type_list<layers::ShortcutEnd>,
                        typename expand<L>::type..., type_list<layers::ResidualEnd>>;
};
template <int N, class... L>
struct expand<Repeat<N, L...>> {
  static_assert(sizeof(rule::repeat_count_positive<N>) != 0);
  using type = typename repeat_list<repeat_copies<N>, concat_t<typename expand<L>::type...>>::type;
};
template <class... L>
struct expand<Checkpoint<L...>> {
  using type = concat_t<typename expand<L>::type...>;
};
template <class T>
using expand_t = typename expand<T>::type;

// Recomputation marks of the flat layers an item stands for, one per layer: 0 outside a
// region, 1 where a region starts, 2 inside it. `user`: the Checkpoint<...> regions;
// `block`: every outermost Residual (GradientCheckpoint<checkpoint_mode::automatic>).
enum : unsigned char { mark_none = 0, mark_start = 1, mark_inside = 2 };

template <std::size_t... N>
constexpr auto join_marks(const std::array<unsigned char, N>&... a) {
  std::array<unsigned char, (N + ... + 0)> r{};
  std::size_t k = 0;
  ((std::copy(a.begin(), a.end(), r.begin() + static_cast<std::ptrdiff_t>(k)), k += N), ...);
  return r;
}
template <std::size_t N>
constexpr std::array<unsigned char, N> region_marks() {
  std::array<unsigned char, N> r{};
  for (auto& m : r) m = mark_inside;
  if constexpr (N > 0) r[0] = mark_start;
  return r;
}
template <int Times, std::size_t N>
constexpr auto repeat_marks(const std::array<unsigned char, N>& a) {
  std::array<unsigned char, N * static_cast<std::size_t>(Times)> r{};
  for (std::size_t t = 0; t < static_cast<std::size_t>(Times); ++t)
    for (std::size_t i = 0; i < N; ++i) r[t * N + i] = a[i];
  return r;
}

template <class T>
struct marks {
  static constexpr std::array<unsigned char, 1> user{mark_none}, block{mark_none};
};
template <class... L>
struct marks<Residual<L...>> {
  static constexpr auto user = join_marks(std::array<unsigned char, 1>{mark_none}, marks<L>::user...,
                                          std::array<unsigned char, 1>{mark_none});
  static constexpr auto block = region_marks<expand_t<Residual<L...>>::size>();
};
template <class... S, class... L>
struct marks<Residual<Shortcut<S...>, L...>> {
  static constexpr auto user =
      join_marks(std::array<unsigned char, 1>{mark_none}, marks<S>::user..., std::array<unsigned char, 1>{mark_none},
                 marks<L>::user..., std::array<unsigned char, 1>{mark_none});
  static constexpr auto block = region_marks<expand_t<Residual<Shortcut<S...>, L...>>::size>();
};
template <int N, class... L>
struct marks<Repeat<N, L...>> {
  static constexpr auto user = repeat_marks<repeat_copies<N>>(join_marks(marks<L>::user...));
  static constexpr auto block = repeat_marks<repeat_copies<N>>(join_marks(marks<L>::block...));
};
template <class... L>
struct marks<Checkpoint<L...>> {
  static constexpr auto user = region_marks<expand_t<Checkpoint<L...>>::size>();
  static constexpr auto block = join_marks(marks<L>::block...);
};

}  // namespace detail
}  // namespace strata
