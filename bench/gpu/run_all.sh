#!/usr/bin/env bash
# One command on the GPU machine: build and run the GPU tests, the training-step
# benchmarks (bench_step.cu), the PyTorch baselines (pytorch_mlp.py) and the kernel
# benchmarks (bench_kernels.cu), then assemble everything into
# bench/results/gpu_<device>_<date>.md with the issue-4 ratios.
#
#   bash bench/gpu/run_all.sh [--only PARTS] [--quick] [--fresh]
#
# PARTS, comma-separated, run in this order (default: all of them, after --fresh):
#   build           compile every binary below, in parallel (nvcc -arch=sm_90 -std=c++20
#                   --expt-relaxed-constexpr; benches -O3, tests -O2 -Werror all-warnings)
#   tests           tests/gpu: test_cuda_kernels, test_trainer_cuda, test_nccl (a world of one)
#   step            bench_step --only launch, then --only gemm (two processes)
#   pytorch-launch  pytorch_mlp.py --models launch
#   pytorch-gemm    pytorch_mlp.py --models gemm
#   kernels         bench_kernels
#   mainjob         the Fashion-MNIST main job (examples/fashion_mnist_train.cu) on one GPU,
#                   3 epochs in float32, then in bf16 mixed precision
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
# Dependencies on the GPU machine: the CUDA toolkit (nvcc, cuBLAS/cuBLASLt, CUB); NCCL >= 2.18
# (found in $NCCL_HOME, the toolkit, /usr, or PyTorch's nvidia-nccl wheel); header-only
# Boost.Hana (the planner) and doctest (the tests), taken from the system or from .carry/
# (bash scripts/gpu_carry.sh fills it; carry ".carry"). MPI is optional: with mpicxx
# (Open MPI's --showme) the NCCL world can bootstrap over MPI and test_nccl is built;
# without it everything runs as a world of one GPU (nccl_communicator::single) and test_nccl
# is skipped. The main job also needs zlib (system, or zlib.h and libz.so.1 from .carry/) and
# the Fashion-MNIST files ($STRATA_FASHION_MNIST_DIR, Debian's dataset-fashion-mnist, or
# .carry/data). PyTorch for the baselines.
#
# Knobs: NVCC, CUDA_ARCH (sm_90), BUILD_DIR (build-bench-gpu/, git-ignored), RESULTS_DIR
# (bench/results), PYTHON, PART_TIMEOUT (s, default 1800), TEST_TIMEOUT (s, default 900),
# BENCH_STEP_ARGS, PYTORCH_ARGS, KERNELS_ARGS (extra arguments), NCCL_HOME.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root" || exit 1
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
arch="${CUDA_ARCH:-sm_90}"
build="${BUILD_DIR:-$root/build-bench-gpu}"
work="$build/run_all"
results="${RESULTS_DIR:-$root/bench/results}"
python="${PYTHON:-$(command -v python3 || command -v python || true)}"
part_timeout="${PART_TIMEOUT:-1800}"
test_timeout="${TEST_TIMEOUT:-900}"
all_parts=(build tests step pytorch-launch pytorch-gemm kernels mainjob)

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
for v in NVCC CUDA_ARCH BUILD_DIR RESULTS_DIR PYTHON PART_TIMEOUT TEST_TIMEOUT BENCH_STEP_ARGS PYTORCH_ARGS KERNELS_ARGS NCCL_HOME; do
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
# environment and dependencies
# ---------------------------------------------------------------------------------------
{
  echo "date: $(date -u)"
  echo "nvcc: $("$nvcc" --version 2>/dev/null | tail -1)"
  command -v nvidia-smi >/dev/null && nvidia-smi 2>&1
  [[ -n "$python" ]] && "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} >"$work/logs/environment.log" 2>&1

deps_notes=()
cuda_root="$(dirname "$(dirname "$(readlink -f "$nvcc" 2>/dev/null || echo "$nvcc")")")"

# NCCL: headers and library (strata/comm/nccl.hpp needs NCCL >= 2.18).
nccl_flags=() nccl_note="not found"
find_nccl() {
  local cands=() d lib
  [[ -n "${NCCL_HOME:-}" ]] && cands+=("$NCCL_HOME")
  [[ -n "${NCCL_ROOT:-}" ]] && cands+=("$NCCL_ROOT")
  cands+=("$cuda_root" /usr/local /usr)
  if [[ -n "$python" ]]; then
    d="$("$python" -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0])' 2>/dev/null || true)"
    [[ -n "$d" ]] && cands+=("$d")
  fi
  for d in "${cands[@]}"; do
    [[ -f "$d/include/nccl.h" ]] || continue
    for lib in "$d/lib" "$d/lib64" "$d/lib/x86_64-linux-gnu" /usr/lib/x86_64-linux-gnu; do
      local link=()
      if [[ -e "$lib/libnccl.so" ]]; then link=(-lnccl)
      elif [[ -e "$lib/libnccl.so.2" ]]; then link=(-l:libnccl.so.2)
      else continue; fi
      nccl_flags=()
      [[ "$d" != /usr ]] && nccl_flags+=(-I"$d/include")
      nccl_flags+=(-L"$lib" "${link[@]}" -Xlinker -rpath -Xlinker "$lib")
      local v
      v="$(awk '/#define NCCL_(MAJOR|MINOR|PATCH)[ \t]/{printf "%s%s", s, $3; s="."}' "$d/include/nccl.h")"
      nccl_note="NCCL $v: $d/include/nccl.h, $lib"
      return 0
    done
  done
  return 1
}
find_nccl
deps_notes+=("NCCL: $nccl_note")

# MPI (optional): Open MPI's compiler wrapper, flags translated for nvcc.
mpi_cflags=() mpi_lflags=() have_mpi=0
nvccify() {
  local t
  for t in "$@"; do
    case "$t" in
      -I*|-L*|-l*|-D*) printf '%s\n' "$t" ;;
      -Wl,*) printf '%s\n' -Xlinker "${t#-Wl,}" ;;
      *) printf '%s\n' -Xcompiler "$t" ;;
    esac
  done
}
if command -v mpicxx >/dev/null && mpicxx --showme:compile >/dev/null 2>&1; then
  # shellcheck disable=SC2046
  mapfile -t mpi_cflags < <(nvccify $(mpicxx --showme:compile))
  # shellcheck disable=SC2046
  mapfile -t mpi_lflags < <(nvccify $(mpicxx --showme:link))
  have_mpi=1
  deps_notes+=("MPI: $(command -v mpicxx) ($(mpicxx --showme:version 2>&1 | head -1))")
