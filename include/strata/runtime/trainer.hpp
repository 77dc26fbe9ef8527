#pragma once
// Training on CPUs in one include: the trainer (exec/trainer.hpp), the host backend and
// its world (init<Host>: MPI when built with STRATA_WITH_MPI, else one process).
#include "strata/exec/trainer.hpp"
#include "strata/runtime/host.hpp"
