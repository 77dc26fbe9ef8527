#!/usr/bin/env bash
# A checkpoint every N steps (bench/host/bench_checkpoint.cpp): the step time of a GPT on 2
# processes with no saves, synchronous saves and asynchronous saves, in one run, as ratios.
# The report goes to stdout and to bench/results/checkpoint_<date>_<cpu>.md.
#   bash bench/host/run_checkpoint.sh [steps per pass] [N]    (default 40 and 5)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=${1:-40} every=${2:-5}

source bench/host/report.sh
build_bench bench_host_checkpoint

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# one BLAS thread per rank: the two ranks keep both cores of a 2-CPU machine busy
run=$(cd /tmp && STRATA_HOST_THREADS=1 mpiexec -n 2 --oversubscribe -x STRATA_HOST_THREADS \
  "$OLDPWD/build-bench/bench/bench_host_checkpoint" "$steps" "$every")
write_report checkpoint "A checkpoint every $every steps: synchronous and asynchronous saves" \
  "bash bench/host/run_checkpoint.sh $steps $every" "$run"
