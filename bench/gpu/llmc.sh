#!/usr/bin/env bash
# llm.c (karpathy/llm.c, train_gpt2cu) as the reference for GPT-2 small training on one GPU
# (issue 30, item 1). Two modes:
#
#   bash bench/gpu/llmc.sh build   # here, on the build machine (nvcc 13, no GPU needed)
#   bash bench/gpu/llmc.sh run     # on the GPU machine, from the repo root, with .carry/ carried
#
# build: exports llm.c from a local git mirror ($LLMC_GIT, a bare git dir; default below,
#   the one the search tool's `fetch github:karpathy/llm.c` gave), builds train_gpt2cu for
#   sm_90 in bf16 without cuDNN, NCCL or MPI, and writes into .carry/llmc/ (git-ignored):
#   train_gpt2cu, train.bin and val.bin (llm.c token files of random uniform tokens < 50257,
#   header of 256 int32: magic 20240520, version 1, token count; then uint16 tokens) and
#   COMMIT (the llm.c commit built). Knobs: LLMC_GIT, LLMC_REV (default HEAD), NVCC
#   (/usr/local/cuda/bin/nvcc), TRAIN_TOKENS (8388608), VAL_TOKENS (1048577).
#   One patch, for CUDA 13 only: cudaMemAdvise takes a cudaMemLocation instead of a device
#   id since CUDA 13 (llmc/cuda_utils.cuh, the managed-memory fallback taken only when
#   cudaMalloc runs out of memory); the sed below passes {cudaMemLocationTypeHost, 0}, the
#   same meaning as the old cudaCpuDeviceId. The Makefile's -lnvidia-ml is left out (llm.c
#   uses NVML only when <nvml.h> is found, which the toolkit here lacks, and only for -lg).
#
# run: GPT-2 small (-e d12: 12 layers, 768 channels, 12 heads, max T 1024, vocab 50257
#   padded to 50304, tied wte) from llm.c's random initialisation, B sequences of T = 1024
#   (B: $B, default 16; one micro-batch per step, no gradient accumulation), bf16 with FP32
#   master weights (llm.c's default), AdamW lr 6e-4, betas 0.9/0.95, eps 1e-8, weight decay
#   0.1 (llm.c: on the matrices and both embeddings), constant lr (cosine to a final fraction
#   of 1.0, no warm-up), global-norm clipping at 1.0 (always on in llm.c), recompute off
#   (-r 0), no sampling (-s 0), validation only before step 1 and after the last (one
#   batch, -m 1; outside the per-step timing). $STEPS steps (default 60). llm.c times every
#   step with cudaEvents around forward, backward and update; this script takes the median
#   of steps 11..end (the first 10 are warm-up) and prints one line:
#     llmc tokens_per_s=<B*T/median s> ms_per_step=<median> mfu=<ours or na> mfu_reported=<llm.c's or na> ...
#   mfu (ours) = tokens/s * (6N + 12*L*D*T) / peak, N = llm.c's num_parameters (all
#   parameters, the padded tied wte included: 124475904), peak from $PEAK_TFLOPS or from the
#   "peak_tflops" of $PEAK_JSON (default $OUT/pytorch_gpt2.json, written by
#   pytorch_gpt2.py: the measured 8192^3 bf16 matmul rate). mfu_reported is llm.c's own
#   number (6N + 6*L*D*T against its table of promised peaks; the table has no H200, so it
#   prints -100% there and this script reports na). The full log goes to $OUT/llmc.log
#   when OUT is set (else build-gpu-run/llmc.log), the line also to $OUT/llmc.txt.
#   Knobs: B, STEPS, PEAK_TFLOPS, PEAK_JSON, LLMC_DIR (.carry/llmc), LLMC_TIMEOUT (120 s),
#   LLMC_ARGS (extra train_gpt2cu arguments, appended).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root" || exit 1
dir="${LLMC_DIR:-$root/.carry/llmc}"
mode="${1:-}"

die() { echo "llmc.sh: $*" >&2; exit 1; }

