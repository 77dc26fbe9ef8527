// requires: cuda
// The kernel suite (tests/kernels) on the CUDA backend: every kernel family against
// float64 references (tolerances in tests/kernels/kernel_suite.hpp). CUDA-only
// behaviour (TF32, cuBLASLt epilogues, device error words, graphs) is in
// test_cuda_kernels.cu. Exit code 77 (ctest: skipped) when there is no CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "strata/backend/cuda/kernels.cuh"

namespace kernel_suite {
using backend = strata::backend::Cuda;
}  // namespace kernel_suite

#include "../kernels/kernel_suite.hpp"

#include "doctest_main.hpp"
