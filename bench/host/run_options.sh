#!/usr/bin/env bash
# The training options' cost on this machine (bench/host/bench_options.cpp): step time of
# the main job's GPT as 2 processes of data parallelism with each option, relative to the
# plain step measured in the same run, and checkpoint save/load against plain file I/O.
# The report goes to stdout and to bench/results/options_<date>_<cpu>.md.
#   bash bench/host/run_options.sh [steps]    (default 10 per pass)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=${1:-10}

source bench/host/report.sh
build_bench bench_host_options

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run=$(cd /tmp && mpiexec -n 2 --oversubscribe "$OLDPWD/build-bench/bench/bench_host_options" "$steps")
write_report options "Training options on the host: step time and checkpoint I/O" "bash bench/host/run_options.sh $steps" "$run"
