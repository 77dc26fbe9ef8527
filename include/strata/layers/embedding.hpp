#pragma once
// Embedding<Vocab, D>: integer ids [..] → vectors [.., D]. Under Split<N> the table
// is cut along the vocabulary (Megatron's vocabulary-parallel embedding): each device
// looks up the ids in its slice, writes zeros for the others, and the planner's
// conversion sums the partial outputs.
#include <stdexcept>

#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

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

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.sig = signature::vocab_embedding;
    c.need = sbp::broadcast;
    c.out = sbp::partial;
    c.partial_input_grad = true;
    c.param_axis = {0, -1, -1, -1, -1, -1};
    c.flops_div = q.n;
    if (Vocab % q.n != 0) c.violate(rule_id::split_vocab, Vocab);
    return c;
  }
  // The ids, for the gradient's scatter-add.
  // Its backward is all weight gradient: under a zero-bubble schedule it runs in W.
  static constexpr buffer_needs memory(const local_dims& d) {
    return {.stash_ids = d.rows * d.in_cols, .weight_pass = true};
  }

  // Ids come from the executor (c.ids: the batch's values cast to int32, checked on
  // every rank before any collective) when the layer reads the model's input, else
  // as values of T (exact below 2^24 in float).
  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    const std::size_t n = c.rows * c.in_cols;
    if (c.ids) {
      copy(c.q, n, c.ids, c.stash_ids);
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      cast_ids(c.q, n, c.x, c.stash_ids);
    } else {
      throw std::logic_error("strata: Embedding: token ids cannot travel as 16-bit (bf16, f16) values; put the Embedding first");
    }
    embedding_forward(c.q, n, std::size_t(D), c.stash_ids, c.w[0], slice_offset(c), slice(c), c.y);
  }
  template <class C>
  static void backward(C& c) {
    embedding_backward(c.q, c.rows * c.in_cols, std::size_t(D), c.stash_ids, c.dy, slice_offset(c), slice(c), c.g[0],
                       true);
  }
  template <class C>
  static void backward_data(C&) {}  // ids have no gradient
  template <class C>
  static void backward_weights(C& c) {
    backward(c);
  }

 private:
  template <class C>
  static std::size_t slice(const C& c) {
    return c.sig == signature::vocab_embedding ? std::size_t(Vocab / c.n) : std::size_t(Vocab);
  }
  template <class C>
  static std::size_t slice_offset(const C& c) {
    return c.sig == signature::vocab_embedding ? slice(c) * std::size_t(c.index) : 0;
  }
};

}  // namespace strata::layers
