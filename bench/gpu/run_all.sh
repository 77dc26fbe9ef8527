#!/usr/bin/env bash
# One command on the GPU machine: build and run the GPU tests, the training-step
# benchmarks (bench_step.cu), the PyTorch baselines (pytorch_mlp.py) and the kernel
# benchmarks (bench_kernels.cu), then assemble everything into
# bench/results/gpu_<device>_<date>.md with the issue-4 ratios.
#
#   bash bench/gpu/run_all.sh [--only PARTS] [--quick] [--fresh]
#
# PARTS, comma-separated, run in this order (default: all of them, after --fresh):
#   build           configure and build with CMake, the one build path (`cmake --preset gpu`:
#                   sm_90, Release, benches and examples on; carried dependencies from .carry/)
#   tests           every test labelled gpu (ctest -L gpu), each with its own log
#   step            bench_step --only launch, then --only gemm (two processes)
#   pytorch-launch  pytorch_mlp.py --models launch
#   pytorch-gemm    pytorch_mlp.py --models gemm
#   kernels         bench_kernels
#   mainjob         the Fashion-MNIST main job (examples/fashion_mnist_train.cu) on one GPU,
#                   3 epochs in float32, then in bf16 mixed precision
#   gpt             the GPT main job (examples/gpt_train.cu) on one GPU, 600 steps
#   attention       bench_gpu_attention (flash attention, bf16, Seq 1k-16k), then
#                   pytorch_attention.py: the ratio against PyTorch's SDPA flash backend
#   gpt2            GPT-2 small on one GPU: bench_gpu_gpt_small, pytorch_gpt2.py (eager,
#                   torch.compile), llmc.sh run (llm.c, carried prebuilt in .carry/llmc)
# Each part's failure is recorded and reported; the others still run. Every part's output
# stays in the work dir ($BUILD_DIR/run_all), and the report is re-assembled after every
# part from whatever parts are there, so the work can be split over several calls on a warm
# machine (e.g. --only build,tests,step then --only pytorch-launch then --only pytorch-gemm,kernels);
# a part a later call does not run keeps its earlier result. --fresh (implied when --only
# is not given) clears the work dir first.
#
# When $OUT is set, the report, the parts' markdown/JSON and the logs are copied under it
# after every part (the device tool brings $OUT back even when a command is cut off).
#
# Dependencies on the GPU machine: CMake, ninja and the CUDA toolkit (nvcc, cuBLAS/cuBLASLt,
# CUB); NCCL >= 2.18 (the toolkit, /usr, $NCCL_HOME, or PyTorch's nvidia-nccl wheel, passed to
# CMake); what Debian gives the build machine and the GPU machine lacks comes in .carry/
# (bash scripts/gpu_carry.sh fills it; carry ".carry"): Boost.Hana, nlohmann/json and doctest headers with
# their CMake packages, OpenBLAS, zlib, the Fashion-MNIST files. MPI is optional: without it
# every program is a world of one GPU (nccl_communicator::single). PyTorch for the baselines.
#
# Knobs: BUILD_DIR (build-gpu/, git-ignored), RESULTS_DIR (bench/results), PYTHON,
# PART_TIMEOUT (s, default 1800), TEST_TIMEOUT (s, default 900), BENCH_STEP_ARGS,
# PYTORCH_ARGS, KERNELS_ARGS (extra arguments), NCCL_HOME, CMAKE_ARGS (extra -D options),
# GPT2_BATCH, GPT2_PROGRAMS, GPT2_ARGS (the gpt2 part).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root" || exit 1
build="${BUILD_DIR:-$root/build-gpu}"
work="$root/build-gpu-run"
results="${RESULTS_DIR:-$root/bench/results}"
python="${PYTHON:-$(command -v python3 || command -v python || true)}"
part_timeout="${PART_TIMEOUT:-1800}"
test_timeout="${TEST_TIMEOUT:-900}"
all_parts=(build attention tests step pytorch-launch pytorch-gemm kernels gpt2 mainjob gpt)

usage() { sed -n '2,40p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
only="" quick=0 fresh=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) only="${2:-}"; shift 2 ;;
    --only=*) only="${1#--only=}"; shift ;;
    --quick) quick=1; shift ;;
    --fresh) fresh=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run_all.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done
