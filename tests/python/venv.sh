#!/usr/bin/env bash
# usage: venv.sh <python3> <venv dir>
# Makes (once) a venv with safetensors and numpy from PyPI, shared by the python tests.
# Exit 77 (ctest: skipped) when it cannot be made, e.g. without network to PyPI.
set -euo pipefail
python=$1 venv=$2

# Two ctest runs (or two tests) on one build tree must not build the venv at the same time.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
command -v flock >/dev/null && flock 9

if ! "$venv/bin/python" -c 'import safetensors, numpy' 2>/dev/null; then
  log="$venv.log"
  rm -rf "$venv"
  echo "venv.sh: creating $venv (pip install safetensors numpy)"
  if ! "$python" -m venv "$venv" >"$log" 2>&1; then
    echo "venv.sh: SKIP: '$python -m venv' failed (Debian: apt-get install python3-venv):"
    tail -n 20 "$log"
    rm -rf "$venv"
    exit 77
  fi
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --timeout 60 --retries 2 -q \
       safetensors numpy >"$log" 2>&1; then
    echo "venv.sh: SKIP: 'pip install safetensors numpy' failed (no network to PyPI?):"
    tail -n 20 "$log"
    rm -rf "$venv"
    exit 77
  fi
fi
"$venv/bin/python" -c 'import safetensors, numpy; print("venv.sh: safetensors", safetensors.__version__, "numpy", numpy.__version__)'
