#pragma once
// strata-header: host-only
// config.json of a transformers model: written from a recognised plan (config_text), and
// read against one (check_config): every size, the heads, the normalisation's eps, the
// rotary base, the activation, the biases. A difference is a checkpoint_error naming
// config.json, the key, its value and the plan's.
//
// Both the key of transformers 4 ("torch_dtype", "rope_theta") and of transformers 5
// ("dtype", "rope_parameters") are written, and either is read.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "strata/hf/family.hpp"
#include "strata/io/file.hpp"
#include "strata/io/json.hpp"
#include "strata/io/safetensors_format.hpp"

namespace strata::hf {

inline std::string torch_dtype(io::dtype t) {
  switch (t) {
    case io::dtype::F64: return "float64";
    case io::dtype::F32: return "float32";
    case io::dtype::BF16: return "bfloat16";
    case io::dtype::F16: return "float16";
    default: return std::string(io::name_of(t));
  }
}

// The config of the model `s` describes, tensors stored as `t`.
inline std::string config_text(const model_spec& s, io::dtype t) {
  nlohmann::ordered_json c;
  c["architectures"] = {std::string(architecture(s.fam))};
  c["model_type"] = s.fam == family::gpt2 ? "gpt2" : "llama";
  c["vocab_size"] = s.vocab;
  if (s.fam == family::gpt2) {
    c["n_embd"] = s.d;
    c["n_layer"] = s.blocks.size();
    c["n_head"] = s.heads;
    c["n_inner"] = s.hidden;
    c["n_positions"] = s.seq;
    c["activation_function"] = "gelu_new";  // the tanh approximation, as strata's GeLU
    c["layer_norm_epsilon"] = s.eps;
    c["scale_attn_weights"] = true;
    c["scale_attn_by_inverse_layer_idx"] = false;
    c["reorder_and_upcast_attn"] = false;
    for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) c[p] = 0.0;  // strata has no dropout
  } else {
    c["hidden_size"] = s.d;
    c["intermediate_size"] = s.hidden;
    c["num_hidden_layers"] = s.blocks.size();
    c["num_attention_heads"] = s.heads;
    c["num_key_value_heads"] = s.kv_heads;
    c["head_dim"] = s.head_dim;
    c["hidden_act"] = "silu";
    c["max_position_embeddings"] = s.seq;
    c["rms_norm_eps"] = s.eps;
    c["rope_theta"] = double(s.rope_base);
    c["rope_parameters"] = {{"rope_theta", double(s.rope_base)}, {"rope_type", "default"}};
    c["attention_bias"] = s.b_qkv >= 0 || s.b_out >= 0;
    c["attention_dropout"] = 0.0;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
  }
  c["tie_word_embeddings"] = s.tied_head;  // a TiedHead reads the embedding; a Linear head is its own
  c["bos_token_id"] = nullptr;        // the tokenizer's: not strata's to say
  c["eos_token_id"] = nullptr;
  c["use_cache"] = true;
  c["torch_dtype"] = torch_dtype(t);
  c["dtype"] = torch_dtype(t);
  return io::json::dump(c, 2) + "\n";
}

// What a read config says beyond the sizes: whether lm_head is the embedding, and how
// many positions GPT-2's wpe holds.
struct config_facts {
  bool tied = false;
  int positions = 0;
  bool attention_bias = false;  // Llama: q, k, v and o projections with biases
};

