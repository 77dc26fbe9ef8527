#pragma once
// The kernel suite: every kernel family of a strata backend (the host backend, the
// CUDA backend) checked once, against independent float64 references computed here
// by plain loops, on random inputs and several shapes (odd ones included), outputs
// poisoned with NaN first so an element a kernel forgets to write fails.
//
// Instantiation: a test file chooses the backend, then includes this header:
//
//   namespace kernel_suite {
//   using backend = strata::backend::Host;  // anything with the Backend interface
//   }
//   #include "../kernels/kernel_suite.hpp"
//
// The suite only uses what every backend offers: B::allocate / upload / download /
// synchronize, a default-constructed B::queue, and the kernels as free functions
// found by argument-dependent lookup on the queue. What only one backend has (thread
// counts, argument checks that throw before writing, device error words, TF32,
// cuBLASLt epilogues, graphs) is tested next to that backend.
//
// Tolerances:
//   float and double outputs   norm-wise relative error ||got - ref|| / ||ref||:
//                              float 1e-5 (summation order, expf/tanhf, FMA), double 1e-12
//   bf16 outputs               element-wise within one bf16 ulp of the reference rounded
//                              to bf16 (the kernel computes in float and rounds once; a
//                              float intermediate may land across a rounding boundary),
//                              plus a small absolute floor where float intermediates
//                              cancel (activation gradients, LayerNorm dx, the label
//                              column of dlogits)
//   float statistics and       element-wise 1e-5 relative plus an absolute floor scaled
//   gradients of bf16 kernels  to the sum (row statistics, bias / LayerNorm / embedding
//                              gradients)
//   bf16 GEMM                  element-wise against the terms' magnitude m = |alpha|
//                              sum|ab| + |beta c|: float output 2^-12 m (an FP32 sum in any
//                              order, truncating adders and split-K included), bf16 output
//                              and gemm_bias_act 2^-5 m (split-K partials, the product before
//                              the bias and the result may each be rounded to bf16); both
//                              outputs also norm-wise 2e-2 (bf16 storage accuracy)
//   conversions, copies,       bit-exact (cast_elements; NaN only as NaN), embedding
//   lookups                    forward; embedding backward bit-identical to adding the
//                              rows of one id in row order in the gradient type; head
//                              permutations; position backward bit-identical to adding
//                              each position's rows in row order in double, rounded once
//   reductions to double       1e-12 of sum|x| (sum) or of sum x^2 (sum_squares)
//   optimizer state that may   element-wise: float 1e-5 relative plus 1e-5 absolute,
//   cancel (m, velocity)       double 1e-12 plus 1e-12 (inputs of magnitude 1)
//   finite differences         1e-6 (double, central differences with h = 1e-6)
#include "kernel_suite_attention.hpp"
#include "kernel_suite_flash.hpp"
#include "kernel_suite_common.hpp"
#include "kernel_suite_elementwise.hpp"
#include "kernel_suite_gemm.hpp"
#include "kernel_suite_norm.hpp"
#include "kernel_suite_optimizer.hpp"
#include "kernel_suite_softmax.hpp"
