#pragma once
// STRATA_HD marks the functions written once for host and device code: per-element
// formulas both backends run (nvcc compiles them for the GPU, g++/clang for the CPU).
#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

// STRATA_HD_INLINE: such a formula that must be inlined into the loops that call it, so that
// they vectorise. The inliner's budget is per translation unit: in a program's TU (a model,
// its trainer and every kernel) g++ left a call per element in GeLU's forward loop and in the
// host attention's exponentials — a quarter of a small GPT's step on the CPU.
#if defined(__CUDACC__)
#define STRATA_HD_INLINE __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define STRATA_HD_INLINE [[gnu::always_inline]] inline
#else
#define STRATA_HD_INLINE inline
#endif
