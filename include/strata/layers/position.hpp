#pragma once
// PositionEmbedding<Seq, D>: learned absolute positions (GPT-2), y[t] = x[t] + pos[t] for
// the tokens t of each [Seq, D] sequence. Works row by row with whole features: under
// Split<N> it keeps a row split (sequence parallelism: each device adds the positions of
// its own rows) and takes a partial sum reduced first; the table stays whole.
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int Seq, int D>
struct PositionEmbedding {
  static_assert(rule::layer_dim_positive<Seq, D>::value);
  static constexpr std::string_view name = "PositionEmbedding";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr int seq = Seq;
  static constexpr int features = D;
  static constexpr shape_t in_shape = shape_v<Seq, D>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 1> params{{{"positions", shape_v<Seq, D>, param_role::replicated, -1}}};
  static constexpr long long forward_flops(shape_t in) { return in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return in.numel(); }
  static constexpr shard_choice shard(const shard_query& q) { return sharding::whole_features(q); }
  // backward needs only the output's gradient; under a zero-bubble schedule the table's
  // gradient waits for W
  static constexpr buffer_needs memory(const local_dims&) { return {.weight_pass = true}; }

  template <class C>
  static void forward(C& c) {
    const std::size_t rows = c.rows / std::size_t(c.pieces()), at = rows * std::size_t(D);
    for (int h = 0; h < c.pieces(); ++h)
      position_forward(c.q, rows, std::size_t(D), positions(c), c.row0, c.x + std::size_t(h) * at,
                       table(c, c.w[0], h), c.y + std::size_t(h) * at);
  }
  template <class C>
  static void backward(C& c) {
    backward_weights(c);
    backward_data(c);
  }
  template <class C>
  static void backward_data(C& c) {
    if (c.dx) copy(c.q, c.rows * c.in_cols, c.dy, c.dx);
  }
  template <class C>
  static void backward_weights(C& c) {
    const std::size_t rows = c.rows / std::size_t(c.pieces()), at = rows * std::size_t(D);
    for (int h = 0; h < c.pieces(); ++h)  // the pieces' table rows are disjoint
      position_backward(c.q, rows, std::size_t(D), positions(c), c.row0, c.dy + std::size_t(h) * at,
                        table(c, c.g[0], h), true);
  }

 private:
  // Under Context<N> the device holds the positions of its pieces of every sample (one of
  // Seq/N from pos0; two of Seq/2N from pos0 and pos1 under ContextAllGather, ContextRing): for each, the
  // table's rows from its first position on; else all Seq from 0.
  template <class C>
  static std::size_t positions(const C& c) {
    return c.sample_rows / std::size_t(c.pieces());
  }
  template <class C, class T>
  static T* table(const C& c, T* rows, int piece) {
    return rows + c.piece_pos0(piece) * std::size_t(D);
  }
};

}  // namespace strata::layers
