#include <strata/_infra_probe.hpp>
#include <boost/mp11/algorithm.hpp>
static_assert(strata::probe::answer() == 42);
static_assert(boost::mp11::mp_size<strata::probe::types<int, float>>::value == 2);
int main() { return 0; }
