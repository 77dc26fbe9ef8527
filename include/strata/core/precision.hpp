#pragma once
// The precision policy: which type each role of a trainer precision T uses.
#include <type_traits>

#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"

namespace strata {

// The types one trainer precision uses:
//   compute: activations, their gradients and the parameters the layers read;
//   master:  parameters the optimizer updates, gradients, optimizer state, the batch;
//   stat:    per-row statistics (softmax max / Σexp / loss, LayerNorm mean / rstd).
// float and double train in one type; bf16 and f16 are mixed precision: 16-bit
// activations and parameter copies for the GEMMs (FP32 accumulation), FP32 master
// weights, FP32 gradients reduced across replicas in FP32, FP32 statistics (Megatron's
// bf16 recipe; for f16, AMP O1's split, where the small range of f16 makes a loss scale
// the usual companion).
template <class T>
struct precision {
  using compute = T;
  using master = T;
  using stat = T;
};
template <>
struct precision<bf16> {
  using compute = bf16;
  using master = float;
  using stat = float;
};
template <>
struct precision<f16> {
  using compute = f16;
  using master = float;
  using stat = float;
};
template <class T>
using master_t = typename precision<T>::master;
template <class T>
using stat_t = typename precision<T>::stat;
// The 16-bit storage types: a kernel loads them, computes in float and rounds its
// outputs once; code written for one is written for both.
template <class T>
inline constexpr bool is_half16_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
// The precisions a trainer trains in (make_trainer<P, T>, Element<T>).
template <class T>
inline constexpr bool is_precision_v = std::is_same_v<T, float> || std::is_same_v<T, double> || is_half16_v<T>;
// Host scalars (alpha, beta) of a GEMM on T: double for double, float otherwise (bf16
// and f16 GEMMs take float scalars, as cuBLASLt does). Every backend's gemm uses it.
template <class T>
using gemm_scalar_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
// True when the trainer keeps a separate master copy of the parameters.
template <class T>
inline constexpr bool is_mixed_v = !std::is_same_v<typename precision<T>::compute, master_t<T>>;

}  // namespace strata
