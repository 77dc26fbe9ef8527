// The kernel suite (tests/kernels) on the host backend: every kernel family against
// float64 references. Host-only behaviour (thread counts, argument checks) is in
// test_host_kernels.cpp and test_host_gemm.cpp.
// strata-test: optimized
#include <doctest/doctest.h>

#include "strata/backend/host/backend.hpp"
#include "strata/backend/host/kernels.hpp"

namespace kernel_suite {
using backend = strata::backend::Host;
}  // namespace kernel_suite

#include "../kernels/kernel_suite.hpp"