else
  # nccl.hpp and world.hpp include MPI only when <mpi.h> is found; without it a job is one
  # process (nccl_communicator::single). STRATA_NO_MPI keeps a stray mpi.h out.
  mpi_cflags=(-DSTRATA_NO_MPI)
  deps_notes+=("MPI: no mpicxx (Open MPI --showme): built with -DSTRATA_NO_MPI, one-GPU worlds only; test_nccl needs MPI and is skipped")
fi

# Header-only dependencies: Boost.Hana (the planner) and doctest (the tests).
hana_flags=() hana_note="" doctest_flags=() doctest_note=""
for d in "${BOOST_INCLUDE:-}" /usr/include /usr/local/include "$root/.carry/include"; do
  [[ -n "$d" && -f "$d/boost/hana.hpp" ]] || continue
  [[ "$d" != /usr/include ]] && hana_flags=(-isystem "$d")
  hana_note="$d/boost/hana.hpp"
  break
done
for d in "${DOCTEST_INCLUDE:-}" /usr/include /usr/local/include "$root/.carry/include" "$root/.carry/doctest"; do
  [[ -n "$d" && -f "$d/doctest/doctest.h" ]] || continue
  [[ "$d" != /usr/include ]] && doctest_flags=(-isystem "$d")
  doctest_note="$d/doctest/doctest.h"
  break
done
# zlib (the main job reads the gzipped IDX files): header and library, system or carried.
zlib_flags=() zlib_note=""
for d in /usr/include /usr/local/include "$root/.carry/include"; do
  [[ -f "$d/zlib.h" ]] || continue
  for lib in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib "$root/.carry/lib"; do
    local_link=()
    if [[ -e "$lib/libz.so" ]]; then local_link=(-lz)
    elif [[ -e "$lib/libz.so.1" ]]; then local_link=(-l:libz.so.1)
    else continue; fi
    zlib_flags=()
    [[ "$d" != /usr/include ]] && zlib_flags+=(-isystem "$d")
    zlib_flags+=(-L"$lib" "${local_link[@]}" -Xlinker -rpath -Xlinker "$lib")
    zlib_note="$d/zlib.h, $lib"
    break 2
  done
