// batch_view has named fields only: the positional form, easy to fill in the wrong order,
// does not compile; {.inputs = x, .labels = y, .samples = n} does.
// expected-error: fields_by_name_only
#include <cstdint>
#include <vector>

#include <strata/exec/batch.hpp>

int main() {
  std::vector<float> x(8);
  std::vector<std::int32_t> y(2);
  const strata::batch_view<float> named{.inputs = x, .labels = y, .samples = 2};
  const strata::batch_view<float> positional{x, y, 2};
  return int(named.samples + positional.samples);
}
