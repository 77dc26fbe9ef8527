// strata training-step benchmarks (issue 4): whole training steps of the strata trainer
// on one GPU, next to the cuBLASLt GEMMs those steps contain.
//
//  (a) launch-bound: the demo MLP (Flatten, Linear(784,512), ReLU, Linear(512,512), ReLU,
//      Linear(512,10), softmax cross-entropy) as
//        Plan<Replicate<1, ...>, Loss<SoftmaxCrossEntropy>, MicroBatch<64>>
//      SGD with momentum, float32, exact FP32 and TF32 GEMMs, CUDA-graph replay (the
//      trainer's default) and eager launches.
//  (b) GEMM-bound: 4 x [Linear(4096,4096), ReLU], Linear(4096,10), cross-entropy, batch 8192.
//      make_trainer<Wide, bf16>: mixed precision (bf16 activations and weight copies, FP32
//      master weights, gradients and SGD state), and float32 with TF32 GEMMs (exact FP32
//      too). The same run times the GEMMs one step issues (5 forward, 4 dgrad, 5 wgrad),
//      called through strata's backend::cuda::gemm with the trainer's exact arguments and
//      math mode, and prints strata step time / sum of those GEMM times (goal <= 1.10 for
//      the bf16 step).
//
// Batches are fed from pinned host memory (a data loader on the CPU: the upload and the
// host-side checks are in the step) and from device memory (a loader that already put
// the batch on the GPU, as PyTorch's device-fed variant: a device-to-device copy into
// the graph's input buffer and a NaN/Inf scan on the device).
//
// What one strata step is (trainer::step): check the host batch (labels in range, inputs
// finite, on the host), upload inputs and labels to fixed device buffers, run the device
// work (a replayed CUDA graph from the third step on, or eager launches), read the loss
// back (one stream synchronisation per step), then the optimizer. All of that is timed:
// cudaEvents around N steps (the per-step synchronisation makes that the wall time),
// median over several repeats, rotating over a few pre-generated batches in pinned host
// memory. The host check and the upload are also timed alone, as a breakdown.
//
// Data: a formula shared with bench/gpu/pytorch_mlp.py, so both see the same values:
//   x[b][n] = float(u / 2^31 - 1),  u = ((n+1)*2654435761 + (b+1)*97531) mod 2^32
//   y[b][s] = (((s+1)*2246822519 + (b+1)*3266489917) mod 2^32 >> 16) mod classes
// (n: flat index within batch b, s: sample). Parameters: strata's own initialisation
// (uniform +-1/sqrt(fan_in), like PyTorch's Linear; different values).
//
// Usage: bench_step [--out FILE.md] [--json FILE.json] [--only launch|gemm] [--warmup N]
//                   [--repeats R] [--steps N] [--wide-steps N] [--batches K] [--no-fp32-wide]
//                   [--quick]
// Markdown goes to --out, else $OUT/bench_step.md when OUT is set, else stdout; the JSON
// (for bench/gpu/run_all.sh) next to it (FILE.json) unless --json says otherwise.
// Exit codes: 0 all measured; 1 a part failed (still reported); 2 usage; 77 no GPU.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/backend/cuda/kernels.cuh>
#include <strata/backend/host/kernels.hpp>
#include <strata/runtime/cuda_world.hpp>
#include <strata/runtime/trainer.hpp>
#include <strata/strata.hpp>

