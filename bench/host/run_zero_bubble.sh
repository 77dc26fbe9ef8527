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

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# Open MPI's shared-memory transport: single-copy (CMA) where the kernel lets the processes
# read each other's memory, else copies through the shared segment (containers without
# ptrace rights). The copying protocol moves a large message in 32 KB fragments, each only
# while both processes are inside MPI, so a message posted before the W's trails behind the
# computation: ZB-V and DualPipeV then measure 4-10% above their simulations (three runs on
# 2026-11-28) against 2-3% with CMA, where the receiver pulls the whole message at once.
bench=$PWD/build-bench/bench/bench_host_zero_bubble
transport="CMA single copy"
if ! run=$(cd /tmp && OMPI_MCA_btl_vader_single_copy_mechanism=cma mpiexec -n 2 --oversubscribe "$bench" "$steps" 2>&1); then
  transport="copies through shared memory (CMA denied here)"
  run=$(cd /tmp && OMPI_MCA_btl_vader_single_copy_mechanism=none mpiexec -n 2 --oversubscribe "$bench" "$steps")
fi
run="$run
Open MPI shared-memory transport: $transport"
write_report zero_bubble "ZB-H1, ZB-V and DualPipeV against 1F1B on the host: a GPT in two pipeline stages on 2 processes" "bash bench/host/run_zero_bubble.sh $steps" "$run"
