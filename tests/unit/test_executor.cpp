// The executor runs the lowered program over exactly the planned buffers: after the first
// step nothing is allocated (training or evaluation), the activation buffers are the
// plan's byte count, and the printed action list is the one it runs.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

template <class P, class T>
void check_static_memory(int in_elems, int classes) {
  auto world = local_world<Host>();
  auto train = make_trainer<P, T>(world, Adam{.lr = 1e-3});
  // exactly the lowered buffer plan, in this trainer's types
  CHECK(train.activation_bytes() == P::lowering::arena_bytes(0, sizeof(T), sizeof(stat_t<T>)));
  if constexpr (std::is_same_v<T, typename P::element_type>) CHECK(train.activation_bytes() == P::activation_arena_bytes(0));
  const std::size_t n = std::size_t(P::micro_batch) * P::num_micro_batch;
  std::vector<master_t<T>> x(n * std::size_t(in_elems));
  std::vector<std::int32_t> y(n * (P::input_shape.rank > 0 && P::layer_plans[0].desc.reads_ids
                                       ? std::size_t(P::input_shape.numel())
                                       : 1));
  std::mt19937 g(3);
  for (auto& v : x) v = master_t<T>(P::layer_plans[0].desc.reads_ids ? double(g() % 16) : 0.1 * (g() % 19) - 0.9);
  for (auto& v : y) v = std::int32_t(g() % unsigned(classes));
  const batch_view<master_t<T>> b{.inputs = x, .labels = y, .samples = n};
  train.step(b);  // first step: the BLAS and the thread pool warm up
  const long long before = Host::buffer<char>::allocation_count().load();
  for (int s = 0; s < 3; ++s) train.step(b);
  (void)train.evaluate(b, n);
  CHECK(Host::buffer<char>::allocation_count().load() == before);
}

// A user layer with its own initialisation rule (an init member): y = x + b, b starting at
// 1/2 + element/8 where its role (opaque) would draw U(±1/√D).
template <int D>
struct Shift {
  static constexpr std::string_view name = "Shift";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 1> params{{{"shift", shape_v<D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }
  static constexpr buffer_needs memory(const local_dims&) { return {}; }
  static double init(const init_site& s) { return 0.5 + 0.125 * static_cast<double>(s.element); }
  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    bias_activation_forward(c.q, backend::activation::none, c.rows, c.in_cols, c.x, c.w[0], static_cast<T*>(nullptr), c.y);
  }
  template <class C>
  static void backward(C& c) {
    bias_grad(c.q, c.rows, c.in_cols, c.dy, c.g[0], true);
    if (c.dx) copy(c.q, c.rows * c.in_cols, c.dy, c.dx);
  }
};

}  // namespace

TEST_CASE("the trainer starts from each layer's init rule: its own member, else its role's") {
  using P = Plan<Replicate<1, Linear<4, 8>, Shift<8>, Linear<8, 3>>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
  auto world = local_world<Host>();
  auto train = make_trainer<P, double>(world, SGD{.lr = 0.1}, /*seed=*/7);
  const auto w = train.gather_parameters();
  REQUIRE(w.size() == std::size_t(P::num_layers));  // the loss too, without parameters
  REQUIRE(w[1][0].size() == 8);
  for (std::size_t e = 0; e < 8; ++e) CHECK(w[1][0][e] == 0.5 + 0.125 * double(e));
  // Linear: U(±1/√fan_in) from the role's rule, fan_in its 4 and 8 input features
  for (std::size_t e = 0; e < w[0][0].size(); ++e)
    CHECK(w[0][0][e] == init_rules::fan_in_uniform(init_site{0, 0, e, 7}, 4));
  for (std::size_t e = 0; e < w[2][1].size(); ++e)
    CHECK(w[2][1][e] == init_rules::fan_in_uniform(init_site{2, 1, e, 7}, 8));
}

TEST_CASE("a step allocates nothing and uses exactly the planned activation buffers") {
  using CE = Loss<SoftmaxCrossEntropy>;
  using MLP = Plan<Replicate<1, Linear<16, 32>, ReLU, Linear<32, 32>, GeLU, Linear<32, 4>>, CE, MicroBatch<8>,
                   NumMicroBatch<3>>;
  using LN = Plan<Replicate<1, Flatten, Linear<12, 16>, LayerNorm<16>, GeLU, Linear<16, 5>>, Input<3, 4>, CE,
                  MicroBatch<4>, NumMicroBatch<2>>;
  using EMB = Plan<Replicate<1, Embedding<16, 8>, LayerNorm<8>, Linear<8, 6>>, Input<3>, CE, MicroBatch<4>>;
  // one stage, two chunks: parts hand over in place
  using S = Replicate<1, Linear<16, 16>, ReLU>;
  using ONE = Plan<Pipeline<S, S, S, Replicate<1, Linear<16, 4>>>, CE, MicroBatch<2>, NumMicroBatch<4>,
                   Schedule<Interleaved<4>>>;
  static_assert(ONE::stages == 1 && ONE::chunks == 4);
  check_static_memory<MLP, double>(16, 4);
  check_static_memory<MLP, float>(16, 4);
  check_static_memory<MLP, bf16>(16, 4);
  check_static_memory<LN, float>(12, 5);
  check_static_memory<EMB, double>(3, 6);
  check_static_memory<ONE, double>(16, 4);
}

TEST_CASE("the report prints the lowered action lists the executor runs") {
  using P = Plan<Pipeline<Replicate<1, Linear<8, 8>, ReLU>, Replicate<1, Linear<8, 2>>>, Loss<SoftmaxCrossEntropy>,
                 MicroBatch<4>, NumMicroBatch<3>, Schedule<PreferBackward>>;
  const std::string r = report<P>();
  // stage 0 of 1F1B with 3 micro-batches: warm-up forward, then one forward one backward
  CHECK(r.find("stage 0: F0 s0 | send-act mb0 | F1 s1 | send-act mb1 + recv-grad mb0 | B0 s0 |") != std::string::npos);
  CHECK(r.find("part 1 backward: prepare-loss L3 SoftmaxCrossEntropy | backward L3 SoftmaxCrossEntropy | backward L2 Linear") !=
        std::string::npos);
  CHECK(r.find("reduce-bucket") != std::string::npos);
}
