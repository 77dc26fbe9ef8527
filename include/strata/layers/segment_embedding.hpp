#pragma once
// SegmentEmbedding<Vocab, D, Types, Sep>: BERT's input embedding without positions —
// token ids [.., Seq] → word[id] + segment[type] [.., Seq, D], where a token's type
// (BERT's token_type_id) is the number of Sep tokens before it, at most Types − 1, so a
// pair "[CLS] a… [SEP] b… [SEP]" gets type 0 up to the first [SEP] and 1 after it. The
// types come from the ids, so the batch stays one id per token.
//
// The word table is param 0 (a TiedHead reads it, as it reads an Embedding's). Under
// Split<N> the word table is cut along the vocabulary as Embedding's: each device writes
// its slice's lookups (zeros for the others) and the planner sums the partial outputs, so
// only device 0 of the part adds the segment vectors; the segment table is whole on every
// device, each computing the same gradient from the same output gradient.
#include "strata/core/rules.hpp"
#include "strata/layers/embedding.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int Vocab, int D, int Types = 2, int Sep = Vocab - 1>
struct SegmentEmbedding {
  static_assert(rule::layer_dim_positive<Vocab, D>::value);
  static_assert(rule::layer_dim_positive<Types, Types>::value);
  static_assert(rule::segment_separator_in_vocabulary<Sep, Vocab>::value);
  static constexpr std::string_view name = "SegmentEmbedding";
  static constexpr layer_role role = layer_role::embedding;
  static constexpr int vocab = Vocab;
  static constexpr int features = D;
  static constexpr int types = Types;
  static constexpr int separator = Sep;
  static constexpr int split_extent = Vocab;
  static constexpr shape_t in_shape{};  // ids of any shape; the last axis is the sequence
  static constexpr shape_t out_shape(shape_t in) { return in.rank == 0 ? shape_v<D> : in.append(D); }
  static constexpr std::array<param_t, 2> params{{{"table", shape_v<Vocab, D>, param_role::weight, 0},
                                                  {"segments", shape_v<Types, D>, param_role::replicated, -1}}};
  // The word table as an Embedding's, U(−1, 1) (at a tied head's scale when tied); the
  // segment vectors at the positions' scale, U(±1/√D), so they do not drown the words.
  static double init(const init_site& s) {
    return s.tensor == 0 ? init_rules::unit(s) : init_rules::fan_in_uniform(s, D);
  }
  static constexpr long long forward_flops(shape_t in) { return 2LL * (in.rank == 0 ? 1 : in.numel()) * D; }
  static constexpr long long backward_flops(shape_t in) { return 2LL * (in.rank == 0 ? 1 : in.numel()) * D; }

  // the word table as Embedding<Vocab, D>'s: cut along the vocabulary under Split<N>
  using words = Embedding<Vocab, D>;
  static constexpr shard_choice shard(const shard_query& q) { return words::shard(q); }
  // A device under Context<N> holds positions [pos0, pos0 + Seq/N) and cannot count the
  // separators before them.
  static constexpr shard_choice context_shard(const shard_query& q) {
    shard_choice c;
    if (q.n > 1) c.violate(rule_id::context_segments, Sep);
    return c;
  }
  // The ids and their types (for the gradients' scatter-adds); the segment vectors looked
  // up before they are added.
  static constexpr buffer_needs memory(const local_dims& d) {
    const long long tokens = d.rows * d.in_cols;
    return {.stash_ids = 2 * tokens, .scratch_values = tokens * D, .weight_pass = true};
  }

  // The word lookup (and the ids in the stash) as Embedding's, then the segments added.
  template <class C>
  static void forward(C& c) {
    words::forward(c);
    const std::size_t n = c.rows * c.in_cols;
    std::int32_t* type = c.stash_ids + n;
    segment_ids(c.q, c.rows, c.in_cols, c.stash_ids, std::int32_t(Sep), std::int32_t(Types - 1), type);
    if (adds_segments(c)) {
      embedding_forward(c.q, n, std::size_t(D), type, c.w[1], 0, std::size_t(Types), c.scratch_values);
      axpy(c.q, n * std::size_t(D), 1.0, c.scratch_values, c.y);
    }
  }
  template <class C>
  static void backward(C& c) {
    backward_weights(c);
  }
  template <class C>
  static void backward_data(C&) {}  // ids have no gradient
  template <class C>
  static void backward_weights(C& c) {
    words::backward_weights(c);
    const std::size_t n = c.rows * c.in_cols;
    embedding_backward(c.q, n, std::size_t(D), c.stash_ids + n, c.dy, 0, std::size_t(Types), c.g[1], true);
  }

 private:
  // Under a vocabulary split the partial outputs are summed: device 0 adds the segments once.
  template <class C>
  static bool adds_segments(const C& c) {
    return c.sig != signature::vocab_embedding || c.index == 0;
  }
};

}  // namespace strata::layers
