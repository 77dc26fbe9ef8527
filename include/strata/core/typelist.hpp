#pragma once
// Type-list utilities with constant instantiation depth (no recursion over the pack),
// so models with hundreds of layers stay far below nvcc's depth limit of 200.
#include <array>
#include <cstddef>
#include <utility>

namespace strata {

// A list of types (layers, items, parts).
template <class... T>
struct type_list {
  static constexpr int size = static_cast<int>(sizeof...(T));
};

}  // namespace strata

namespace strata::detail {

template <std::size_t I, class T>
struct indexed {
  using type = T;
};
template <class Seq, class... T>
struct indexer;
template <std::size_t... I, class... T>
struct indexer<std::index_sequence<I...>, T...> : indexed<I, T>... {};
template <std::size_t I, class T>
indexed<I, T> select_indexed(const indexed<I, T>&);

// The I-th type of a pack, by overload resolution against indexed bases.
template <std::size_t I, class... T>
using nth_t = typename decltype(select_indexed<I>(indexer<std::index_sequence_for<T...>, T...>{}))::type;

template <std::size_t I, class List>
struct list_nth;
template <std::size_t I, class... T>
struct list_nth<I, type_list<T...>> {
  using type = nth_t<I, T...>;
};
template <std::size_t I, class List>
using list_nth_t = typename list_nth<I, List>::type;

// Concatenation by index arithmetic: output element j is looked up directly in its
// source list, so neither template depth nor expression nesting grows with the count
// (a fold over operator+ would hit clang's 256-deep expression limit).
template <class... Lists>
struct concat_impl {
  static constexpr std::size_t n = sizeof...(Lists);
  static constexpr std::array<int, n + 1> offsets = [] {
    std::array<int, n + 1> o{};
    constexpr std::array<int, n> sizes{Lists::size...};
    for (std::size_t i = 0; i < n; ++i) o[i + 1] = o[i] + sizes[i];
    return o;
  }();
  static constexpr int total = offsets[n];
  static constexpr std::size_t list_of(std::size_t j) {
    std::size_t i = 0;
    while (static_cast<int>(j) >= offsets[i + 1]) ++i;
    return i;
  }
  template <std::size_t... J>
  static auto make(std::index_sequence<J...>)
      -> type_list<list_nth_t<J - offsets[list_of(J)], nth_t<list_of(J), Lists...>>...>;
  using type = decltype(make(std::make_index_sequence<static_cast<std::size_t>(total)>{}));
};
template <>
struct concat_impl<> {
  using type = type_list<>;
};

template <class... Lists>
using concat_t = typename concat_impl<Lists...>::type;

}  // namespace strata::detail
