#!/usr/bin/env bash
# Fills the git-ignored .carry/ with what the GPU machine lacks (it has the CUDA
# toolkit and PyTorch but no package registry): Boost.Hana and doctest headers and the
# Fashion-MNIST files (and zlib, for the main job). Run here, then name .carry in the device tool's `carry`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/deps.sh
rm -rf .carry
mkdir -p .carry/include/boost .carry/data
cp -r /usr/include/boost/hana /usr/include/boost/hana.hpp /usr/include/boost/core .carry/include/boost/
cp -r /usr/include/boost/config /usr/include/boost/config.hpp .carry/include/boost/ 2>/dev/null || true
cp -r /usr/include/doctest .carry/include/
cp /usr/share/datasets/fashion-mnist/*.gz .carry/data/
# zlib for the main job (the GPU machine may lack its header or the -dev symlink)
mkdir -p .carry/lib
cp /usr/include/zlib.h /usr/include/zconf.h .carry/include/
cp -L "$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/{print $NF; exit}')" .carry/lib/libz.so.1
du -sh .carry
