#!/usr/bin/env bash
# Build and run the CUDA backend tests without CMake, e.g. on a bare GPU
# machine that has only the CUDA toolkit. Each tests/gpu/*.cu is its own
# program; exit code 77 means "no CUDA device" (reported as skipped). Files
# whose "// requires:" line names more than cuda (mpi, nccl) are left to ctest.
#
#   bash tests/gpu/run.sh [doctest options, e.g. -tc="gemm*"]
#
# doctest: taken from the system include path, or from DOCTEST_INCLUDE (a
# folder holding doctest/doctest.h), or from .carry/doctest when present
# (.carry/ is git-ignored: copy /usr/include/doctest there to carry it to a
# machine without doctest). Knobs: NVCC, CUDA_ARCH (sm_90), BUILD_DIR.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
arch="${CUDA_ARCH:-sm_90}"
build="${BUILD_DIR:-$root/build-gpu-tests}"
mkdir -p "$build"

inc=(-I"$root/include")
if [[ -n "${DOCTEST_INCLUDE:-}" ]]; then
  inc+=(-I"$DOCTEST_INCLUDE")
elif [[ -f "$root/.carry/include/doctest/doctest.h" ]]; then
  inc+=(-I"$root/.carry/include")  # scripts/gpu_carry.sh (also Boost.Hana)
elif [[ -f "$root/.carry/doctest/doctest/doctest.h" ]]; then
  inc+=(-I"$root/.carry/doctest")
fi

status=0
for src in "$here"/*.cu; do
  name="$(basename "$src" .cu)"
  # Files that also need MPI or NCCL ("// requires: mpi cuda nccl") go through
  # ctest, which knows those include and link flags.
  reqs="$(head -n 20 "$src" | sed -n 's|^//[[:space:]]*requires:||p' | tr ',' ' ')"
  extra="$(echo $reqs | tr ' ' '\n' | grep -v -x -e cuda -e '' || true)"
  if [[ -n "$extra" ]]; then
    echo "$name: not built here (requires $(echo $extra)): use ctest -L gpu"
    continue
  fi
  start=$(date +%s)
  "$nvcc" -std=c++20 -arch="$arch" -O2 -Xcompiler -Wall -Werror all-warnings "${inc[@]}" "$src" \
    -o "$build/$name" -lcublasLt -lcublas
  echo "$name: built in $(( $(date +%s) - start )) s"
  rc=0
  "$build/$name" "$@" || rc=$?
  case $rc in
    0) echo "$name: passed" ;;
    77) echo "$name: skipped (no CUDA device)" ;;
    *) echo "$name: FAILED (exit $rc)"; status=1 ;;
  esac
done
exit "$status"