// Checks the config `c` (read from `path`) against the model `s`; throws checkpoint_error.
inline config_facts check_config(const model_spec& s, const io::json::value& c, const std::string& path) {
  auto fail = [&](const std::string& what) { throw io::checkpoint_error(path, what); };
  if (!c.is_object()) fail("not a JSON object");
  const bool gpt2 = s.fam == family::gpt2;
  auto find = [&](const char* key) -> const io::json::value* {
    const auto it = c.find(key);
    return it == c.end() || it->is_null() ? nullptr : &*it;
  };
  // an integer entry (absent: `fallback`, or an error without one)
  auto whole = [&](const char* key, std::optional<long long> fallback = std::nullopt) {
    const io::json::value* v = find(key);
    if (!v && fallback) return *fallback;
    if (!v || !v->is_number_integer())
      fail(std::string("\"") + key + "\" is " + (v ? io::json::described(*v) : "absent") + ", not an integer");
    return v->get<long long>();
  };
  auto number = [&](const io::json::value* v, const std::string& key) {
    if (!v || !v->is_number())
      fail("\"" + key + "\" is " + (v ? io::json::described(*v) : "absent") + ", not a number");
    return v->get<double>();
  };
  auto text = [&](const char* key, const char* fallback) {
    const io::json::value* v = find(key);
    if (!v) return std::string(fallback);
    if (!v->is_string()) fail(std::string("\"") + key + "\" is " + io::json::described(*v) + ", not a string");
    return v->get<std::string>();
  };
  auto flag = [&](const char* key, bool fallback) {
    const io::json::value* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(std::string("\"") + key + "\" is " + io::json::described(*v) + ", not true or false");
    return v->get<bool>();
  };
  auto same = [&](const char* key, long long theirs, long long mine, const char* what) {
    if (theirs != mine)
      fail(std::string("\"") + key + "\" is " + std::to_string(theirs) + ", the plan's " + what + " is " +
           std::to_string(mine));
  };
  const std::string type = text("model_type", "");
  if (type != (gpt2 ? "gpt2" : "llama"))
    fail("model_type \"" + type + "\": the plan is a " + std::string(architecture(s.fam)) + " (model_type \"" +
         (gpt2 ? "gpt2" : "llama") + "\")");
  config_facts f;
  const long long L = static_cast<long long>(s.blocks.size());
  if (gpt2) {
    same("vocab_size", whole("vocab_size"), s.vocab, "Embedding's vocabulary");
    same("n_embd", whole("n_embd"), s.d, "model width D");
    same("n_layer", whole("n_layer"), L, "block count");
    same("n_head", whole("n_head"), s.heads, "attention's heads");
    same("n_inner", whole("n_inner", 4LL * s.d), s.hidden, "MLP width");
    f.positions = static_cast<int>(whole("n_positions"));
    if (f.positions < s.seq)
      fail("\"n_positions\" is " + std::to_string(f.positions) + ": fewer than the plan's " + std::to_string(s.seq) +
           " positions (Seq)");
    const std::string act = text("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      fail("\"activation_function\" is \"" + act + "\": strata's GeLU is the tanh approximation (gelu_new)");
    const double eps = number(find("layer_norm_epsilon"), "layer_norm_epsilon");
    if (std::abs(eps - s.eps) > 1e-12 * s.eps)
      fail("\"layer_norm_epsilon\" is " + io::json::value(eps).dump() + ", strata's LayerNorm's eps is 1e-05");
    if (!flag("scale_attn_weights", true) || flag("scale_attn_by_inverse_layer_idx", false))
      fail("the attention scores are scaled otherwise than by 1/sqrt(head dim), as strata's attention does");
  } else {
    same("vocab_size", whole("vocab_size"), s.vocab, "Embedding's vocabulary");
    same("hidden_size", whole("hidden_size"), s.d, "model width D");
    same("num_hidden_layers", whole("num_hidden_layers"), L, "block count");
    same("num_attention_heads", whole("num_attention_heads"), s.heads, "attention's heads");
    same("num_key_value_heads", whole("num_key_value_heads", s.heads), s.kv_heads, "attention's kv heads");
    same("head_dim", whole("head_dim", s.head_dim), s.head_dim, "head dimension D / heads");
    same("intermediate_size", whole("intermediate_size"), s.hidden, "SwiGLU's hidden width");
    if (whole("max_position_embeddings") < s.seq)
      fail("\"max_position_embeddings\" is " + std::to_string(whole("max_position_embeddings")) +
           ": fewer than the plan's " + std::to_string(s.seq) + " positions (Seq)");
    if (text("hidden_act", "silu") != "silu")
      fail("\"hidden_act\" is \"" + text("hidden_act", "silu") + "\": strata's SwiGLU gates with silu");
    const double eps = number(find("rms_norm_eps"), "rms_norm_eps");
    if (std::abs(eps - s.eps) > 1e-12 * s.eps)
      fail("\"rms_norm_eps\" is " + io::json::value(eps).dump() + ", the plan's RMSNorm eps is " +
           io::json::value(s.eps).dump());
    // the rotary base: transformers 5's rope_parameters, or 4's rope_theta (rope_scaling: none)
    const io::json::value* rope = find("rope_parameters");
    const io::json::value* scaling = find("rope_scaling");
    const std::string key = rope ? "rope_parameters.rope_theta" : "rope_theta";
    if (rope && !rope->is_object()) fail("\"rope_parameters\" is " + io::json::described(*rope) + ", not an object");
    const io::json::value* theta =
        rope ? (rope->contains("rope_theta") ? &(*rope)["rope_theta"] : nullptr) : find("rope_theta");
    const double base = theta ? number(theta, key) : 10000.0;  // transformers' default
    if (base != double(s.rope_base))
      fail("\"" + key + "\" is " + io::json::value(base).dump() + ", the plan's rope base is " +
           std::to_string(s.rope_base));
    const io::json::value* kind = rope && rope->contains("rope_type") ? &(*rope)["rope_type"] : nullptr;
    if ((kind && *kind != "default") ||
        (scaling && !(scaling->is_object() && scaling->value("rope_type", "") == "default")))
      fail("the rotary positions are scaled (" + (kind ? kind->dump() : scaling->dump()) +
           "): strata's are the plain RoPE (rope_type \"default\")");
    f.attention_bias = flag("attention_bias", false);
    if (flag("mlp_bias", false)) fail("\"mlp_bias\" is true: strata's SwiGLU has no biases");
    if (whole("pretraining_tp", 1) != 1) fail("\"pretraining_tp\" is not 1");
  }
  f.tied = flag("tie_word_embeddings", !gpt2 ? false : true);  // transformers' defaults
  return f;
}

}  // namespace strata::hf
