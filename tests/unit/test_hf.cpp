// requires: zlib
// Hugging Face transformers folders (hf/*.hpp) in one process, without transformers itself
// (python.hf_roundtrip compares against it): which plans are GPT-2 or Llama and the message
// for each that is not; the layouts of grouped-query attention against a direct enumeration;
// export then import gives back every parameter bit for bit (F64; F32 rounded once; sharded
// files with an index; GPT-2's tied lm_head and a longer wpe); and a clear checkpoint_error
// for every bad folder: another config, a missing, extra, misshapen, non-finite or nonzero
// tensor, a truncated file, no model file.
#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include <strata/hf.hpp>
#include <strata/strata.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <map>
#include <string>
#include <vector>

using namespace strata;
namespace fs = std::filesystem;

namespace {

constexpr int V = 32, S = 8, D = 16, H = 4, F = 24;
template <class... L>
using plan = Plan<Replicate<1, L...>, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>>;
template <class Act = GeLU, class Head = Linear<D, V, false>, bool MlpBias = true, int Heads = H>
using gpt = plan<Embedding<V, D>, PositionEmbedding<S, D>,
                 Repeat<2, Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, S>>,
                        Residual<LayerNorm<D>, Linear<D, 4 * D, MlpBias>, Act, Linear<4 * D, D, MlpBias>>>,
                 LayerNorm<D>, Head>;
template <class Norm = RMSNorm<D>, class Attn = CausalSelfAttention<D, H, S, 10000>>
using llama = plan<Embedding<V, D>, Repeat<2, Residual<Norm, Attn>, Residual<Norm, SwiGLU<D, F>>>, Norm,
                   Linear<D, V, false>>;

template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
// text holds part; the text is shown where it does not
#define CHECK_HAS(text, part)                                            \
  do {                                                                   \
    const std::string t_ = (text);                                       \
    CHECK_MESSAGE(t_.find(part) != std::string::npos, "got: ", t_);     \
  } while (0)

template <class P>
hf::parameters random_parameters(unsigned seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd;
  hf::parameters p(P::num_layers);
  for (int i = 0; i < P::num_layers; ++i)
    for (int k = 0; k < P::layer_plans[std::size_t(i)].desc.num_params; ++k) {
      std::vector<double> t(std::size_t(P::layer_plans[std::size_t(i)].desc.params[std::size_t(k)].shape.numel()));
      for (double& v : t) v = nd(g);
      p[std::size_t(i)].push_back(std::move(t));
    }
  return p;
}

// Rewrites a safetensors file of the folder through `change` (names -> values, shapes).
struct tensors {
  std::map<std::string, std::vector<double>> values;
  std::map<std::string, std::vector<std::uint64_t>> shapes;
};
void rewrite(const std::string& path, auto&& change) {
  tensors t;
  {
    const io::reader r(path);
    for (const auto& n : r.names()) {
      t.values[n] = r.read<double>(n);
      t.shapes[n] = r.info(n).shape;
    }
  }
  change(t);
  io::writer w;
  w.set_metadata("format", "pt");
  for (const auto& [n, v] : t.values) w.add(n, t.shapes[n], v);
  w.write(path);
}
void edit_config(const std::string& dir, auto&& change) {
  std::ifstream in(dir + "/config.json");
  io::json::value c = io::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  change(c);
  std::ofstream(dir + "/config.json", std::ios::trunc) << c.dump(2);
}

}  // namespace

