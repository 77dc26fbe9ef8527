#pragma once
// STRATA_HD marks the functions written once for host and device code: per-element
// formulas both backends run (nvcc compiles them for the GPU, g++/clang for the CPU).
#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif
