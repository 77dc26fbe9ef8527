// GPT-2 small trained with strata on one GPU (issue 30, item 1): tokens/s and MFU.
//
// Model: GPT-2 small as examples/gpt_job.hpp writes its single-device GPT — token and
// learned position embeddings, 12 pre-LN blocks (LayerNorm, causal self-attention with
// 12 heads over D 768 and biases; LayerNorm, Linear(768, 3072), GeLU (tanh
// approximation, GPT-2's gelu_new), Linear(3072, 768)), a final LayerNorm and a head tied
// to the token embedding (TiedHead: GPT-2's tie, the table counted once), context 1024,
// vocabulary 50304 (GPT-2's 50257 padded to a multiple of 64, as nanoGPT does), no dropout:
//   Plan<Replicate<1, Embedding<50304,768>, PositionEmbedding<1024,768>,
//                     Repeat<12, Attention, MLP>, LayerNorm<768>, TiedHead<50304,768>>,
//        Input<1024>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>>
// make_trainer<P, bf16>: bf16 activations and weight copies (GEMMs in bf16 with FP32
// accumulation), FP32 master weights, gradients and AdamW state. AdamW lr 6e-4, betas
// 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings only (decay_on::matrices:
// nanoGPT's groups), constant learning rate, no clipping unless --clip. strata's random
// initialisation.
//
// Data: random tokens, uniform in [0, 50257), drawn on the host once (4 batches of B
// sequences of 1025 tokens: inputs the first 1024, labels the last 1024), copied to device
// memory once and fed from there (the trainer's device-fed path: a device-to-device copy
// into the recorded graph's input buffers; the token ids and labels are downloaded and
// checked on the host, 8 bytes per token). Steps rotate over the 4 batches.
//
// A step is the whole trainer::step: the batch copy and checks, the device work (a CUDA
// graph: step 2 records it, later steps replay it), one stream synchronisation to read
// the loss back, then the fused AdamW update. Timing: 3 warm-up steps, then --steps steps,
// each between two cudaEvents (the loss read-back makes that the wall time, also measured
// with steady_clock); the median ms/step is reported.
//
//   tokens/s = B·T / median step;  MFU = tokens/s · (6N + 12·L·D·T) / peak
// N: every parameter, the tied table once. peak: the device's dense bf16 GEMM rate measured
// in the same run: cuBLASLt, 8192 x 8192 x 8192, bf16 operands and output, FP32
// accumulation (CUBLAS_COMPUTE_32F), random data, 32 MiB workspace, the heuristic's first
// algorithm; 3 warm-up calls, then the median of 10 calls each between two cudaEvents.
//
// Usage: bench_gpu_gpt_small [--batch B] [--steps N] [--warmup W] [--clip C] [--eager]
//                            [--json FILE]
//   B in {8, 16, 32} (the micro-batch is a type: one trainer instantiated per size, each
//   adding ~1.2 GB and ~15 s to the compile; default 16),
//   N timed steps (default 20), W warm-up steps (default 3, at least 3 so that the graph is
//   recorded and replayed once before timing), --clip: global-norm clipping, --eager:
//   no graph replay.
// Prints a last line `strata_gpt2 batch=.. ms_per_step=.. tokens_per_s=.. mfu=..
// peak_tflops=.. params=..` and writes the same (and more) as JSON with --json.
// Exit codes: 0 done; 1 failed; 2 usage; 77 no CUDA device.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <strata/backend/cuda/kernels.cuh>
#include <strata/runtime/cuda_world.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

