#pragma once
// Which Hugging Face transformers model a plan's layers are: recognise<P>() walks the flat
// layer list (P::layers, the types) and returns the family and its sizes, or refuses,
// naming the first layer that breaks the pattern.
//
//   GPT2LMHeadModel   Embedding<V, D>, PositionEmbedding<S, D>, n × {Residual<LayerNorm<D>,
//                     CausalSelfAttention<D, H, S>>, Residual<LayerNorm<D>, Linear<D, F>,
//                     GeLU, Linear<F, D>>}, LayerNorm<D>, Linear<D, V, false>
//   LlamaForCausalLM  Embedding<V, D>, n × {Residual<RMSNorm<D, E>, CausalSelfAttention<D, H,
//                     S, Base>>, Residual<RMSNorm<D, E>, SwiGLU<D, F>>}, RMSNorm<D, E>,
//                     Linear<D, V, false>
//
// then the loss, whatever it is. Every block has the same sizes (a transformers config has
// one of each). The attention is read from its members and parameters, so that the
// layer's template may grow: heads, kv_heads (grouped-query attention; heads where absent),
// seq, causal, rope_base, and parameters w_qkv [D, (H + 2·KV)·dh], w_out [D, D] and the
// optional biases b_qkv, b_out (absent: zeros in transformers' tensors).
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "strata/core/agreed_error.hpp"
#include "strata/core/typelist.hpp"
#include "strata/layers.hpp"
#include "strata/plan/plan.hpp"

