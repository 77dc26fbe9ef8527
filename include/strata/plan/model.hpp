#pragma once
// Normalisation of a network type into items (strategies and bare layers), parts
// (pipeline parts: each on its own devices) and the flat list of layer types.
// All bookkeeping is constexpr arrays; types are produced only for the layer list.
#include <array>

#include "strata/core/typelist.hpp"
#include "strata/layers/residual.hpp"
#include "strata/strategy/strategy.hpp"

namespace strata::detail {

// One annotation or one bare layer, as written by the user.
struct item_desc {
  bool bare = true;                         // a layer written without a strategy
  strategy_kind kind = strategy_kind::replicate;
  int devices = 0;                          // N of Replicate<N>/Split<N>/Context<N>
  bool context = false;                     // Context<N>: the sequence split over the devices
  int tensor = 1;                           // Context<N, Split<T>>: T (the tensor split inside it)
  int num_layers = 1;
  int part = 0;                             // pipeline part this item belongs to
  int nested_at = -1;                       // position of a strategy nested inside, or −1
  bool group = false;                       // a Pipeline/Colocate/Model where an item belongs
};

// The flat layers of an item: Residual<...> and Repeat<N, ...> expanded (layers/residual.hpp).
// A strategy's layers (its `layers` list, Context<N, Split<T, L...>>'s the inner L...).
template <class List>
struct strategy_layers;
template <class... L>
struct strategy_layers<type_list<L...>> {
  using type = concat_t<expand_t<L>...>;
  static constexpr auto user = join_marks(marks<L>::user...);
  static constexpr auto block = join_marks(marks<L>::block...);
};
template <class T>
struct item_layers {
  using type = expand_t<T>;
};
template <class T>
  requires is_strategy_v<T>
struct item_layers<T> {
  using type = typename strategy_layers<typename T::layers>::type;
};

// The recomputation marks of an item's flat layers (layers/residual.hpp).
template <class T>
struct item_marks : marks<T> {};
template <class T>
  requires is_strategy_v<T>
struct item_marks<T> {
  static constexpr auto user = strategy_layers<typename T::layers>::user;
  static constexpr auto block = strategy_layers<typename T::layers>::block;
};

// Position of the first strategy or grouping among an item's flat layers, or −1.
template <class... L>
constexpr int first_annotation(type_list<L...>) {
  constexpr std::array<bool, sizeof...(L) + 1> nested{is_annotation_v<L>..., false};
  for (int i = 0; i < static_cast<int>(sizeof...(L)); ++i)
    if (nested[static_cast<std::size_t>(i)]) return i;
  return -1;
}

template <class T>
constexpr item_desc describe_item() {
  item_desc d;
  if constexpr (is_strategy_v<T>) {
    d.bare = false;
    d.kind = T::kind;
    d.devices = T::devices;
    d.context = is_context_v<T>;
    if constexpr (is_context_v<T>) d.tensor = T::tensor;
    d.num_layers = item_layers<T>::type::size;
    d.nested_at = first_annotation(typename item_layers<T>::type{});
  } else if constexpr (is_annotation_v<T>) {
    d.group = true;  // a grouping construct where an item was expected
  } else {
    d.num_layers = item_layers<T>::type::size;  // a bare Residual or Repeat stands for several
    d.nested_at = first_annotation(typename item_layers<T>::type{});  // a strategy inside a Residual
  }
  return d;
}

// Items of one pipeline part.
template <class Part>
struct part_items {
  using type = type_list<Part>;
};
template <class... I>
struct part_items<Colocate<I...>> {
  using type = type_list<I...>;
};

template <class List>
struct items_info;
template <class... I>
struct items_info<type_list<I...>> {
  static constexpr std::array<item_desc, sizeof...(I)> value{describe_item<I>()...};
  using layers = concat_t<typename item_layers<I>::type...>;
  static constexpr auto user_marks = join_marks(item_marks<I>::user...);
  static constexpr auto block_marks = join_marks(item_marks<I>::block...);
};

// net_traits<Net>: items (flattened across parts) with their part index.
template <class Net>
struct net_traits {  // a single strategy or a single bare layer: one part
  using items = type_list<Net>;
  static constexpr bool explicit_parts = true;
  static constexpr int num_parts = 1;
  static constexpr std::array<int, 1> item_part{0};
  static constexpr int empty_part = -1;
};
template <class... I>
struct net_traits<Colocate<I...>> {
  using items = type_list<I...>;
  static constexpr bool explicit_parts = true;
  static constexpr int num_parts = 1;
  static constexpr std::array<int, sizeof...(I)> item_part{};
  static constexpr int empty_part = sizeof...(I) == 0 ? 0 : -1;
};
// EPL's default: each TaskGraph on its own devices. Parts are found later, from TaskGraphs.
template <class... I>
struct net_traits<Model<I...>> {
  using items = type_list<I...>;
  static constexpr bool explicit_parts = false;
  static constexpr int num_parts = 0;  // computed from TaskGraphs
  static constexpr std::array<int, sizeof...(I)> item_part{};
  static constexpr int empty_part = sizeof...(I) == 0 ? 0 : -1;
};
template <class... P>
struct net_traits<Pipeline<P...>> {
  using items = concat_t<typename part_items<P>::type...>;
  static constexpr bool explicit_parts = true;
  static constexpr int num_parts = static_cast<int>(sizeof...(P));
  static constexpr std::array<int, sizeof...(P)> part_sizes{part_items<P>::type::size...};
  static constexpr auto item_part = [] {
    std::array<int, static_cast<std::size_t>(items::size)> a{};
    int k = 0;
    for (int p = 0; p < num_parts; ++p)
      for (int j = 0; j < part_sizes[static_cast<std::size_t>(p)]; ++j) a[static_cast<std::size_t>(k++)] = p;
    return a;
  }();
  static constexpr int empty_part = [] {
    if (sizeof...(P) == 0) return 0;
    for (int p = 0; p < num_parts; ++p)
      if (part_sizes[static_cast<std::size_t>(p)] == 0) return p;
    return -1;
  }();
};

}  // namespace strata::detail
