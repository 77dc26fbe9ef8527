#!/usr/bin/env bash
# usage: safetensors_interop.sh <python3> <interop program> <venv dir> <work dir>
# With the venv of venv.sh (safetensors, numpy), runs safetensors_interop.py.
# Exit 77 (ctest: skipped) when the venv cannot be made, e.g. without network to PyPI.
set -euo pipefail
python=$1 program=$2 venv=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)

bash "$here/venv.sh" "$python" "$venv"  # exits 77 (skip) when it cannot be made

rm -rf "$work"
mkdir -p "$work"
exec "$venv/bin/python" "$here/safetensors_interop.py" "$program" "$work"
