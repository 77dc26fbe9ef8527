#pragma once
// How a kernel call reaches a backend: the three layers every kernel family has (CUB's
// device -> dispatch -> kernel, Kokkos' parallel_for -> Impl::ParallelFor<..., Cuda>).
//
//   front      backend/<family>.hpp, written once for every backend: each entry point's
//              signature, contract, element-type static_asserts and argument checks (null
//              pointers, sizes; an empty problem returns before anything else). It then calls
//   dispatch   impl::<family>_kernels<Queue>::<entry>(q, ...), a class template the front
//              declares and each backend specialises for its queue type;
//   backend    host/<family>.hpp, cuda/<family>.cuh: the specialisation derives from the
//              backend's struct of static member templates that do the work (thread pool and
//              CBLAS; CUDA kernels, cuBLASLt, CUB) on arguments the front has checked.
// Everything is a template resolved at compile time: no virtual call, no copy, and the front
// inlines into its caller, so a kernel call costs what its implementation costs.
//
// Lookup. Layers, the executor and tests call kernels unqualified with the queue first
// (`copy(q, n, x, y)`, `gemm(q, ...)`, `adam_step(q, ...)`). The fronts live in the inline
// namespace strata::backend::kernels and every backend's queue derives from the empty
// kernels::queue_base: a base class's namespace is associated with the queue, so
// argument-dependent lookup finds the fronts. Each backend namespace also says `using
// namespace kernels`, so the qualified spellings (host::gemm(q, ...), cuda::fill(q, ...))
// name the same functions. A backend declares no namespace-scope function with a front's
// name (its implementations are static members, which lookup never finds), so no call is
// ambiguous; a host-only convenience overload of a front's name (host::all_finite(n, x))
// comes with `using kernels::<name>` beside it.
//
// Conventions of every front:
//  * the queue comes first; work is ordered on it (on the host: done on return; on a device:
//    enqueued, and only the calls that return a host value, which say so, wait for it);
//  * raw pointers + element counts, row-major, contiguous rows unless an ld is given;
//    "rows x cols" means element (r, c) lives at p[r * cols + c];
//  * T, the element type of activations and parameters, is float, double, bf16 or f16
//    (is_elem_v). bf16 and f16 are storage types (is_half16_v): a kernel loads them,
//    computes in float (compute_t) and rounds its 16-bit outputs to nearest even. Row
//    statistics (S) and parameter gradients (G) have their own real type, so a 16-bit step
//    writes float statistics and float master gradients; for float and double S = G = T;
//  * hyper-parameters are passed as double and rounded to T where they meet tensor data
//    (what PyTorch does with Python floats);
//  * an output may alias an input only where an entry point says so;
//  * invalid arguments throw std::invalid_argument ("strata: <kernel>: <what>") before any
//    output is written; an out-of-range label or id throws std::out_of_range (a device
//    backend reports it later: see its header).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "strata/core/precision.hpp"

namespace strata::backend {

inline namespace kernels {
// The empty base of every backend's queue (see the file comment).
struct queue_base {};
// A queue some backend specialises the kernel families for.
template <class Q>
concept kernel_queue = std::derived_from<Q, queue_base>;
}  // namespace kernels

namespace detail {

template <class T>
inline constexpr bool is_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;
// Element types of activations: the reals and the 16-bit storage types.
template <class T>
inline constexpr bool is_elem_v = is_real_v<T> || is_half16_v<T>;
// Arithmetic type for elementwise work on T (bf16 and f16 compute in float).
template <class T>
using compute_t = std::conditional_t<is_half16_v<T>, float, T>;

[[noreturn]] inline void fail(const char* kernel, const std::string& what) {
  throw std::invalid_argument(std::string("strata: ") + kernel + ": " + what);
}
inline void need(bool ok, const char* kernel, const char* what) {
  if (!ok) fail(kernel, what);
}

// The error of a label (or token id) outside [lo, hi), with the first row that had one:
// the host throws it at once, a device backend when it reads its error word back.
inline std::out_of_range bad_label(const char* kernel, std::int64_t label, std::size_t row, std::int64_t lo,
                                   std::int64_t hi) {
  return std::out_of_range(std::string("strata: ") + kernel + ": label " + std::to_string(label) + " at row " +
                           std::to_string(row) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           ")");
}

}  // namespace detail

}  // namespace strata::backend