namespace {

using namespace strata;
namespace cu = strata::backend::cuda;
using strata::backend::trans;
using strata::bf16;

using CE = Loss<SoftmaxCrossEntropy>;
using Demo = Plan<Replicate<1, Flatten, Linear<784, 512>, ReLU, Linear<512, 512>, ReLU, Linear<512, 10>>, CE,
                  MicroBatch<64>>;
using Wide = Plan<Replicate<1, Linear<4096, 4096>, ReLU, Linear<4096, 4096>, ReLU, Linear<4096, 4096>, ReLU,
                            Linear<4096, 4096>, ReLU, Linear<4096, 10>>,
                  CE, MicroBatch<8192>>;
static_assert(Demo::devices_per_replica == 1 && Demo::num_micro_batch == 1 && Demo::input_shape.numel() == 784);
static_assert(Wide::devices_per_replica == 1 && Wide::num_micro_batch == 1 && Wide::input_shape.numel() == 4096);

const SGD sgd{.lr = 0.01, .momentum = 0.9};  // pytorch_mlp.py uses the same

// ---------------------------------------------------------------------------
// options, models, data
// ---------------------------------------------------------------------------

struct options {
  std::string out, json, command, only;
  int warmup = 5, repeats = 7, steps = 200, wide_steps = 10, batches = 4;
  bool fp32_wide = true;
};

struct linear_dims {
  std::size_t in, out;
};

struct model_desc {
  std::string key, title, plan;
  std::size_t batch = 0, in_elems = 0;
  int classes = 10;
  std::vector<linear_dims> linears;
  // The trainer skips dX only for layer 0; the demo's first Linear is layer 1 (after
  // Flatten), so its dgrad is computed (and thrown away).
  bool first_dgrad = false;
  double flops = 0;  // model FLOPs of one step (the plan's count)
};

model_desc demo_model() {
  model_desc m;
  m.key = "launch";
  m.title = "(a) launch-bound: demo MLP, batch 64";
  m.plan = "Plan<Replicate<1, Flatten, Linear<784,512>, ReLU, Linear<512,512>, ReLU, Linear<512,10>>, "
           "Loss<SoftmaxCrossEntropy>, MicroBatch<64>>";
  m.batch = 64;
  m.in_elems = 784;
  m.linears = {{784, 512}, {512, 512}, {512, 10}};
  m.first_dgrad = true;
  m.flops = double(Demo::flops_per_replica_step());
  return m;
}

model_desc wide_model() {
  model_desc m;
  m.key = "gemm";
  m.title = "(b) GEMM-bound: 4 x 4096-wide MLP, batch 8192";
  m.plan = "Plan<Replicate<1, 4 x [Linear<4096,4096>, ReLU], Linear<4096,10>>, Loss<SoftmaxCrossEntropy>, "
           "MicroBatch<8192>>";
  m.batch = 8192;
  m.in_elems = 4096;
  m.linears = {{4096, 4096}, {4096, 4096}, {4096, 4096}, {4096, 4096}, {4096, 10}};
  m.first_dgrad = false;
  m.flops = double(Wide::flops_per_replica_step());
  return m;
}

float data_value(std::uint64_t b, std::uint64_t n) {
  const std::uint64_t u = ((n + 1) * 2654435761ull + (b + 1) * 97531ull) & 0xffffffffull;
  return static_cast<float>(static_cast<double>(u) / 2147483648.0 - 1.0);
}
std::int32_t data_label(std::uint64_t b, std::uint64_t s, int classes) {
  const std::uint64_t u = ((s + 1) * 2246822519ull + (b + 1) * 3266489917ull) & 0xffffffffull;
  return static_cast<std::int32_t>((u >> 16) % static_cast<std::uint64_t>(classes));
}

// K batches in pinned host memory (what a data loader hands the trainer).
class host_batches {
 public:
  host_batches(const model_desc& m, int k) : samples_(m.batch), elems_(m.in_elems), k_(k) {
    STRATA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&x_), sizeof(float) * samples_ * elems_ * k_));
    STRATA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&y_), sizeof(std::int32_t) * samples_ * k_));
    for (std::size_t b = 0; b < std::size_t(k_); ++b) {
      float* x = x_ + b * samples_ * elems_;
      for (std::size_t n = 0; n < samples_ * elems_; ++n) x[n] = data_value(b, n);
      for (std::size_t s = 0; s < samples_; ++s) y_[b * samples_ + s] = data_label(b, s, m.classes);
    }
  }
  ~host_batches() {
    if (x_) (void)cudaFreeHost(x_);
    if (y_) (void)cudaFreeHost(y_);
  }
  host_batches(const host_batches&) = delete;
  host_batches& operator=(const host_batches&) = delete;

  batch_view<float> view(long long i) const {
    const std::size_t b = static_cast<std::size_t>(i % k_);
    return {.inputs = {x_ + b * samples_ * elems_, samples_ * elems_}, .labels = {y_ + b * samples_, samples_},
            .samples = samples_};
  }

 private:
  std::size_t samples_, elems_;
  int k_;
  float* x_ = nullptr;
  std::int32_t* y_ = nullptr;
};

// ---------------------------------------------------------------------------
// timing helpers
// ---------------------------------------------------------------------------

struct stats {
  double median = 0, min = 0, max = 0;  // per step / per call, milliseconds
  int repeats = 0, per_repeat = 0;
};

