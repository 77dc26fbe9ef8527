#pragma once
// strata: a distributed-training plan as a type. Include this for the whole library.
#include "strata/layers.hpp"
#include "strata/plan/plan.hpp"
#include "strata/plan/report.hpp"
#include "strata/strategy/options.hpp"
#include "strata/strategy/strategy.hpp"

namespace strata {
using namespace strata::layers;
}  // namespace strata
