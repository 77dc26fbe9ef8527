#!/usr/bin/env bash
# Colossal-AI's tensor modes on this machine (bench/host/bench_tensor_modes.cpp): a GPT
# block on 8 MPI processes as 1D, 2D (x DP2), 2.5D and 3D tensor parallelism, step time
# and bytes per device counted against the planner's prediction. The report goes to
# stdout and to bench/results/tensor_modes_<date>_<cpu>.md.
#   bash bench/host/run_tensor_modes.sh [steps]    (default 10 per pass)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=${1:-10}

source bench/host/report.sh
build_bench bench_host_tensor_modes

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
run=$(cd /tmp && mpiexec -n 8 --oversubscribe "$OLDPWD/build-bench/bench/bench_host_tensor_modes" "$steps")
write_report tensor_modes "Tensor modes on the host: a GPT block on 8 processes (they oversubscribe the CPUs)" "bash bench/host/run_tensor_modes.sh $steps" "$run"
