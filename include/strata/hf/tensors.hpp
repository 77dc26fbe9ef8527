#pragma once
// The tensors of a transformers model and where each element comes from in strata's
// parameters: one map per transformers tensor, read both ways (export: transformers
// element e takes strata element source(e); import: the reverse).
//
// Layouts (strata's attention: w_qkv [D, (H + 2·KV)·dh]; for kv group g, G = H / KV, its
// columns [g·(G+2)·dh, (g+1)·(G+2)·dh) hold query heads g·G .. g·G+G−1, then k_g, then v_g;
// b_qkv alike; w_out [D, D] rows follow the query heads):
//   copy         the same row-major values (LayerNorm, GPT-2's Conv1D weights [in, out])
//   transpose    nn.Linear's [out, in] of strata's [in, out] (Llama's projections, lm_head)
//   gpt2_qkv     c_attn [D, 3D] (or its bias [3D]): columns [all q | all k | all v]
//   q, k, v      Llama's q_proj [H·dh, D], k_proj / v_proj [KV·dh, D] (or their biases)
//   rows         the first rows of a longer table (GPT-2's wpe of n_positions ≥ Seq rows)
//   zeros        a tensor strata does not have (a bias of a layer without one): zeros
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/hf/family.hpp"

namespace strata::hf {

using parameters = std::vector<std::vector<std::vector<double>>>;  // [layer][tensor], whole

enum class layout { copy, transpose, gpt2_qkv, q, k, v, rows, zeros };

struct tensor_map {
  std::string name;                  // transformers' name
  std::vector<std::uint64_t> shape;  // transformers' shape
  int layer = -1, k = -1;            // strata's tensor (-1: none)
  layout how = layout::copy;
  std::string tied;                  // another transformers tensor that stands for this one
                                     // when absent (a tied lm_head: the embedding)
};

// The strata column of element j of query head h (part 0), or of kv head h's k (1) or v (2).
inline std::uint64_t qkv_column(const model_spec& s, int part, std::uint64_t h, std::uint64_t j) {
  const std::uint64_t G = std::uint64_t(s.heads / s.kv_heads), dh = std::uint64_t(s.head_dim);
  if (part == 0) return (h / G) * (G + 2) * dh + (h % G) * dh + j;
  return h * (G + 2) * dh + (G + std::uint64_t(part) - 1) * dh + j;
}

// The strata element (of tensor m.layer, m.k) that transformers element e of m holds; for
// `rows`, elements past strata's table give `none`.
inline constexpr std::uint64_t none = ~std::uint64_t(0);
inline std::uint64_t source(const model_spec& s, const tensor_map& m, std::uint64_t e) {
  const std::uint64_t dh = std::uint64_t(s.head_dim), D = std::uint64_t(s.d);
  const std::uint64_t C = std::uint64_t(s.heads + 2 * s.kv_heads) * dh;  // w_qkv's columns
  const bool matrix = m.shape.size() == 2;
  const std::uint64_t cols = matrix ? m.shape[1] : m.shape[0];
  const std::uint64_t r = matrix ? e / cols : 0, c = matrix ? e % cols : e;
  switch (m.how) {
    case layout::copy: return e;
    case layout::transpose: return c * m.shape[0] + r;
    case layout::rows: return r < std::uint64_t(s.seq) ? e : none;
    case layout::gpt2_qkv: {  // [D, 3D] or [3D]: column c = part·D + h·dh + j
      const std::uint64_t col = qkv_column(s, int(c / D), (c % D) / dh, c % dh);
      return matrix ? r * C + col : col;
    }
    case layout::q:
    case layout::k:
    case layout::v: {  // [heads·dh, D] (out, in) or [heads·dh]: row = h·dh + j
      const std::uint64_t row = matrix ? r : c;
      const std::uint64_t col = qkv_column(s, int(m.how) - int(layout::q), row / dh, row % dh);
      return matrix ? c * C + col : col;
    }
    case layout::zeros: return none;
  }
  return none;
}

// Every transformers tensor of the model, in the order transformers lists them. Llama's
// attention biases are there when `attention_bias` says (default: when strata's attention
// has biases); a strata bias no tensor maps stays zero.
inline std::vector<tensor_map> tensor_maps(const model_spec& s, std::optional<bool> attention_bias = std::nullopt) {
  using u = std::uint64_t;
  const u V = u(s.vocab), D = u(s.d), F = u(s.hidden), S = u(s.seq), dh = u(s.head_dim);
  const u H = u(s.heads) * dh, KV = u(s.kv_heads) * dh;
  std::vector<tensor_map> m;
  auto add = [&](std::string name, std::vector<u> shape, int layer, int k, layout how, std::string tied = "") {
    if (layer < 0 || k < 0) layer = k = -1, how = layout::zeros;
    m.push_back({std::move(name), std::move(shape), layer, k, how, std::move(tied)});
  };
  if (s.fam == family::gpt2) {
    add("transformer.wte.weight", {V, D}, s.embed, 0, layout::copy);
    add("transformer.wpe.weight", {S, D}, s.position, 0, layout::rows);
    for (std::size_t i = 0; i < s.blocks.size(); ++i) {
      const auto& b = s.blocks[i];
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      add(p + "ln_1.weight", {D}, b.norm1, 0, layout::copy);
      add(p + "ln_1.bias", {D}, b.norm1, 1, layout::copy);
      add(p + "attn.c_attn.weight", {D, 3 * D}, b.attn, s.w_qkv, layout::gpt2_qkv);
      add(p + "attn.c_attn.bias", {3 * D}, b.attn, s.b_qkv, layout::gpt2_qkv);
      add(p + "attn.c_proj.weight", {D, D}, b.attn, s.w_out, layout::copy);
      add(p + "attn.c_proj.bias", {D}, b.attn, s.b_out, layout::copy);
      add(p + "ln_2.weight", {D}, b.norm2, 0, layout::copy);
      add(p + "ln_2.bias", {D}, b.norm2, 1, layout::copy);
      add(p + "mlp.c_fc.weight", {D, F}, b.mlp_in, 0, layout::copy);
      add(p + "mlp.c_fc.bias", {F}, b.mlp_in, s.mlp_bias ? 1 : -1, layout::copy);
      add(p + "mlp.c_proj.weight", {F, D}, b.mlp_out, 0, layout::copy);
      add(p + "mlp.c_proj.bias", {D}, b.mlp_out, s.mlp_bias ? 1 : -1, layout::copy);
    }
    add("transformer.ln_f.weight", {D}, s.final_norm, 0, layout::copy);
    add("transformer.ln_f.bias", {D}, s.final_norm, 1, layout::copy);
    // a TiedHead is the embedding: transformers ties lm_head to it and stores it once
  if (!s.tied_head) add("lm_head.weight", {V, D}, s.head, 0, layout::transpose, "transformer.wte.weight");
    return m;
  }
  add("model.embed_tokens.weight", {V, D}, s.embed, 0, layout::copy);
  const bool bias = attention_bias.value_or(s.b_qkv >= 0 || s.b_out >= 0);  // all four or none
  for (std::size_t i = 0; i < s.blocks.size(); ++i) {
    const auto& b = s.blocks[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {D}, b.norm1, 0, layout::copy);
    add(p + "self_attn.q_proj.weight", {H, D}, b.attn, s.w_qkv, layout::q);
    add(p + "self_attn.k_proj.weight", {KV, D}, b.attn, s.w_qkv, layout::k);
    add(p + "self_attn.v_proj.weight", {KV, D}, b.attn, s.w_qkv, layout::v);
    if (bias) {
      add(p + "self_attn.q_proj.bias", {H}, b.attn, s.b_qkv, layout::q);
      add(p + "self_attn.k_proj.bias", {KV}, b.attn, s.b_qkv, layout::k);
      add(p + "self_attn.v_proj.bias", {KV}, b.attn, s.b_qkv, layout::v);
    }
    add(p + "self_attn.o_proj.weight", {D, H}, b.attn, s.w_out, layout::transpose);
    if (bias) add(p + "self_attn.o_proj.bias", {D}, b.attn, s.b_out, layout::copy);
    add(p + "post_attention_layernorm.weight", {D}, b.norm2, 0, layout::copy);
    add(p + "mlp.gate_proj.weight", {F, D}, b.mlp_in, 0, layout::transpose);
    add(p + "mlp.up_proj.weight", {F, D}, b.mlp_in, 1, layout::transpose);
    add(p + "mlp.down_proj.weight", {D, F}, b.mlp_in, 2, layout::transpose);
  }
  add("model.norm.weight", {D}, s.final_norm, 0, layout::copy);
  // a TiedHead is the embedding: transformers ties lm_head to it and stores it once
  if (!s.tied_head) add("lm_head.weight", {V, D}, s.head, 0, layout::transpose, "model.embed_tokens.weight");
  return m;
}

}  // namespace strata::hf
