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
    position_forward(c.q, c.rows, std::size_t(D), positions(c), c.row0, c.x, table(c, c.w[0]), c.y);
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
    position_backward(c.q, c.rows, std::size_t(D), positions(c), c.row0, c.dy, table(c, c.g[0]), true);
  }

 private:
  // Under Context<N> the device holds positions [pos0, pos0 + Seq/N) of every sample: the
  // table's rows from pos0 on, Seq/N of them; else all Seq from 0.
  template <class C>
  static std::size_t positions(const C& c) {
    return std::size_t(Seq) / std::size_t(c.context);
  }
  template <class C, class T>
  static T* table(const C& c, T* rows) {
    return rows + c.pos0 * std::size_t(D);
  }
};

}  // namespace strata::layers
