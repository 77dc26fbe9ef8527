// The C++ half of python.hf_roundtrip (hf_roundtrip.py has the other), under mpiexec -n 4:
//   export <dir>   a small GPT-2, a small Llama (RMSNorm, rotary attention, SwiGLU, untied
//                  head without bias) and a Llama 3-style one (grouped-query attention without
//                  biases, tied embeddings) train 3 AdamW steps as PP2 x TP2 (GPT-2 and Llama 3
//                  with sequence parallelism), then are exported as transformers folders:
//                  <dir>/gpt2 (F64),
//                  <dir>/gpt2_f32 (F32), <dir>/gpt2_ckpt (from a strata checkpoint, F64),
//                  <dir>/llama (F64, sharded in files of at most 4 KiB with an index),
//                  <dir>/llama_f32; and strata's own logits on fixed tokens,
//                  <dir>/<model>/strata_logits.safetensors
//   import <dir>   the folders transformers wrote (hf_roundtrip.py make) load into PP2 x TP2
//                  plans, float64 (and GPT-2 float32 too); strata's logits on fixed tokens
//                  go to <dir>/hf_<model>/strata_logits[_f32].safetensors
// The logits come out of the plan through a loss layer that keeps its input (LogitsProbe),
// run by trainer::evaluate on the same layers and shards as training.
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <strata/hf.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

using namespace strata;

// The loss slot's input is the logits, whole on each device of the last part (a loss without
// shard() gets whole features): kept for the test, nothing trained.
struct LogitsProbe {
  static constexpr std::string_view name = "LogitsProbe";
  static constexpr layer_role role = layer_role::loss;
  static constexpr shape_t in_shape{};
  static constexpr shape_t out_shape(shape_t) { return shape_v<1>; }
  static constexpr std::array<param_t, 0> params{};
  static constexpr long long forward_flops(shape_t) { return 0; }
  static constexpr long long backward_flops(shape_t) { return 0; }
  static constexpr buffer_needs memory(const local_dims&) { return {}; }
  static constexpr mesh_choice mesh_shard(const mesh_query&) { return {.supported = false}; }
  static inline std::vector<double> kept;
  template <class C>
  static void forward(C& c) {
    for (std::size_t e = 0; e < c.rows * c.in_cols; ++e) kept.push_back(static_cast<double>(c.x[e]));
  }
  template <class C>
  static void backward(C&) {}
};

constexpr int V = 32, S = 8, D = 16, H = 4, F = 24, B = 4;  // B: the sequences scored
template <class Head, class LossLayer, class... Extra>
using gpt = Plan<
    Pipeline<Split<2, Embedding<V, D>, PositionEmbedding<S, D>, Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>,
                   Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>>,
             Split<2, Residual<LayerNorm<D>, CausalSelfAttention<D, H, S>>,
                   Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>, LayerNorm<D>, Head>>,
    Input<S>, Loss<LossLayer>, MicroBatch<2>, NumMicroBatch<2>, Extra...>;
using LBlock = Repeat<1, Residual<RMSNorm<D>, CausalSelfAttention<D, H, S, 10000>>, Residual<RMSNorm<D>, SwiGLU<D, F>>>;
template <class LossLayer, class... Extra>
using llama = Plan<Pipeline<Split<2, Embedding<V, D>, LBlock>, Split<2, LBlock, RMSNorm<D>, Linear<D, V, false>>>,
                   Input<S>, Loss<LossLayer>, MicroBatch<2>, NumMicroBatch<2>, Extra...>;

// Llama 3's form: grouped-query attention without biases, the head tied to the embedding
// (one table on both pipeline stages)
using L3Block = Repeat<1, Residual<RMSNorm<D>, LlamaAttention<D, H, 2, S>>, Residual<RMSNorm<D>, SwiGLU<D, F>>>;
template <class LossLayer, class... Extra>
using llama3 = Plan<Pipeline<Split<2, Embedding<V, D>, L3Block>, Split<2, L3Block, RMSNorm<D>, TiedHead<V, D>>>,
                    Input<S>, Loss<LossLayer>, MicroBatch<2>, NumMicroBatch<2>, Extra...>;

using GptTrain = gpt<Linear<D, V, false>, SoftmaxCrossEntropy, SequenceParallel>;
using GptProbe = gpt<Linear<D, V, false>, LogitsProbe>;
using LlamaTrain = llama<SoftmaxCrossEntropy>;
using LlamaProbe = llama<LogitsProbe>;
using L3Train = llama3<SoftmaxCrossEntropy, SequenceParallel>;
using L3Probe = llama3<LogitsProbe>;
static_assert(GptTrain::num_layers == GptProbe::num_layers && LlamaTrain::num_layers == LlamaProbe::num_layers &&
              L3Train::num_layers == L3Probe::num_layers);

