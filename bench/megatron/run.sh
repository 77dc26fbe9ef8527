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

READING="$(cat "$ROOT/bench/megatron/reading.md")"
start=$SECONDS
"$CXX" -std=c++20 -O1 -fconstexpr-ops-limit=4294967296 -fconstexpr-loop-limit=16777216 -I"$ROOT/include" \
  "$ROOT/bench/megatron/predict.cpp" -o "$WORK/predict"
compile_s=$((SECONDS - start))
table="$("$WORK/predict")"
"$CXX" -std=c++20 -O1 -I"$ROOT/include" "$ROOT/bench/megatron/gemm_check.cpp" -o "$WORK/gemm_check"
gemm_table="$("$WORK/gemm_check")"
"$CXX" -std=c++20 -O1 -I"$ROOT/include" "$ROOT/bench/megatron/activations.cpp" -o "$WORK/activations"
activation_table="$("$WORK/activations")"

{
  echo "# Cost model vs published Megatron-LM throughput (A100)"
  echo
  echo "- date: $(date -u)"
  echo "- command: \`bash bench/megatron/run.sh\` (compile of the ten planned models: ${compile_s}s with $("$CXX" --version | head -1))"
  echo "- tree: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- hardware description: \`strata::hw::A100_80GB\` (include/strata/plan/hardware.hpp) with Megatron-LM's 2021"
  echo "  attention kernels (predict.cpp's \`megatron_a100\`). Every constant and its source:"
  echo "  - data sheet (A100 SXM4 80 GB, DGX A100): 312 TFLOP/s bf16/fp16 dense, 108 SMs, HBM2e 2039 GB/s, NVLink 300 GB/s"
  echo "    per direction, 8 × 200 Gb/s HDR InfiniBand per node (25 GB/s per GPU)"
  echo "  - \`gemm_efficiency\` = 0.806 (fraction of peak of one GEMM tile in a full wave): our H100 measurement"
  echo "    (bench/results/gpu_nvidia_h100_80gb_hbm3_2026-11-24.md): the twelve bf16 GEMMs of 8192×4096×4096 and"
  echo "    4096×4096×8192 took 4.263 ms, 773.7 TFLOP/s = 0.782 of 989; their tiles fill 0.970 of 8 (or 4) waves on"
  echo "    132 SMs, so 0.782 / 0.970 = 0.806. Carried to the A100 as a fraction (both run cuBLAS tensor-core"
  echo "    kernels; an argument, not an A100 measurement)"
  echo "  - \`hbm_efficiency\` = 0.90: the same file's 1 GiB device-to-device copy, 3012.8 GB/s of the H100's 3350,"
  echo "    carried to the A100 as a fraction"
  echo "  - \`gemm_hbm_efficiency\` = 0.486 (the HBM rate of a GEMM whose bytes outweigh its FLOPs): the same file's"
  echo "    three memory-bound bf16 GEMMs (8192×10×4096, 4096×10×8192, 8192×4096×10, 67.35 MB each) at 0.488, 0.535"
  echo "    and 0.435 of 3350 GB/s, their mean carried to the A100 as a fraction"
  echo "  - tile shapes 256×128, 128×256, 128×128 (the fastest for each GEMM is taken): the output tiles of cuBLAS's"
  echo "    large tensor-core kernels (the tile is part of their names, e.g. \`ampere_bf16_s16816gemm_bf16_256x128_...\`);"
  echo "    smaller tiles and split-K are left out (no measured efficiency for them)"
  echo "  - attention materialized (no FlashAttention in 2021) with dropout on the probabilities: Megatron-LM's"
  echo "    \`--attention-dropout\` defaults to 0.1 (megatron/arguments.py); Table 1 does not say it was turned off"
  echo "  - gradients in fp16, accumulated by autograd in \`.grad\` (it keeps the first micro-batch's gradient and adds"
  echo "    each later one in a pass of its own: read and write 2 bytes, read the new 2-byte gradient, per parameter, at"
  echo "    90% of HBM): \`--fp16\` without \`--accumulate-allreduce-grads-in-fp32\` or \`--use-contiguous-buffers-in-ddp\`,"
  echo "    so neither DDP installs Megatron-LM's \`main_grad\` buffer and its hook (megatron/arguments.py and"
  echo "    megatron/model/distributed.py at 6985e58938, 2021-08-18, the scripts' commit). With \`--DDP-impl local\` they"
  echo "    are all-reduced after the backward; with \`--DDP-impl torch\` (\`no_sync\` until the last micro-batch,"
  echo "    megatron/schedules.py) in 25 MiB buckets (DistributedDataParallel's \`bucket_cap_mb\` default) during the last"
  echo "    micro-batch's backward. strata's own wgrad GEMMs accumulate in place, so strata's hardware descriptions"
  echo "    leave the pass off"
  echo "  - the optimizer step at 52 bytes per parameter (strata's fused Adam: 30): Megatron-LM's"
  echo "    Float16OptimizerWithFloat16Params.step (megatron/optimizer/optimizer.py at 6985e58938) copies each fp16"
  echo "    gradient to fp32 (2 + 4), unscales it and checks for inf/NaN (4 + 4), takes its norm for \`--clip-grad\`"
  echo "    (4; the clipping pass runs only when the norm exceeds 1.0: not counted), runs apex's FusedAdam (28) and"
  echo "    copies the masters to the fp16 weights (4 + 2)"
  echo "  - \`--DDP-impl local\` (the six rows with a pipeline): 12 bytes per parameter around the all-reduce, which"
  echo "    flattens the fp16 gradients into one buffer, divides it by the group's size and copies the result back"
  echo "    (megatron/model/distributed.py at 6985e58938, without contiguous buffers)"
  echo "  - collectives and messages at the bus bandwidth published nccl-tests runs reach, as a fraction of the link"
  echo "    rate: NVLink 200 of 300 GB/s (8 × A100-SXM4-80GB, all_reduce_perf busbw about 200 GB/s,"
  echo "    github.com/NVIDIA/nccl-tests/issues/149), HDR InfiniBand 96 of 100 GB/s per node (3 nodes of 8 ×"
  echo "    A100-SXM4-40GB with 4 HDR adapters each, peak busbw 96 GB/s, github.com/NVIDIA/nccl-tests/issues/119)"
  echo "  - latencies: NCCL's own model for its ring algorithm and Simple protocol (src/graph/tuning.cc, the same"
  echo "    constants in NCCL 2.8.3, 2.9.6 and 2.10.3, 2020-2021): 8.4 µs per call, plus per ring step 3.4 µs over"
  echo "    NVLink and 9.6 µs over the network (a tensor-parallel all-reduce over 8 devices: 56 µs)"
  echo "  None of these was fitted to the table below."
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
  echo "How each row ran: Megatron-LM's examples/sc21/run_table_1.sh and CONFIG.sh (\"the scripts that were used to"
  echo "produce the results in the paper\", examples/sc21/README.md): micro-batch 16, 16, 16, 8, 4, 2, 2, 1, 1, 1 (in"
  echo "table order); \`--DDP-impl torch\` for the four rows without a pipeline, \`local\` for the others; the interleaved"
  echo "schedule with 5, 5, 3 and 1 layers per virtual stage for 76.1B, 145.6B, 310.1B and 529.6B (3, 2, 2 and 3 chunks"
  echo "per stage); \`--activations-checkpoint-method uniform\` (every layer recomputed); \`--fp16 --loss-scale 8192\`,"
  echo "\`--clip-grad 1.0\`, the dropouts at their default 0.1. Assumed: Megatron's model chunks of L / (PP · V) blocks,"
  echo "the embeddings on the first, the head on the last."
  echo
  echo "## Predicted vs published"
  echo
  echo "Columns after \"step s\": the share of the predicted step in each term (plan/cost.hpp)."
  echo
  echo "$table"
  echo
  echo "## The GEMM model against our H100 measurements"
  echo
  echo "\`cost::gemm_s\` (plan/cost.hpp) with \`hw::H100_80GB\` against the GEMMs timed one by one on our H100"
  echo "(bench/megatron/gemm_check.cpp; TF32 peak 494.7 TFLOP/s dense from the data sheet). The large bf16 rows"
  echo "are in sample (gemm_efficiency came from their mean), the rest are not."
  echo
  echo "$gemm_table"
  echo
  echo "## Activation memory per layer against Korthikanti et al. 2022"
  echo
  echo "Korthikanti, Casper, Lym, McAfee, Andersch, Shoeybi, Catanzaro: *Reducing Activation Recomputation in Large"
  echo "Transformer Models*, arXiv:2205.05198, Table 2: the bytes one transformer layer keeps for its backward, in units"
  echo "of s·b·h (16-bit activations, 1-byte dropout masks; restated with its terms in AWS Neuron's activation-memory"
  echo "guide). strata's figure is what its lowered plan keeps per micro-batch for one more block"
  echo "(bench/megatron/activations.cpp: \`Plan::stash_bytes\`, bf16, dropout 0.1 on the attention probabilities and"
  echo "both residual branches) on the shapes of Megatron's Table 1 at s = 2048, b = 1. The paper's Table 5 (iteration"
  echo "times) is in no source this project can read, so only its memory model is compared here."
  echo
  echo "$activation_table"
  echo
  echo "Term by term (bytes per s·b·h; the paper's 34 = 4 for the two LayerNorm inputs + 11 for attention + 19 for"
  echo "the MLP):"
  echo
  echo "- **No score tensor.** strata's attention is flash attention: it never keeps the 5·a·s/h of the softmax, its"
  echo "  dropout mask and the dropped probabilities — what the paper's selective recomputation recomputes — so its"
  echo "  columns compare with the paper's *selective* ones."
  echo "- **No dropout masks** (−2 of the paper's replicated 10): a mask is a hash of each element's coordinates"
  echo "  (core/random.hpp), recomputed in the backward."
  echo "- **One more attention tensor** (+2/t): the attention keeps q, k, v, its output in head layout (the flash"
  echo "  backward reads it) and the same output in row layout (the output projection's input); Megatron keeps one."
  echo "  So with tensor parallelism strata keeps 8 + 26/t (11.25 at t = 8) against the paper's 10 + 24/t (13.0)."
  echo "- **Sequence parallelism keeps the row split of the gathered inputs** (4/t): the attention's and the first"
  echo "  MLP linear's inputs are all-gathered from the row split for the forward; as Megatron does, each keeps the split"
  echo "  and gathers it again before its backward (\`layer_call::regather\`). strata keeps 34/t (4.25 at t = 8), the"
  echo "  paper's figure. Until the tree that added the second gather it kept them whole: 4 + 30/t (7.75 at t = 8)."
  echo "- **Recomputation** keeps each Residual's input (two per layer, row-split under SequenceParallel: 4/t) where"
  echo "  the paper keeps the layer's input (2, replicated)."
  echo "- The skip connections' gradients are not kept per micro-batch: they live in one work slot per nesting depth"
  echo "  while a backward runs (plan/lower/parts.hpp); until this tree they took 4 · s·b·h bytes per layer (4/t under"
  echo "  SequenceParallel) in every in-flight micro-batch's stash."
  echo
  echo "## Reading"
  echo
  echo "$READING"
} > "$OUT_MD"
echo "wrote $OUT_MD"
