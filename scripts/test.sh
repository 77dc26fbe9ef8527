#!/usr/bin/env bash
# Full CI pass: deps, configure, build, ctest. Extra arguments go to ctest,
# e.g. `scripts/test.sh -L static` or `scripts/test.sh -R unit.plan`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"

# Open MPI refuses to start as root without these (CI containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

status=0
ctest --test-dir build --output-on-failure -j"$jobs" "$@" || status=$?
exit "$status"
