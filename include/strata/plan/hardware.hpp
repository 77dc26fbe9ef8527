#pragma once
// Hardware descriptions for the planner's cost model (plan/cost.hpp): peak FLOP/s per
// element type, HBM bandwidth, memory, and the links a collective crosses — within a
// node (NVLink) and between nodes (the node's network adapters shared by its devices).
// Values, not behaviour: a description is a struct with `static constexpr hardware value`.
#include <string_view>
#include <type_traits>

#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"

namespace strata {

struct hardware {
  std::string_view name{};
  double flops_fp64 = 0, flops_fp32 = 0, flops_bf16 = 0, flops_fp16 = 0;  // dense peak FLOP/s
  // The fraction of peak a large matrix multiplication sustains (cuBLAS on big GEMMs); the
  // one number here that is not a data-sheet value. Layers whose bytes outweigh their
  // FLOPs run at hbm_bytes_per_s instead (a roofline per layer call).
  double gemm_efficiency = 1.0;
  double hbm_bytes_per_s = 0;
  long long memory_bytes = 0;
  int devices_per_node = 1;
  double intra_bytes_per_s = 0, intra_latency_s = 0;  // per device and direction, inside a node
  double inter_bytes_per_s = 0, inter_latency_s = 0;  // per device and direction, between nodes

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

// An 8-GPU node: NVLink inside it, one network adapter per GPU between nodes; fp16 peak =
// bf16 peak; gemm_efficiency 0.80 and ring-step latencies of 5 µs (NVLink), 10 µs (network).
constexpr hardware eight_gpu_node(std::string_view name, double bf16, double fp32, double fp64, double hbm,
                                  long long memory, double nvlink_each_way, double nic_each_way) {
  return hardware{.name = name, .flops_fp64 = fp64, .flops_fp32 = fp32, .flops_bf16 = bf16, .flops_fp16 = bf16,
                  .gemm_efficiency = 0.80, .hbm_bytes_per_s = hbm, .memory_bytes = memory, .devices_per_node = 8,
                  .intra_bytes_per_s = nvlink_each_way, .intra_latency_s = 5e-6,
                  .inter_bytes_per_s = nic_each_way, .inter_latency_s = 10e-6};
}

// NVIDIA A100 SXM4 80 GB in a DGX A100 / Selene node (data sheet): 312 TFLOP/s dense
// bf16/fp16, 19.5 TFLOP/s fp32 (non-tensor), 19.5 fp64 tensor; HBM2e 2039 GB/s; NVLink 3
// (600 GB/s bidirectional per GPU: 300 GB/s each way); 8 × 200 Gb/s HDR InfiniBand per
// node, one adapter per GPU: 25 GB/s each way.
struct A100_80GB {
  static constexpr hardware value =
      eight_gpu_node("A100-SXM4-80GB", 312e12, 19.5e12, 19.5e12, 2039e9, 80LL << 30, 300e9, 25e9);
};

// NVIDIA H100 SXM5 80 GB (data sheet): 989 TFLOP/s dense bf16/fp16, 67 fp32, 67 fp64
// tensor; HBM3 3.35 TB/s; NVLink 4 (900 GB/s bidirectional: 450 each way); 8 × 400 Gb/s
// NDR InfiniBand per node: 50 GB/s each way per GPU.
struct H100_80GB {
  static constexpr hardware value =
      eight_gpu_node("H100-SXM5-80GB", 989e12, 67e12, 67e12, 3.35e12, 80LL << 30, 450e9, 50e9);
};

}  // namespace hw
}  // namespace strata