knobs=""
for v in BUILD_DIR RESULTS_DIR PYTHON PART_TIMEOUT TEST_TIMEOUT BENCH_STEP_ARGS PYTORCH_ARGS KERNELS_ARGS NCCL_HOME CMAKE_ARGS \
         GPT2_BATCH GPT2_PROGRAMS GPT2_ARGS; do
  [[ -n "${!v:-}" ]] && knobs+="$v=$(printf '%q' "${!v}") "
done
command_line="${knobs}bash bench/gpu/run_all.sh${only:+ --only $only}$([[ $quick == 1 ]] && echo ' --quick')$([[ $fresh == 1 ]] && echo ' --fresh')"
if [[ -z "$only" ]]; then
  parts=("${all_parts[@]}")
  fresh=1
else
  IFS=',' read -r -a parts <<<"$only"
  for p in "${parts[@]}"; do
    [[ " ${all_parts[*]} " == *" $p "* ]] || { echo "run_all.sh: unknown part '$p' (${all_parts[*]})" >&2; exit 2; }
  done
fi
wants() { [[ " ${parts[*]} " == *" $1 "* ]]; }

[[ $fresh == 1 ]] && rm -rf "$work"
mkdir -p "$work/logs" "$work/status" "$work/parts" "$results" "$build"
echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC')  $command_line" >>"$work/commands.log"
have_timeout=0
command -v timeout >/dev/null && have_timeout=1
# shellcheck disable=SC2317  # called through watched
run_limited() {  # seconds, command...
  local s="$1"; shift
  if [[ $have_timeout == 1 ]]; then timeout --kill-after=30 "$s" "$@"; else "$@"; fi
}

# Runs a command in the background; while it runs and $OUT is set, the report is
# re-assembled and copied to $OUT every 30 s, so a command cut off still leaves it there.
watched() {
  "$@" </dev/null &
  local pid=$! _
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if [[ -n "${OUT:-}" ]] && kill -0 "$pid" 2>/dev/null; then assemble >/dev/null 2>&1; fi
  done
  wait "$pid"
}

# status <name> <state> <seconds> <note>: one line per part / binary, the last one wins
status() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(date -u '+%H:%M:%S')" "${4:-}" >"$work/status/$1"; echo "[$1] $2${4:+ ($4)}"; }

