// Mesh and rank layout: rank = data * devices_per_replica + stage * part_devices + index.
#include <array>

#include <strata/strata.hpp>

using namespace strata;

// Two pipeline stages, each a Split<4>: 8 devices per replica; world 16 gives 2 replicas.
using Net = Pipeline<Split<4, Linear<1024, 4096>, GeLU, Linear<4096, 1024>>,
                     Split<4, Linear<1024, 4096>, GeLU, Linear<4096, 1024>>>;
using P = Plan<Net, Loss<SoftmaxCrossEntropy>, MicroBatch<8>, NumMicroBatch<4>, World<16>>;

static_assert(P::part_devices == 4 && P::stages == 2 && P::devices_per_replica == 8);
static_assert(P::data_parallel() == 2);  // from World<16>

static_assert(P::coord(13).data == 1 && P::coord(13).stage == 1 && P::coord(13).index == 1);
static_assert(P::rank_of(1, 1, 1) == 13);

// Communication groups of rank 5 (replica 0, stage 1, index 1).
template <std::size_t N>
constexpr std::array<int, N> members(group_axis axis, int rank) {
  std::array<int, N> out{};
  const int n = P::group(axis, rank, 16, out);
  return n == static_cast<int>(N) ? out : std::array<int, N>{};
}
static_assert(members<4>(group_axis::part, 5) == std::array{4, 5, 6, 7});  // tensor-parallel peers
static_assert(members<2>(group_axis::pipeline, 5) == std::array{1, 5});      // its pipeline
static_assert(members<2>(group_axis::data, 5) == std::array{5, 13});         // same shard, other replica
static_assert(members<8>(group_axis::part_data, 5) == std::array{4, 5, 6, 7, 12, 13, 14, 15});

int main() { return 0; }
