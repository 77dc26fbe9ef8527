#!/usr/bin/env bash
# Install the Debian packages strata's build and tests need, touching apt only
# when something is actually missing (so CI re-runs stay offline and fast).
set -euo pipefail

packages=(cmake ninja-build g++ clang libboost-dev nlohmann-json3-dev doctest-dev
          libopenblas-dev libopenmpi-dev openmpi-bin zlib1g-dev dataset-fashion-mnist fortunes python3-venv
          libsentencepiece-dev sentencepiece libdnnl-dev)

missing=()
for p in "${packages[@]}"; do
  # dpkg -s also succeeds for removed-but-not-purged packages; check Status.
  if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps.sh: all packages present"
  exit 0
fi

echo "deps.sh: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "deps.sh: not root and no sudo; install manually: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