# ---------------------------------------------------------------------------------------
# environment, dependencies and the build: CMake is the one build path
# ---------------------------------------------------------------------------------------
{
  echo "date: $(date -u)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  command -v nvidia-smi >/dev/null && nvidia-smi 2>&1
  [[ -n "$python" ]] && "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} >"$work/logs/environment.log" 2>&1

# What the machine lacks comes from .carry/ (scripts/gpu_carry.sh); NCCL from the toolkit,
# $NCCL_HOME or PyTorch's nvidia-nccl wheel.
cmake_hints=()
carry="$root/.carry"
# Binaries built on the build machine (scripts/gpu_prebuild.sh): unpacked when build-gpu/
# has no build of its own; its ctest files name the build machine's root, linked to ours.
prebuilt=0
if [[ -f "$carry/build-gpu.tar.gz" && ! -f "$build/build.ninja" ]]; then
  tar -C "$build" -xzf "$carry/build-gpu.tar.gz"
  built_at="$(cat "$build/BUILT_AT")"
  if [[ "$built_at" != "$root" && ! -e "$built_at" ]]; then mkdir -p "$(dirname "$built_at")" && ln -s "$root" "$built_at"; fi
  prebuilt=1
  echo "prebuilt binaries of commit $(cat "$build/BUILT_FROM") (scripts/gpu_prebuild.sh)" >>"$work/logs/environment.log"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [[ -d "$d" ]] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
if [[ -d "$carry" ]]; then
  # OpenBLAS and its Fortran runtime travel gzipped (the carry limit): unpack them once
  lib="$build/carried-lib"
  mkdir -p "$lib"
  for z in "$carry"/lib/*.gz; do
    [[ -e "$z" ]] || continue
    [[ -f "$lib/$(basename "$z" .gz)" ]] || gunzip -c "$z" >"$lib/$(basename "$z" .gz)"
  done
  cp -f "$carry"/lib/libz.so* "$lib/" 2>/dev/null
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_hints+=(-DCMAKE_PREFIX_PATH="$carry" -DBoost_INCLUDE_DIR="$carry/include"
                -DBLAS_LIBRARIES="$lib/libopenblas.so.0" -DSTRATA_CBLAS_INCLUDE_DIR="$carry/include/openblas"
                -DZLIB_INCLUDE_DIR="$carry/include" -DZLIB_LIBRARY="$lib/libz.so.1"
                -DSTRATA_FASHION_MNIST_DIR="$carry/data")
fi
for d in "${NCCL_HOME:-}" /usr/local/cuda /usr; do
  [[ -n "$d" && -f "$d/include/nccl.h" ]] && { cmake_hints+=(-DSTRATA_NCCL_INCLUDE_DIR="$d/include"); break; }
done
if [[ -n "$python" ]]; then
  d="$("$python" -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0])' 2>/dev/null || true)"
  if [[ -n "$d" && -f "$d/include/nccl.h" ]]; then
    cmake_hints+=(-DSTRATA_NCCL_INCLUDE_DIR="$d/include" -DSTRATA_NCCL_LIBRARY="$(ls "$d"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d/lib"
  fi
fi
fmnist_dir=""
for d in "${STRATA_FASHION_MNIST_DIR:-}" /usr/share/datasets/fashion-mnist "$carry/data"; do
  [[ -n "$d" && -f "$d/train-images-idx3-ubyte.gz" ]] && { fmnist_dir="$d"; break; }
done

# The binaries each part runs, and the CMake targets that make them.
declare -A target_path=(
  [bench_kernels]="$build/bench/bench_gpu_kernels" [bench_step]="$build/bench/bench_gpu_step"
  [fashion_mnist_train]="$build/examples/fashion_mnist_train_cuda" [gpt_train]="$build/examples/gpt_train_cuda"
  [bench_attention]="$build/bench/bench_gpu_attention" [bench_gpt2]="$build/bench/bench_gpu_gpt_small")

configure() {
  # shellcheck disable=SC2086
  cmake --preset gpu -B "$build" "${cmake_hints[@]}" ${CMAKE_ARGS:-} >"$work/logs/configure.log" 2>&1
}
ensure_built() {  # for parts run without the build part: builds the one target if missing
  local name="$1"
  [[ -x "${target_path[$name]}" ]] && return 0
  [[ -f "$build/build.ninja" ]] || configure || return 1
  cmake --build "$build" --target "$(basename "${target_path[$name]}")" >>"$work/logs/build.log" 2>&1
}

# ---------------------------------------------------------------------------------------
# copying to $OUT and assembling the report
# ---------------------------------------------------------------------------------------
report=""
export_out() {
  [[ -n "${OUT:-}" ]] || return 0
  mkdir -p "$OUT/parts" "$OUT/logs"
  cp -f "$work"/parts/* "$OUT/parts/" 2>/dev/null
  cp -f "$work"/logs/* "$OUT/logs/" 2>/dev/null
  cp -f "$work/commands.log" "$OUT/" 2>/dev/null
  [[ -n "$report" && -f "$report" ]] && cp -f "$report" "$OUT/"
  return 0
}

assemble() {
  if [[ -z "$python" ]]; then
    # no Python: the parts, concatenated, without the ratios
    local dev
    dev="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
    dev="$(echo "${dev:-unknown}" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '_' | sed 's/^_//;s/_$//')"
    report="$results/gpu_${dev}_$(date -u +%Y-%m-%d).md"
    { echo "# strata GPU results (no Python found: ratios not computed)"; echo; cat "$work/commands.log"; echo
      cat "$work"/status/* 2>/dev/null; echo; cat "$work"/parts/*.md 2>/dev/null; } >"$report"
  else
    report="$("$python" - "$work" "$results" <<'PY'
import datetime, glob, json, os, re, subprocess, sys

work, results = sys.argv[1], sys.argv[2]

def read(p, default=""):
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return default

def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

step = {k: load(os.path.join(work, "parts", "bench_step_%s.json" % k)) for k in ("launch", "gemm")}
torch_res = {k: load(os.path.join(work, "parts", "pytorch_%s.json" % k)) for k in ("launch", "gemm")}

device = None
for j in list(step.values()) + [t and t.get("environment") for t in torch_res.values()]:
    if j and j.get("device"):
        device = j["device"]
        break
if not device:
    try:
        device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                stdout=subprocess.PIPE, universal_newlines=True).stdout.splitlines()[0]
    except Exception:
        device = "unknown"
slug = re.sub(r"[^a-z0-9]+", "_", device.lower()).strip("_") or "unknown"
today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
out_path = os.path.join(results, "gpu_%s_%s.md" % (slug, today))

def fmt(v, f="%.4f"):
    return f % v if isinstance(v, (int, float)) else "-"

def verdict(ok):
    return "meets" if ok else "misses"

# strata step times: (model, math, graphs, protocol) -> ms; protocol "host" = batch in pinned
# host memory, "device" = batch already in device memory (the same two protocols as PyTorch's)
S = {}
for k, j in step.items():
    for r in (j or {}).get("steps", []):
        if r.get("status") == "ok":
            S[(r["model"], r["math"], r["graphs"], "device" if r.get("device_data") else "host")] = r["ms"]
G = {}
for k, j in step.items():
    for g in (j or {}).get("gemm_sums", []):
        if g.get("status") == "ok":
            G[(g["model"], g["math"])] = g["sum_ms"]
H = {}
for k, j in step.items():
    for h in (j or {}).get("host", []):
        if h.get("status") == "ok":
            H[h["model"]] = h
# PyTorch: (model, precision) -> {variant: {"host": ms, "device": ms}}
T = {}
for k, j in torch_res.items():
    for r in (j or {}).get("results", []):
        if r.get("status") == "ok":
            T.setdefault((r["model"], r["precision"]), {})[r["variant"]] = {"host": r["host_ms"], "device": r["device_ms"]}

md = []
md.append("# strata on %s: GPU tests and benchmarks, %s" % (device, today))
md.append("")
md.append("Assembled by `bench/gpu/run_all.sh` from the parts in its work dir. Commands (UTC), in order:")
md.append("")
md.append("```")
md.append(read(os.path.join(work, "commands.log")).strip())
md.append("```")
md.append("")
md.append("Dependencies found:")
md.append("")
for line in read(os.path.join(work, "logs", "dependencies.log")).strip().splitlines():
    md.append("- " + line)
env = read(os.path.join(work, "logs", "environment.log"))
m = re.search(r"^nvcc: (.*)$", env, re.M)
if m:
    md.append("- nvcc: " + m.group(1))
m = re.search(r"^torch (.*)$", env, re.M)
if m:
    md.append("- torch " + m.group(1))
md.append("")

md.append("## Parts")
md.append("")
md.append("| part | status | seconds | finished (UTC) | note |")
md.append("|---|---|---:|---|---|")
for p in sorted(glob.glob(os.path.join(work, "status", "*"))):
    f = read(p).rstrip("\n").split("\t")
    f += [""] * (5 - len(f))
    md.append("| %s | %s | %s | %s | %s |" % (f[0], f[1], f[2], f[3], f[4].replace("|", "/")))
md.append("")

md.append("## Issue 4 goals")
md.append("")
md.append("Speedup = PyTorch time / strata time (above 1: strata is faster). strata = the trainer's default "
          "(CUDA-graph replay), fed the same way as PyTorch in each protocol. **host** protocol = batch copied "
          "from pinned host memory every step (strata also checks it on the CPU; PyTorch calls `loss.item()`); "
          "**device** protocol = batches already on the GPU (strata: device-to-device copy into the graph's "
          "input buffer, NaN/Inf scan on the device, loss read back every step; PyTorch: no per-step sync). "
          "Best PyTorch = the fastest successful variant of the same precision and protocol. bf16: strata "
          "`make_trainer<P, bf16>` (bf16 activations, FP32 master weights) vs PyTorch autocast bf16.")
md.append("")
md.append("| case | precision | protocol | strata ms/step | PyTorch eager ms/step | best PyTorch ms/step (variant) "
          "| speedup vs eager (goal >= 1.5) | speedup vs best (goal >= 1.0) |")
md.append("|---|---|---|---:|---:|---:|---:|---:|")
rows = 0
for model, prec in (("launch", "fp32"), ("launch", "tf32"), ("gemm", "bf16"), ("gemm", "tf32"), ("gemm", "fp32")):
    t = T.get((model, prec), {})
    if all(S.get((model, prec, True, p)) is None for p in ("host", "device")) and not t:
        continue
    for proto in ("host", "device"):
        s = S.get((model, prec, True, proto))
        eager = t.get("eager", {}).get(proto)
        best = min(((v[proto], n) for n, v in t.items()), default=(None, None))
        sp_e = eager / s if (eager and s) else None
        sp_b = best[0] / s if (best[0] and s) else None
        goal_e = (" " + verdict(sp_e >= 1.5)) if (sp_e and model == "launch") else ""
        goal_b = (" " + verdict(sp_b >= 1.0)) if (sp_b and model == "launch") else ""
        md.append("| %s | %s | %s | %s | %s | %s | %s%s | %s%s |" % (
            "launch-bound (demo MLP, batch 64)" if model == "launch" else "GEMM-bound (4x4096, batch 8192)",
            prec, proto, fmt(s), fmt(eager), ("%s (%s)" % (fmt(best[0]), best[1])) if best[0] else "-",
            fmt(sp_e, "%.2f"), goal_e, fmt(sp_b, "%.2f"), goal_b))
        rows += 1
if rows == 0:
    md.append("| (no step or PyTorch results yet) | | | | | | | |")
md.append("")
md.append("The goals of issue 4 for the launch-bound case are the two speedup columns; for the GEMM-bound case "
          "it is the bf16 step against the sum of its own bf16 cuBLASLt GEMMs (TF32 and FP32 shown beside it):")
md.append("")
md.append("| GEMM-bound step vs the sum of its cuBLASLt GEMMs | math | strata ms/step | GEMM sum ms | step / sum (goal <= 1.10, bf16) |")
md.append("|---|---|---:|---:|---:|")
any_g = False
for math in ("bf16", "tf32", "fp32"):
    for proto in ("device", "host"):
        s, g = S.get(("gemm", math, True, proto)), G.get(("gemm", math))
        if s and g:
            md.append("| strata, CUDA graph replay, %s-fed | %s | %s | %s | %.3f %s |" % (
                proto, math, fmt(s), fmt(g), s / g, verdict(s / g <= 1.10) if math == "bf16" else ""))
            any_g = True
if not any_g:
    md.append("| (no results yet) | | | | |")
md.append("")

def demote(text):
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.M).strip()

def section(title, names):
    md.append("## " + title)
    md.append("")
    found = False
    for n in names:
        t = read(os.path.join(work, "parts", n))
        if t.strip():
            md.append(demote(t))
            md.append("")
            found = True
    if not found:
        md.append("(not run)")
        md.append("")

# GPU tests: status and the tail of each log
md.append("## GPU tests")
md.append("")
tests = sorted(glob.glob(os.path.join(work, "status", "test-*")))
if not tests:
    md.append("(not run)")
for p in tests:
    f = read(p).rstrip("\n").split("\t")
    name = f[0][len("test-"):]
    md.append("### %s: %s" % (name, f[1] if len(f) > 1 else "?"))
    md.append("")
    log = read(os.path.join(work, "logs", "%s.log" % name)).rstrip().splitlines()
    md.append("```")
    md.extend(log[-40:] if log else ["(no log)"])
    md.append("```")
    md.append("")
section("strata training steps (bench_step)", ["bench_step_launch.md", "bench_step_gemm.md"])
section("PyTorch baselines (pytorch_mlp.py)", ["pytorch_launch.md", "pytorch_gemm.md"])
section("CUDA kernel benchmarks (bench_kernels)", ["gpu_kernels.md"])
md.append("## Main job on one GPU (Fashion-MNIST, 3 epochs)")
md.append("")
jobs = [p for p in ("fp32", "bf16") if os.path.exists(os.path.join(work, "logs", "mainjob_%s.log" % p))]
if not jobs:
    md.append("(not run)")
for p in jobs:
    md.append("### %s" % p)
    md.append("")
    md.append("```")
    md.extend([l for l in read(os.path.join(work, "logs", "mainjob_%s.log" % p)).splitlines()
               if "done in" in l or "accuracy" in l or "strata:" in l or "images" in l][-12:] or ["(no output)"])
    md.append("```")
    md.append("")

with open(out_path, "w") as f:
    f.write("\n".join(md) + "\n")
print(out_path)
PY
)" || report=""
  fi
  [[ -n "$report" ]] && echo "report: $report"
  export_out
}

# ---------------------------------------------------------------------------------------
# the parts
# ---------------------------------------------------------------------------------------
q=()
[[ $quick == 1 ]] && q=(--quick)

part_build() {
  local start rc
  start=$(date +%s)
  if ! configure; then
    status build "failed" $(( $(date +%s) - start )) "cmake configure failed, see logs/configure.log"
    return
  fi
  # the dependency line CMake prints, for the report
  grep -E "^-- strata|^-- strata: skipping" "$work/logs/configure.log" | sed 's/^-- //' >"$work/logs/dependencies.log"
  # only what this script runs: the gpu-labelled tests and the three programs (the host
  # tests are CI's, and building them here would spend device time on a CPU's work)
  local targets
  targets="$(ninja -C "$build" -t targets all 2>/dev/null |
             sed -n 's/^\(gpu_[A-Za-z0-9_]*\|bench_gpu_[a-z_]*\|fashion_mnist_train_cuda\|gpt_train_cuda\): phony$/\1/p')"
  # shellcheck disable=SC2086
  cmake --build "$build" --target $targets >"$work/logs/build.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then status build "ok" $(( $(date +%s) - start )) ""
  else status build "failed" $(( $(date +%s) - start )) "cmake --build exit $rc, see logs/build.log"; fi
}

part_tests() {
  local n rc start names
  [[ -f "$build/CTestTestfile.cmake" ]] || { status tests "skipped" 0 "not configured (run the build part)"; return; }
  names="$(cd "$build" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: \(gpu\.[^ ]*\)$/\1/p')"
  for n in $names; do
    start=$(date +%s)
    watched run_limited "$test_timeout" ctest --test-dir "$build" -R "^$n\$" --output-on-failure \
      >"$work/logs/$n.log" 2>&1
    rc=$?
    if grep -q "Skipped" "$work/logs/$n.log"; then status "test-$n" "skipped" $(( $(date +%s) - start )) "no CUDA device"
    elif [[ $rc == 0 ]]; then status "test-$n" "passed" $(( $(date +%s) - start )) ""
    elif [[ $rc == 124 || $rc == 137 ]]; then status "test-$n" "failed" $(( $(date +%s) - start )) "timed out after $test_timeout s"
    else status "test-$n" "failed" $(( $(date +%s) - start )) "exit $rc"; fi
    # a failing test runs again under compute-sanitizer (memcheck, then racecheck)
    if [[ $rc != 0 ]] && ! grep -q "Skipped" "$work/logs/$n.log" && command -v compute-sanitizer >/dev/null; then
      local exe tool
      exe="$(cd "$build" && ctest -N -V -R "^$n\$" | sed -n 's/^.*Test command: \([^ ]*\).*$/\1/p' | head -1)"
      for tool in memcheck racecheck; do
        [[ -n "$exe" ]] && run_limited "$test_timeout" compute-sanitizer --tool "$tool" --print-limit 20 "$exe" \
          >"$work/logs/$n.$tool.log" 2>&1
      done
    fi
  done
}

part_step() {
  local k rc start
  if ! ensure_built bench_step; then status step "skipped" 0 "bench_step not built"; return; fi
  for k in launch gemm; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    watched run_limited "$part_timeout" "${target_path[bench_step]}" --only "$k" "${q[@]}" ${BENCH_STEP_ARGS:-} \
      --out "$work/parts/bench_step_$k.md" --json "$work/parts/bench_step_$k.json" \
      >"$work/logs/bench_step_$k.log" 2>&1
    rc=$?
    case $rc in
      0) status "step-$k" "ok" $(( $(date +%s) - start )) "" ;;
      77) status "step-$k" "skipped" 0 "no CUDA device" ;;
      124|137) status "step-$k" "failed" $(( $(date +%s) - start )) "timed out after $part_timeout s" ;;
      *) status "step-$k" "failed" $(( $(date +%s) - start )) "exit $rc, see logs/bench_step_$k.log" ;;
    esac
    assemble >/dev/null
  done
}

part_pytorch() {
  local k="$1" rc nf start
  start=$(date +%s)
  if [[ -z "$python" ]]; then status "pytorch-$k" "skipped" 0 "no python3"; return; fi
  # shellcheck disable=SC2086
  watched run_limited "$part_timeout" "$python" "$here/pytorch_mlp.py" --models "$k" --merge "${q[@]}" ${PYTORCH_ARGS:-} \
    --out "$work/parts/pytorch_$k.md" --json "$work/parts/pytorch_$k.json" >"$work/logs/pytorch_$k.log" 2>&1
  rc=$?
  case $rc in
    0) nf="$(grep -c '| failed' "$work/parts/pytorch_$k.md" 2>/dev/null)"
       status "pytorch-$k" "ok" $(( $(date +%s) - start )) "${nf:-0} configuration(s) failed (compile failures are not fatal)" ;;
    77) status "pytorch-$k" "skipped" $(( $(date +%s) - start )) "$(tail -1 "$work/logs/pytorch_$k.log")" ;;
    124|137) status "pytorch-$k" "failed" $(( $(date +%s) - start )) "timed out after $part_timeout s" ;;
    *) status "pytorch-$k" "failed" $(( $(date +%s) - start )) "exit $rc, see logs/pytorch_$k.log" ;;
  esac
}

part_kernels() {
  local rc start
  start=$(date +%s)
  if ! ensure_built bench_kernels; then status kernels "skipped" 0 "bench_kernels not built"; return; fi
  # shellcheck disable=SC2086
  watched run_limited "$part_timeout" "${target_path[bench_kernels]}" "${q[@]}" ${KERNELS_ARGS:-} --out "$work/parts/gpu_kernels.md" \
    >"$work/logs/bench_kernels.log" 2>&1
  rc=$?
  case $rc in
    0) status kernels "ok" $(( $(date +%s) - start )) "" ;;
    77) status kernels "skipped" 0 "no CUDA device" ;;
    124|137) status kernels "failed" $(( $(date +%s) - start )) "timed out after $part_timeout s" ;;
    *) status kernels "failed" $(( $(date +%s) - start )) "exit $rc, see logs/bench_kernels.log" ;;
  esac
}

part_mainjob() {
  local prec rc start acc
  if ! ensure_built fashion_mnist_train; then status mainjob "skipped" 0 "fashion_mnist_train not built"; return; fi
  if [[ -z "$fmnist_dir" ]]; then status mainjob "skipped" 0 "no Fashion-MNIST files"; return; fi
  if ! nvidia-smi -L >/dev/null 2>&1; then status mainjob "skipped" 0 "no CUDA device"; return; fi
  for prec in fp32 bf16; do
    start=$(date +%s)
    STRATA_FASHION_MNIST_DIR="$fmnist_dir" watched run_limited "$part_timeout" "${target_path[fashion_mnist_train]}" 3 "$prec" \
      >"$work/logs/mainjob_$prec.log" 2>&1
    rc=$?
    acc="$(grep -o 'test accuracy: [0-9.]*' "$work/logs/mainjob_$prec.log" | tail -1)"
    case $rc in
      0) status "mainjob-$prec" "ok" $(( $(date +%s) - start )) "${acc:-no accuracy printed}" ;;
      124|137) status "mainjob-$prec" "failed" $(( $(date +%s) - start )) "timed out after $part_timeout s" ;;
      *) status "mainjob-$prec" "failed" $(( $(date +%s) - start )) "exit $rc, see logs/mainjob_$prec.log" ;;
    esac
  done
}

# The GPT main job on one GPU (the single-device plan), 600 steps: its validation line.
part_gpt() {
  local rc start val text_dir=""
  if ! ensure_built gpt_train; then status gpt "skipped" 0 "gpt_train_cuda not built"; return; fi
  for d in "${STRATA_TEXT_DIR:-}" /usr/share/games/fortunes "$carry/data/fortunes"; do
    [[ -n "$d" && -f "$d/computers" ]] && { text_dir="$d"; break; }
  done
  if [[ -z "$text_dir" ]]; then status gpt "skipped" 0 "no fortunes text"; return; fi
  if ! nvidia-smi -L >/dev/null 2>&1; then status gpt "skipped" 0 "no CUDA device"; return; fi
  start=$(date +%s)
  STRATA_TEXT_DIR="$text_dir" watched run_limited "$part_timeout" "${target_path[gpt_train]}" 600 >"$work/logs/gpt.log" 2>&1
  rc=$?
  val="$(grep -o 'validation loss: .*' "$work/logs/gpt.log" | tail -1)"
  case $rc in
    0) status gpt "ok" $(( $(date +%s) - start )) "${val:-no validation line printed}" ;;
    124|137) status gpt "failed" $(( $(date +%s) - start )) "timed out after $part_timeout s" ;;
    *) status gpt "failed" $(( $(date +%s) - start )) "exit $rc, see logs/gpt.log" ;;
  esac
}

# One program of a part: its log, and a status line named after it (exit 77: no device).
run_program() {  # name log command...
  local name="$1" log="$2" rc start
  shift 2
  start=$(date +%s)
  watched run_limited "$part_timeout" "$@" >"$log" 2>&1
  rc=$?
  case $rc in
    0) status "$name" "ok" $(( $(date +%s) - start )) "$(grep -m1 -o '^\(strata_gpt2\|llmc\) .*' "$log" | cut -c1-160)" ;;
    77) status "$name" "skipped" 0 "no CUDA device" ;;
    124|137) status "$name" "failed" $(( $(date +%s) - start )) "timed out after $part_timeout s" ;;
    *) status "$name" "failed" $(( $(date +%s) - start )) "exit $rc, see logs/$(basename "$log")" ;;
  esac
  return $rc
}

# Flash attention against PyTorch's SDPA flash backend on the same shapes (the ratio table).
part_attention() {
  if ! ensure_built bench_attention; then status attention "skipped" 0 "bench_gpu_attention not built"; return; fi
  run_program attention "$work/logs/attention.log" "${target_path[bench_attention]}" --out "$work/parts/attention.json" &&
    [[ -n "$python" ]] &&
    run_program attention-pytorch "$work/logs/attention_pytorch.log" "$python" "$here/pytorch_attention.py" \
      --strata "$work/parts/attention.json" --out "$work/parts/attention.md"
}

# GPT-2 small on one GPU: strata, then PyTorch (which measures the bf16 GEMM peak llm.c's
# MFU uses), then llm.c; the same batch (GPT2_BATCH, default 16) for all three. GPT2_PROGRAMS
# (default "strata pytorch llmc") picks some; GPT2_ARGS go to bench_gpt2 (e.g. --clip 1.0).
part_gpt2() {
  local b="${GPT2_BATCH:-16}" progs=" ${GPT2_PROGRAMS:-strata pytorch llmc} "
  if [[ $progs == *" strata "* ]]; then
    if ensure_built bench_gpt2; then
      # shellcheck disable=SC2086
      run_program gpt2-strata "$work/logs/gpt2_strata.log" "${target_path[bench_gpt2]}" --batch "$b" \
        --json "$work/parts/gpt2_strata.json" ${GPT2_ARGS:-}
    else status gpt2-strata "skipped" 0 "bench_gpu_gpt_small not built"; fi
  fi
  [[ -n "$python" && $progs == *" pytorch "* ]] && run_program gpt2-pytorch "$work/logs/gpt2_pytorch.log" \
    "$python" "$here/pytorch_gpt2.py" --batch "$b" --json "$work/parts/gpt2_pytorch.json"
  [[ $progs == *" llmc "* ]] && B="$b" PEAK_JSON="$work/parts/gpt2_pytorch.json" \
    run_program gpt2-llmc "$work/logs/gpt2_llmc.log" bash "$here/llmc.sh" run
}

for p in "${all_parts[@]}"; do
  wants "$p" || continue
  echo "== $p"
  case "$p" in
    build) part_build ;;
    tests) part_tests ;;
    step) part_step ;;
    pytorch-launch) part_pytorch launch ;;
    pytorch-gemm) part_pytorch gemm ;;
    kernels) part_kernels ;;
    mainjob) part_mainjob ;;
    gpt) part_gpt ;;
    attention) part_attention ;;
    gpt2) part_gpt2 ;;
  esac
  assemble >/dev/null
done
assemble
overall=0
grep -l $'\tfailed\t' "$work"/status/* >/dev/null 2>&1 && overall=1
exit "$overall"
