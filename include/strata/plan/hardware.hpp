#pragma once
// Hardware descriptions for the planner's cost model (plan/cost.hpp): peak FLOP/s per
// element type, HBM bandwidth, memory, and the links a collective crosses — within a
// node (NVLink) and between nodes (the node's network adapters shared by its devices).
// Values, not behaviour: a description is a struct with `static constexpr hardware value`.
#include <array>
#include <string_view>
#include <type_traits>

#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"

namespace strata {

// How the attention core (scores = q kᵀ, softmax, probabilities · v) is run: the score
// tensor [heads, s, s] written to HBM and read back by separate kernels (Megatron-LM 2021),
// or kept on chip by one fused kernel (FlashAttention; strata's own layer). Software, not
// silicon, but the cost model needs it beside the hardware: it decides the HBM traffic.
enum class attention_kernels : unsigned char { materialized, flash };

// Where a micro-batch's weight gradients go (hardware::accumulate_grads).
enum class grad_accumulation : unsigned char { in_place, every, after_first };

struct hardware {
  std::string_view name{};
  double flops_fp64 = 0, flops_fp32 = 0, flops_bf16 = 0, flops_fp16 = 0;  // dense peak FLOP/s
  // The fraction of peak one GEMM tile sustains when every SM has a tile (a full wave); the
  // cost model (plan/cost.hpp) multiplies it by the tile/wave quantization of each GEMM's
  // shape over sm_count SMs, trying each of gemm_tiles (cuBLAS's heuristic picks among such
  // shapes). Layers whose bytes outweigh their FLOPs run at hbm_bytes_per_s · hbm_efficiency.
  double gemm_efficiency = 1.0;
  int sm_count = 1;
  std::array<std::array<int, 2>, 3> gemm_tiles{{{256, 128}, {128, 256}, {128, 128}}};  // output tile rows × cols
  double hbm_bytes_per_s = 0;   // data sheet
  double hbm_efficiency = 1.0;  // the fraction of it a streaming kernel (a device copy) sustains
  // The fraction of it a GEMM kernel sustains where its bytes outweigh its FLOPs (a small
  // inner dimension, or a skinny operand); 0: hbm_efficiency
  double gemm_hbm_efficiency = 0;
  long long memory_bytes = 0;
  int devices_per_node = 1;
  double intra_bytes_per_s = 0, intra_latency_s = 0;  // per device and direction, inside a node
  double inter_bytes_per_s = 0, inter_latency_s = 0;  // per device and direction, between nodes
  // The latencies above are per ring step (a message to the next device); a collective call
  // pays this once besides (NCCL's base latency of the algorithm and protocol).
  double collective_latency_s = 0;
  // The fraction of those link rates a large NCCL transfer sustains: nccl-tests' bus
  // bandwidth (busbw) over the link rate, from published runs.
  double intra_efficiency = 1.0, inter_efficiency = 1.0;
  // The same fraction for a point-to-point message (a pipeline's activations, a context
  // ring's blocks); 0: the collectives' above. A calibrated description (runtime/calibrate.hpp)
  // measures the sendrecv itself (1) and fits the collectives' apart: MPI's all-reduce on a
  // host runs at a fraction of a sendrecv's rate.
  double p2p_efficiency = 0;
  // The software the predicted run uses for attention; attention_dropout: dropout on the
  // probabilities (a read, a write and a 1-byte mask per score in each pass; materialized only).
  attention_kernels attention = attention_kernels::flash;
  bool attention_dropout = false;
  // How the predicted runtime carries weight gradients from the backward to the optimizer
  // (strata's own: all defaults). `accumulate_grads`: strata's wgrad GEMMs add into the
  // gradient in place (beta = 1), nothing extra; PyTorch-based runtimes write each
  // micro-batch's gradient to a fresh tensor and add it in a pass of its own — a read and a
  // write of the accumulator and a read of the new gradient per parameter — on `every`
  // micro-batch (a hook adding into a zeroed buffer: Megatron-LM's local DDP with its
  // contiguous main_grad buffer, main_grad.add_(grad)) or on every one `after_first`
  // (autograd's .grad keeps the first and adds the rest). `grad_bytes`: the accumulator's and
  // the data-parallel reduction's element size (0: the masters', as strata).
  // `grad_bucket_bytes`: nonzero when the reduction runs in buckets of that size while the last
  // micro-batch's backward runs (PyTorch's DDP, priced so without a pipeline only; 0: after the
  // backward, as strata and Megatron-LM's local DDP).
  grad_accumulation accumulate_grads = grad_accumulation::in_place;
  int grad_bytes = 0;
  double grad_bucket_bytes = 0;
  // The bytes the predicted runtime's optimizer step moves per parameter it updates; 0:
  // strata's fused Adam (masters, two moments and the gradient read, the three written, in
  // master precision, and the compute-type weights written).
  double optimizer_bytes_per_param = 0;
  // Passes over the gradients around their data-parallel reduction, in bytes per parameter
  // (a runtime that flattens them into one buffer, scales it and copies the result back:
  // Megatron-LM's local DDP without contiguous buffers); 0: none, as strata reduces them
  // where they are. Charged where a data group reduces.
  double grad_pack_bytes_per_param = 0;
  // the gradients' element size for masters of `master_bytes`
  constexpr double gradient_bytes(double master_bytes) const { return grad_bytes > 0 ? grad_bytes : master_bytes; }
  // Devices that share compute (more processes than cores on a CPU machine: the rates above
  // are each one's share when all run): a device that waits lends its share to the others,
  // so a pipeline's bubble and the stages' imbalance cost nothing — the step computes as
  // the stages' mean (plan/cost.hpp's estimate).
  bool shared_compute = false;

