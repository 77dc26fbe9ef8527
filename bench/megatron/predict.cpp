// The planner's cost model (plan/cost.hpp) against published runs: the ten GPT
// configurations of Narayanan et al., "Efficient Large-Scale Language Model Training on
// GPU Clusters Using Megatron-LM" (SC'21, arXiv:2104.04473), Table 1, on A100-80GB
// (Selene: 8 GPUs per node on NVLink, 8 × 200 Gb/s HDR InfiniBand per node).
//
// Each model is written as a strata type — token and position embeddings, L pre-LN blocks
// (causal self-attention, GeLU MLP of 4h), LayerNorm, the vocabulary head and the loss;
// vocabulary 51,200, sequence 2048, fp16 — under Split<TP> with every block recomputed
// (GradientCheckpoint<automatic>). Its probe plan's analyses give each unit's time
// (plan/cost.hpp); the stages are Megatron's: L / (PP · V) blocks per model chunk, chunk k
// on stage k mod PP, the embeddings on the first, the head on the last.
//
// Each row runs as the paper's own launch script says (Megatron-LM's
// examples/sc21/run_table_1.sh and CONFIG.sh, "the scripts that were used to produce the
// results in the paper"): its micro-batch size, the interleaved schedule with
// --num-layers-per-virtual-pipeline-stage where given, --DDP-impl torch or local,
// --activations-checkpoint-method uniform (every layer), --fp16 with a static loss scale.
//
// Throughput is counted as the paper counts it (its equation for F with recomputation):
//   F = 96 · B · s · l · h² · (1 + s / (6h) + V / (16 · l · h))  per iteration,
// predicted TFLOP/s per GPU = F / (predicted step time · GPUs).
//
//   bash bench/megatron/run.sh        # writes bench/results/megatron_a100.md
#include <array>
#include <cmath>
#include <cstdio>

#include <strata/plan/cost.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

constexpr int Vocab = 51200, Seq = 2048;

// The A100 running Megatron-LM's 2021 attention: the [heads/TP, s, s] scores materialized
// (fused scale-mask-softmax, no FlashAttention) and dropout on the probabilities
// (--attention-dropout, 0.1 by default in Megatron-LM's arguments.py; the scripts leave it).
// Gradients in fp16 (--fp16, and neither --accumulate-allreduce-grads-in-fp32 nor
// --use-contiguous-buffers-in-ddp: megatron/arguments.py and model/distributed.py at 6985e58938,
// the scripts' commit), accumulated by autograd in .grad (it keeps the first micro-batch's and
// adds the rest), then by --DDP-impl:
// - local: all-reduced after the backward: flattened into one buffer, divided by the group's
//   size, all-reduced, copied back (read and write 2 bytes in each of the three passes);
// - torch: torch.nn.parallel.DistributedDataParallel under no_sync (megatron/schedules.py), the
//   last micro-batch's backward all-reducing them in buckets of 25 MiB (bucket_cap_mb's default).
// The optimizer step (Float16OptimizerWithFloat16Params.step, megatron/optimizer/optimizer.py at
// the same commit), per parameter: the fp16 gradient copied to an fp32 one (read 2, write 4),
// unscaled and checked for inf/NaN (read and write 4: --loss-scale is a ConstantGradScaler,
// and the unscale runs for any scaler), its L2 norm for --clip-grad (read 4; the scaling by the
// clip coefficient runs only when the norm exceeds it, not counted), apex's FusedAdam (masters,
// two moments and the gradient read, the three written: 28) and the masters copied to the
// fp16 weights (read 4, write 2): 52 bytes, against strata's fused 30.
constexpr hardware megatron_a100(bool torch_ddp) {
  hardware h = hw::A100_80GB::value;
  h.attention = attention_kernels::materialized;
  h.attention_dropout = true;
  h.grad_bytes = 2;
  h.accumulate_grads = grad_accumulation::after_first;
  h.grad_bucket_bytes = torch_ddp ? 25.0 * (1 << 20) : 0;
  h.optimizer_bytes_per_param = (2 + 4) + (4 + 4) + 4 + 28 + (4 + 2);
  h.grad_pack_bytes_per_param = torch_ddp ? 0 : 3 * (2 + 2);
  return h;
}

template <int H, int Heads>
using Attention = Residual<LayerNorm<H>, CausalSelfAttention<H, Heads, Seq>>;
template <int H>
using MLP = Residual<LayerNorm<H>, Linear<H, 4 * H>, GeLU, Linear<4 * H, H>>;

struct published {
  const char* name;
  int heads, hidden, layers, tp, pp, gpus, batch;
  double tflops_per_gpu, percent_peak;
};

// --DDP-impl
enum class ddp { torch, local };

struct row {
  published pub;
  cost::step_estimate e;
  double predicted_tflops;
};

