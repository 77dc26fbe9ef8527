#pragma once
// What a layer's role gives it when the layer does not say otherwise: one function per
// optional member of layer_desc (layers/layer.hpp) — its sharding under Split<N> (1D) and on
// a 2D/2.5D/3D mesh, its parameters' initialisation, the GEMMs the cost model charges, and
// whether it reads the model's token ids. The planners and executors read only the
// description; a layer whose rule is its own (its parameter layout, its projections)
// declares the member in its header, so adding a layer edits nothing else.
#include <array>
#include <cmath>
#include <cstdint>

#include "strata/core/random.hpp"
#include "strata/core/sbp.hpp"
#include "strata/core/shape.hpp"

namespace strata {

// One initial value: logical element `element` of parameter `tensor` of layer `layer` under
// the run's seed. A rule reads these alone, never a shard, so every plan starts from the
// same model.
struct init_site {
  int layer = 0, tensor = 0;
  std::uint64_t element = 0, seed = 0;
};

// A GEMM the cost model times: `items` products C[m, n] = A[m, k]·B[k, n]. weight: B is a
// parameter, so dB is the part of backward a zero-bubble W runs (else both are activations).
struct gemm_shape {
  double items = 1, m = 0, n = 0, k = 0;
  bool weight = true;
};
// The attention core: `items` score matrices [seq, seq] over heads of head_dim features;
// the cost model times it fused (flash) or materialised, as the hardware says.
struct score_shape {
  double items = 0, seq = 0, head_dim = 0;
};
// What the cost model charges one layer call of local_dims (this device's share): its GEMMs,
// which run one after another, and the attention core. None: the roofline of its FLOPs and
// bytes, of whose backward weight_share is the zero-bubble W pass.
struct call_gemms {
  std::array<gemm_shape, 4> gemm{};
  int num_gemms = 0;
  score_shape scores{};
  double weight_share = 0.5;

