#pragma once
// TiedHead<Vocab, D, Bias = false>: the output head that reads the model's
// Embedding<Vocab, D> table (GPT-2, T5, Gemma, small Llamas: tie_word_embeddings),
// logits = x · tableᵀ (+ bias: BERT's masked-language-model decoder has one of its own).
// Its parameter is the Embedding's (tied_param): the plan finds that Embedding, gives
// the head a copy of the same block on every device (initialised as the Embedding's),
// and after the gradient reduction sums the two copies' gradients — locally when both
// are on one device, over the pair of devices when pipeline stages hold one each — so
// the copies take the same update and stay equal; the gradient norm, the analyses and
// checkpoints count the tensor once.
//
// Under Split<N> the head is column-parallel over the vocabulary: each device holds the
// table's rows of its vocabulary slice — the slice its Embedding holds (rule
// [tied-shards]) — and produces those logits for a vocabulary-parallel loss.
#include "strata/core/rules.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int Vocab, int D, bool Bias = false>
struct TiedHead {
  static_assert(rule::layer_dim_positive<Vocab, D>::value);
  static constexpr std::string_view name = "TiedHead";
  static constexpr layer_role role = layer_role::linear;
  static constexpr int vocab = Vocab;
  static constexpr int features = D;
  static constexpr int split_extent = Vocab;
  static constexpr shape_t in_shape = shape_v<D>;
  static constexpr shape_t out_shape(shape_t in) { return in.with_last(Vocab); }
  static constexpr bool has_bias = Bias;
  static constexpr auto params = [] {
    if constexpr (Bias)
      return std::array<param_t, 2>{{{"table", shape_v<Vocab, D>, param_role::weight, 0},
                                     {"bias", shape_v<Vocab>, param_role::bias, 0}}};
    else
      return std::array<param_t, 1>{{{"table", shape_v<Vocab, D>, param_role::weight, 0}}};
  }();
  static constexpr tied_param tie{.param = 0, .owner = layer_role::embedding, .owner_param = 0};
  // The table starts as its owner's; the bias at zero (BERT's, transformers').
  static double init(const init_site& s) { return s.tensor == 0 ? init_rules::fan_in_uniform(s, D) : 0.0; }
  static constexpr long long rows(shape_t in) { return in.numel() / D; }
  static constexpr long long forward_flops(shape_t in) { return rows(in) * (2LL * D * Vocab + (Bias ? Vocab : 0)); }
  static constexpr long long backward_flops(shape_t in) { return rows(in) * (4LL * D * Vocab + (Bias ? Vocab : 0)); }

  static constexpr shard_choice shard(const shard_query& q) {
    shard_choice c;
    c.sig = signature::column_parallel;
    c.need = sbp::broadcast;
    c.out = sbp::split_feature;
    c.partial_input_grad = true;
    c.flops_div = q.n;
    c.param_axis = {0, 0, -1, -1, -1, -1};  // the table (and bias) on the vocabulary, as the Embedding's
    if (Vocab % q.n != 0) c.violate(rule_id::split_vocab, Vocab);
    return c;
  }
  static constexpr mesh_choice mesh_shard(const mesh_query&) { return {.supported = false}; }
  // The cost model's GEMM: this device's vocabulary slice of the logits.
  static constexpr call_gemms gemms(const local_dims& d) {
    call_gemms g;
    g.add({1, static_cast<double>(d.rows), static_cast<double>(d.out_cols), double(D), true});
    return g;
  }
  static constexpr buffer_needs memory(const local_dims&) { return {.keep_input = true, .weight_pass = true}; }

  // logits[rows, slice] = x · table_sliceᵀ (+ bias_slice)
  template <class C>
  static void forward(C& c) {
    using T = typename C::value_type;
    using S = gemm_scalar_t<T>;
    const T* bias = nullptr;
    if constexpr (Bias) bias = c.w[1];
    gemm_bias_act(c.q, backend::trans::N, backend::trans::T, c.rows, c.out_cols, std::size_t(D), S(1), c.x,
                  std::size_t(D), c.w[0], std::size_t(D), S(0), c.y, c.out_cols, bias, backend::activation::none,
                  static_cast<T*>(nullptr));
  }
  template <class C>
  static void backward(C& c) {
    backward_weights(c);
    backward_data(c);
  }
  // dx = dy · table_slice (a partial sum over the vocabulary slices under Split<N>)
  template <class C>
  static void backward_data(C& c) {
    using S = gemm_scalar_t<typename C::value_type>;
    if (c.dx)
      gemm(c.q, backend::trans::N, backend::trans::N, c.rows, std::size_t(D), c.out_cols, S(1), c.dy, c.out_cols,
           c.w[0], std::size_t(D), S(0), c.dx, std::size_t(D));
  }
  // dtable_slice += dyᵀ · x
  template <class C>
  static void backward_weights(C& c) {
    using S = gemm_scalar_t<typename C::value_type>;
    gemm(c.q, backend::trans::T, backend::trans::N, c.out_cols, std::size_t(D), c.rows, S(1), c.dy, c.out_cols, c.x,
         std::size_t(D), S(1), c.g[0], std::size_t(D));
    if constexpr (Bias) bias_grad(c.q, c.rows, c.out_cols, c.dy, c.g[1], true);
  }
};

}  // namespace strata::layers
