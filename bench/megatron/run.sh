#!/usr/bin/env bash
# The planner's cost model against the published Megatron-LM runs (bench/megatron/predict.cpp):
# compiles the predictor (the ten models are planned at compile time) and writes
# bench/results/megatron_a100.md with the table it prints.
#
#   bash bench/megatron/run.sh        # CXX=clang++ to use another compiler; OUT_MD=... elsewhere
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CXX="${CXX:-g++}"
OUT_MD="${OUT_MD:-$ROOT/bench/results/megatron_a100.md}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/strata-megatron.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

start=$SECONDS
"$CXX" -std=c++20 -O1 -fconstexpr-ops-limit=4294967296 -fconstexpr-loop-limit=16777216 -I"$ROOT/include" \
  "$ROOT/bench/megatron/predict.cpp" -o "$WORK/predict"
compile_s=$((SECONDS - start))
table="$("$WORK/predict")"

{
  echo "# Cost model vs published Megatron-LM throughput (A100)"
  echo
  echo "- date: $(date -u)"
  echo "- command: \`bash bench/megatron/run.sh\` (compile of the ten planned models: ${compile_s}s with $("$CXX" --version | head -1))"
  echo "- tree: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- hardware description: \`strata::hw::A100_80GB\` (include/strata/plan/hardware.hpp): 312 TFLOP/s bf16 dense,"
  echo "  HBM 2039 GB/s, NVLink 300 GB/s per direction, 8 × 200 Gb/s HDR InfiniBand per node (25 GB/s per GPU),"
  echo "  latencies 5 µs / 10 µs per ring step, and \`gemm_efficiency\` = 0.80 — the one value not from a data sheet, set"
  echo "  before the comparison and not fitted to it"
  echo
  echo "## Source of the published numbers"
  echo
  echo "Narayanan, Shoeybi, Casper, LeGresley, Patwary, Korthikanti, Vainbrand, Kashinkunti, Bernauer, Catanzaro,"
  echo "Phanishayee, Zaharia: *Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM*, SC'21,"
  echo "arXiv:2104.04473, Table 1 (weak scaling, GPT models of 1.7B–1T parameters on up to 3072 A100-80GB GPUs of"
  echo "Selene; vocabulary 51,200, sequence 2048; TFLOP/s per GPU counted with the paper's equation, which includes the"
  echo "recomputed forward). Corroborated by: the paper's abstract (1T parameters, 502 PFLOP/s on 3072 GPUs, 52% of"
  echo "peak; https://huggingface.co/papers/2104.04473), the Megatron-LM README (vocabulary 51,200, sequence 2048,"
  echo "Selene, up to 3072 A100), and a BigScience note listing the 145B (80 × 12288), 310B (96 × 16384) and 530B"
  echo "(105 × 20480) shapes (https://github.com/stas00/bigscience-backup, train/tr11-176B-ml/chronicles-prequel.md)."
  echo "The per-row figures were taken from the paper's Table 1; each row's TFLOP/s × GPUs reproduces the table's"
  echo "aggregate PFLOP/s column (e.g. 163 × 3072 = 501 ≈ 502.0)."
  echo
  echo "Assumptions the table does not state: micro-batch 1, the 1F1B schedule (not interleaved), activation"
  echo "recomputation of every transformer half-block, bf16 with fp32 gradients all-reduced after the pipeline flush"
  echo "(not overlapped), Megatron's stage assignment (L/PP blocks per stage, embeddings on the first, head on the last)."
  echo
  echo "## Predicted vs published"
  echo
  echo "Columns after \"step s\": the share of the predicted step in each term (plan/cost.hpp)."
  echo
  echo "$table"
  echo
  echo "## Reading"
  echo
  echo "The goal was every row within 15%; it is not met (see the last line above). Every prediction is too high, so the"
  echo "model misses time rather than adds it. Compute is 71–81% of every predicted step, so the compute term dominates"
  echo "the error: it assumes GEMMs at 80% of peak and the memory-bound kernels (LayerNorm, GeLU, softmax, residual adds)"
  echo "at 100% of HBM bandwidth with no launch overhead; Megatron's measured throughput includes kernel launches,"
  echo "unfused elementwise kernels, the data loader and logging. The two smallest models are the worst (+31%, +21%):"
  echo "one efficiency for every GEMM overstates the small ones (hidden 2304 and 3072, tensor split 1 and 2) — a"
  echo "size-dependent GEMM efficiency is the first thing the model lacks. The data-parallel all-reduce is already"
  echo "charged pessimistically (after the flush, at 25 GB/s per GPU, no NVLink-first hierarchy), so it does not"
  echo "explain an over-prediction."
} > "$OUT_MD"
echo "wrote $OUT_MD"
