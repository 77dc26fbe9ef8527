#!/usr/bin/env bash
# Causal attention, forward + backward, float32, one sequence of 8 heads of 64 at Seq 512
# to 8192: strata's host flash attention against PyTorch's CPU scaled_dot_product_attention
# on the same threads, alternated twice (each keeps its best). Report to stdout and to
# bench/results/attention_<date>_<cpu>.md.
#   bash bench/host/run_attention.sh [threads]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
threads=${1:-$(nproc)}
source bench/host/report.sh
build_bench bench_host_attention
bench_venv
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for pass in 1 2; do
  ./build-bench/bench/bench_host_attention "$threads" | tee -a "$out/strata"
  "$venv/bin/python" bench/host/pytorch_attention.py --threads "$threads" | tee -a "$out/torch"
done
best() { awk -v s="$2" '$3 == s { if (m == "" || $10 < m) m = $10 } END { print m }' "$1"; }
table=$({
  echo "PyTorch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'), $threads threads; ms are the best forward + backward"
  echo
  printf "%-6s %14s %14s %22s %18s\n" seq "strata ms" "PyTorch ms" "speed strata/PyTorch" "strata kept MiB"
  for s in 512 1024 2048 4096 8192; do
    a=$(best "$out/strata" "$s"); b=$(best "$out/torch" "$s")
    kept=$(awk -v s="$s" '$3 == s { print $15; exit }' "$out/strata")
    printf "%-6s %14s %14s %22s %18s\n" "$s" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')" "$kept"
  done
})
write_report attention "Causal attention forward + backward: strata host flash attention vs PyTorch CPU SDPA" \
  "bash bench/host/run_attention.sh $threads" "$table"
