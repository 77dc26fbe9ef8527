#!/usr/bin/env bash
# Does the search rank plans as they run on this machine? (bench/host/bench_ranking.cpp)
# Its configurations of a small GPT on 2, 4 and 8 processes (more processes than cores share
# them: every process measures its share in the calibration, and the description says the
# compute is shared), the search's estimate and the plan's prediction on the calibrated
# description beside the measured step (the fastest of `passes` passes of `steps` steps).
# The report goes to stdout and to bench/results/ranking_<date>_<cpu>.md.
#   bash bench/host/run_ranking.sh [steps] [passes]    (default 5 and 3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=${1:-5}
passes=${2:-3}

source bench/host/report.sh
build_bench bench_host_ranking2 bench_host_ranking4 bench_host_ranking8

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# --bind-to none: Open MPI would bind each of 2 processes to a core of its choosing
mpi=(mpiexec --bind-to none --oversubscribe)
run=$(cd /tmp && for n in 2 4 8; do
        echo "## $n processes"
        echo
        "${mpi[@]}" -n $n "$OLDPWD/build-bench/bench/bench_host_ranking$n" "$steps" "$passes"
        echo
      done)
write_report ranking "The search's ranking against measured steps" "bash bench/host/run_ranking.sh $steps $passes" "$run"
