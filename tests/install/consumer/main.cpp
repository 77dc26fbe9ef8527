// Downstream smoke test: the installed umbrella header must be found through
// strata::strata's usage requirements (include dir, C++20, Boost).
#include <strata/strata.hpp>

static_assert(__cplusplus >= 202002L, "strata::strata must propagate C++20");

int main() { return 0; }
