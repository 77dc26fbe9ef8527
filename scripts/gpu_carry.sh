#!/usr/bin/env bash
# Fills the git-ignored .carry/ with what the GPU machine lacks (it has CMake, ninja, the
# CUDA toolkit and PyTorch, but no package registry), for bench/gpu/run_all.sh's CMake
# build: Boost.Hana, nlohmann/json and doctest headers, OpenBLAS (gzipped: the carry limit is 64 MiB;
# run_all.sh unpacks it), zlib and the Fashion-MNIST files. Run here, then name .carry in
# the device tool's `carry`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/deps.sh
rm -rf .carry
mkdir -p .carry/include/boost .carry/include/openblas .carry/lib .carry/data
# Boost.Hana (the planner) and what FindBoost reads for the version
cp -r /usr/include/boost/hana /usr/include/boost/hana.hpp /usr/include/boost/version.hpp .carry/include/boost/
cp -r /usr/include/boost/config /usr/include/boost/config.hpp /usr/include/boost/core .carry/include/boost/
cp -r /usr/include/doctest .carry/include/
# nlohmann/json (checkpoint headers) with its CMake package, found under CMAKE_PREFIX_PATH=.carry
cp -r /usr/include/nlohmann .carry/include/
mkdir -p .carry/share/cmake
cp -r /usr/share/cmake/nlohmann_json .carry/share/cmake/
# OpenBLAS for the host backend (the reference the GPU trainer test compares with)
blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)"
gzip -9 -c "$blas" >.carry/lib/libopenblas.so.0.gz
for l in libgfortran.so.5 libquadmath.so.0; do gzip -9 -c "$(readlink -f "/lib/x86_64-linux-gnu/$l")" >".carry/lib/$l.gz"; done
inc="$(dirname "$(readlink -f /usr/include/x86_64-linux-gnu/cblas.h)")"
cp "$inc/cblas.h" "$inc/openblas_config.h" .carry/include/openblas/
# zlib for the main job
cp /usr/include/zlib.h /usr/include/zconf.h .carry/include/
cp -L "$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/{print $NF; exit}')" .carry/lib/libz.so.1
ln -sf libz.so.1 .carry/lib/libz.so
cp /usr/share/datasets/fashion-mnist/*.gz .carry/data/
# the GPT main job's text (Debian's fortunes), dereferenced
mkdir -p .carry/data/fortunes
cp -L /usr/share/games/fortunes/* .carry/data/fortunes/ 2>/dev/null || true
du -sh .carry