stats summarize(std::vector<double> v, int per_repeat) {
  stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  s.repeats = int(n);
  s.per_repeat = per_repeat;
  return s;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---------------------------------------------------------------------------
// strata training steps
// ---------------------------------------------------------------------------

struct step_row {
  std::string model, variant, math;
  std::string precision = "fp32";  // fp32, tf32 or bf16 (the GEMM sum it is compared with)
  bool graphs = true, tf32 = false, device_data = false;
  stats t;            // cudaEvent time per step
  double wall = 0;    // steady_clock median per step (cross-check)
  double first_loss = 0, last_loss = 0;
  std::string status = "ok";
};

// The same K batches copied to device memory (a loader that already put them on the GPU).
class device_batches {
 public:
  device_batches(const model_desc& m, const host_batches& h, int k) : samples_(m.batch), elems_(m.in_elems), k_(k) {
    x_ = cu::buffer<float>(samples_ * elems_ * std::size_t(k_));
    y_ = cu::buffer<std::int32_t>(samples_ * std::size_t(k_));
    for (int b = 0; b < k_; ++b) {
      const auto v = h.view(b);
      STRATA_CUDA_CHECK(cudaMemcpy(x_.data() + std::size_t(b) * samples_ * elems_, v.inputs.data(),
                                   sizeof(float) * samples_ * elems_, cudaMemcpyHostToDevice));
      STRATA_CUDA_CHECK(cudaMemcpy(y_.data() + std::size_t(b) * samples_, v.labels.data(), sizeof(std::int32_t) * samples_,
                                   cudaMemcpyHostToDevice));
    }
  }
  batch_view<float> view(long long i) const {
    const std::size_t b = static_cast<std::size_t>(i % k_);
    return {.inputs = {x_.data() + b * samples_ * elems_, samples_ * elems_},
            .labels = {y_.data() + b * samples_, samples_}, .samples = samples_};
  }

 private:
  std::size_t samples_, elems_;
  int k_;
  cu::buffer<float> x_;
  cu::buffer<std::int32_t> y_;
};

// T = float (tf32 picks the GEMM math) or bf16 (mixed precision). D: host_batches or
// device_batches.
template <class P, class T = float, class D = host_batches>
step_row time_trainer(const options& o, const model_desc& m, const D& data, bool tf32, bool graphs, int steps) {
  constexpr bool bf = std::is_same_v<T, bf16>;
  step_row r;
  r.model = m.key;
  r.graphs = graphs;
  r.tf32 = tf32 && !bf;
  r.device_data = std::is_same_v<D, device_batches>;
  r.precision = bf ? "bf16" : tf32 ? "tf32" : "fp32";
  r.math = bf ? "bf16, FP32 master" : tf32 ? "TF32" : "FP32 (exact)";
  r.variant = std::string(graphs ? "strata, CUDA graph replay" : "strata, eager launches") +
              (r.device_data ? ", device-fed" : "");
  try {
    auto w = cuda_local_world();
    w.queue().set_tf32(r.tf32);  // before the first step: the captured graph keeps its GEMMs
    auto t = make_trainer<P, T>(w, sgd);
    t.use_graphs(graphs);
    long long i = 0;
    r.first_loss = t.step(data.view(i++)).loss;
    // the second step is captured as the graph; the rest of the warm-up replays it
    for (int s = 1; s < std::max(o.warmup, 3); ++s) r.last_loss = t.step(data.view(i++)).loss;
    cu::event start(true), stop(true);
    std::vector<double> ev, wall;
    for (int rep = 0; rep < o.repeats; ++rep) {
      const double h0 = now_ms();
      cu::record(w.queue(), start);
      for (int s = 0; s < steps; ++s) r.last_loss = t.step(data.view(i++)).loss;
      cu::record(w.queue(), stop);
      cu::synchronize(stop);
      wall.push_back((now_ms() - h0) / steps);
      ev.push_back(double(cu::elapsed_ms(start, stop)) / steps);
    }
    r.t = summarize(ev, steps);
    r.wall = summarize(wall, steps).median;
  } catch (const std::exception& e) {
    r.status = std::string("failed: ") + e.what();
  }
  std::printf("%-6s %-40s %-17s %10.4f ms/step (min %.4f, max %.4f; wall %.4f)  loss %.4f -> %.4f  %s\n",
              m.key.c_str(), r.variant.c_str(), r.math.c_str(), r.t.median, r.t.min, r.t.max, r.wall, r.first_loss,
              r.last_loss, r.status.c_str());
  std::fflush(stdout);
  return r;
}

// The two host-side parts of a step, alone: the batch check (trainer::check_batch's
// scan of the inputs for NaN/Inf, one thread) and the upload of inputs and labels.
struct breakdown {
  double check_ms = 0, upload_ms = 0;
  std::string status = "ok";
};

breakdown time_host_side(const options& o, const model_desc& m, const host_batches& data) {
  breakdown b;
  try {
    std::vector<double> chk, up;
    cu::queue q;
    cu::buffer<float> x(m.batch * m.in_elems);
    cu::buffer<std::int32_t> y(m.batch);
    const int reps = std::max(o.repeats, 5), inner = m.batch * m.in_elems > (1u << 22) ? 2 : 100;
    volatile bool sink = true;
    for (int rep = 0; rep < reps; ++rep) {
      double t0 = now_ms();
      for (int k = 0; k < inner; ++k) {
        const auto v = data.view(k);
        bool ok = backend::host::all_finite(v.inputs.size(), v.inputs.data());
        for (std::size_t s = 0; s < v.samples; ++s) ok = ok && v.labels[s] >= 0 && v.labels[s] < m.classes;
        sink = sink && ok;
      }
      chk.push_back((now_ms() - t0) / inner);
      t0 = now_ms();
      for (int k = 0; k < inner; ++k) {
        const auto v = data.view(k);
        cu::upload(q, v.labels.data(), v.labels.size(), y.data());
        cu::upload(q, v.inputs.data(), v.inputs.size(), x.data());
        q.synchronize();
      }
      up.push_back((now_ms() - t0) / inner);
    }
    if (!sink) b.status = "the data has a non-finite value";
    b.check_ms = summarize(chk, inner).median;
    b.upload_ms = summarize(up, inner).median;
  } catch (const std::exception& e) {
    b.status = std::string("failed: ") + e.what();
  }
  std::printf("%-6s host batch check %.4f ms, upload (pinned) %.4f ms  %s\n", m.key.c_str(), b.check_ms, b.upload_ms,
              b.status.c_str());
  return b;
}

// ---------------------------------------------------------------------------
// The GEMMs of one step, through strata's gemm with the trainer's arguments
// ---------------------------------------------------------------------------

template <class T>
__global__ void k_fill_hash(T* p, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull + seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float v = (float(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    if constexpr (std::is_same_v<T, float>)
      p[i] = v;
    else
      p[i] = T(v);
  }
}

template <class T>
cu::buffer<T> random_buffer(cu::queue& q, std::size_t n, std::uint64_t seed, float scale) {
  cu::buffer<T> b(std::max<std::size_t>(n, 1));
  k_fill_hash<T><<<1024, 256, 0, q.stream()>>>(b.data(), n, seed, scale);
  STRATA_CUDA_CHECK_LAUNCH("k_fill_hash");
  return b;
}

struct gemm_row {
  std::string name;  // "fwd L1", ...
  std::size_t M = 0, N = 0, K = 0;
  double beta = 0;
  stats t;  // per call, ms
};

struct gemm_sum {
  std::string model, math;
  std::vector<gemm_row> rows;
  double sum = 0;       // sum of the per-GEMM medians, ms
  stats sequence;       // the same GEMMs back to back, per step
  std::string status = "ok";
};

// math: "fp32", "tf32" or "bf16" (bf16 operands, forward/dgrad bf16 out, wgrad into
// float gradients with beta = 1, FP32 accumulation).
template <class E>
gemm_sum time_gemms(const options& o, const model_desc& m, const std::string& math, int iters) {
  gemm_sum g;
  g.model = m.key;
  g.math = math;
  try {
    cu::queue q;
    q.set_tf32(math == "tf32");
    const std::size_t rows = m.batch;
    const std::size_t L = m.linears.size();
    std::vector<cu::buffer<E>> X, W, Y, dY, dX;
    std::vector<cu::buffer<float>> dW;
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t in = m.linears[l].in, out = m.linears[l].out;
      X.push_back(random_buffer<E>(q, rows * in, 11 + l, 1.0f));
      W.push_back(random_buffer<E>(q, in * out, 101 + l, 1.0f / std::sqrt(float(in))));
      Y.emplace_back(rows * out);
      dY.push_back(random_buffer<E>(q, rows * out, 1001 + l, 1e-3f));
      dX.emplace_back(l > 0 || m.first_dgrad ? rows * in : 1);
      dW.push_back(random_buffer<float>(q, in * out, 10001 + l, 1e-3f));
    }
    q.synchronize();
    // The trainer's calls (layers/linear.hpp, Linear::forward/backward):
    //   forward gemm(N, N, rows, out, in, 1, X, in, W, out, 0, Y, out)
    //   wgrad   gemm(T, N, in, out, rows, 1, X, in, dY, out, 1, dW, out)
    //   dgrad   gemm(N, T, rows, in, out, 1, dY, out, W, out, 0, dX, in)
    struct op {
      std::string name;
      std::size_t M, N, K;
      double beta;
      std::function<void()> run;
    };
    std::vector<op> ops;
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t in = m.linears[l].in, out = m.linears[l].out;
      const std::string tag = "L" + std::to_string(l + 1);
      ops.push_back({"forward " + tag, rows, out, in, 0.0, [&, l, in, out] {
                       cu::gemm(q, trans::N, trans::N, rows, out, in, 1.0f, X[l].data(), in, W[l].data(), out,
                                0.0f, Y[l].data(), out);
                     }});
    }
    for (std::size_t l = L; l-- > 0;) {
      const std::size_t in = m.linears[l].in, out = m.linears[l].out;
      const std::string tag = "L" + std::to_string(l + 1);
      ops.push_back({"wgrad " + tag, in, out, rows, 1.0, [&, l, in, out] {
                       cu::gemm(q, trans::T, trans::N, in, out, rows, 1.0f, X[l].data(), in, dY[l].data(), out,
                                1.0f, dW[l].data(), out);
                     }});
      if (l > 0 || m.first_dgrad)
        ops.push_back({"dgrad " + tag, rows, in, out, 0.0, [&, l, in, out] {
                         cu::gemm(q, trans::N, trans::T, rows, in, out, 1.0f, dY[l].data(), out, W[l].data(), out,
                                  0.0f, dX[l].data(), in);
                       }});
    }
    cu::event start(true), stop(true);
    const auto timed = [&](const std::function<void()>& f, int n) {
      std::vector<double> v;
      for (int w = 0; w < 2; ++w) f();
      for (int rep = 0; rep < o.repeats; ++rep) {
        cu::record(q, start);
        for (int k = 0; k < n; ++k) f();
        cu::record(q, stop);
        cu::synchronize(stop);
        v.push_back(double(cu::elapsed_ms(start, stop)) / n);
      }
      return summarize(v, n);
    };
    for (const op& x : ops) {
      gemm_row r{x.name, x.M, x.N, x.K, x.beta, timed(x.run, iters)};
      g.sum += r.t.median;
      g.rows.push_back(r);
    }
    g.sequence = timed(
        [&] {
          for (const op& x : ops) x.run();
        },
        iters);
  } catch (const std::exception& e) {
    g.status = std::string("failed: ") + e.what();
  }
  std::printf("%-6s GEMMs of one step (%zu) in %-4s: sum %.4f ms, back to back %.4f ms  %s\n", m.key.c_str(),
              g.rows.size(), math.c_str(), g.sum, g.sequence.median, g.status.c_str());
  std::fflush(stdout);
  return g;
}

