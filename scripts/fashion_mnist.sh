#!/usr/bin/env bash
# The second example: build the Fashion-MNIST trainer and run DESIGN.md's two-stage
# pipeline as 4 MPI processes (2 stages x data parallel 2) for 3 epochs. Extra arguments
# go to the program: [epochs] [fp32|bf16] (bf16: mixed precision, FP32 master weights).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_EXAMPLES=ON
cmake --build build -j"$(nproc)" --target fashion_mnist_train

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks="${STRATA_RANKS:-4}"
exec mpiexec -n "$ranks" --oversubscribe ./build/examples/fashion_mnist_train "${@:-3}"
