#!/usr/bin/env bash
# The main job: build the Llama example and train a Llama-style decoder (tied embeddings,
# 4 pre-RMSNorm blocks of grouped-query rotary attention and SwiGLU, D 128, context 128) on
# SentencePiece BPE tokens (vocabulary 2048) of the fortune collections of Debian's
# `fortunes` package as 4 MPI processes: a two-stage pipeline, each stage Split<2> with
# sequence parallelism, the embedding table tied across the stages. It ends with the
# held-out loss in nats/token and bits/byte, the float64 reference forward beside
# strata's, a sample decoded by SentencePiece, and the model exported for Hugging Face
# transformers (checkpoints/llama-hf).
# Extra arguments go to the program: [steps] (default 2000, about 10 minutes on 2 cores with the build)
# [--checkpoint DIR] (default checkpoints/llama) [--save-every N] (1000) [--resume DIR] [--stop-after N]
# [--export DIR] (default checkpoints/llama-hf).
# The byte-level GPT job: bash scripts/gpt.sh; the Fashion-MNIST example: bash scripts/fashion_mnist.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_EXAMPLES=ON
cmake --build build -j"$(nproc)" --target llama_train

# Open MPI refuses to start as root without these (containers run as root); more
# processes than cores need --oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpiexec -n 4 --oversubscribe ./build/examples/llama_train "$@"