done
fmnist_dir=""
for d in "${STRATA_FASHION_MNIST_DIR:-}" /usr/share/datasets/fashion-mnist "$root/.carry/data"; do
  [[ -n "$d" && -f "$d/train-images-idx3-ubyte.gz" ]] && { fmnist_dir="$d"; break; }
done
deps_notes+=("zlib: ${zlib_note:-NOT FOUND (bash scripts/gpu_carry.sh carries zlib.h and libz.so.1)}")
deps_notes+=("Fashion-MNIST: ${fmnist_dir:-NOT FOUND (bash scripts/gpu_carry.sh carries it in .carry/data)}")
deps_notes+=("Boost.Hana: ${hana_note:-NOT FOUND (run bash scripts/gpu_carry.sh on the build machine and carry .carry)}")
deps_notes+=("doctest: ${doctest_note:-NOT FOUND (copy /usr/include/doctest to .carry/include/doctest, or set DOCTEST_INCLUDE)}")
printf '%s\n' "${deps_notes[@]}" >"$work/logs/dependencies.log"
printf '  %s\n' "${deps_notes[@]}"

# ---------------------------------------------------------------------------------------
# building (each binary: its own log, skipped when its inputs and flags are unchanged)
# ---------------------------------------------------------------------------------------
libs=(-lcublasLt -lcublas)
common=(-std=c++20 -arch="$arch" --expt-relaxed-constexpr -I"$root/include")
test_flags=(-O2 -Xcompiler -Wall -Werror all-warnings)
bin_names=(bench_kernels bench_step test_cuda_kernels test_trainer_cuda test_nccl fashion_mnist_train)
src_of() {
  case "$1" in
    bench_*) echo "$here/$1.cu" ;;
    test_*) echo "$root/tests/gpu/$1.cu" ;;
    fashion_mnist_train) echo "$root/examples/fashion_mnist_train.cu" ;;
  esac
}
# Prints the nvcc command line of a binary, or "MISSING: reason".
flags_of() {
  local name="$1" need=()
  case "$name" in
    bench_kernels) need=() ;;
    bench_step) need=(hana nccl) ;;
    test_cuda_kernels) need=(doctest) ;;
    test_trainer_cuda) need=(doctest hana nccl) ;;
    test_nccl) need=(nccl mpi) ;;
    fashion_mnist_train) need=(hana nccl zlib) ;;
  esac
  local n missing=()
  for n in "${need[@]}"; do
    case "$n" in
      hana) [[ -n "$hana_note" ]] || missing+=("Boost.Hana headers") ;;
      doctest) [[ -n "$doctest_note" ]] || missing+=("doctest headers") ;;
      nccl) [[ ${#nccl_flags[@]} -gt 0 ]] || missing+=("NCCL") ;;
      mpi) [[ $have_mpi == 1 ]] || missing+=("MPI (mpicxx)") ;;
      zlib) [[ -n "$zlib_note" ]] || missing+=("zlib") ;;
    esac
  done
  if [[ ${#missing[@]} -gt 0 ]]; then echo "MISSING: ${missing[*]}"; return; fi
  local f=("$nvcc" "${common[@]}")
  case "$name" in
    bench_kernels) f+=(-O3) ;;
    bench_step) f+=(-O3 -Werror all-warnings "${hana_flags[@]}" "${mpi_cflags[@]}") ;;
    test_cuda_kernels) f+=("${test_flags[@]}" "${doctest_flags[@]}") ;;
    test_trainer_cuda) f+=("${test_flags[@]}" "${doctest_flags[@]}" "${hana_flags[@]}" "${mpi_cflags[@]}") ;;
    test_nccl) f+=("${test_flags[@]}" "${mpi_cflags[@]}") ;;
    fashion_mnist_train) f+=(-O3 -Werror all-warnings "${hana_flags[@]}" "${mpi_cflags[@]}") ;;
  esac
  f+=("$(src_of "$name")" -o "$build/$name")
  case "$name" in
    bench_step|test_trainer_cuda|test_nccl) f+=("${nccl_flags[@]}" "${libs[@]}" "${mpi_lflags[@]}") ;;
    fashion_mnist_train) f+=("${nccl_flags[@]}" "${libs[@]}" "${mpi_lflags[@]}" "${zlib_flags[@]}") ;;
    *) f+=("${libs[@]}") ;;
  esac
  printf '%q ' "${f[@]}"
}
stamp_of() {  # hash of the sources the binary depends on, and its command line
  { flags_of "$1"; cat "$(src_of "$1")"; find "$root/include" -type f -print0 | sort -z | xargs -0 cat; } |
    sha1sum | cut -d' ' -f1
}
build_one() {  # synchronous; records status build-<name>
  local name="$1" cmd start rc
  cmd="$(flags_of "$name")"
  if [[ "$cmd" == MISSING:* ]]; then status "build-$name" "skipped" 0 "needs ${cmd#MISSING: }"; return 1; fi
  local stamp
  stamp="$(stamp_of "$name")"
  if [[ -x "$build/$name" && -f "$build/$name.stamp" && "$(cat "$build/$name.stamp")" == "$stamp" ]]; then
    status "build-$name" "ok" 0 "up to date"
    return 0
  fi
  rm -f "$build/$name" "$build/$name.stamp"
  start=$(date +%s)
  echo "$cmd" >"$work/logs/build_$name.log"
  eval "$cmd" >>"$work/logs/build_$name.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then
    echo "$stamp" >"$build/$name.stamp"
    status "build-$name" "ok" $(( $(date +%s) - start )) ""
  else
    status "build-$name" "failed" $(( $(date +%s) - start )) "nvcc exit $rc, see logs/build_$name.log"
  fi
  return $rc
}
ensure_built() {  # for parts run without the build part: rebuilds only what changed
  if [[ -x "$build/$1" && -f "$build/$1.stamp" && "$(cat "$build/$1.stamp")" == "$(stamp_of "$1")" ]]; then return 0; fi
  build_one "$1"
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
  local pids=() n start failed=0 skipped=0
  start=$(date +%s)
  for n in "${bin_names[@]}"; do
    build_one "$n" &
    pids+=($!)
  done
  for n in "${pids[@]}"; do wait "$n" || true; done
  for n in "${bin_names[@]}"; do
    grep -q $'\tfailed\t' "$work/status/build-$n" 2>/dev/null && failed=$((failed + 1))
    grep -q $'\tskipped\t' "$work/status/build-$n" 2>/dev/null && skipped=$((skipped + 1))
  done
  if [[ $failed -gt 0 ]]; then status build "failed" $(( $(date +%s) - start )) "$failed of ${#bin_names[@]} failed, $skipped skipped"
  else status build "ok" $(( $(date +%s) - start )) "$skipped skipped"; fi
}