namespace {

using namespace strata;
namespace cu = strata::backend::cuda;

constexpr int Vocab = 50304, Tokens = 50257, Seq = 1024, D = 768, Heads = 12, Layers = 12;
using Attention = Residual<LayerNorm<D>, CausalSelfAttention<D, Heads, Seq>>;
using MLP = Residual<LayerNorm<D>, Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>;
template <int B>
using GPT2 = Plan<Replicate<1, Embedding<Vocab, D>, PositionEmbedding<Seq, D>, Repeat<Layers, Attention, MLP>,
                            LayerNorm<D>, TiedHead<Vocab, D>>,
                  Input<Seq>, Loss<SoftmaxCrossEntropy>, MicroBatch<B>>;

// GPT-2 small's count with a 50304-row table tied to the head: 124,475,904.
constexpr long long block_params = 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + 2 * D + (D * 4 * D + 4 * D) +
                                   (4 * D * D + D);
constexpr long long expected_params = (long long)Vocab * D + (long long)Seq * D + Layers * block_params + 2 * D;
static_assert(GPT2<16>::model_parameters == expected_params && expected_params == 124475904);
static_assert(GPT2<16>::tie.any() && GPT2<16>::tie.owner == 0 && GPT2<16>::tie.user == GPT2<16>::num_layers - 2);
static_assert(GPT2<16>::devices_per_replica == 1 && GPT2<16>::num_micro_batch == 1);

const AdamW adamw{.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};

struct options {
  int batch = 16, steps = 20, warmup = 3;
  double clip = 0.0;
  bool graphs = true;
  std::string json, command;
};

struct result {
  std::string status = "ok";
  double ms_median = 0, ms_min = 0, ms_max = 0, wall_median = 0;
  double first_loss = 0, last_loss = 0;
  long long activation_bytes = 0;
  double setup_s = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---------------------------------------------------------------------------
// The device's dense bf16 GEMM rate: cuBLASLt, 8192^3, FP32 accumulation
// ---------------------------------------------------------------------------

__global__ void k_fill_bf16(__nv_bfloat16* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull + seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = __float2bfloat16(float(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f);  // U(-1, 1)
  }
}

struct peak_result {
  double tflops = 0, ms = 0;
  std::string status = "ok";
};

peak_result measure_peak() {
  peak_result r;
  constexpr std::uint64_t n = 8192;
  constexpr std::size_t ws_bytes = std::size_t(32) << 20;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  void* ws = nullptr;
  try {
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    STRATA_CUDA_CHECK(cudaEventCreate(&start));
    STRATA_CUDA_CHECK(cudaEventCreate(&stop));
    STRATA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&a), sizeof(__nv_bfloat16) * n * n));
    STRATA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b), sizeof(__nv_bfloat16) * n * n));
    STRATA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&c), sizeof(__nv_bfloat16) * n * n));
    STRATA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    k_fill_bf16<<<1024, 256, 0, stream>>>(a, n * n, 1);
    k_fill_bf16<<<1024, 256, 0, stream>>>(b, n * n, 2);
    STRATA_CUDA_CHECK(cudaGetLastError());
    STRATA_CUBLAS_CHECK(cublasLtCreate(&lt));
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opn = CUBLAS_OP_N;
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opn, sizeof opn));
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, n, n, std::int64_t(n)));
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t wsb = ws_bytes;
    STRATA_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    STRATA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, layout, layout, layout, layout, pref, 1, &heur, &found));
    if (found == 0) throw std::runtime_error("cuBLASLt found no bf16 algorithm for 8192^3");
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&] {
      STRATA_CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, a, layout, b, layout, &beta, c, layout, c, layout,
                                         &heur.algo, ws, ws_bytes, stream));
    };
    for (int w = 0; w < 3; ++w) gemm();
    std::vector<double> ms;
    for (int i = 0; i < 10; ++i) {
      STRATA_CUDA_CHECK(cudaEventRecord(start, stream));
      gemm();
      STRATA_CUDA_CHECK(cudaEventRecord(stop, stream));
      STRATA_CUDA_CHECK(cudaEventSynchronize(stop));
      float t = 0.f;
      STRATA_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(double(t));
    }
    r.ms = median(ms);
    r.tflops = 2.0 * double(n) * double(n) * double(n) / (r.ms * 1e-3) / 1e12;
  } catch (const std::exception& e) {
    r.status = std::string("failed: ") + e.what();
  }
  if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
  if (layout) (void)cublasLtMatrixLayoutDestroy(layout);
  if (desc) (void)cublasLtMatmulDescDestroy(desc);
  if (lt) (void)cublasLtDestroy(lt);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), ws})
    if (p) (void)cudaFree(p);
  if (start) (void)cudaEventDestroy(start);
  if (stop) (void)cudaEventDestroy(stop);
  if (stream) (void)cudaStreamDestroy(stream);
  return r;
}

// ---------------------------------------------------------------------------
// The strata steps
// ---------------------------------------------------------------------------

constexpr int data_batches = 4;

// `data_batches` batches of B sequences: Seq + 1 uniform tokens each, inputs the first Seq
// (as float, the trainer's master type), labels the last Seq. Drawn on the host once.
struct host_data {
  std::vector<float> inputs;
  std::vector<std::int32_t> labels;
};
host_data make_data(int batch) {
  host_data h;
  const std::size_t per = std::size_t(batch) * Seq * data_batches;
  h.inputs.resize(per);
  h.labels.resize(per);
  std::mt19937_64 g(2026);
  std::uniform_int_distribution<std::int32_t> token(0, Tokens - 1);
  std::vector<std::int32_t> seq(Seq + 1);
  for (std::size_t s = 0; s < std::size_t(batch) * data_batches; ++s) {
    for (auto& t : seq) t = token(g);
    for (int i = 0; i < Seq; ++i) {
      h.inputs[s * Seq + std::size_t(i)] = static_cast<float>(seq[std::size_t(i)]);
      h.labels[s * Seq + std::size_t(i)] = seq[std::size_t(i) + 1];
    }
  }
  return h;
}

