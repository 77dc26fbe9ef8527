#pragma once
// One function pointer per layer of a plan for each pass the executor runs: forward,
// backward whole, and a zero-bubble schedule's two halves (a layer without them runs
// whole in B and has nothing for W).
#include <array>

#include "strata/core/typelist.hpp"
#include "strata/layers/layer.hpp"

namespace strata::exec {

template <class Ctx, class List>
struct layer_dispatch;

template <class Ctx, class... Ls>
struct layer_dispatch<Ctx, type_list<Ls...>> {
  using fn = void (*)(Ctx&);
  template <class L>
  static void forward_of(Ctx& c) {
    if constexpr (ExecutableLayer<L>) L::forward(c);
  }
  template <class L>
  static void backward_of(Ctx& c) {
    if constexpr (ExecutableLayer<L>) L::backward(c);
  }
  template <class L>
  static void data_of(Ctx& c) {
    if constexpr (SplitBackwardLayer<L>) L::backward_data(c);
    else backward_of<L>(c);
  }
  template <class L>
  static void weights_of(Ctx& c) {
    if constexpr (SplitBackwardLayer<L>) L::backward_weights(c);
  }
  // statistics a layer keeps across steps: their initial values, and the fold at a step's end
  template <class L>
  static double state_init_of(long long k) {
    if constexpr (requires { L::state_init(k); }) return L::state_init(k);
    else return 0.0;
  }
  template <class L>
  static void fold_of(Ctx& c) {
    if constexpr (requires { L::fold_state(c); }) L::fold_state(c);
  }
  static constexpr std::array<double (*)(long long), sizeof...(Ls)> state_init{&state_init_of<Ls>...};
  static constexpr std::array<fn, sizeof...(Ls)> fold_state{&fold_of<Ls>...};
  static constexpr std::array<fn, sizeof...(Ls)> forward{&forward_of<Ls>...};
  static constexpr std::array<fn, sizeof...(Ls)> backward{&backward_of<Ls>...};
  static constexpr std::array<fn, sizeof...(Ls)> backward_data{&data_of<Ls>...};
  static constexpr std::array<fn, sizeof...(Ls)> backward_weights{&weights_of<Ls>...};
};

}  // namespace strata::exec
