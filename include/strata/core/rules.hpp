#pragma once
// Every rule a configuration can break, one class template per row of core/rules.def.
// A rule's template arguments carry the numbers involved, so the compiler's "in
// instantiation of rule::X<...>" note prints them next to "strata rule [tag]: message"
// (g++, clang and nvcc all do). Instantiating a rule checks it: `holds` is its condition,
// the static_assert fires when it is false. `value` is always true, so that a check
// written `static_assert(rule::X<...>::value)` reports the broken rule once and nothing
// after it (clang reads no member of a class whose assertion failed without a second
// error; g++ would print a second "static assertion failed" for a false `value`).

namespace strata::rule {

// Dependent `false`: a rule that can only fail must not fire before it is instantiated.
template <auto...>
inline constexpr bool never = false;
template <class...>
inline constexpr bool never_type = false;

#define STRATA_UNPAREN_(...) __VA_ARGS__
#define STRATA_TYPE_RULE(id, name, tag, params, condition, message) \
  template <STRATA_UNPAREN_ params>                                 \
  struct name {                                                     \
    static constexpr bool holds = condition;                        \
    static_assert(holds, "strata rule [" tag "]: " message);        \
    static constexpr bool value = true;                             \
  };
#define STRATA_RULE(id, name, tag, params, args, condition, message) \
  STRATA_TYPE_RULE(id, name, tag, params, condition, message)        \
  template <STRATA_UNPAREN_ params>                                  \
  inline constexpr bool name##_holds = condition;
#include "strata/core/rules.def"
#undef STRATA_RULE
#undef STRATA_TYPE_RULE

}  // namespace strata::rule
