#pragma once
// strata host backend: every kernel family's host implementation, with its front
// (backend/<family>.hpp: the entry points, the same on every backend; see dispatch.hpp).
#include "strata/backend/host/attention.hpp"
#include "strata/backend/host/batchnorm.hpp"
#include "strata/backend/host/convolution.hpp"
#include "strata/backend/host/elementwise.hpp"
#include "strata/backend/host/embedding.hpp"
#include "strata/backend/host/gemm.hpp"
#include "strata/backend/host/moe.hpp"
#include "strata/backend/host/normalization.hpp"
#include "strata/backend/host/optimizer.hpp"
#include "strata/backend/host/reduction.hpp"
#include "strata/backend/host/softmax.hpp"
