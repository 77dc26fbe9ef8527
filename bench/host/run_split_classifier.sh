#!/usr/bin/env bash
# EPL's split classifier (bench/host/bench_split_classifier.cpp): a 100,000-class head split
# over 4 processes beside a replicated ResNet body, against the same layers all replicated;
# memory per device from the plan and the measured step time. The report goes to stdout and
# to bench/results/split_classifier_<date>_<cpu>.md.
#   bash bench/host/run_split_classifier.sh [steps]    (default 5)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=${1:-5}

source bench/host/report.sh
build_bench bench_host_split_classifier

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin="$PWD/build-bench/bench/bench_host_split_classifier"
run=$(cd /tmp && mpiexec --bind-to none --oversubscribe -n 4 "$bin" "$steps")
write_report split_classifier "EPL's split classifier against a replicated one: memory and step time" \
  "bash bench/host/run_split_classifier.sh $steps" "$run"
