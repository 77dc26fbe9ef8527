#!/usr/bin/env bash
# usage: checkpoint_python.sh <python3> <venv dir> <work dir> <mpiexec> [mpiexec args...] <program>
# A 2-rank strata checkpoint read back with Python's safetensors (checkpoint_python.py).
# Exit 77 (ctest: skipped) when the venv cannot be made.
set -euo pipefail
python=$1 venv=$2 work=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)

bash "$here/venv.sh" "$python" "$venv"  # exits 77 (skip) when it cannot be made

rm -rf "$work"
mkdir -p "$work"
"$@" "$work"
exec "$venv/bin/python" "$here/checkpoint_python.py" "$work"