  // Peak FLOP/s for activations of element type T (bf16/f16 on tensor cores).
  template <class T>
  constexpr double peak_flops() const {
    if constexpr (std::is_same_v<T, bf16>) return flops_bf16;
    else if constexpr (std::is_same_v<T, f16>) return flops_fp16;
    else if constexpr (std::is_same_v<T, double>) return flops_fp64;
    else return flops_fp32;
  }
};

namespace hw {

// Measured on our H100 (bench/results/gpu_nvidia_h100_80gb_hbm3_2026-11-24.md) and carried
// to the A100 as fractions, since both run cuBLAS's tensor-core kernels and stream HBM through
// the same kind of memory system (an argument, not a measurement on an A100):
// - gemm_efficiency 0.806: the twelve bf16 GEMMs of 8192×4096×4096 / 4096×4096×8192 took
//   4.263 ms in all, 773.7 TFLOP/s = 0.782 of 989; on 132 SMs those shapes fill 1024 (or 512)
//   output tiles of 256×128 into 8 (4) waves, 0.970 of the SM-time, so a full wave runs at
//   0.782 / 0.970 = 0.806 of peak.
// - hbm_efficiency 0.90: a 1 GiB device-to-device copy moved 3012.8 GB/s (read + write) of
//   the data sheet's 3350.
// - gemm_hbm_efficiency 0.486: the three memory-bound bf16 GEMMs of that file (8192×10×4096,
//   4096×10×8192 and 8192×4096×10, each 67.35 MB of A, B and C) moved 1635, 1791 and 1458
//   GB/s, 0.488, 0.535 and 0.435 of 3350: cuBLAS's GEMM kernels stream about half of what a
//   copy does, whatever the number of output tiles (the first two have 32 and 16 tiles of
//   256×128 for 132 SMs, the third 1024).
inline constexpr double measured_gemm_efficiency = 0.806;
inline constexpr double measured_hbm_efficiency = 0.90;
inline constexpr double measured_gemm_hbm_efficiency = 0.486;

// Published nccl-tests runs (the bus bandwidth of all_reduce_perf at 1 GiB and up):
// - 8 × A100-SXM4-80GB on NVLink/NVSwitch: busbw about 200 GB/s of NVLink 3's 300 GB/s per
//   direction (github.com/NVIDIA/nccl-tests/issues/149, 2023);
// - 3 nodes of 8 × A100-SXM4-40GB, 4 HDR adapters per node (100 GB/s): busbw peaking at 96
//   GB/s (github.com/NVIDIA/nccl-tests/issues/119, 2022);
// - H100 NVLink 4: "with the protocol overhead (~20%) NCCL can get an effective NVLink
//   bandwidth of 370GB/s" of the 450 line rate (NCCL's maintainer, nccl-tests issue 212,
//   2024). The network figure is carried to the H100's NDR adapters (an argument, not a
//   measurement).
inline constexpr double a100_nvlink_efficiency = 200.0 / 300.0;
inline constexpr double h100_nvlink_efficiency = 370.0 / 450.0;
inline constexpr double infiniband_efficiency = 96.0 / 100.0;

// NCCL's latency model for the ring algorithm with its Simple protocol, the one for
// bandwidth-bound messages (src/graph/tuning.cc, the same in NCCL 2.8.3, 2.9.6 and 2.10.3,
// 2020-2021): a base latency of 8.4 µs per call, and per ring step 3.4 µs over NVLink and
// 9.6 µs over the network.
inline constexpr double nccl_call_latency = 8.4e-6, nccl_nvlink_step = 3.4e-6, nccl_network_step = 9.6e-6;

// An 8-GPU node: NVLink inside it, one network adapter per GPU between nodes; fp16 peak =
// bf16 peak; NCCL's latencies.
constexpr hardware eight_gpu_node(std::string_view name, double bf16, double fp32, double fp64, int sms, double hbm,
                                  long long memory, double nvlink_each_way, double nic_each_way,
                                  double nvlink_efficiency) {
  return hardware{.name = name, .flops_fp64 = fp64, .flops_fp32 = fp32, .flops_bf16 = bf16, .flops_fp16 = bf16,
                  .gemm_efficiency = measured_gemm_efficiency, .sm_count = sms, .hbm_bytes_per_s = hbm,
                  .hbm_efficiency = measured_hbm_efficiency, .gemm_hbm_efficiency = measured_gemm_hbm_efficiency,
                  .memory_bytes = memory, .devices_per_node = 8,
                  .intra_bytes_per_s = nvlink_each_way, .intra_latency_s = nccl_nvlink_step,
                  .inter_bytes_per_s = nic_each_way, .inter_latency_s = nccl_network_step,
                  .collective_latency_s = nccl_call_latency,
                  .intra_efficiency = nvlink_efficiency, .inter_efficiency = infiniband_efficiency};
}

// NVIDIA A100 SXM4 80 GB in a DGX A100 / Selene node (data sheet): 312 TFLOP/s dense
// bf16/fp16, 19.5 TFLOP/s fp32 (non-tensor), 19.5 fp64 tensor; 108 SMs; HBM2e 2039 GB/s;
// NVLink 3 (600 GB/s bidirectional per GPU: 300 GB/s each way); 8 × 200 Gb/s HDR
// InfiniBand per node, one adapter per GPU: 25 GB/s each way.
struct A100_80GB {
  static constexpr hardware value =
      eight_gpu_node("A100-SXM4-80GB", 312e12, 19.5e12, 19.5e12, 108, 2039e9, 80LL << 30, 300e9, 25e9,
                     a100_nvlink_efficiency);
};

// NVIDIA H100 SXM5 80 GB (data sheet): 989 TFLOP/s dense bf16/fp16, 67 fp32, 67 fp64
// tensor; 132 SMs; HBM3 3.35 TB/s; NVLink 4 (900 GB/s bidirectional: 450 each way);
// 8 × 400 Gb/s NDR InfiniBand per node: 50 GB/s each way per GPU.
struct H100_80GB {
  static constexpr hardware value =
      eight_gpu_node("H100-SXM5-80GB", 989e12, 67e12, 67e12, 132, 3.35e12, 80LL << 30, 450e9, 50e9,
                     h100_nvlink_efficiency);
};

}  // namespace hw
}  // namespace strata
