#!/usr/bin/env bash
# A Llama-style training step (tied embeddings, RMSNorm, rotary grouped-query attention,
# SwiGLU; float32, AdamW, one process): strata (bench_llama.cpp) against the same model in
# PyTorch (pytorch_llama.py) on the same threads, alternated twice (each keeps its best),
# at the main job's shape and a wider one. Report to stdout and to
# bench/results/llama_<date>_<cpu>.md.
#   bash bench/host/run_llama.sh [threads]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
threads=${1:-$(nproc)}
source bench/host/report.sh
build_bench bench_host_llama
bench_venv
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for pass in 1 2; do
  ./build-bench/bench/bench_host_llama "$threads" | tee -a "$out/strata"
  "$venv/bin/python" bench/host/pytorch_llama.py --threads "$threads" | tee -a "$out/torch"
  "$venv/bin/python" bench/host/pytorch_llama.py --threads "$threads" --config wide --batches 2,4 --steps 4 --warmup 1 |
    tee -a "$out/torch"
done
# best ms/step of file $1 for config $2 at batch $3 ("<fw> <config> sequences <B> threads <T> <ms> ms/step")
best() { awk -v c="$2" -v b="$3" '$2 == c && $4 == b { if (m == "" || $7 < m) m = $7 } END { print m }' "$1"; }
table=$({
  echo "PyTorch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'), $threads threads; ms/step are the best of two passes"
  echo
  printf "%-6s %-10s %12s %12s %16s %16s %22s\n" config sequences "strata ms" "PyTorch ms" "strata tok/s" "PyTorch tok/s" \
    "speed strata/PyTorch"
  for cb in main:8:128 main:16:128 main:32:128 wide:2:512 wide:4:512; do
    IFS=: read -r c b s <<< "$cb"
    a=$(best "$out/strata" "$c" "$b"); t=$(best "$out/torch" "$c" "$b")
    printf "%-6s %-10s %12s %12s %16s %16s %22s\n" "$c" "$b" "$a" "$t" \
      "$(awk -v m="$a" -v b="$b" -v s="$s" 'BEGIN { printf "%.0f", b * s / m * 1e3 }')" \
      "$(awk -v m="$t" -v b="$b" -v s="$s" 'BEGIN { printf "%.0f", b * s / m * 1e3 }')" \
      "$(awk -v a="$a" -v t="$t" 'BEGIN { printf "%.2f", t / a }')"
  done
})
write_report llama "Llama-style training step: strata vs PyTorch CPU" "bash bench/host/run_llama.sh $threads" "$table"
