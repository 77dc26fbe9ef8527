#pragma once
// Reading Plan<Net, Options...>: each option category at most once, unknown types
// rejected, defaults filled in. Boost.Hana does the type-level lookup.
#include <boost/hana/at.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <type_traits>

#include "strata/core/rules.hpp"
#include "strata/core/typelist.hpp"
#include "strata/strategy/options.hpp"

namespace strata::detail {

namespace hana = boost::hana;

template <class T>
constexpr bool option_is(option_kind k) {
  if constexpr (plan_option<T>) return T::option == k;
  else return false;
}

// Options of category K, as a hana tuple of types.
template <option_kind K, class... O>
constexpr auto options_of() {
  return hana::filter(hana::tuple_t<O...>, [](auto t) {
    using T = typename decltype(t)::type;
    return hana::bool_c<option_is<T>(K)>;
  });
}

// The option of category K, or Fallback.
template <option_kind K, class Fallback, class... O>
constexpr auto pick() {
  constexpr auto found = options_of<K, O...>();
  if constexpr (decltype(hana::length(found))::value == 0) return hana::type_c<Fallback>;
  else return hana::at_c<0>(found);
}
template <option_kind K, class Fallback, class... O>
using pick_t = typename decltype(pick<K, Fallback, O...>())::type;

// First option whose category repeats an earlier one: the pair for the diagnostic.
template <class... O>
struct duplicate_option {
  static constexpr int n = static_cast<int>(sizeof...(O));
  template <class T>
  static constexpr int kind_of() {
    if constexpr (plan_option<T>) return static_cast<int>(T::option);
    else return -1;
  }
  static constexpr std::array<int, sizeof...(O) + 1> kinds{kind_of<O>()..., -1000};
  static constexpr std::array<int, 2> pair = [] {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < j; ++i)
        if (kinds[static_cast<std::size_t>(i)] >= 0 && kinds[static_cast<std::size_t>(i)] == kinds[static_cast<std::size_t>(j)])
          return std::array<int, 2>{i, j};
    return std::array<int, 2>{-1, -1};
  }();
  static constexpr int unknown = [] {
    for (int i = 0; i < n; ++i)
      if (kinds[static_cast<std::size_t>(i)] < 0) return i;
    return -1;
  }();
};

// Nothing to check: the rule type instantiated when the options are well formed.
struct no_rule {};

// The option rule a list of options breaks, as a type to instantiate: [unknown-option]
// for the first entry that is no option, [option-once] for the first repeated category.
template <class... O>
constexpr auto option_rule() {
  using D = duplicate_option<O...>;
  if constexpr (D::unknown >= 0)
    return std::type_identity<rule::is_known_option<nth_t<static_cast<std::size_t>(D::unknown), O...>>>{};
  else if constexpr (D::pair[0] >= 0)
    return std::type_identity<rule::option_once<nth_t<static_cast<std::size_t>(D::pair[0]), O...>,
                                                nth_t<static_cast<std::size_t>(D::pair[1]), O...>>>{};
  else return std::type_identity<no_rule>{};
}
template <class... O>
using option_rule_t = typename decltype(option_rule<O...>())::type;

}  // namespace strata::detail