template <int B>
result run_steps(const options& o) {
  using P = GPT2<B>;
  result r;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    const host_data h = make_data(B);
    const std::size_t per = std::size_t(B) * Seq;
    cu::buffer<float> x(h.inputs.size());
    cu::buffer<std::int32_t> y(h.labels.size());
    STRATA_CUDA_CHECK(cudaMemcpy(x.data(), h.inputs.data(), sizeof(float) * h.inputs.size(), cudaMemcpyHostToDevice));
    STRATA_CUDA_CHECK(cudaMemcpy(y.data(), h.labels.data(), sizeof(std::int32_t) * h.labels.size(),
                                 cudaMemcpyHostToDevice));
    auto batch = [&](long long i) {
      const std::size_t k = std::size_t(i % data_batches);
      return batch_view<float>{.inputs = {x.data() + k * per, per}, .labels = {y.data() + k * per, per},
                               .samples = std::size_t(B)};
    };

    auto w = cuda_local_world();
    auto t = make_trainer<P, bf16>(w, adamw);
    t.set_training_options({.decay = decay_on::matrices, .clip_norm = o.clip});
    t.use_graphs(o.graphs);
    r.activation_bytes = t.activation_bytes();
    r.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("trainer ready in %.1f s; activation buffers %.2f GiB; memory after setup: ", r.setup_s,
                double(r.activation_bytes) / double(1 << 30));
    {
      std::size_t free_b = 0, total_b = 0;
      STRATA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      std::printf("%.1f of %.1f GiB in use\n", double(total_b - free_b) / double(1 << 30),
                  double(total_b) / double(1 << 30));
    }
    std::fflush(stdout);

    long long i = 0;
    for (int s = 0; s < o.warmup; ++s) {  // step 1 eager, step 2 records the graph, then replays
      const auto s0 = std::chrono::steady_clock::now();
      const double loss = t.step(batch(i++)).loss;
      if (s == 0) r.first_loss = loss;
      std::printf("warm-up step %d: loss %.4f, %.1f ms\n", s + 1, loss,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
      std::fflush(stdout);
    }
    cu::event start(true), stop(true);
    std::vector<double> ev, wall;
    for (int s = 0; s < o.steps; ++s) {
      const auto h0 = std::chrono::steady_clock::now();
      cu::record(w.queue(), start);
      r.last_loss = t.step(batch(i++)).loss;
      cu::record(w.queue(), stop);
      cu::synchronize(stop);
      wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count());
      ev.push_back(double(cu::elapsed_ms(start, stop)));
    }
    r.ms_median = median(ev);
    r.ms_min = *std::min_element(ev.begin(), ev.end());
    r.ms_max = *std::max_element(ev.begin(), ev.end());
    r.wall_median = median(wall);
  } catch (const std::exception& e) {
    r.status = std::string("failed: ") + e.what();
  }
  return r;
}

result run_for(const options& o) {
  switch (o.batch) {
    case 8: return run_steps<8>(o);
    case 16: return run_steps<16>(o);
    case 32: return run_steps<32>(o);
    default: throw std::logic_error("batch not instantiated");
  }
}
bool batch_supported(int b) { return b == 8 || b == 16 || b == 32; }

// ---------------------------------------------------------------------------
// output
// ---------------------------------------------------------------------------

int usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--batch 8|16|32] [--steps N] [--warmup W>=3] [--clip C] [--eager] "
               "[--json FILE]\n",
               argv0, why.c_str(), argv0);
  return 2;
}