  constexpr void add(gemm_shape g) {
    if (num_gemms < static_cast<int>(gemm.size())) gemm[static_cast<std::size_t>(num_gemms++)] = g;
  }
  constexpr bool timed() const { return num_gemms > 0 || scores.items > 0; }
};

// ---- sharding under Split<N> (1D tensor parallelism) ---------------------------------------
namespace sharding {

constexpr void split_share(shard_choice& c, int n) {
  if (c.need == sbp::split_feature) c.feat_div = n;
  if (c.need == sbp::split_batch) c.rows_div = n;
  c.flops_div = c.rows_div * c.feat_div;
}

// Where a row-wise layer receives a partial sum: reduced whole, or under SequenceParallel
// reduced and scattered by rows.
constexpr sbp reduced(const shard_query& q) { return q.sequence_parallel ? sbp::split_batch : sbp::broadcast; }

// Pointwise: any split or broadcast layout passes through; a partial sum is reduced first.
constexpr shard_choice pointwise(const shard_query& q) {
  shard_choice c;
  c.sig = signature::pointwise;
  c.need = c.out = q.arrives == sbp::partial ? reduced(q) : q.arrives;
  split_share(c, q.n);
  return c;
}

// Reshape: keeps a row split, and a feature split of a vector input; else whole tensors.
constexpr shard_choice reshape(const shard_query& q) {
  shard_choice c;
  c.sig = signature::pointwise;
  c.need = c.out = q.arrives == sbp::split_batch                      ? sbp::split_batch
                   : (q.arrives == sbp::split_feature && q.in.rank <= 1) ? sbp::split_feature
                                                                        : sbp::broadcast;
  split_share(c, q.n);
  return c;
}

// Whole features (normalisation, user layers that know nothing of sharding): keeps a row
// split, gathers anything else; parameters stay whole.
constexpr shard_choice whole_features(const shard_query& q) {
  shard_choice c;
  c.sig = signature::replicated;
  c.need = c.out = q.arrives == sbp::split_batch ? sbp::split_batch : q.arrives == sbp::partial ? reduced(q) : sbp::broadcast;
  split_share(c, q.n);
  if (c.need != sbp::split_batch) c.flops_div = 1;  // every device computes the whole layer
  return c;
}

constexpr shard_choice by_role(layer_role r, const shard_query& q) {
  switch (r) {
    case layer_role::elementwise: return pointwise(q);
    case layer_role::reshape: return reshape(q);
    default: return whole_features(q);
  }
}

// ---- sharding on a 2D/2.5D/3D mesh ---------------------------------------------------------

// One Linear of in → out features: SUMMA (2D, 2.5D) or the 3D cube, every parameter on it.
constexpr mesh_choice mesh_linear(const mesh_query& q, long long in, long long out) {
  mesh_choice c;
  c.sig = q.linear;
  if (in % q.q != 0) c.violate(rule_id::split_features, static_cast<int>(in));
  else if (out % q.q != 0) c.violate(rule_id::split_features, static_cast<int>(out));
  c.project(in, out);
  c.param_projection = {0, 0, 0, 0, 0, 0};
  return c;
}

// Linear: its own features; layout-preserving roles: pointwise on the blocks; normalisation:
// a row's features are spread over a mesh row, whose moments it all-reduces; the loss:
// vocabulary-parallel over the blocks' features. Anything else cannot run on a mesh.
constexpr mesh_choice mesh_by_role(layer_role r, const mesh_query& q) {
  mesh_choice c;
  switch (r) {
    case layer_role::linear: return mesh_linear(q, q.in.last(), q.out.last());
    case layer_role::elementwise:
    case layer_role::residual_begin:
    case layer_role::residual_end: c.sig = signature::pointwise; return c;
    case layer_role::layernorm:
      c.sig = signature::pointwise;
      c.row_moments = true;
      if (q.in.last() % q.q != 0) c.violate(rule_id::tensor_features, q.in.last());
      return c;
    case layer_role::loss: c.sig = signature::vocab_loss; return c;
    default: c.supported = false; return c;
  }
}

}  // namespace sharding

// ---- initialisation ------------------------------------------------------------------------
namespace init_rules {

// U(−1, 1)
inline double unit(const init_site& s) { return unit_uniform(s.seed, s.layer, s.tensor, s.element); }
// U(−1/√fan_in, 1/√fan_in): PyTorch's Linear default
inline double fan_in_uniform(const init_site& s, int fan_in) {
  return unit(s) / std::sqrt(static_cast<double>(fan_in > 0 ? fan_in : 1));
}

// Normalisation: scale 1, shift 0; tables (embeddings): U(−1, 1); anything else
// U(±1/√fan_in), the fan-in the layer's input features (or the tensor's first axis).
inline double by_role(layer_role r, const shape_t& in, const param_t& p, const init_site& s) {
  switch (r) {
    case layer_role::layernorm: return s.tensor == 0 ? 1.0 : 0.0;
    case layer_role::embedding: return unit(s);
    default: return fan_in_uniform(s, in.rank > 0 ? in.last() : p.shape.dim[0]);
  }
}

}  // namespace init_rules

// ---- cost ----------------------------------------------------------------------------------
namespace gemm_rules {

// A Linear is one GEMM of the local rows by its local columns. A table lookup's backward is
// all weight gradient. Anything else: the roofline, half its backward in W.
constexpr call_gemms by_role(layer_role r, const local_dims& d) {
  call_gemms g;
  if (r == layer_role::linear)
    g.add({1, static_cast<double>(d.rows), static_cast<double>(d.out_cols), static_cast<double>(d.in_cols), true});
  if (r == layer_role::embedding) g.weight_share = 1;
  return g;
}

}  // namespace gemm_rules

// ---- what the lowering reads ----------------------------------------------------------------
// First in the model, the layer reads the batch's token ids (the executor hands it c.ids).
constexpr bool reads_ids_by_role(layer_role r) { return r == layer_role::embedding; }

}  // namespace strata
