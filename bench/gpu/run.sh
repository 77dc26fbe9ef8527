#!/usr/bin/env bash
# Build and run the strata CUDA kernel benchmarks. Needs only the CUDA toolkit
# (nvcc, cuBLASLt; CUB comes with it) and nvcc's host compiler: no CMake, no
# Boost, no doctest.
#
#   bash bench/gpu/run.sh [--out FILE.md] [--warmup N] [--iters N] [--quick]
#
# The markdown table goes to --out FILE.md, else $OUT/gpu_kernels.md when OUT
# is set, else bench/results/gpu_kernels.md. Knobs: NVCC, CUDA_ARCH (sm_90),
# BUILD_DIR (build-bench-gpu/, git-ignored).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
arch="${CUDA_ARCH:-sm_90}"
build="${BUILD_DIR:-$root/build-bench-gpu}"
mkdir -p "$build"

args=("$@")
if [[ " $* " != *" --out "* && -z "${OUT:-}" ]]; then
  mkdir -p "$root/bench/results"
  args+=(--out "$root/bench/results/gpu_kernels.md")
fi

start=$(date +%s)
"$nvcc" -O3 -arch="$arch" -std=c++20 -I"$root/include" "$here/bench_kernels.cu" \
  -o "$build/bench_kernels" -lcublasLt -lcublas
echo "bench_kernels: built in $(( $(date +%s) - start )) s with $("$nvcc" --version | tail -1)"
exec "$build/bench_kernels" "${args[@]}"
