#pragma once
// All built-in layers.
#include "strata/layers/activation.hpp"
#include "strata/layers/attention.hpp"
#include "strata/layers/embedding.hpp"
#include "strata/layers/layer.hpp"
#include "strata/layers/layernorm.hpp"
#include "strata/layers/linear.hpp"
#include "strata/layers/loss.hpp"
#include "strata/layers/moe.hpp"
#include "strata/layers/position.hpp"
#include "strata/layers/residual.hpp"
#include "strata/core/shape.hpp"
