#!/usr/bin/env bash
# Context parallelism on this machine (bench/host/bench_context.cpp): memory per device at
# Seq 2k-32k under Context<1, 2, 4, 8> (all-gather and ring attention), and a GPT step at Seq 2048 on the same cores as one
# process with 2 threads (and with 1), as Context<2> on 2 processes of 1 thread, and
# (oversubscribed on a 2-core machine) as Context<4> and as Context<2, Split<2>> (CP2 × TP2) on
# 4 processes of 1 thread. The report goes to stdout and to
# bench/results/context_<date>_<cpu>.md.
#   bash bench/host/run_context.sh [steps]    (default 5)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=${1:-5}

source bench/host/report.sh
build_bench bench_host_context

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin="$PWD/build-bench/bench/bench_host_context"
# --bind-to none: Open MPI binds a lone process to one core, which would leave its second thread idle
mpi=(mpiexec --bind-to none --oversubscribe)
run=$(cd /tmp && "${mpi[@]}" -n 1 "$bin" 2 "$steps"
      "${mpi[@]}" -n 1 "$bin" 1 "$steps" | tail -1
      "${mpi[@]}" -n 2 "$bin" 1 "$steps" | tail -1
      "${mpi[@]}" -n 2 "$bin" 1 "$steps" all-to-all | tail -1
      "${mpi[@]}" -n 2 "$bin" 1 "$steps" ring | tail -1
      "${mpi[@]}" -n 4 "$bin" 1 "$steps" | tail -1
      "${mpi[@]}" -n 4 "$bin" 1 "$steps" all-to-all | tail -1
      "${mpi[@]}" -n 4 "$bin" 1 "$steps" ring | tail -1
      "${mpi[@]}" -n 4 "$bin" 1 "$steps" tp2 | tail -1
      "${mpi[@]}" -n 4 "$bin" 1 "$steps" tp2-ring | tail -1)
write_report context "Context parallelism on the host: memory per device and step time" \
  "bash bench/host/run_context.sh $steps" "$run"