// ---------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------

struct device_info {
  std::string name;
  int sms = 0, driver = 0, runtime = 0, cublaslt = 0, nccl = 0;
  std::size_t memory = 0;
};

device_info query_device() {
  device_info d;
  int dev = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  d.name = prop.name;
  d.sms = prop.multiProcessorCount;
  d.memory = prop.totalGlobalMem;
  STRATA_CUDA_CHECK(cudaDriverGetVersion(&d.driver));
  STRATA_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime));
  d.cublaslt = int(cublasLtGetVersion());
  if (ncclGetVersion(&d.nccl) != ncclSuccess) d.nccl = 0;
  return d;
}

std::string version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// ---------------------------------------------------------------------------
// The bf16 step's work besides its GEMMs, pass by pass, with the trainer's kernels
// and shapes: where a step over its GEMM sum goes (what to fuse next).
// ---------------------------------------------------------------------------

struct pass_row {
  std::string name;
  double bytes = 0;  // memory traffic of one call (reads + writes)
  int per_step = 1;  // calls in one step
  stats t;           // per call, ms
};
struct pass_table {
  std::vector<pass_row> rows;
  double copy_gbs = 0;  // measured device-to-device copy bandwidth, GB/s (read + write)
  std::string status = "ok";
};

pass_table time_passes(const options& o, const model_desc& m) {
  pass_table pt;
  try {
    cu::queue q;
    const std::size_t rows = m.batch, width = m.linears.front().out;
    std::size_t params = 0;
    for (const auto& l : m.linears) params += l.in * l.out + l.out;
    const std::size_t act = rows * width;
    auto p32 = random_buffer<float>(q, params, 1, 0.01f), g32 = random_buffer<float>(q, params, 2, 1e-3f),
         v32 = random_buffer<float>(q, params, 3, 1e-3f);
    cu::buffer<bf16> p16(params);
    auto a16 = random_buffer<bf16>(q, act, 4, 1.0f), d16 = random_buffer<bf16>(q, act, 5, 1e-3f);
    cu::buffer<bf16> o16(act);
    auto x32 = random_buffer<float>(q, rows * m.in_elems, 6, 1.0f);
    cu::buffer<float> y32(rows * m.in_elems), b32(width);
    cu::buffer<bf16> x16(rows * m.in_elems);
    q.synchronize();
    cu::event start(true), stop(true);
    const auto timed = [&](const std::function<void()>& f) {
      std::vector<double> v;
      for (int w = 0; w < 2; ++w) f();
      for (int rep = 0; rep < o.repeats; ++rep) {
        cu::record(q, start);
        for (int k = 0; k < 10; ++k) f();
        cu::record(q, stop);
        cu::synchronize(stop);
        v.push_back(double(cu::elapsed_ms(start, stop)) / 10);
      }
      return summarize(v, 10);
    };
    const double b2 = 2, b4 = 4;
    const std::size_t hidden = m.linears.size() - 1;  // ReLUs
    pt.rows.push_back({"device-to-device copy of the float batch (device-fed)", b4 * 2 * rows * m.in_elems, 1,
                       timed([&] { cu::copy(q, rows * m.in_elems, x32.data(), y32.data()); })});
    pt.copy_gbs = pt.rows.back().bytes / (pt.rows.back().t.median * 1e-3) / 1e9;
    pt.rows.push_back({"batch float -> bf16 (cast_elements)", (b4 + b2) * rows * m.in_elems, 1,
                       timed([&] { cu::cast_elements(q, rows * m.in_elems, x32.data(), x16.data()); })});
    pt.rows.push_back({"zero the FP32 gradients (fill)", b4 * params, 1,
                       timed([&] { cu::fill(q, params, 0.0f, g32.data()); })});
    pt.rows.push_back({"ReLU forward (bf16)", b2 * 2 * act, int(hidden), timed([&] {
                         cu::bias_activation_forward(q, backend::activation::relu, rows, width, a16.data(),
                                                     static_cast<const bf16*>(nullptr), static_cast<bf16*>(nullptr),
                                                     o16.data());
                       })});
    pt.rows.push_back({"ReLU backward (bf16)", b2 * 3 * act, int(hidden), timed([&] {
                         cu::activation_backward(q, backend::activation::relu, act, a16.data(), d16.data(), o16.data());
                       })});
    // the 4096-wide layers; the last (10 columns) is negligible
    pt.rows.push_back({"bias gradient, bf16 dY -> FP32 (bias_grad)", b2 * act, int(hidden), timed([&] {
                         cu::bias_grad(q, rows, width, d16.data(), b32.data(), true);
                       })});
    pt.rows.push_back({"SGD momentum on the FP32 masters", b4 * 5 * params, 1, timed([&] {
                         cu::sgd_momentum_step(q, params, 1e-9, 0.9, 0.0, p32.data(), g32.data(), v32.data());
                       })});
    pt.rows.push_back({"bf16 copies of the masters (cast_elements)", (b4 + b2) * params, 1,
                       timed([&] { cu::cast_elements(q, params, p32.data(), p16.data()); })});
  } catch (const std::exception& e) {
    pt.status = std::string("failed: ") + e.what();
  }
  double sum = 0;
  for (const auto& r : pt.rows) sum += r.t.median * r.per_step;
  std::printf("%-6s non-GEMM passes of a bf16 step: %.4f ms (copy bandwidth %.0f GB/s)  %s\n", m.key.c_str(), sum,
              pt.copy_gbs, pt.status.c_str());
  return pt;
}

