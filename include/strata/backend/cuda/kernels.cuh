// strata-header: cuda-only
#pragma once
// strata CUDA backend: every kernel family's CUDA implementation, with its front
// (backend/<family>.hpp: the entry points, the same on every backend, called with a
// cuda::queue first and device pointers; see dispatch.hpp), the CUDA-only extras
// (gemm_wgrad_bias, the multi-tensor optimizers, raise_device_errors), and the backend
// checked against the Backend concept.
#include "strata/backend/cuda/attention.cuh"
#include "strata/backend/cuda/batchnorm.cuh"
#include "strata/backend/cuda/convolution.cuh"
#include "strata/backend/cuda/cuda.hpp"
#include "strata/backend/cuda/elementwise.cuh"
#include "strata/backend/cuda/embedding.cuh"
#include "strata/backend/cuda/gemm.cuh"
#include "strata/backend/cuda/gemm_epilogue.cuh"
#include "strata/backend/cuda/moe.cuh"
#include "strata/backend/cuda/normalization.cuh"
#include "strata/backend/cuda/optimizer.cuh"
#include "strata/backend/cuda/reduction.cuh"
#include "strata/backend/cuda/softmax.cuh"
#include "strata/core/backend.hpp"

static_assert(strata::Backend<strata::backend::Cuda>, "the CUDA backend must model strata::Backend");
