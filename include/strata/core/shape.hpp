#pragma once
// Static per-sample shapes and parameter descriptions: the vocabulary every layer and the planner share.
#include <array>
#include <cstdint>
#include <string_view>

namespace strata {

// A per-sample shape (the batch dimension is never part of it). Rank ≤ 4 covers
// images [C,H,W], sequences [S,D] and vectors [D].
struct shape_t {
  int rank = 0;
  std::array<int, 4> dim{};

  constexpr long long numel() const {
    long long n = 1;
    for (int i = 0; i < rank; ++i) n *= dim[static_cast<std::size_t>(i)];
    return n;
  }
  constexpr int last() const { return rank > 0 ? dim[static_cast<std::size_t>(rank - 1)] : 0; }
  // Rows of one sample as layers see it: every axis but the last (the features).
  constexpr long long rows() const { return numel() / (last() > 0 ? last() : 1); }
  constexpr shape_t with_last(int d) const {
    shape_t s = *this;
    if (s.rank == 0) s.rank = 1;
    s.dim[static_cast<std::size_t>(s.rank - 1)] = d;
    return s;
  }
  constexpr shape_t append(int d) const {
    shape_t s = *this;
    s.dim[static_cast<std::size_t>(s.rank++)] = d;
    return s;
  }
  friend constexpr bool operator==(const shape_t&, const shape_t&) = default;
};

template <int... D>
inline constexpr shape_t shape_v{static_cast<int>(sizeof...(D)), {D...}};

// What a parameter is for: the sharding pass needs to know whether a tensor is a
// weight matrix (split along an axis), a bias (follows the output split) or
// something that always stays whole.
enum class param_role : unsigned char { weight, bias, replicated };

struct param_t {
  std::string_view name;
  shape_t shape;
  param_role role = param_role::weight;
  // Axis split when the layer runs tensor-parallel in its primary signature (−1: never split).
  int split_axis = -1;
};

// How a layer behaves under the planner: decides its sharding signatures.
enum class layer_role : unsigned char {
  elementwise,  // ReLU, GeLU: any Split/Broadcast layout passes through
  reshape,      // Flatten: keeps batch splits, needs whole features
  linear,       // Megatron column/row parallel
  layernorm,    // normalises over features: needs whole features
  embedding,    // vocabulary-parallel table
  attention,    // head-parallel
  gated_mlp,    // SwiGLU: gate and up column-parallel, down row-parallel, in one layer
  moe,          // expert-parallel with all-to-all
  loss,         // must be last; vocabulary-parallel when logits arrive split
  opaque,       // user layer with no sharding knowledge: whole features, replicated params
  residual_begin,  // Residual<...>: where the skip connection leaves (its input is kept)
  residual_end,    // Residual<...>: where it is added back, in the skip's layout
  shortcut_end     // Residual<Shortcut<S...>, L...>: the shortcut's output becomes the skip; the input goes on
};

constexpr std::string_view to_string(layer_role r) {
  switch (r) {
    case layer_role::elementwise: return "elementwise";
    case layer_role::reshape: return "reshape";
    case layer_role::linear: return "linear";
    case layer_role::layernorm: return "layernorm";
    case layer_role::embedding: return "embedding";
    case layer_role::attention: return "attention";
    case layer_role::gated_mlp: return "gated-mlp";
    case layer_role::moe: return "moe";
    case layer_role::loss: return "loss";
    case layer_role::opaque: return "opaque";
    case layer_role::residual_begin: return "residual-begin";
    case layer_role::residual_end: return "residual-end";
    case layer_role::shortcut_end: return "shortcut-end";
  }
  return "?";
}

}  // namespace strata