struct results {
  std::vector<step_row> steps;
  std::vector<gemm_sum> gemms;
  std::vector<std::pair<std::string, breakdown>> host;
  std::vector<std::pair<std::string, pass_table>> passes;
};

const step_row* find_step(const results& r, const std::string& model, const std::string& precision, bool graphs,
                          bool device_data) {
  for (const auto& s : r.steps)
    if (s.model == model && s.precision == precision && s.graphs == graphs && s.device_data == device_data &&
        s.status == "ok")
      return &s;
  return nullptr;
}
const gemm_sum* find_gemm(const results& r, const std::string& model, const std::string& math) {
  for (const auto& g : r.gemms)
    if (g.model == model && g.math == math && g.status == "ok") return &g;
  return nullptr;
}

std::string markdown(const options& o, const device_info& d, const std::vector<model_desc>& models,
                     const results& res) {
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::ostringstream md;
  md << "# strata training-step benchmarks\n\n";
  md << "- device: " << d.name << " (" << d.sms << " SMs, " << (d.memory >> 30) << " GiB)\n";
  md << "- driver: " << version(d.driver) << " (cudaDriverGetVersion " << d.driver << "), runtime "
     << version(d.runtime) << ", cuBLASLt " << d.cublaslt << ", NCCL " << d.nccl << ", built with nvcc "
     << __CUDACC_VER_MAJOR__ << "." << __CUDACC_VER_MINOR__ << "\n";
  md << "- date: " << date << "\n";
  md << "- command: `" << o.command << "`\n";
  md << "- timing: " << std::max(o.warmup, 3) << " warm-up steps (step 2 records the CUDA graph), then "
     << o.repeats << " repeats of N steps between two cudaEvents; the median repeat's time / N is reported "
     << "(min and max of the repeats too). Batches rotate over " << o.batches
     << " pre-generated batches in pinned host memory.\n";
  md << "- a strata step = host check of the batch (labels in range, inputs finite) + upload of inputs and labels + "
        "device work (a replayed CUDA graph, or eager launches) + **one stream synchronisation to read the loss "
        "back** + the optimizer (SGD lr 0.01, momentum 0.9). All of it is in the time.\n";
  md << "- math: `FP32 (exact)` = float32 with cuBLASLt CUBLAS_COMPUTE_32F (the queue's default), `TF32` = "
        "float32 with `world.queue().set_tf32(true)` (CUBLAS_COMPUTE_32F_FAST_TF32), `bf16, FP32 master` = "
        "`make_trainer<P, bf16>`: bf16 activations and weight copies (GEMMs CUDA_R_16BF with FP32 accumulation), "
        "FP32 master weights, gradients and SGD state, float batch.\n";
  md << "- batches: host-fed = pinned host memory (upload and host-side checks in the step); device-fed = already "
        "in device memory (device-to-device copy into the graph's input buffer, NaN/Inf scan on the device, labels "
        "checked on the host after a 4-byte-per-sample download).\n\n";

  for (const auto& m : models) {
    md << "## " << m.title << "\n\n";
    md << "`" << m.plan << "`, SGD momentum, " << fmt("%.3g", m.flops / 1e9) << " GFLOP per step (model FLOPs).\n\n";
    md << "| variant | math | ms/step (median) | min | max | steps/s | TFLOP/s | loss first -> last | status |\n";
    md << "|---|---|---:|---:|---:|---:|---:|---|---|\n";
    for (const auto& s : res.steps) {
      if (s.model != m.key) continue;
      const bool ok = s.status == "ok";
      md << "| " << s.variant << " | " << s.math << " | " << (ok ? fmt("%.4f", s.t.median) : "-") << " | "
         << (ok ? fmt("%.4f", s.t.min) : "-") << " | " << (ok ? fmt("%.4f", s.t.max) : "-") << " | "
         << (ok ? fmt("%.0f", 1000.0 / s.t.median) : "-") << " | "
         << (ok ? fmt("%.1f", m.flops / (s.t.median * 1e-3) / 1e12) : "-") << " | "
         << (ok ? fmt("%.4f", s.first_loss) + " -> " + fmt("%.4f", s.last_loss) : "-") << " | " << s.status
         << " |\n";
    }
    md << "\nN = " << (m.key == "launch" ? o.steps : o.wide_steps)
       << " steps per repeat. Host wall-clock time agrees with the event time because every step synchronises.\n\n";
    for (const auto& [key, b] : res.host)
      if (key == m.key)
        md << "Host-side parts of a step, timed alone: batch check (one thread) " << fmt("%.4f", b.check_ms)
           << " ms, upload of inputs + labels from pinned memory " << fmt("%.4f", b.upload_ms) << " ms"
           << (b.status == "ok" ? "" : " (" + b.status + ")") << ".\n\n";

    // GEMM tables
    std::vector<const gemm_sum*> gs;
    for (const auto& g : res.gemms)
      if (g.model == m.key) gs.push_back(&g);
    if (!gs.empty()) {
      md << "GEMMs of one step, through `backend::cuda::gemm` with the trainer's arguments (forward, wgrad with "
            "beta = 1, dgrad"
         << (m.first_dgrad ? ", including the first Linear's dgrad, which the trainer computes because Flatten is "
                             "layer 0"
                           : "; no dgrad for the first layer")
         << "), each timed alone (median per call):\n\n";
      md << "| GEMM | M x N x K (row-major C = op(A) op(B)) | beta |";
      for (const auto* g : gs) md << " " << g->math << " (ms) |";
      md << "\n|---|---|---:|";
      for (std::size_t i = 0; i < gs.size(); ++i) md << "---:|";
      md << "\n";
      const gemm_sum* ref = gs.front();
      for (std::size_t i = 0; i < ref->rows.size(); ++i) {
        const gemm_row& r = ref->rows[i];
        md << "| " << r.name << " | " << r.M << " x " << r.N << " x " << r.K << " | " << fmt("%.0f", r.beta) << " |";
        for (const auto* g : gs) md << " " << (i < g->rows.size() ? fmt("%.4f", g->rows[i].t.median) : "-") << " |";
        md << "\n";
      }
      md << "| **sum** | | |";
      for (const auto* g : gs) md << " **" << (g->status == "ok" ? fmt("%.4f", g->sum) : g->status) << "** |";
      md << "\n| back to back (one stream) | | |";
      for (const auto* g : gs) md << " " << (g->status == "ok" ? fmt("%.4f", g->sequence.median) : "-") << " |";
      md << "\n\n";

      md << "| strata step vs the sum of its GEMMs | math | step (ms) | GEMM sum (ms) | step / GEMM sum |"
         << (m.key == "gemm" ? " goal <= 1.10 |" : "") << "\n|---|---|---:|---:|---:|"
         << (m.key == "gemm" ? "---|" : "") << "\n";
      for (const char* prec : {"bf16", "tf32", "fp32"})
        for (const bool device_data : {true, false})
          for (const bool graphs : {true, false}) {
            const step_row* s = find_step(res, m.key, prec, graphs, device_data);
            const gemm_sum* g = find_gemm(res, m.key, prec);
            if (!s || !g) continue;
            const double ratio = s->t.median / g->sum;
            md << "| " << s->variant << " | " << s->math << " | " << fmt("%.4f", s->t.median) << " | "
               << fmt("%.4f", g->sum) << " | " << fmt("%.3f", ratio) << " |";
            // the goal is stated for the bf16 step; the others are shown for comparison
            if (m.key == "gemm") md << (std::string(prec) != "bf16" ? " -" : ratio <= 1.10 ? " meets" : " misses") << " |";
            md << "\n";
          }
      if (m.key == "gemm")
        for (const auto& [key, b] : res.host)
          if (key == m.key && b.status == "ok")
            if (const step_row* s = find_step(res, m.key, "bf16", true, false); s)
              if (const gemm_sum* g = find_gemm(res, m.key, "bf16"); g)
                md << "\nThe host-fed bf16 graph step includes the host-side parts timed alone above (check + "
                      "upload of the float batch, not overlapped with device work): without them it would be about "
                   << fmt("%.4f", s->t.median - b.check_ms - b.upload_ms) << " ms, "
                   << fmt("%.3f", (s->t.median - b.check_ms - b.upload_ms) / g->sum)
                   << " x its GEMM sum (an estimate; the device-fed row measures it).\n";
      for (const auto& [key, pt] : res.passes) {
        if (key != m.key) continue;
        md << "\nThe bf16 step's other work, pass by pass (the trainer's kernels and shapes, each timed alone, median "
              "per call; GB/s against the measured device-to-device copy, "
           << fmt("%.0f", pt.copy_gbs) << " GB/s):\n\n| pass | calls per step | ms per call | GB/s | of copy | ms per step |\n"
           << "|---|---:|---:|---:|---:|---:|\n";
        double sum = 0;
        for (const auto& r : pt.rows) {
          const double gbs = r.bytes / (r.t.median * 1e-3) / 1e9;
          sum += r.t.median * r.per_step;
          md << "| " << r.name << " | " << r.per_step << " | " << fmt("%.4f", r.t.median) << " | " << fmt("%.0f", gbs)
             << " | " << fmt("%.2f", pt.copy_gbs > 0 ? gbs / pt.copy_gbs : 0.0) << " | "
             << fmt("%.4f", r.t.median * r.per_step) << " |\n";
        }
        md << "| **sum** | | | | | **" << fmt("%.4f", sum) << "** |\n";
        if (const gemm_sum* g = find_gemm(res, m.key, "bf16"); g && pt.status == "ok")
          md << "\nGEMM sum + these passes = " << fmt("%.4f", g->sum + sum) << " ms, "
             << fmt("%.3f", (g->sum + sum) / g->sum) << " x the GEMM sum: the floor for an unfused step.\n";
        if (pt.status != "ok") md << "\n(" << pt.status << ")\n";
      }
      md << "\n";
    }
  }
  return md.str();
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}