TEST_CASE("recognise: GPT-2 and Llama plans, and the layer that breaks the pattern") {
  const hf::model_spec g = hf::recognise<gpt<>>();
  CHECK(g.fam == hf::family::gpt2);
  CHECK((g.vocab == V && g.d == D && g.seq == S && g.heads == H && g.kv_heads == H && g.head_dim == D / H));
  CHECK((g.hidden == 4 * D && g.blocks.size() == 2 && g.mlp_bias && g.eps == 1e-5 && g.head == 23));
  const hf::model_spec l = hf::recognise<llama<>>();
  CHECK(l.fam == hf::family::llama);
  CHECK((l.rope_base == 10000 && l.hidden == F && l.eps == 1e-5 && l.blocks.size() == 2 && l.position == -1));
  CHECK((l.w_qkv == 0 && l.b_qkv == 1 && l.w_out == 2 && l.b_out == 3));

  CHECK(refusal([] { hf::recognise<gpt<ReLU>>(); }) ==
        "strata::hf: the model is not a GPT2LMHeadModel: layer 9 (ReLU) breaks the pattern: expected GeLU "
        "(GPT-2's activation, the tanh approximation)");
  CHECK(refusal([] { hf::recognise<gpt<GeLU, Linear<D, V>>>(); }) ==
        "strata::hf: the head Linear<16, 32> (layer 23) has a bias, which GPT2LMHeadModel's lm_head does not: use "
        "Linear<D, V, false>");
  CHECK(refusal([] { hf::recognise<llama<LayerNorm<D>>>(); }) ==
        "strata::hf: the model is not a LlamaForCausalLM: layer 2 (LayerNorm) breaks the pattern: expected RMSNorm "
        "(the block's first normalisation)");
  CHECK_HAS(refusal([] { hf::recognise<llama<RMSNorm<D>, MultiHeadAttention<D, H, S, false, 10000>>>(); }),
            ("layer 3 (MultiHeadAttention) breaks the pattern: the attention is not causal"));
  CHECK_HAS(refusal([] { hf::recognise<llama<RMSNorm<D>, CausalSelfAttention<D, H, S>>>(); }),
            ("layer 3 (CausalSelfAttention) breaks the pattern: Llama's attention has rotary positions"));
  using mixed_eps = plan<Embedding<V, D>, Residual<RMSNorm<D>, CausalSelfAttention<D, H, S, 10000>>,
                         Residual<RMSNorm<D, 6>, SwiGLU<D, F>>, RMSNorm<D>, Linear<D, V, false>>;
  CHECK_HAS(refusal([] { hf::recognise<mixed_eps>(); }),
            ("layer 6 (RMSNorm) breaks the pattern: its eps differs from the first normalisation's"));
  using no_blocks = plan<Embedding<V, D>, RMSNorm<D>, Linear<D, V, false>>;
  CHECK_HAS(refusal([] { hf::recognise<no_blocks>(); }), ("expected at least one transformer block"));
  using extra = plan<Embedding<V, D>, Residual<RMSNorm<D>, CausalSelfAttention<D, H, S, 10000>>,
                     Residual<RMSNorm<D>, SwiGLU<D, F>>, RMSNorm<D>, Linear<D, V, false>, Linear<V, V, false>>;
  CHECK_HAS(refusal([] { hf::recognise<extra>(); }), ("layer 11 (Linear) breaks the pattern: expected the loss"));
}

TEST_CASE("grouped-query attention: q, k, v columns of w_qkv against a direct enumeration") {
  hf::model_spec s;
  s.fam = hf::family::llama;
  s.d = 16, s.heads = 4, s.kv_heads = 2, s.head_dim = 4;  // G = 2: [q0 q1 k0 v0 | q2 q3 k1 v1]
  std::vector<std::string> column(std::size_t((s.heads + 2 * s.kv_heads) * s.head_dim));
  const char* order[2][4] = {{"q0", "q1", "k0", "v0"}, {"q2", "q3", "k1", "v1"}};
  for (int g = 0; g < 2; ++g)
    for (int b = 0; b < 4; ++b)
      for (int j = 0; j < 4; ++j)
        column[std::size_t((g * 4 + b) * 4 + j)] = order[g][b] + std::string(".") + std::to_string(j);
  const char* part = "qkv";
  for (int p = 0; p < 3; ++p)
    for (int h = 0; h < (p == 0 ? 4 : 2); ++h)
      for (int j = 0; j < 4; ++j)
        CHECK(column[hf::qkv_column(s, p, std::uint64_t(h), std::uint64_t(j))] ==
              part[p] + std::to_string(h) + "." + std::to_string(j));
  // k_proj [KV·dh, D] (out, in): row r = h·dh + j, column i is w_qkv[i, k column of (h, j)]
  const hf::tensor_map k{"k", {8, 16}, 0, 0, hf::layout::k, ""};
  const std::uint64_t C = 32;
  for (std::uint64_t r = 0; r < 8; ++r)
    for (std::uint64_t i = 0; i < 16; ++i)
      CHECK(hf::source(s, k, r * 16 + i) == i * C + hf::qkv_column(s, 1, r / 4, r % 4));
}

