#!/usr/bin/env bash
# ResNet-50's training step (torchvision's resnet50: float32, SGD with momentum, one
# process, T threads) at batch 8 and 16 of 224 × 224 images: strata (bench_resnet.cpp,
# images NHWC) against PyTorch (pytorch_resnet.py) in its default NCHW layout and in
# channels_last, on the same threads. Each program reports the median of `steps` steps
# after 2 warm-up steps; the frameworks alternate twice and each keeps its better median.
# On a CPU with AVX-512, strata runs a second time with OPENBLAS_CORETYPE=SkylakeX: an
# OpenBLAS that does not know the CPU (Debian 12's 0.3.21 on AMD Zen 5) falls back to its
# AVX2 (Haswell) kernels, and this picks its AVX-512 ones. Where oneDNN is installed
# (Debian: libdnnl-dev; the strata::dnnl component), strata runs once more with its
# convolutions on oneDNN (bench_resnet_dnnl): strata-onednn.
# PyTorch and torchvision are pip-installed into a private venv (STRATA_BENCH_VENV,
# default .venv-bench; never a dependency of strata). Report to stdout and to
# bench/results/resnet50_<date>_<cpu>.md.
#   bash bench/host/run_resnet.sh [threads (all CPUs)] [image size (224)] [batches (8,16)] [steps (5)]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
threads=${1:-$(nproc)}
size=${2:-224}
batches=${3:-8,16}
steps=${4:-5}
source bench/host/report.sh
build_bench bench_host_resnet
dnnl=./build-bench/bench/bench_host_resnet_dnnl
if grep -q '^STRATA_HAVE_DNNL:INTERNAL=ON' build-bench/CMakeCache.txt; then
  cmake --build build-bench --target bench_host_resnet_dnnl >/dev/null
else
  dnnl=""
fi
bench_venv
"$venv/bin/python" -c "import torchvision" 2>/dev/null || "$venv/bin/pip" install --quiet torchvision
avx512=$(grep -m1 -o -w avx512f /proc/cpuinfo || true)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for pass in 1 2; do
  for b in ${batches//,/ }; do
    ./build-bench/bench/bench_host_resnet "$threads" "$steps" "$b" "$size" | tee -a "$out/all"
    if [ -n "$avx512" ]; then
      OPENBLAS_CORETYPE=SkylakeX ./build-bench/bench/bench_host_resnet "$threads" "$steps" "$b" "$size" |
        sed 's/^strata /strata-avx512 /; s/^BLAS:/BLAS (OPENBLAS_CORETYPE=SkylakeX):/' | tee -a "$out/all"
    fi
    [ -n "$dnnl" ] && "$dnnl" "$threads" "$steps" "$b" "$size" | grep -v '^BLAS' | tee -a "$out/all"
    for f in nchw nhwc; do
      "$venv/bin/python" bench/host/pytorch_resnet.py --threads "$threads" --batch "$b" --size "$size" \
        --steps "$steps" --format "$f" | tee -a "$out/all"
    done
  done
done
# the better median of framework $1 at batch $2 ("<fw> resnet50 batch <B> image <S> threads <T> <ms> ms/step ...")
best() { awk -v f="$1" -v b="$2" '$1 == f && $4 == b { if (m == "" || $9 < m) m = $9 } END { print m }' "$out/all"; }
ratio() { awk -v s="$1" -v t="$2" 'BEGIN { if (s == "" || t == "") print "-"; else printf "%.3f", s / t }'; }
table=$({
  echo "ResNet-50 (torchvision resnet50, 25,557,032 parameters), float32, SGD momentum 0.9, images ${size}x${size}x3,"
  echo "$threads threads; PyTorch $("$venv/bin/python" -c 'import torch, torchvision; print(torch.__version__, "torchvision", torchvision.__version__)')"
  grep -m1 '^BLAS:' "$out/all" || true
  grep -m1 '^BLAS (' "$out/all" || true
  grep -m1 '^oneDNN:' "$out/all" || true
  echo "ms/step: the median of $steps steps after 2 warm-up steps, the better of two passes; time ratio > 1: strata slower"
  echo
  printf "%-6s %10s %13s %13s %13s %13s %15s %15s %15s\n" batch "strata ms" "strata-avx512" "strata-onednn" \
    "PyTorch NCHW" "PyTorch NHWC" "strata/PyTorch" "avx512/PyTorch" "onednn/PyTorch"
  printf "%-6s %10s %13s %13s %13s %13s %15s %15s %15s\n" "" "" "ms" "ms" "ms" "ms" "NCHW   NHWC" "NCHW   NHWC" \
    "NCHW   NHWC"
  for b in ${batches//,/ }; do
    s=$(best strata "$b"); a=$(best strata-avx512 "$b"); o=$(best strata-onednn "$b")
    n=$(best pytorch-nchw "$b"); h=$(best pytorch-nhwc "$b")
    printf "%-6s %10s %13s %13s %13s %13s %15s %15s %15s\n" "$b" "$s" "${a:--}" "${o:--}" "$n" "$h" \
      "$(ratio "$s" "$n") $(ratio "$s" "$h")" "$(ratio "$a" "$n") $(ratio "$a" "$h")" "$(ratio "$o" "$n") $(ratio "$o" "$h")"
  done
  echo
  echo "every run:"
  grep -v '^BLAS' "$out/all"
})
write_report resnet50 "ResNet-50 training step: strata vs PyTorch CPU" \
  "bash bench/host/run_resnet.sh $threads $size $batches $steps" "$table"
