#!/usr/bin/env bash
# ZB-H1, ZB-V and DualPipeV against 1F1B on this machine (bench/host/bench_zero_bubble.cpp): a GPT in two
# pipeline stages on 2 MPI processes, step times and their ratio next to the closed
# forms' prediction. The report goes to stdout and to bench/results/zero_bubble_<date>_<cpu>.md.
#   bash bench/host/run_zero_bubble.sh [steps]    (default 5 per pass)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=${1:-5}

source bench/host/report.sh
build_bench bench_host_zero_bubble

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
run=$(cd /tmp && mpiexec -n 2 --oversubscribe "$OLDPWD/build-bench/bench/bench_host_zero_bubble" "$steps")
write_report zero_bubble "ZB-H1, ZB-V and DualPipeV against 1F1B on the host: a GPT in two pipeline stages on 2 processes" "bash bench/host/run_zero_bubble.sh $steps" "$run"
