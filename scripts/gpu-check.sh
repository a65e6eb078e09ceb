#!/usr/bin/env bash
# What a session lent a GPU machine runs there, once: the GPU figures that
# need one (scripts/bench/gpu_train.sh: bf16-mixed, 16-mixed and fp32
# training throughput of a DistilBERT-base-sized classifier at 512 tokens).
#
# Build here first (the machine has no registry; it has a torch 2.11.0 of its
# own, whose libraries the binary uses there through LD_LIBRARY_PATH):
#   cargo build --release -p pipe-train --example model_throughput
#   mkdir -p .gpu && cp target/release/examples/model_throughput .gpu/
# then run `scripts/gpu-check.sh .gpu/model_throughput` there with `.gpu`
# carried. Output goes to stdout and, when OUT is set, to $OUT/gpu-check.log.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-$repo/.gpu/model_throughput}
log=${OUT:-/tmp}/gpu-check.log
{
    echo "--- machine"
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    nproc
    torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "--- libtorch_cuda linked in"
    ldd "$binary" | grep -E 'libtorch(_cuda)?\.so' || echo "libtorch_cuda missing: the binary would see no GPU"
    echo "--- training throughput (scripts/bench/gpu_train.sh)"
    PRECISIONS=${PRECISIONS:-"bf16-mixed 16-mixed 32-true"} BATCHES=${BATCHES:-"8 16 32 64"} \
        ITERS=${ITERS:-30} REFERENCE=${REFERENCE:-1} bash "$repo/scripts/bench/gpu_train.sh" "$binary"
} 2>&1 | tee "$log"
