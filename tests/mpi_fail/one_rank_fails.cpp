// One rank fails alone; the job must end on every rank within seconds, with the rank and
// the message printed, instead of leaving the other ranks inside a collective for ever.
//   layer   a user layer throws in forward on rank 2 only: the exception escapes step()
//   escape  rank 2 throws in the user's own code between steps, and nothing catches it
//   caught  rank 2 throws between steps; main catches it and returns world.fail(e)
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

int g_rank = -1;
bool g_fragile = false;  // mode "layer"

// y = x, except that forward throws on rank 2 from its third call on.
template <int D>
struct Fragile {
  static constexpr std::string_view name = "Fragile";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t) { return 0; }
  static constexpr long long backward_flops(shape_t) { return 0; }
  static constexpr buffer_needs memory(const local_dims&) { return {}; }
  template <class C>
  static void forward(C& c) {
    static int calls = 0;
    if (g_fragile && g_rank == 2 && ++calls >= 3) throw std::runtime_error("Fragile: a corrupt value on this rank");
    copy(c.q, c.rows * c.in_cols, c.x, c.y);
  }
  template <class C>
  static void backward(C& c) {
    if (c.dx) copy(c.q, c.rows * c.in_cols, c.dy, c.dx);
  }
};

using P = Plan<Replicate<1, Linear<8, 16>, Fragile<16>, ReLU, Linear<16, 4>>, Loss<SoftmaxCrossEntropy>, MicroBatch<4>>;

void train(strata::world<Host, comm::mpi_communicator>& world, const char* mode) {
  auto t = make_trainer<P, float>(world, SGD{});
  std::vector<float> x(4 * 8, 0.5f);
  std::vector<std::int32_t> y(4, 1);
  for (int s = 0; s < 100; ++s) {
    if (s == 3 && world.rank() == 2 && std::strcmp(mode, "layer") != 0)
      throw std::runtime_error("shard file 2 is unreadable on this rank");
    t.step({.inputs = x, .labels = y, .samples = 4});
  }
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  g_rank = world.rank();
  const char* mode = argc > 1 ? argv[1] : "";
  g_fragile = std::strcmp(mode, "layer") == 0;
  if (std::strcmp(mode, "escape") == 0) {
    train(world, mode);  // nothing catches: std::terminate, then strata's handler
    return 0;
  }
  try {
    train(world, mode);
    std::printf("rank %d: no error\n", world.rank());
    return 0;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