bool parse_int(std::string_view s, int lo, int& out) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v < lo) return false;
  out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--batch" && has) {
      if (!parse_int(argv[++i], 1, o.batch) || !batch_supported(o.batch))
        return usage(argv[0], std::string("--batch ") + argv[i] + ": one of 8, 16, 32");
    } else if (a == "--steps" && has) {
      if (!parse_int(argv[++i], 1, o.steps)) return usage(argv[0], "--steps: a positive integer");
    } else if (a == "--warmup" && has) {
      if (!parse_int(argv[++i], 3, o.warmup)) return usage(argv[0], "--warmup: an integer >= 3");
    } else if (a == "--clip" && has) {
      char* end = nullptr;
      o.clip = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(o.clip >= 0)) return usage(argv[0], "--clip: a number >= 0");
    } else if (a == "--json" && has) {
      o.json = argv[++i];
    } else if (a == "--eager") {
      o.graphs = false;
    } else {
      return usage(argv[0], "unknown argument '" + a + "'");
    }
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipping");
    return 77;
  }
  try {
    cudaDeviceProp prop{};
    STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, runtime = 0;
    STRATA_CUDA_CHECK(cudaDriverGetVersion(&driver));
    STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    using P = GPT2<16>;
    const long long N = P::model_parameters;
    const double flops_per_token = 6.0 * double(N) + 12.0 * Layers * D * Seq;
    std::printf("bench_gpu_gpt_small: GPT-2 small (12 layers, D 768, 12 heads, context 1024, vocabulary 50304, "
                "head tied to the token embedding), %lld parameters\n",
                N);
    std::printf("device: %s (%d SMs, %.0f GiB), driver %d, runtime %d, cuBLASLt %zu; %s\n", prop.name,
                prop.multiProcessorCount, double(prop.totalGlobalMem) / double(1 << 30), driver, runtime,
                cublasLtGetVersion(), date);
    std::printf("strata: make_trainer<P, bf16> (bf16 activations, FP32 masters), AdamW lr 6e-4 betas 0.9/0.95 eps "
                "1e-8 weight decay 0.1 (matrices), %s, device-fed, batch %d x %d tokens, %d warm-up + %d timed "
                "steps%s\n",
                o.graphs ? "CUDA graph replay" : "eager launches", o.batch, Seq, o.warmup, o.steps,
                o.clip > 0 ? (", clipping at " + std::to_string(o.clip)).c_str() : "");
    std::printf("model FLOPs per token: 6N + 12LDT = %.4g (the plan counts %.4g per token, causal attention "
                "halved)\n",
                flops_per_token, double(P::flops_per_replica_step()) / (double(P::replica_batch) * Seq));
    std::fflush(stdout);

    const peak_result peak = measure_peak();
    std::printf("peak: cuBLASLt bf16 8192^3 (FP32 accumulation): %.4f ms median of 10 -> %.1f TFLOP/s  %s\n", peak.ms,
                peak.tflops, peak.status.c_str());
    std::fflush(stdout);

    const result r = run_for(o);
    if (r.status != "ok") {
      std::fprintf(stderr, "bench_gpu_gpt_small: %s\n", r.status.c_str());
      return 1;
    }
    const double tokens_per_s = double(o.batch) * Seq / (r.ms_median * 1e-3);
    const double achieved = tokens_per_s * flops_per_token;
    const double mfu = peak.tflops > 0 ? achieved / (peak.tflops * 1e12) : 0.0;
    std::printf("steps: median %.3f ms (min %.3f, max %.3f; wall %.3f), loss first %.4f (ln 50304 = %.4f), last "
                "%.4f\n",
                r.ms_median, r.ms_min, r.ms_max, r.wall_median, r.first_loss, std::log(double(Vocab)), r.last_loss);
    std::printf("%.0f tokens/s, %.1f TFLOP/s of model FLOPs, MFU %.4f of %.1f TFLOP/s\n", tokens_per_s,
                achieved / 1e12, mfu, peak.tflops);
    const bool loss_ok = std::isfinite(r.first_loss) && std::isfinite(r.last_loss) &&
                         std::fabs(r.first_loss - std::log(double(Vocab))) < 1.0;
    if (!loss_ok) std::printf("WARNING: the first loss is not near ln(50304)\n");
    std::printf("strata_gpt2 batch=%d ms_per_step=%.4f tokens_per_s=%.1f mfu=%.5f peak_tflops=%.2f params=%lld\n",
                o.batch, r.ms_median, tokens_per_s, mfu, peak.tflops, N);
    std::fflush(stdout);
    if (!o.json.empty()) {
      const nlohmann::json j = {
          {"name", "strata_gpt2"}, {"device", prop.name}, {"driver", driver}, {"runtime", runtime},
          {"date", date}, {"command", o.command}, {"batch", o.batch}, {"seq", Seq}, {"steps", o.steps},
          {"warmup", o.warmup}, {"graphs", o.graphs}, {"device_fed", true}, {"clip", o.clip},
          {"ms_per_step", r.ms_median}, {"ms_min", r.ms_min}, {"ms_max", r.ms_max},
          {"wall_ms_per_step", r.wall_median}, {"tokens_per_s", tokens_per_s}, {"mfu", mfu},
          {"peak_tflops", peak.tflops}, {"peak_gemm_ms", peak.ms}, {"peak_status", peak.status},
          {"model_tflops", achieved / 1e12}, {"flops_per_token", flops_per_token}, {"params", N},
          {"first_loss", r.first_loss}, {"last_loss", r.last_loss}, {"activation_bytes", r.activation_bytes},
          {"setup_s", r.setup_s}};
      std::ofstream(o.json) << j.dump(2) << "\n";
      std::printf("wrote %s\n", o.json.c_str());
    }
    return loss_ok && peak.status == "ok" ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_gpt_small: %s\n", e.what());
    return 1;
  }
}