part_tests() {
  local n rc start
  for n in test_cuda_kernels test_trainer_cuda test_nccl; do
    if ! ensure_built "$n"; then
      status "test-$n" "skipped" 0 "not built: $(cut -f5 "$work/status/build-$n" 2>/dev/null)"
      echo "not built: $(cut -f5 "$work/status/build-$n" 2>/dev/null)" >"$work/logs/$n.log"
      continue
    fi
    start=$(date +%s)
    watched run_limited "$test_timeout" "$build/$n" >"$work/logs/$n.log" 2>&1
    rc=$?
    case $rc in
      0) status "test-$n" "passed" $(( $(date +%s) - start )) "" ;;
      77) status "test-$n" "skipped" $(( $(date +%s) - start )) "no CUDA device" ;;
      124|137) status "test-$n" "failed" $(( $(date +%s) - start )) "timed out after $test_timeout s" ;;
      *) status "test-$n" "failed" $(( $(date +%s) - start )) "exit $rc" ;;
    esac
  done
}

part_step() {
  local k rc start
  if ! ensure_built bench_step; then status step "skipped" 0 "bench_step not built"; return; fi
  for k in launch gemm; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    watched run_limited "$part_timeout" "$build/bench_step" --only "$k" "${q[@]}" ${BENCH_STEP_ARGS:-} \
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
  watched run_limited "$part_timeout" "$build/bench_kernels" "${q[@]}" ${KERNELS_ARGS:-} --out "$work/parts/gpu_kernels.md" \
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
    STRATA_FASHION_MNIST_DIR="$fmnist_dir" watched run_limited "$part_timeout" "$build/fashion_mnist_train" 3 "$prec" \
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
  esac
  assemble >/dev/null
done
assemble
overall=0
grep -l $'\tfailed\t' "$work"/status/* >/dev/null 2>&1 && overall=1
exit "$overall"