namespace strata::hf {

enum class family { gpt2, llama };
constexpr std::string_view architecture(family f) { return f == family::gpt2 ? "GPT2LMHeadModel" : "LlamaForCausalLM"; }

// The sizes of a recognised model and where each of its parts is in the plan's layers.
struct model_spec {
  family fam = family::gpt2;
  int vocab = 0, d = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0, hidden = 0;
  double eps = 0;     // the normalisations' (LayerNorm: 1e-5; RMSNorm: 10^-E)
  int rope_base = 0;  // Llama
  // parameter indices in the attention layer (-1: absent), the same in every block
  int w_qkv = -1, b_qkv = -1, w_out = -1, b_out = -1;
  bool mlp_bias = false;  // GPT-2's MLP Linears have biases
  int embed = -1, position = -1, final_norm = -1, head = -1;  // layer indices
  bool tied_head = false;  // the head is a TiedHead: lm_head is the embedding (tie_word_embeddings)
  struct block {
    int norm1 = -1, attn = -1, norm2 = -1, mlp_in = -1, mlp_out = -1;  // Llama: mlp_in is the SwiGLU
  };
  std::vector<block> blocks;
};

namespace detail {

enum class kind : unsigned char {
  other, embedding, position, residual_begin, residual_end, layernorm, rmsnorm, attention, linear, gelu, swiglu, loss
};
constexpr std::string_view kind_name(kind k) {
  constexpr std::array<std::string_view, 12> names{"another layer", "Embedding", "PositionEmbedding", "ResidualBegin",
                                                   "ResidualEnd", "LayerNorm", "RMSNorm", "CausalSelfAttention",
                                                   "Linear", "GeLU", "SwiGLU", "a loss"};
  return names[static_cast<std::size_t>(k)];
}

// What recognition needs of one layer type.
struct layer_info {
  kind what = kind::other;
  int features = 0, vocab = 0, seq = 0, heads = 0, kv_heads = 0, rope_base = 0;
  bool causal = false;
  int in = 0, out = 0;  // Linear; SwiGLU: D and Hidden
  bool bias = false;    // Linear
  bool tied = false;    // a TiedHead: a head without a bias reading the Embedding's table
  int w_qkv = -1, b_qkv = -1, w_out = -1, b_out = -1;
  shape_t qkv_shape{}, out_shape{};
  double eps = 0;
};

template <class L>
constexpr int param_index(std::string_view name) {
  for (std::size_t k = 0; k < L::params.size(); ++k)
    if (L::params[k].name == name) return static_cast<int>(k);
  return -1;
}

template <class L>
constexpr layer_info info_of() {
  layer_info i;
  if constexpr (std::is_same_v<L, layers::ResidualBegin>) i.what = kind::residual_begin;
  else if constexpr (std::is_same_v<L, layers::ResidualEnd>) i.what = kind::residual_end;
  else if constexpr (std::is_same_v<L, layers::GeLU>) i.what = kind::gelu;
  else if constexpr (L::role == layer_role::loss) i.what = kind::loss;
  else if constexpr (requires { L::vocab; L::features; }) {
    if constexpr (std::is_same_v<L, layers::Embedding<L::vocab, L::features>>) {
      i.what = kind::embedding;
      i.vocab = L::vocab;
      i.features = L::features;
    } else if constexpr (std::is_same_v<L, layers::TiedHead<L::vocab, L::features>>) {
      i.what = kind::linear;
      i.in = L::features;
      i.out = L::vocab;
      i.tied = true;
    }
  } else if constexpr (requires { L::in_features; L::out_features; L::has_bias; }) {
    if constexpr (std::is_same_v<L, layers::Linear<L::in_features, L::out_features, L::has_bias>>) {
      i.what = kind::linear;
      i.in = L::in_features;
      i.out = L::out_features;
      i.bias = L::has_bias;
    }
  } else if constexpr (L::role == layer_role::attention &&
                       requires { L::features; L::heads; L::seq; L::causal; L::rope_base; }) {
    i.what = kind::attention;
    i.features = L::features;
    i.heads = L::heads;
    if constexpr (requires { L::kv_heads; }) i.kv_heads = L::kv_heads;
    else i.kv_heads = L::heads;
    i.seq = L::seq;
    i.causal = L::causal;
    i.rope_base = L::rope_base;
    i.w_qkv = param_index<L>("w_qkv");
    i.b_qkv = param_index<L>("b_qkv");
    i.w_out = param_index<L>("w_out");
    i.b_out = param_index<L>("b_out");
    if (i.w_qkv >= 0) i.qkv_shape = L::params[static_cast<std::size_t>(i.w_qkv)].shape;
    if (i.w_out >= 0) i.out_shape = L::params[static_cast<std::size_t>(i.w_out)].shape;
  } else if constexpr (requires { L::seq; L::features; }) {
    if constexpr (std::is_same_v<L, layers::PositionEmbedding<L::seq, L::features>>) {
      i.what = kind::position;
      i.seq = L::seq;
      i.features = L::features;
    }
  } else if constexpr (requires { L::features; L::split_extent; }) {
    if constexpr (std::is_same_v<L, layers::SwiGLU<L::features, L::split_extent>>) {
      i.what = kind::swiglu;
      i.in = L::features;
      i.out = L::split_extent;
    }
  } else if constexpr (requires { L::features; L::eps; }) {
    if constexpr (std::is_same_v<L, layers::LayerNorm<L::features>>) {
      i.what = kind::layernorm;
      i.features = L::features;
      i.eps = L::eps;
    } else if constexpr (L::name == std::string_view("RMSNorm") && L::params.size() == 1) {
      i.what = kind::rmsnorm;
      i.features = L::features;
      i.eps = L::eps;
    }
  }
  return i;
}

template <class List>
struct layer_infos;
template <class... L>
struct layer_infos<type_list<L...>> {
  static constexpr std::array<layer_info, sizeof...(L)> value{info_of<L>()...};
};

// Walks the layers against a family's pattern; `bad` names the first that breaks it.
class matcher {
 public:
  matcher(const layer_info* infos, int n, const std::string_view* names, family f)
      : l_(infos), n_(n), names_(names), f_(f) {}
  int at() const { return i_; }
  bool done() const { return i_ >= n_ || l_[i_].what == kind::loss; }
  bool next_is(kind k) const { return !done() && l_[i_].what == k; }
  const layer_info& take(kind k, const char* why) {
    if (!next_is(k)) bad(std::string("expected ") + std::string(kind_name(k)) + " " + why);
    return l_[i_++];
  }
  // `at`: the layer that breaks it (default: the next one)
  [[noreturn]] void bad(const std::string& what, int at = -1) const {
    if (at < 0) at = i_;
    const std::string found = at < n_ ? "layer " + std::to_string(at) + " (" + std::string(names_[at]) + ")"
                                      : "the end of the model";
    throw agreed_error("strata::hf: the model is not a " + std::string(architecture(f_)) + ": " + found +
                       " breaks the pattern: " + what);
  }
  void same(bool ok, const std::string& what, int at) const {
    if (!ok) bad(what, at);
  }