# llm.c's token file format (llmc/dataloader.h): 256 int32 header, then uint16 tokens
write_tokens() { # FILE COUNT SEED
  python3 - "$1" "$2" "$3" <<'EOF'
import array, random, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = array.array("i", [0] * 256)
header[0], header[1], header[2] = 20240520, 1, n
rng = random.Random(seed)
toks = array.array("H", rng.choices(range(50257), k=n))  # uniform, < GPT-2's 50257
assert header.itemsize == 4 and toks.itemsize == 2 and sys.byteorder == "little"
with open(path, "wb") as f:
    header.tofile(f)
    toks.tofile(f)
EOF
}

build() {
  local git="${LLMC_GIT:-/work/.mirror/karpathy+llm.c/repo}" rev="${LLMC_REV:-HEAD}"
  local nvcc="${NVCC:-/usr/local/cuda/bin/nvcc}"
  [[ -d "$git" ]] || die "no llm.c git mirror at $git (set LLMC_GIT to a clone or bare git dir of karpathy/llm.c)"
  [[ -x "$nvcc" ]] || die "no nvcc at $nvcc (set NVCC)"
  local commit
  commit="$(git --git-dir="$git" rev-parse "$rev^{commit}")" || die "no commit $rev in $git"
  src="$(mktemp -d)"  # global: the EXIT trap runs after build() returns
  trap 'rm -rf "${src:-}"' EXIT
  git --git-dir="$git" archive "$commit" | tar -x -C "$src" || die "git archive failed"
  # CUDA 13: cudaMemAdvise(ptr, n, advice, cudaMemLocation) (see the header)
  if "$nvcc" --version | grep -q "release 1[3-9]"; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      "$src/llmc/cuda_utils.cuh"
  fi
  echo "llmc.sh: building llm.c $commit with $("$nvcc" --version | tail -1)"
  # NVCC_LDFLAGS on the command line replaces the Makefile's (drops -lnvidia-ml, adds an
  # rpath to the toolkit's cuBLAS); CI= keeps the Makefile from asking nvidia-smi.
  (cd "$src" && PATH="$(dirname "$nvcc"):$PATH" make train_gpt2cu \
      NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 PRECISION=BF16 GPU_COMPUTE_CAPABILITY=90 \
      NVCC_LDFLAGS="-lcublas -lcublasLt -Xlinker -rpath=/usr/local/cuda/lib64") || die "make train_gpt2cu failed"
  mkdir -p "$dir"
  strip -o "$dir/train_gpt2cu" "$src/train_gpt2cu" 2>/dev/null || cp "$src/train_gpt2cu" "$dir/train_gpt2cu"
  chmod +x "$dir/train_gpt2cu"
  echo "$commit" >"$dir/COMMIT"
  local ntrain="${TRAIN_TOKENS:-8388608}" nval="${VAL_TOKENS:-1048577}"
  write_tokens "$dir/train.bin" "$ntrain" 1 || die "writing train.bin failed"
  write_tokens "$dir/val.bin" "$nval" 2 || die "writing val.bin failed"
  ls -l "$dir"
  du -sh "$dir"
}

# cuBLAS 13 for a binary linked on another machine: the toolkit (rpath), else PyTorch's wheel
lib_path() {
  local bin="$1" extra=""
  if ldd "$bin" 2>/dev/null | grep -q "not found"; then
    extra="$(python3 - <<'EOF' 2>/dev/null
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [os.path.dirname(p) for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "**", "libcublasLt.so.13*"), recursive=True)]
print(":".join(sorted(set(hits))))
EOF
)"
  fi
  echo "/usr/local/cuda/lib64${extra:+:$extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

