#!/usr/bin/env bash
# The host benchmarks, in one run on this machine:
#  1. GEMMs: strata's host gemm vs OpenBLAS called directly (1 thread and T threads);
#  2. the seed MLP's training step (float32, Adam, one process, T threads) at batch 64,
#     256 and 1024: strata vs PyTorch on the same CPU and thread count;
#  3. the main job's GPT training step (float32, AdamW, one process, T threads) at 8, 16
#     and 32 sequences of 128 tokens: tokens/s, strata vs PyTorch.
# PyTorch is installed with pip into a private venv (STRATA_BENCH_VENV, default
# .venv-bench, git-ignored); it is never a dependency of strata. The report (ratios,
# machine, versions, the command) goes to stdout and to bench/results/host_<date>_<cpu>.md.
#   bash bench/host/run.sh [threads]      (default: every CPU this process may use)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
threads=${1:-$(nproc)}

source bench/host/report.sh
build_bench bench_host_gemm bench_host_step bench_host_gpt

bench_venv

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "== GEMM, 1 thread"; ./build-bench/bench/bench_host_gemm 1 | tee "$out/gemm1"
echo "== GEMM, $threads threads"; ./build-bench/bench/bench_host_gemm "$threads" | tee "$out/gemmT"
echo "== training step"
# Alternate the two frameworks twice; each keeps its best pass (the other is warm-up for the caches and clocks).
for pass in 1 2; do
  ./build-bench/bench/bench_host_step "$threads" | tee -a "$out/strata"
  "$venv/bin/python" bench/host/pytorch_mlp.py --threads "$threads" | tee -a "$out/torch"
done

echo "== GPT training step"
for pass in 1 2; do
  ./build-bench/bench/bench_host_gpt "$threads" | tee -a "$out/strata_gpt"
  "$venv/bin/python" bench/host/pytorch_gpt.py --threads "$threads" | tee -a "$out/torch_gpt"
  "$venv/bin/python" bench/host/pytorch_gpt.py --threads "$threads" --seq 2048 --batches 1,2 --steps 4 --warmup 1 |
    tee -a "$out/torch_gpt"
done

best() {  # best ms/step of framework file $1 at batch $2
  awk -v b="$2" '$3 == b { if (m == "" || $6 < m) m = $6 } END { print m }' "$1"
}
{
  echo "# Host benchmarks: strata vs OpenBLAS and PyTorch ($(date -u +%Y-%m-%d))"
  echo
  echo "- command: \`bash bench/host/run.sh $threads\`"
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs usable;" \
       "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "- $(head -1 "$out/gemm1")"
  echo "- PyTorch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'), $("$venv/bin/python" -c 'import torch; c = torch.__config__.show(); print("MKL" if "MKL" in c else "no MKL", "+ oneDNN" if "oneDNN" in c or "mkldnn" in c.lower() else "")')"
  echo "- strata commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- include bench || echo ' (with local changes)')"
  echo
  echo "## GEMM (float32, row-major): strata's call / OpenBLAS called directly (goal >= 0.95)"
  echo
  for f in gemm1 gemmT; do
    echo '```'
    tail -n +2 "$out/$f"
    echo '```'
  done
  echo
  echo "## Seed MLP training step, $threads threads (goal: strata/PyTorch speed >= 1.0 at every batch)"
  echo
  echo "| batch | strata ms/step | PyTorch ms/step | speed ratio strata/PyTorch |"
  echo "| --- | --- | --- | --- |"
  for b in 64 256 1024; do
    s=$(best "$out/strata" "$b"); t=$(best "$out/torch" "$b")
    echo "| $b | $s | $t | $(awk -v s="$s" -v t="$t" 'BEGIN { printf "%.2f", t / s }') |"
  done
  echo
  echo "## GPT training step (the main job's model: 4 blocks, D 128, 4 heads, context 128, vocabulary 256), $threads threads"
  echo
  echo "PyTorch's attention is its fused \`scaled_dot_product_attention\`; strata's is its flash attention"
  echo "(backend/attention.hpp). Goal: strata/PyTorch speed >= 1.0."
  echo
  echo "| sequences | strata ms/step | PyTorch ms/step | strata tokens/s | PyTorch tokens/s | speed ratio strata/PyTorch |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for b in 8 16 32; do
    s=$(best "$out/strata_gpt" "$b"); t=$(best "$out/torch_gpt" "$b")
    echo "| $b | $s | $t | $(awk -v s="$s" -v b="$b" 'BEGIN { printf "%.0f", b * 128 / s * 1e3 }') |" \
         "$(awk -v t="$t" -v b="$b" 'BEGIN { printf "%.0f", b * 128 / t * 1e3 }') | $(awk -v s="$s" -v t="$t" 'BEGIN { printf "%.2f", t / s }') |"
  done
  echo
  echo "The same model at a context of 2048 (both sides' attention is fused and never forms the"
  echo "2048 x 2048 scores: strata's flash attention, PyTorch's CPU SDPA):"
  echo
  echo "| sequences of 2048 | strata ms/step | PyTorch ms/step | strata tokens/s | PyTorch tokens/s | speed ratio strata/PyTorch |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for b in 1 2; do
    s=$(best "$out/strata_gpt" "$b"); t=$(best "$out/torch_gpt" "$b")
    echo "| $b | $s | $t | $(awk -v s="$s" -v b="$b" 'BEGIN { printf "%.0f", b * 2048 / s * 1e3 }') |" \
         "$(awk -v t="$t" -v b="$b" 'BEGIN { printf "%.0f", b * 2048 / t * 1e3 }') | $(awk -v s="$s" -v t="$t" 'BEGIN { printf "%.2f", t / s }') |"
  done
} > "$out/report.md"
echo
cat "$out/report.md"
mkdir -p bench/results
cpu=$(lscpu | sed -n 's/^Model name: *//p' | tr -c 'A-Za-z0-9\n' '_' | tr -s _ | cut -c1-24)
dest="bench/results/host_$(date -u +%Y-%m-%d)_${cpu}.md"
cp "$out/report.md" "$dest"
echo "written to $dest"
