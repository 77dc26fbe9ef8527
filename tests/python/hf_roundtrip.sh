#!/usr/bin/env bash
# usage: hf_roundtrip.sh <python3> <venv dir> <work dir> <mpiexec> [mpiexec args...] <program>
# strata <-> Hugging Face transformers, both ways (hf_roundtrip.cpp, hf_roundtrip.py): strata
# trains and exports, transformers saves random models, strata imports them under PP2 x TP2,
# and the logits of each pair are compared. Exit 77 (ctest: skipped) when the venv
# (torch, transformers; venv_hf.sh) cannot be made.
set -euo pipefail
python=$1 venv=$2 work=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)

bash "$here/venv_hf.sh" "$python" "$venv"  # exits 77 (skip) when it cannot be made

rm -rf "$work"
mkdir -p "$work"
"$venv/bin/python" "$here/hf_roundtrip.py" make "$work"
"$@" export "$work"
"$@" import "$work"
exec "$venv/bin/python" "$here/hf_roundtrip.py" check "$work"
