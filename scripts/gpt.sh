#!/usr/bin/env bash
# The byte-level GPT job (the main job, scripts/main.sh, trains a Llama-style model on BPE
# tokens): build the GPT example and train a byte-level GPT (4 pre-LN blocks, D 128, 4 heads,
# context 128) on the fortune collections of Debian's `fortunes` package as 4 MPI
# processes: a two-stage pipeline, each stage Split<2> (head-parallel attention, Megatron
# MLPs, vocabulary-parallel embedding and loss) with sequence parallelism. It ends with
# the held-out loss next to the unigram baseline and a generated sample.
# Extra arguments go to the program: [steps] (default 5000, about 8 minutes on 2 cores with the build)
# [--checkpoint DIR] (default checkpoints/gpt) [--save-every N] (1000) [--resume DIR] [--stop-after N].
# The Fashion-MNIST example: bash scripts/fashion_mnist.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_EXAMPLES=ON
cmake --build build -j"$(nproc)" --target gpt_train

# Open MPI refuses to start as root without these (containers run as root); more
# processes than cores need --oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpiexec -n 4 --oversubscribe ./build/examples/gpt_train "$@"
