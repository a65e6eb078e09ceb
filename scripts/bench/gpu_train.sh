#!/usr/bin/env bash
# GPU figure of issue 4, for a session that is lent a device: bf16-mixed
# training throughput of a DistilBERT-base-sized classifier (6 layers, 768
# wide, 12 heads, FFN 3072, BERT's 30,522-id vocabulary) at 512 tokens, in
# samples/s and model FLOPs utilisation, from fresh weights (no hub). Each
# configuration prints two lines: without an attention mask, and with the
# padding mask the train stage passes for a padded batch (the one to quote
# for the stage; PIPE_BENCH_MASK=none or =padding runs one of them).
# REFERENCE=1's transformers step runs unmasked: compare it with the
# "no mask" line.
#
# Build here, carry the binary and the venv's torch libraries, run there:
#   cargo build --release -p pipe-train --example model_throughput
#   scripts/bench/gpu_train.sh [BINARY]
# (scripts/gpu-prepare.sh's .gpu/bin/model_throughput is taken when it is
# there; scripts/gpu-check.sh runs a shorter matrix of the same.)
# Env: PEAK_TFLOPS (default: the first GPU's dense bf16 datasheet peak,
# 989 for H100/H200 SXM, 835 for their NVL parts), BATCHES
# (default "8 16 32"), ITERS (default 20), PRECISIONS (default
# "bf16-mixed 32-true").
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
default=$repo/target/release/examples/model_throughput
[[ -x $repo/.gpu/bin/model_throughput ]] && default=$repo/.gpu/bin/model_throughput
binary=${1:-$default}
if [[ $binary == "$repo/.gpu/bin/"* ]]; then
    # Its RUNPATH names the build machine's .venv: this machine's torch
    # 2.11 first, as gpu-check.sh does.
    if lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null); then
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi
model=$(mktemp -d)
trap 'rm -rf "$model"' EXIT
cat > "$model/config.json" <<'JSON'
{"model_type": "distilbert", "dim": 768, "n_layers": 6, "n_heads": 12,
 "hidden_dim": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
 "dropout": 0.1, "attention_dropout": 0.1, "seq_classif_dropout": 0.2,
 "activation": "gelu", "initializer_range": 0.02, "pad_token_id": 0}
JSON
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
case "$gpu_name" in
    *"H200 NVL"* | *"H100 NVL"*) default_peak=835 ;;
    *) default_peak=989 ;;
esac
date -u +%F
# REFERENCE=1 alternates each configuration with the same step in
# transformers (scripts/bench/gpu_train_reference.py), for a side-by-side
# ratio from one session.
for precision in ${PRECISIONS:-bf16-mixed 32-true}; do
    for batch in ${BATCHES:-8 16 32}; do
        PIPE_BENCH_DEVICE=cuda PIPE_BENCH_PEAK_TFLOPS=${PEAK_TFLOPS:-$default_peak} \
            "$binary" "$model" "$batch" 512 "${ITERS:-20}" train "$precision"
        if [[ ${REFERENCE:-0} == 1 ]]; then
            python3 "$repo/scripts/bench/gpu_train_reference.py" "$model" "$batch" 512 \
                "${ITERS:-20}" "$precision"
        fi
    done
done
