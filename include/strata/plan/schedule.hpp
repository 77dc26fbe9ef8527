#pragma once
// Pipeline schedules: static per-stage instruction lists (plan/program.hpp) that
// plan/simulate.hpp proves. A schedule is a tag type carrying its builder, its name and its
// traits (plan/schedule_traits.hpp); the built-in ones, one header each with their builder,
// are GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V and DualPipeV. A new built-in schedule is its header
// in plan/schedules/, a line here, and its tests.
#include "strata/plan/program.hpp"
#include "strata/plan/schedule_emit.hpp"
#include "strata/plan/schedule_slots.hpp"
#include "strata/plan/schedule_traits.hpp"
#include "strata/plan/schedules/dual_pipe_v.hpp"
#include "strata/plan/schedules/gpipe.hpp"
#include "strata/plan/schedules/interleaved.hpp"
#include "strata/plan/schedules/one_f_one_b.hpp"
#include "strata/plan/schedules/zb_h1.hpp"
#include "strata/plan/schedules/zb_v.hpp"
#include "strata/plan/simulate.hpp"
#include "strata/strategy/options.hpp"