run() {
  local bin="$dir/train_gpt2cu" b="${B:-16}" steps="${STEPS:-60}" t=1024
  [[ -x "$bin" ]] || die "no llm.c binary at $bin: run 'bash bench/gpu/llmc.sh build' on the build machine and carry .carry"
  [[ -f "$dir/train.bin" && -f "$dir/val.bin" ]] || {
    echo "llmc.sh: no token files in $dir: writing them now"
    if ! { write_tokens "$dir/train.bin" 8388608 1 && write_tokens "$dir/val.bin" 1048577 2; }; then
      die "writing token files failed"
    fi
  }
  (( steps > 10 )) || die "STEPS must be > 10 (the first 10 steps are warm-up)"
  local logdir="${OUT:-$root/build-gpu-run}"
  mkdir -p "$logdir"
  local log="$logdir/llmc.log"
  local commit; commit="$(cat "$dir/COMMIT" 2>/dev/null || echo unknown)"
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH="$(lib_path "$bin")"
  local cmd=("$bin" -i "$dir/train.bin" -j "$dir/val.bin" -e d12 -b "$b" -t "$t" -d $((b * t))
             -r 0 -x "$steps" -v 1000000 -m 1 -s 0 -l 6e-4 -c 0.1 -u 0 -q 1.0 -k cosine
             -w 1 -z 0 -h 0)
  # shellcheck disable=SC2206
  [[ -n "${LLMC_ARGS:-}" ]] && cmd+=(${LLMC_ARGS})
  { echo "# llm.c $commit"; echo "# $(date -u +%FT%TZ) ${cmd[*]}"; nvidia-smi -L 2>/dev/null; } >"$log"
  local t0=$SECONDS rc=0
  timeout "${LLMC_TIMEOUT:-120}" "${cmd[@]}" >>"$log" 2>&1 || rc=$?
  echo "# rc=$rc wall_s=$((SECONDS - t0))" >>"$log"
  if (( rc != 0 )); then
    tail -25 "$log" >&2
    die "train_gpt2cu failed (rc $rc); log: $log"
  fi
  local peak="${PEAK_TFLOPS:-}" pjson="${PEAK_JSON:-${OUT:+$OUT/pytorch_gpt2.json}}"
  if [[ -z "$peak" && -n "$pjson" && -f "$pjson" ]]; then
    peak="$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get("peak_tflops"); print(v if v else "")' "$pjson" 2>/dev/null)"
  fi
  local line
  line="$(python3 - "$log" "$b" "$t" "$peak" "$commit" <<'EOF'
import re, statistics, sys
log, B, T, peak, commit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
text = open(log, errors="replace").read()
steps = [(int(m.group(1)), float(m.group(2)), float(m.group(3)))
         for m in re.finditer(r"^step\s+(\d+)/\d+ \|.*\| ([\d.]+) ms \| (-?[\d.]+)% bf16 MFU", text, re.M)]
timed = [s for s in steps if s[0] > 10]
if not timed:
    sys.exit("llmc.sh: no step lines after step 10 in " + log)
ms = statistics.median(s[1] for s in timed)
tps = B * T / (ms / 1e3)
n = re.search(r"num_parameters\s*\|\s*(\d+)", text)
L = re.search(r"num_layers L\s*\|\s*(\d+)", text)
D = re.search(r"channels C\s*\|\s*(\d+)", text)
N, L, D = int(n.group(1)), int(L.group(1)), int(D.group(1))
flops_tok = 6 * N + 12 * L * D * T
mfu = f"{tps * flops_tok / (float(peak) * 1e12):.4f}" if peak else "na"
rep = statistics.median(s[2] for s in timed)
mfu_rep = f"{rep / 100:.4f}" if rep > 0 else "na"
dev = re.search(r"\| device\s+\| (.+?)\s+\|", text)
print(f"llmc tokens_per_s={tps:.0f} ms_per_step={ms:.3f} mfu={mfu} mfu_reported={mfu_rep} "
      f"peak_tflops={peak or 'na'} n_params={N} flops_per_token={flops_tok} B={B} T={T} "
      f"steps_timed={len(timed)} ms_min={min(s[1] for s in timed):.3f} ms_max={max(s[1] for s in timed):.3f} "
      f"device=\"{dev.group(1) if dev else 'unknown'}\" llmc_commit={commit[:12]}")
EOF
)" || die "could not parse $log"
  echo "$line" | tee -a "$log"
  [[ -n "${OUT:-}" ]] && echo "$line" >"$OUT/llmc.txt"
  return 0
}

case "$mode" in
  build) build ;;
  run) run ;;
  *) sed -n '2,45p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; [[ "$mode" == -h || "$mode" == --help ]] || exit 2 ;;
esac
