#!/usr/bin/env bash
# Full CI pass: deps, configure, build, ctest. Extra arguments go to ctest,
# e.g. `scripts/test.sh -L static` or `scripts/test.sh -R unit.plan`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release

# The Python tests' venvs (downloads from PyPI: the network's time, not the cores') are made
# while the build compiles; their tests find them ready, or wait on their locks. Where one
# cannot be made (no network), its test tries again and is skipped.
venvs=""
if command -v python3 >/dev/null; then
  { bash tests/python/venv.sh python3 build/python-venv || true
    bash tests/python/venv_hf.sh python3 build/python-venv-hf || true; } >build/python-venvs.log 2>&1 &
  venvs=$!
fi
cmake --build build -j"$jobs"
if [ -n "$venvs" ]; then wait "$venvs" || true; fi

# Open MPI refuses to start as root without these (CI containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

status=0
ctest --test-dir build --output-on-failure -j"$jobs" "$@" || status=$?
exit "$status"