std::string to_json(const options& o, const device_info& d, const results& res) {
  std::ostringstream j;
  j.precision(9);
  j << "{\n  \"device\": \"" << json_escape(d.name) << "\",\n  \"driver\": " << d.driver
    << ",\n  \"command\": \"" << json_escape(o.command) << "\",\n  \"steps\": [\n";
  for (std::size_t i = 0; i < res.steps.size(); ++i) {
    const auto& s = res.steps[i];
    j << "    {\"model\": \"" << s.model << "\", \"math\": \"" << s.precision << "\", \"graphs\": "
      << (s.graphs ? "true" : "false") << ", \"device_data\": " << (s.device_data ? "true" : "false") << ", \"ms\": " << s.t.median << ", \"min_ms\": " << s.t.min
      << ", \"max_ms\": " << s.t.max << ", \"wall_ms\": " << s.wall << ", \"first_loss\": " << s.first_loss
      << ", \"last_loss\": " << s.last_loss << ", \"status\": \"" << json_escape(s.status) << "\"}"
      << (i + 1 < res.steps.size() ? "," : "") << "\n";
  }
  j << "  ],\n  \"gemm_sums\": [\n";
  for (std::size_t i = 0; i < res.gemms.size(); ++i) {
    const auto& g = res.gemms[i];
    j << "    {\"model\": \"" << g.model << "\", \"math\": \"" << g.math << "\", \"sum_ms\": " << g.sum
      << ", \"sequence_ms\": " << g.sequence.median << ", \"gemms\": " << g.rows.size() << ", \"status\": \""
      << json_escape(g.status) << "\"}" << (i + 1 < res.gemms.size() ? "," : "") << "\n";
  }
  j << "  ],\n  \"host\": [\n";
  for (std::size_t i = 0; i < res.host.size(); ++i) {
    const auto& [key, b] = res.host[i];
    j << "    {\"model\": \"" << key << "\", \"check_ms\": " << b.check_ms << ", \"upload_ms\": " << b.upload_ms
      << ", \"status\": \"" << json_escape(b.status) << "\"}" << (i + 1 < res.host.size() ? "," : "") << "\n";
  }
  j << "  ]\n}\n";
  return j.str();
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--out FILE.md] [--json FILE.json] [--only launch|gemm] [--warmup N] [--repeats R]\n"
               "          [--steps N] [--wide-steps N] [--batches K] [--no-fp32-wide] [--quick]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--out" && has) o.out = argv[++i];
    else if (a == "--json" && has) o.json = argv[++i];
    else if (a == "--only" && has) o.only = argv[++i];
    else if (a == "--warmup" && has) o.warmup = std::max(3, std::atoi(argv[++i]));
    else if (a == "--repeats" && has) o.repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--steps" && has) o.steps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--wide-steps" && has) o.wide_steps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--batches" && has) o.batches = std::max(1, std::atoi(argv[++i]));
    else if (a == "--no-fp32-wide") o.fp32_wide = false;
    else if (a == "--quick") {
      o.repeats = 3;
      o.steps = 50;
      o.wide_steps = 3;
      o.fp32_wide = false;
    } else return usage(argv[0]);
  }
  if (!o.only.empty() && o.only != "launch" && o.only != "gemm") return usage(argv[0]);
  if (o.out.empty())
    if (const char* dir = std::getenv("OUT"); dir && *dir) o.out = std::string(dir) + "/bench_step.md";
  if (o.json.empty() && !o.out.empty()) {
    o.json = o.out;
    if (o.json.size() > 3 && o.json.compare(o.json.size() - 3, 3, ".md") == 0) o.json.resize(o.json.size() - 3);
    o.json += ".json";
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipping");
    return 77;
  }
  std::puts("bench_step: strata trainer steps on one GPU (launch-bound demo MLP in FP32/TF32; GEMM-bound wide MLP "
            "in bf16 mixed precision and TF32), host-fed and device-fed.");
  try {
    const device_info dev = query_device();
    std::printf("device: %s, driver %s, runtime %s\n", dev.name.c_str(), version(dev.driver).c_str(),
                version(dev.runtime).c_str());
    std::vector<model_desc> models;
    results res;
    if (o.only.empty() || o.only == "launch") {
      const model_desc m = demo_model();
      models.push_back(m);
      const host_batches data(m, o.batches);
      res.host.emplace_back(m.key, time_host_side(o, m, data));
      const device_batches ddata(m, data, o.batches);
      for (const bool tf32 : {false, true}) {
        for (const bool graphs : {true, false})
          res.steps.push_back(time_trainer<Demo>(o, m, data, tf32, graphs, o.steps));
        res.steps.push_back(time_trainer<Demo>(o, m, ddata, tf32, true, o.steps));
      }
      res.gemms.push_back(time_gemms<float>(o, m, "fp32", std::max(o.steps, 20)));
      res.gemms.push_back(time_gemms<float>(o, m, "tf32", std::max(o.steps, 20)));
    }
    if (o.only.empty() || o.only == "gemm") {
      const model_desc m = wide_model();
      models.push_back(m);
      const host_batches data(m, o.batches);
      const device_batches ddata(m, data, o.batches);
      res.host.emplace_back(m.key, time_host_side(o, m, data));
      res.steps.push_back(time_trainer<Wide, bf16>(o, m, ddata, false, true, o.wide_steps));
      res.steps.push_back(time_trainer<Wide, bf16>(o, m, ddata, false, false, o.wide_steps));
      res.steps.push_back(time_trainer<Wide, bf16>(o, m, data, false, true, o.wide_steps));
      res.steps.push_back(time_trainer<Wide>(o, m, ddata, true, true, o.wide_steps));
      res.steps.push_back(time_trainer<Wide>(o, m, data, true, true, o.wide_steps));
      res.steps.push_back(time_trainer<Wide>(o, m, data, true, false, o.wide_steps));
      if (o.fp32_wide) res.steps.push_back(time_trainer<Wide>(o, m, data, false, true, std::max(1, o.wide_steps / 2)));
      res.gemms.push_back(time_gemms<float>(o, m, "tf32", o.wide_steps));
      if (o.fp32_wide) res.gemms.push_back(time_gemms<float>(o, m, "fp32", std::max(1, o.wide_steps / 2)));
      res.gemms.push_back(time_gemms<cu::bf16>(o, m, "bf16", o.wide_steps));
      res.passes.emplace_back(m.key, time_passes(o, m));
    }
    const std::string md = markdown(o, dev, models, res);
    if (!o.out.empty()) {
      std::ofstream f(o.out);
      f << md;
      std::printf("wrote %s\n", o.out.c_str());
    } else {
      std::fputs(md.c_str(), stdout);
    }
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      f << to_json(o, dev, res);
      std::printf("wrote %s\n", o.json.c_str());
    }
    bool ok = true;
    for (const auto& s : res.steps) ok = ok && s.status == "ok";
    for (const auto& g : res.gemms) ok = ok && g.status == "ok";
    for (const auto& h : res.host) ok = ok && h.second.status == "ok";
    for (const auto& pt : res.passes) ok = ok && pt.second.status == "ok";
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step: %s\n", e.what());
    return 1;
  }
}