// The tokens scored: B sequences, the same in every run.
std::vector<double> tokens() {
  std::vector<double> t(B * S);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = double((i * 7 + i / S * 3 + 1) % V);
  return t;
}

// Probe plan P's logits on tokens() with parameters already in `t`; the device that holds
// them (last stage, first of its part) writes them, with the tokens, into `file`.
template <class P, class M, class T, class W>
void score(W& world, T& t, const std::string& file) {
  const std::vector<double> ids = tokens();
  const std::vector<M> x(ids.begin(), ids.end());
  std::vector<std::int32_t> y(x.size(), 0);
  LogitsProbe::kept.clear();
  t.evaluate({.inputs = x, .labels = y, .samples = B}, B);
  const std::string problem = [&]() -> std::string {
    if (t.coord().stage != P::stages - 1 || t.coord().index != 0) return "";
    if (LogitsProbe::kept.size() != std::size_t(B * S * V))
      return "kept " + std::to_string(LogitsProbe::kept.size()) + " logits, expected " + std::to_string(B * S * V);
    io::writer w;
    w.add("logits", {B, S, V}, LogitsProbe::kept);
    w.add("tokens", {B, S}, std::vector<std::int64_t>(ids.begin(), ids.end()));
    w.write(file);
    return "";
  }();
  world.comm().agree(problem.empty(), problem);
}

template <class Train, class Probe, class W>
void train_and_export(W& world, const std::string& dir, const std::string& name, std::uint64_t seed) {
  auto t = make_trainer<Train, double>(world, AdamW{.lr = 1e-2, .weight_decay = 0.1}, seed);
  std::vector<double> x(4 * S);
  std::vector<std::int32_t> y(4 * S);
  for (int s = 0; s < 3; ++s) {
    verify::random_data<Train>(seed)(s, std::span<double>(x), std::span<std::int32_t>(y));
    t.step({.inputs = x, .labels = y, .samples = 4});
  }
  const std::string out = dir + "/" + name;
  hf::export_folder(world, t, out,
                    {.dtype = io::dtype::F64, .max_shard_bytes = name == "llama" ? 4096u : 5'000'000'000u});
  hf::export_folder(world, t, out + "_f32");
  // the same model through a strata checkpoint (GPT-2): the files must hold the same values
  t.save_checkpoint(dir + "/ckpt_" + name);
  if (world.rank() == 0 && name == "gpt2")
    hf::export_checkpoint<Train>(dir + "/ckpt_" + name, out + "_ckpt", {.dtype = io::dtype::F64});
  // strata's logits: the trained parameters in the probe plan (the same layers but the loss)
  auto p = make_trainer<Probe, double>(world, AdamW{.lr = 1e-2});
  p.set_parameters(t.gather_parameters());
  score<Probe, double>(world, p, out + "/strata_logits.safetensors");
  if (world.rank() == 0)
    std::printf("hf_roundtrip: trained %s 3 steps (PP2 x TP2), exported to %s\n", name.c_str(), out.c_str());
}

template <class Probe, class T, class W>
void import_and_score(W& world, const std::string& dir, const std::string& suffix) {
  auto t = make_trainer<Probe, T>(world, AdamW{.lr = 1e-2});
  hf::import_folder(world, t, dir);
  score<Probe, T>(world, t, dir + "/strata_logits" + suffix + ".safetensors");
  if (world.rank() == 0)
    std::printf("hf_roundtrip: imported %s into PP2 x TP2 (%s)\n", dir.c_str(), suffix.empty() ? "float64" : "float32");
}

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  try {
    const std::string mode = argc == 3 ? argv[1] : "";
    if (mode != "export" && mode != "import") throw agreed_error("usage: hf_roundtrip export|import <dir>");
    const std::string dir = argv[2];
    if (mode == "export") {
      train_and_export<GptTrain, GptProbe>(world, dir, "gpt2", 11);
      train_and_export<LlamaTrain, LlamaProbe>(world, dir, "llama", 12);
      train_and_export<L3Train, L3Probe>(world, dir, "llama3", 13);
    } else {
      import_and_score<GptProbe, double>(world, dir + "/hf_gpt2", "");
      import_and_score<GptProbe, float>(world, dir + "/hf_gpt2", "_f32");
      import_and_score<LlamaProbe, double>(world, dir + "/hf_llama", "");
      import_and_score<L3Probe, double>(world, dir + "/hf_llama3", "");
    }
    return 0;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
