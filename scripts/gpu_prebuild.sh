#!/usr/bin/env bash
# Builds the GPU targets here (nvcc, sm_90, the `gpu` preset) and packs the binaries and
# ctest files into .carry/build-gpu.tar.gz, so the lent GPU machine spends its minutes
# running, not compiling. bench/gpu/run_all.sh unpacks the archive when build-gpu/ has
# no build of its own. MPI is left out: the GPU machine has no MPI library, and every
# program then runs as a world of one GPU. Run scripts/gpu_carry.sh first (dependencies).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
build="$root/build-gpu"
cmake --preset gpu -B "$build" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null
targets="$(ninja -C "$build" -t targets all |
           sed -n 's/^\(gpu_[A-Za-z0-9_]*\|bench_gpu_[a-z_]*\|fashion_mnist_train_cuda\|gpt_train_cuda\): phony$/\1/p')"
# shellcheck disable=SC2086
cmake --build "$build" --target $targets
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
(cd "$build" && find . -name CTestTestfile.cmake -print0 | xargs -0 cp --parents -t "$stage")
for t in $targets; do
  f="$(cd "$build" && find . -type f -name "$t" -perm -u+x | head -1)"
  [[ -n "$f" ]] || { echo "gpu_prebuild.sh: $t not built" >&2; exit 1; }
  mkdir -p "$stage/$(dirname "$f")"
  strip -o "$stage/$f" "$build/$f"
done
# ctest files name absolute paths: the GPU machine links this root to its own checkout
echo "$root" >"$stage/BUILT_AT"
git rev-parse HEAD >"$stage/BUILT_FROM"
mkdir -p .carry
tar -C "$stage" -czf .carry/build-gpu.tar.gz .
du -h .carry/build-gpu.tar.gz
