#!/usr/bin/env bash
# usage: venv_hf.sh <python3> <venv dir>
# Makes (once) a venv with torch, transformers, safetensors and numpy for python.hf_roundtrip,
# apart from venv.sh's small one: torch is large. The CPU-only wheel index of PyTorch is tried
# first (about 200 MB); where it cannot be reached, plain PyPI's torch (with its CUDA wheels:
# about 5.5 GB on disk, 80 s to install on the 2-core development machine).
# Exit 77 (ctest: skipped) when it cannot be made, e.g. without network to PyPI.
set -euo pipefail
python=$1 venv=$2

# Two ctest runs (or two tests) on one build tree must not build the venv at the same time.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
command -v flock >/dev/null && flock 9

check='import torch, transformers, safetensors, numpy'
if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
  log="$venv.log"
  rm -rf "$venv"
  echo "venv_hf.sh: creating $venv (pip install torch transformers safetensors numpy)"
  start=$(date +%s)
  if ! "$python" -m venv "$venv" >"$log" 2>&1; then
    echo "venv_hf.sh: SKIP: '$python -m venv' failed (Debian: apt-get install python3-venv):"
    tail -n 20 "$log"
    rm -rf "$venv"
    exit 77
  fi
  pip=("$venv/bin/python" -m pip install --disable-pip-version-check --no-input --timeout 60 --retries 2 -q)
  if "${pip[@]}" torch --index-url https://download.pytorch.org/whl/cpu >>"$log" 2>&1; then
    echo "venv_hf.sh: torch from PyTorch's CPU wheel index"
  else
    echo "venv_hf.sh: PyTorch's CPU wheel index cannot be reached: torch from PyPI (with CUDA wheels, ~5.5 GB)"
  fi
  if ! "${pip[@]}" torch transformers safetensors numpy >>"$log" 2>&1; then
    echo "venv_hf.sh: SKIP: 'pip install torch transformers safetensors numpy' failed (no network to PyPI?):"
    tail -n 20 "$log"
    rm -rf "$venv"
    exit 77
  fi
  echo "venv_hf.sh: installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
fi
"$venv/bin/python" -c "$check; print('venv_hf.sh: torch', torch.__version__, 'transformers', transformers.__version__)"
