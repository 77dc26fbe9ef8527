#pragma once
// Embedding<Vocab, D>: integer ids [..] → vectors [.., D]. Under Split<N> the table
// is cut along the vocabulary (Megatron's vocabulary-parallel embedding).
#include "strata/layers/layer.hpp"
#include "strata/plan/rules.hpp"

namespace strata::layers {

template <int Vocab, int D>
struct Embedding {
  static_assert(rule::layer_dim_positive<Vocab, D>::value);
  static constexpr std::string_view name = "Embedding";
  static constexpr layer_role role = layer_role::embedding;
  static constexpr int vocab = Vocab;
  static constexpr int features = D;
  static constexpr int split_extent = Vocab;
  static constexpr shape_t in_shape{};  // ids of any shape
  static constexpr shape_t out_shape(shape_t in) { return in.rank == 0 ? shape_v<D> : in.append(D); }
  static constexpr std::array<param_t, 1> params{{{"table", shape_v<Vocab, D>, param_role::weight, 0}}};
  static constexpr long long forward_flops(shape_t in) { return (in.rank == 0 ? 1 : in.numel()) * D; }
  static constexpr long long backward_flops(shape_t in) { return (in.rank == 0 ? 1 : in.numel()) * D; }
  static constexpr long long stash_elems(shape_t in) { return in.rank == 0 ? 1 : in.numel(); }
};

}  // namespace strata::layers