 private:
  const layer_info* l_;
  int n_, i_ = 0;
  const std::string_view* names_;
  family f_;
};

inline void attention(matcher& m, model_spec& s, bool first) {
  const int at = m.at();
  const layer_info& a = m.take(kind::attention, "(causal self-attention)");
  const std::string sizes = "D " + std::to_string(a.features) + ", " + std::to_string(a.heads) + " heads, " +
                            std::to_string(a.kv_heads) + " kv heads, Seq " + std::to_string(a.seq) + ", rope base " +
                            std::to_string(a.rope_base);
  if (!a.causal) m.bad("the attention is not causal (a causal LM's is)", at);
  if (s.fam == family::gpt2 && a.rope_base != 0) m.bad("GPT-2's attention has no rotary positions (RopeBase 0)", at);
  if (s.fam == family::llama && a.rope_base <= 0) m.bad("Llama's attention has rotary positions (RopeBase > 0)", at);
  if (s.fam == family::gpt2 && a.kv_heads != a.heads)
    m.bad("GPT-2 has no grouped-query attention (KVHeads = Heads)", at);
  const int dh = a.heads > 0 ? a.features / a.heads : 0;
  if (a.w_qkv < 0 || a.w_out < 0 || a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0 ||
      !(a.qkv_shape == shape_t{2, {a.features, (a.heads + 2 * a.kv_heads) * dh, 0, 0}}) ||
      !(a.out_shape == shape_t{2, {a.heads * dh, a.features, 0, 0}}))
    m.bad("its parameters are not w_qkv [D, (H + 2·KV)·dh] and w_out [D, D]", at);
  if (first) {
    s.heads = a.heads;
    s.kv_heads = a.kv_heads;
    s.head_dim = dh;
    s.seq = a.seq;
    s.rope_base = a.rope_base;
    s.w_qkv = a.w_qkv, s.b_qkv = a.b_qkv, s.w_out = a.w_out, s.b_out = a.b_out;
  }
  m.same(a.features == s.d && a.heads == s.heads && a.kv_heads == s.kv_heads && a.seq == s.seq &&
             a.rope_base == s.rope_base && a.b_qkv == s.b_qkv && a.b_out == s.b_out,
         "its attention (" + sizes + ") differs from the first block's", at);
  s.blocks.back().attn = at;
}

inline int norm(matcher& m, model_spec& s, const char* where) {
  const int at = m.at();
  const layer_info& n = m.take(s.fam == family::gpt2 ? kind::layernorm : kind::rmsnorm, where);
  if (s.eps == 0) s.eps = n.eps;
  m.same(n.features == s.d,
         "its normalisation has " + std::to_string(n.features) + " features, not " + std::to_string(s.d), at);
  m.same(n.eps == s.eps, "its eps differs from the first normalisation's (a transformers config has one)", at);
  return at;
}

inline void mlp(matcher& m, model_spec& s, bool first) {
  auto& b = s.blocks.back();
  if (s.fam == family::llama) {
    b.mlp_in = m.at();
    const layer_info& g = m.take(kind::swiglu, "(Llama's MLP)");
    if (first) s.hidden = g.out;
    m.same(g.in == s.d && g.out == s.hidden, "its SwiGLU<" + std::to_string(g.in) + ", " + std::to_string(g.out) +
                                                 "> differs from SwiGLU<" + std::to_string(s.d) + ", " +
                                                 std::to_string(s.hidden) + ">", b.mlp_in);
    return;
  }
  b.mlp_in = m.at();
  const layer_info& up = m.take(kind::linear, "(the MLP's Linear<D, F>)");
  if (first) {
    s.hidden = up.out;
    s.mlp_bias = up.bias;
  }
  m.same(up.in == s.d && up.out == s.hidden && up.bias == s.mlp_bias, "its MLP differs from the first block's",
         b.mlp_in);
  m.take(kind::gelu, "(GPT-2's activation, the tanh approximation)");
  b.mlp_out = m.at();
  const layer_info& down = m.take(kind::linear, "(the MLP's Linear<F, D>)");
  m.same(down.in == s.hidden && down.out == s.d && down.bias == s.mlp_bias, "its MLP differs from the first block's",
         b.mlp_out);
}

}  // namespace detail

// The family and sizes of plan P's model; an agreed_error (the same on every rank) names
// the first layer that breaks the pattern.
template <class P>
model_spec recognise(family f) {
  using layer_list = typename P::layers;
  const auto& infos = detail::layer_infos<layer_list>::value;
  std::array<std::string_view, infos.size()> names{};
  for (std::size_t i = 0; i < names.size(); ++i) names[i] = P::layer_plans[i].desc.name;
  using detail::kind;
  detail::matcher m(infos.data(), static_cast<int>(infos.size()), names.data(), f);
  model_spec s;
  s.fam = f;
  s.embed = m.at();
  const detail::layer_info& e = m.take(kind::embedding, "(the token embedding first)");
  s.vocab = e.vocab;
  s.d = e.features;
  if (f == family::gpt2) {
    s.position = m.at();
    const detail::layer_info& p = m.take(kind::position, "(GPT-2's learned positions)");
    m.same(p.features == s.d, "its PositionEmbedding has " + std::to_string(p.features) + " features, not " +
                                  std::to_string(s.d), s.position);
    s.seq = p.seq;
  }
  while (m.next_is(kind::residual_begin)) {
    const bool first = s.blocks.empty();
    s.blocks.emplace_back();
    m.take(kind::residual_begin, "");
    s.blocks.back().norm1 = detail::norm(m, s, "(the block's first normalisation)");
    const int seq = s.seq;
    detail::attention(m, s, first);
    if (f == family::gpt2)
      m.same(seq == s.seq, "its attention's Seq differs from the PositionEmbedding's", s.blocks.back().attn);
    m.take(kind::residual_end, "(the end of the attention's residual)");
    m.take(kind::residual_begin, "(the MLP's residual)");
    s.blocks.back().norm2 = detail::norm(m, s, "(the MLP's normalisation)");
    detail::mlp(m, s, first);
    m.take(kind::residual_end, "(the end of the MLP's residual)");
  }
  if (s.blocks.empty()) m.bad("expected at least one transformer block (a Residual)");
  s.final_norm = detail::norm(m, s, "(the final normalisation)");
  s.head = m.at();
  const detail::layer_info& h = m.take(kind::linear, "(the head Linear<D, V, false> or TiedHead<V, D>)");
  m.same(h.in == s.d && h.out == s.vocab, "the head is Linear<" + std::to_string(h.in) + ", " + std::to_string(h.out) +
                                              ">, not Linear<" + std::to_string(s.d) + ", " +
                                              std::to_string(s.vocab) + ", false>", s.head);
  if (h.bias)
    throw agreed_error("strata::hf: the head Linear<" + std::to_string(s.d) + ", " + std::to_string(s.vocab) +
                       "> (layer " + std::to_string(s.head) + ") has a bias, which " + std::string(architecture(f)) +
                       "'s lm_head does not: use Linear<D, V, false>");
  s.tied_head = h.tied;
  if (!m.done()) m.bad("expected the loss after the head");
  return s;
}

// The family plan P's layers make: GPT-2's if they start Embedding, PositionEmbedding,
// Llama's otherwise (the refusal then names the layer that breaks Llama's pattern).
template <class P>
model_spec recognise() {
  const auto& infos = detail::layer_infos<typename P::layers>::value;
  const bool gpt2 = infos.size() > 1 && infos[1].what == detail::kind::position;
  return recognise<P>(gpt2 ? family::gpt2 : family::llama);
}

}  // namespace strata::hf
