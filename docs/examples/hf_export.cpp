// Hugging Face transformers folders from and into any plan (strata/hf.hpp): a small Llama
// (RMSNorm, rotary attention, SwiGLU, a head without bias) trains a few steps and is exported
// as config.json + model.safetensors, which transformers loads with
// AutoModelForCausalLM.from_pretrained; the same export is made from its strata checkpoint;
// and the folder is imported into another plan: every parameter comes back bit for bit
// (float64 files). Under 2 processes the model trains as tensor parallelism (Split<2>) and is
// imported as data parallelism.
// mpi-ranks: 1 2
#include <cstdio>
#include <filesystem>
#include <span>
#include <strata/hf.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>
#include <vector>

using namespace strata;

constexpr int Vocab = 64, Seq = 16, D = 32, Heads = 4, Hidden = 64;
using Blocks =
    Repeat<2, Residual<RMSNorm<D>, CausalSelfAttention<D, Heads, Seq, 10000>>, Residual<RMSNorm<D>, SwiGLU<D, Hidden>>>;
template <template <int, class...> class Strategy, int N>
using Llama = Plan<Strategy<N, Embedding<Vocab, D>, Blocks, RMSNorm<D>, Linear<D, Vocab, false>>, Input<Seq>,
                   Loss<SoftmaxCrossEntropy>, MicroBatch<4>, Element<double>>;

template <class Train, class W>
bool round_trip(W& world) {
  auto t = make_trainer<Train>(world, AdamW{.lr = 1e-2});
  std::vector<double> x(4 * Seq);
  std::vector<std::int32_t> y(4 * Seq);
  for (int step = 0; step < 3; ++step) {
    verify::random_data<Train>(7)(step, std::span<double>(x), std::span<std::int32_t>(y));
    t.step({.inputs = x, .labels = y, .samples = 4});
  }
  // config.json and model.safetensors (F32 by default; sharded above max_shard_bytes)
  hf::export_folder(world, t, "hf_llama_example", {.dtype = io::dtype::F64});
  // the same from a checkpoint directory, in one process
  t.save_checkpoint("hf_llama_checkpoint");
  if (world.rank() == 0)
    hf::export_checkpoint<Train>("hf_llama_checkpoint", "hf_llama_from_checkpoint", {.dtype = io::dtype::F64});
  // into another plan: each rank keeps its shards
  using Load = Llama<Replicate, 1>;
  auto loaded = make_trainer<Load>(world, AdamW{.lr = 1e-2});
  hf::import_folder(world, loaded, "hf_llama_example");
  bool same = loaded.gather_parameters() == t.gather_parameters();
  world.comm().agree(true, "");
  if (world.rank() == 0) {
    same = same && hf::read_folder<Load>("hf_llama_from_checkpoint") == hf::read_folder<Load>("hf_llama_example");
    for (const char* d : {"hf_llama_example", "hf_llama_checkpoint", "hf_llama_from_checkpoint"})
      std::filesystem::remove_all(d);
    std::printf("%s exported (LlamaForCausalLM) and imported: parameters %s\n",
                world.size() == 1 ? "one device" : "Split<2>", same ? "bit-identical" : "DIFFERENT");
  }
  return same;
}

int main(int argc, char** argv) {
  auto world = init<Host>(argc, argv);
  try {
    const bool ok = world.size() == 1 ? round_trip<Llama<Replicate, 1>>(world) : round_trip<Llama<Split, 2>>(world);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
