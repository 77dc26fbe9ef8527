#!/usr/bin/env bash
# Fills the git-ignored .carry/ with what the GPU machine lacks (it has the CUDA
# toolkit and PyTorch but no package registry): Boost.Hana and doctest headers and the
# Fashion-MNIST files. Run here, then name .carry in the device tool's `carry`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/deps.sh
rm -rf .carry
mkdir -p .carry/include/boost .carry/data
cp -r /usr/include/boost/hana /usr/include/boost/hana.hpp /usr/include/boost/core .carry/include/boost/
cp -r /usr/include/boost/config /usr/include/boost/config.hpp .carry/include/boost/ 2>/dev/null || true
cp -r /usr/include/doctest .carry/include/
cp /usr/share/datasets/fashion-mnist/*.gz .carry/data/
du -sh .carry