// MBS: --micro-batch-size; V: model chunks per stage (L / (PP · --num-layers-per-virtual-pipeline-stage))
template <int H, int Heads, int L, int TP, int PP, int GPUs, int Batch, int MBS, int V, ddp DDP>
row predict(const published& pub) {
  using Probe = Plan<Split<TP, Embedding<Vocab, H>, PositionEmbedding<Seq, H>, Repeat<L, Attention<H, Heads>, MLP<H>>,
                           LayerNorm<H>, Linear<H, Vocab>>,
                     Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<MBS>, Element<f16>,
                     GradientCheckpoint<checkpoint_mode::automatic>>;
  static constexpr hardware hw = megatron_a100(DDP == ddp::torch);
  constexpr int units = 2 + 2 * L + 2;  // embeddings, L × (attention, MLP), LayerNorm, head
  using U = detail::concat_t<type_list<Embedding<Vocab, H>, PositionEmbedding<Seq, H>>,
                             typename detail::repeat_list<L, type_list<Attention<H, Heads>, MLP<H>>>::type,
                             type_list<LayerNorm<H>, Linear<H, Vocab>>>;
  static_assert(U::size == units);
  static constexpr auto first = detail::unit_firsts(U{});
  static constexpr auto profile =
      cost::profile_of<Probe, static_cast<std::size_t>(units)>(first, hw);
  // Megatron's model chunks: L / (PP · V) blocks each; the embeddings on the first, the head on the last
  constexpr int K = PP * V;
  static_assert(L % K == 0);
  std::array<int, K + 1> cuts{};
  for (int k = 1; k < K; ++k) cuts[static_cast<std::size_t>(k)] = 2 + 2 * (k * L / K);
  cuts[K] = units;
  constexpr int dp = GPUs / (TP * PP);
  static_assert(dp * TP * PP == GPUs && Batch % (dp * MBS) == 0);
  const cost::parallel_config c{.tensor = TP, .pipeline = PP, .data = dp, .micro_batch = MBS,
                                .micro_batches = Batch / (dp * MBS),
                                .schedule = cost::price_of<Interleaved<V>>};
  const cost::step_estimate e = cost::estimate<static_cast<std::size_t>(units), K>(profile, cuts, c, hw);
  const double s = Seq, h = H, l = L, vocab = Vocab, B = Batch;
  const double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + vocab / (16 * l * h));
  return row{pub, e, F / (e.step_s * GPUs) / 1e12};
}

}  // namespace

int main() {
  // Table 1 of arXiv:2104.04473: heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s per GPU, % of
  // peak; then run_table_1.sh's micro-batch, chunks per stage (layers / (PP ·
  // --num-layers-per-virtual-pipeline-stage), 1 where not given) and --DDP-impl
  const std::array<row, 10> rows{
      predict<2304, 24, 24, 1, 1, 32, 512, 16, 1, ddp::torch>(
          {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 44}),
      predict<3072, 32, 30, 2, 1, 64, 512, 16, 1, ddp::torch>(
          {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 44}),
      predict<4096, 32, 36, 4, 1, 128, 512, 16, 1, ddp::torch>(
          {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 46}),
      predict<6144, 48, 40, 8, 1, 256, 1024, 8, 1, ddp::torch>(
          {"18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135, 43}),
      predict<8192, 64, 48, 8, 2, 512, 1536, 4, 1, ddp::local>(
          {"39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138, 44}),
      predict<10240, 80, 60, 8, 4, 1024, 1792, 2, 3, ddp::local>(
          {"76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 45}),
      predict<12288, 96, 80, 8, 8, 1536, 2304, 2, 2, ddp::local>(
          {"145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 47}),
      predict<16384, 128, 96, 8, 16, 1920, 2160, 1, 2, ddp::local>(
          {"310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 50}),
      predict<20480, 128, 105, 8, 35, 2520, 2520, 1, 3, ddp::local>(
          {"529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 52}),
      predict<25600, 160, 128, 8, 64, 3072, 3072, 1, 1, ddp::local>(
          {"1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163, 52}),
  };
  std::printf("| model | TP | PP | DP | GPUs | batch | published TFLOP/s/GPU | predicted | error | step s | "
              "compute | of it grad acc | TP comm | PP comm | bubble | DP comm | optimizer | MFU (no recompute) | memory GiB |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double worst = 0, sum = 0;
  int within = 0, within10 = 0;
  for (const row& r : rows) {
    const auto& p = r.pub;
    const auto& e = r.e;
    const double err = (r.predicted_tflops - p.tflops_per_gpu) / p.tflops_per_gpu;
    worst = std::fabs(err) > worst ? std::fabs(err) : worst;
    sum += std::fabs(err);
    within += std::fabs(err) <= 0.15;
    within10 += std::fabs(err) <= 0.10;
    auto pct = [&](double x) { return 100 * x / e.step_s; };
    std::printf("| %s | %d | %d | %d | %d | %d | %.0f | %.1f | %+.1f%% | %.2f | %.0f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | "
                "%.1f%% | %.1f%% | %.1f |\n",
                p.name, p.tp, p.pp, p.gpus / (p.tp * p.pp), p.gpus, p.batch, p.tflops_per_gpu, r.predicted_tflops,
                100 * err, e.step_s, pct(e.compute_s), pct(e.accumulate_s), pct(e.tensor_comm_s), pct(e.pipeline_comm_s), pct(e.bubble_s),
                pct(e.data_comm_s), pct(e.optimizer_s), 100 * e.mfu, static_cast<double>(e.memory_bytes) / (1LL << 30));
  }
  std::printf("\nrows within 10%%: %d of %zu (within 15%%: %d); worst relative error %.1f%%, mean absolute error %.1f%%\n",
              within10, rows.size(), within, 100 * worst, 100 * sum / static_cast<double>(rows.size()));
  return 0;
}
