#pragma once
// The first broken rule of a plan, found by constexpr code (a diagnosis), and raised as
// the matching rule template so that its numbers appear in the diagnostic. rule_id and
// the mapping from a diagnosis's numbers to the template's arguments come from the same
// table as the rules (core/rules.def).
#include "strata/core/rules.hpp"

namespace strata {

enum class rule_id : unsigned char {
  ok,
#define STRATA_RULE(id, ...) id,
#define STRATA_TYPE_RULE(id, ...) id,
#include "strata/core/rules.def"
#undef STRATA_RULE
#undef STRATA_TYPE_RULE
  reported  // broken and already raised where it was checked (a type rule): raise nothing more
};

// A broken rule and its numbers, in the order of the rule's template arguments (the
// table's argument column reads them as A, B, C, D).
struct diagnosis {
  rule_id id = rule_id::ok;
  long long a = 0, b = 0, c = 0, d = 0;
  constexpr bool ok() const { return id == rule_id::ok; }
};

constexpr diagnosis first_of(diagnosis x, diagnosis y) { return x.ok() ? y : x; }

namespace detail {
using strata::diagnosis;
using strata::first_of;
using strata::rule_id;

// raised<id, A, B, C, D> is the rule's template with its arguments; instantiating it
// (`static_assert(sizeof(raised<...>) != 0)`, or a member of that type) checks the rule
// and reports nothing else when it breaks. rule_id::ok raises nothing.
template <rule_id R, long long A, long long B, long long C, long long D>
struct raised {};
// holds<id, A, B, C, D>: whether the rule holds for these numbers, without raising it.
template <rule_id R, long long A, long long B, long long C, long long D>
inline constexpr bool holds = true;

#define STRATA_TYPE_RULE(...)
#define STRATA_RULE(id, name, tag, params, args, condition, message)                        \
  template <long long A, long long B, long long C, long long D>                              \
  struct raised<rule_id::id, A, B, C, D> : rule::name<STRATA_UNPAREN_ args> {};               \
  template <long long A, long long B, long long C, long long D>                              \
  inline constexpr bool holds<rule_id::id, A, B, C, D> = rule::name##_holds<STRATA_UNPAREN_ args>;
#include "strata/core/rules.def"
#undef STRATA_RULE
#undef STRATA_TYPE_RULE

// The diagnosis of one rule checked on its numbers: ok, or the rule and the numbers.
template <rule_id R, long long A = 0, long long B = 0, long long C = 0, long long D = 0>
constexpr diagnosis check() {
  if constexpr (holds<R, A, B, C, D>) return diagnosis{};
  else return diagnosis{R, A, B, C, D};
}

}  // namespace detail
}  // namespace strata