TEST_CASE("export then import gives back every parameter") {
  temp_dir t;
  using G = gpt<>;
  using L = llama<>;
  const hf::parameters pg = random_parameters<G>(1), pl = random_parameters<L>(2);
  hf::write_folder<G>(pg, t.file("gpt2"), {.dtype = io::dtype::F64});
  CHECK(hf::read_folder<G>(t.file("gpt2")) == pg);
  CHECK(fs::exists(t.file("gpt2/model.safetensors")));
  // sharded: files of at most 4 KiB and the index; F64 bit for bit
  hf::write_folder<L>(pl, t.file("llama"), {.dtype = io::dtype::F64, .max_shard_bytes = 4096});
  std::set<std::string> shards;
  for (const auto& [tensor, file] : io::read_index(t.file("llama/model.safetensors.index.json")).weight_map) {
    shards.insert(file);
    CHECK(fs::file_size(t.file("llama/" + file)) < 4096 + 2048);  // the data under the limit, and a header
  }
  CHECK(shards.size() > 5);
  CHECK(!fs::exists(t.file("llama/model.safetensors")));
  CHECK(hf::read_folder<L>(t.file("llama")) == pl);
  // a second export into the same folder, unsharded: the old shards go
  hf::write_folder<L>(pl, t.file("llama"), {.dtype = io::dtype::F32});
  CHECK(!fs::exists(t.file("llama/model.safetensors.index.json")));
  CHECK(!fs::exists(t.file("llama/" + *shards.begin())));
  const hf::parameters back = hf::read_folder<L>(t.file("llama"));
  bool rounded_once = true;
  for (std::size_t i = 0; i < pl.size(); ++i)
    for (std::size_t k = 0; k < pl[i].size(); ++k)
      for (std::size_t e = 0; e < pl[i][k].size(); ++e)
        rounded_once = rounded_once && back[i][k][e] == double(float(pl[i][k][e]));
  CHECK(rounded_once);
  const std::string config = [&] {
    std::ifstream in(t.file("llama/config.json"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  CHECK_HAS(config, ("\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]"));
  CHECK_HAS(config, ("\"rope_theta\": 10000.0"));
  CHECK_HAS(config, ("\"attention_bias\": true"));
  CHECK_HAS(config, ("\"torch_dtype\": \"float32\""));
  // BF16: rounded from the float value
  hf::write_folder<L>(pl, t.file("llama_bf16"), {.dtype = io::dtype::BF16});
  const hf::parameters b16 = hf::read_folder<L>(t.file("llama_bf16"));
  CHECK(b16[0][0][5] ==
        double(strata::detail::bf16_bits_to_float(strata::detail::float_to_bf16_bits(float(pl[0][0][5])))));
}

TEST_CASE("GPT-2 folders as transformers writes them: a tied lm_head, a longer wpe, no MLP biases") {
  temp_dir t;
  using G = gpt<>;
  const hf::parameters p = random_parameters<G>(3);
  const std::string dir = t.file("tied");
  hf::write_folder<G>(p, dir, {.dtype = io::dtype::F64});
  // transformers' default: lm_head is wte (not saved), and 16 positions (strata takes 8)
  edit_config(dir, [](io::json::value& c) {
    c["tie_word_embeddings"] = true;
    c["n_positions"] = 16;
  });
  rewrite(dir + "/model.safetensors", [](tensors& x) {
    x.values.erase("lm_head.weight");
    auto& wpe = x.values["transformer.wpe.weight"];
    for (int e = 0; e < 8 * D; ++e) wpe.push_back(1e300);  // rows 8..15: never read
    x.shapes["transformer.wpe.weight"] = {16, D};
  });
  const hf::parameters back = hf::read_folder<G>(dir);
  CHECK(back[1] == p[1]);  // the first 8 positions
  bool transposed = true;  // the head [D, V] is wte [V, D] transposed
  for (int v = 0; v < V; ++v)
    for (int d = 0; d < D; ++d)
      transposed = transposed && back[23][0][std::size_t(d * V + v)] == p[0][0][std::size_t(v * D + d)];
  CHECK(transposed);
  // a plan whose MLP Linears have no bias: zeros in c_fc.bias load, anything else is refused
  using NoBias = gpt<GeLU, Linear<D, V, false>, false>;
  const std::string nb = t.file("nobias");
  hf::write_folder<NoBias>(random_parameters<NoBias>(4), nb, {.dtype = io::dtype::F64});
  CHECK(hf::read_folder<NoBias>(nb).size() == std::size_t(NoBias::num_layers));
  CHECK_HAS(refusal([&] { hf::read_folder<NoBias>(t.file("tied")); }),
            ("tensor 'transformer.h.0.mlp.c_fc.bias' is not zero (element 0 is "));
}

TEST_CASE("a bad folder is refused, naming the file and the problem") {
  temp_dir t;
  using G = gpt<>;
  const std::string good = t.file("good");
  hf::write_folder<G>(random_parameters<G>(5), good, {.dtype = io::dtype::F64});
  int n = 0;
  auto damaged = [&](auto&& change) {
    const std::string dir = t.file("bad" + std::to_string(n++));
    fs::copy(good, dir);
    change(dir);
    return refusal([&] { hf::read_folder<G>(dir); });
  };
  CHECK_HAS(refusal([&] { hf::read_folder<gpt<GeLU, Linear<D, V, false>, true, 2>>(good); }),
            ("config.json: \"n_head\" is 4, the plan's attention's heads is 2"));
  CHECK_HAS(refusal([&] { hf::read_folder<llama<>>(good); }),
            ("config.json: model_type \"gpt2\": the plan is a LlamaForCausalLM (model_type \"llama\")"));
  CHECK_HAS(damaged([](const std::string& d) { edit_config(d, [](auto& c) { c["layer_norm_epsilon"] = 1e-6; }); }),
            ("config.json: \"layer_norm_epsilon\" is 1e-06, strata's LayerNorm's eps is 1e-05"));
  CHECK_HAS(damaged([](const std::string& d) { edit_config(d, [](auto& c) { c["activation_function"] = "relu"; }); }),
            ("\"activation_function\" is \"relu\": strata's GeLU is the tanh approximation (gelu_new)"));
  CHECK_HAS(damaged([](const std::string& d) { edit_config(d, [](auto& c) { c["n_positions"] = 4; }); }),
            ("\"n_positions\" is 4: fewer than the plan's 8 positions (Seq)"));
  CHECK_HAS(
      damaged([](const std::string& d) { std::ofstream(d + "/config.json", std::ios::trunc) << "{\"n_embd\": "; }),
      ("config.json: not valid JSON: at byte "));
  CHECK_HAS(damaged([](const std::string& d) {
               rewrite(d + "/model.safetensors", [](tensors& x) { x.values.erase("transformer.ln_f.bias"); });
             }), ("model.safetensors: tensor 'transformer.ln_f.bias' of GPT2LMHeadModel is missing"));
  CHECK_HAS(damaged([](const std::string& d) {
               rewrite(d + "/model.safetensors", [](tensors& x) { x.values.erase("lm_head.weight"); });
             }), ("tensor 'lm_head.weight' of GPT2LMHeadModel is missing (config.json: tie_word_embeddings false)"));
  CHECK_HAS(damaged([](const std::string& d) {
               rewrite(d + "/model.safetensors", [](tensors& x) {
                 x.values["transformer.h.2.ln_1.weight"] = std::vector<double>(D, 1.0);
                 x.shapes["transformer.h.2.ln_1.weight"] = {D};
                 x.values["transformer.h.0.attn.bias"] = std::vector<double>(1, 1.0);  // an old buffer: ignored
                 x.shapes["transformer.h.0.attn.bias"] = {1};
               });
             }), ("model.safetensors: holds 1 tensor(s) that a GPT2LMHeadModel of the plan's sizes does not have, "
                 "'transformer.h.2.ln_1.weight' the first"));
  CHECK_HAS(damaged([](const std::string& d) {
               rewrite(d + "/model.safetensors", [](tensors& x) { x.shapes["transformer.ln_f.bias"] = {4, 4}; });
             }), ("tensor 'transformer.ln_f.bias' has shape [4, 4], GPT2LMHeadModel of the plan's sizes needs [16]"));
  CHECK_HAS(damaged([](const std::string& d) {
               rewrite(d + "/model.safetensors", [](tensors& x) { x.values["transformer.wte.weight"][7] = NAN; });
             }), ("tensor 'transformer.wte.weight' holds nan at element 7"));
  CHECK_HAS(damaged([](const std::string& d) { fs::resize_file(d + "/model.safetensors", 1000); }),
            ("model.safetensors: truncated"));
  CHECK_HAS(damaged([](const std::string& d) { fs::remove(d + "/model.safetensors"); }),
            ("holds neither model.safetensors nor model.safetensors.index.json"));
}
