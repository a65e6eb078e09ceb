#!/usr/bin/env bash
# The GPU check: what a machine with one NVIDIA GPU, torch 2.11 for its
# python3, no network and no compiler runs, in under 8 minutes, with the
# binaries scripts/gpu-prepare.sh built on a CPU machine (.gpu/):
#
#   1. the pipe-train tests of tests/it/cuda.rs on the GPU: a GPU run
#      against the CPU run (format and weights), every precision (16-mixed
#      with its loss scaler, and a forced overflow), ddp and both sharded
#      strategies with 2 replicas on the one GPU;
#   2. training throughput of a DistilBERT-base-sized classifier at 512
#      tokens, bf16-mixed and 32-true, at a few batch sizes (samples/s, MFU);
#   3. one epoch of the real train/classifier@1 stage through `pipe` on a
#      synthetic IMDB-sized dataset (scripts/gpu/imdb-synthetic.yaml).
#
# It ends with one summary table. Output goes to stdout and, with OUT set,
# to $OUT/gpu-check.log. Exit status 0 when every part passed, 1 when one
# failed, 2 when the machine cannot run the check (no GPU, no torch 2.11).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
gpu=${GPU_DIR:-$repo/.gpu}
bin=$gpu/bin
out=${OUT:-/tmp}
log=$out/gpu-check.log
rows=()
failed=0

row() { rows+=("$(printf '%-44s %-5s %s' "$1" "$2" "$3")"); [[ $2 == ok ]] || failed=1; }

machine() {
    echo "--- machine"
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || {
        echo "nvidia-smi failed: no NVIDIA GPU here"; return 2; }
    echo "cores: $(nproc)"
    ldd --version | head -1
    local glibc
    glibc=$(ldd --version | head -1 | grep -oE '[0-9]+\.[0-9]+$')
    if [[ $(printf '%s\n2.34\n' "$glibc" | sort -V | head -1) != 2.34 ]]; then
        echo "glibc $glibc: the binaries need 2.34 or newer"; return 2
    fi
    local info
    info=$(python3 -c 'import os, torch; print(torch.__version__); print(os.path.join(os.path.dirname(torch.__file__), "lib")); print(torch.version.cuda); print(torch.cuda.is_available())') || {
        echo "python3 cannot import torch: install torch==2.11.0"; return 2; }
    local version lib
    version=$(sed -n 1p <<<"$info")
    lib=$(sed -n 2p <<<"$info")
    echo "torch $version (CUDA $(sed -n 3p <<<"$info"), available: $(sed -n 4p <<<"$info")) in $lib"
    case $version in
        2.11.*) ;;
        *) echo "torch $version: the binaries were built against torch 2.11.0 and need exactly it"; return 2 ;;
    esac
    # The binaries' RUNPATH names the build machine's .venv; this torch
    # comes first.
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The tests find their fixtures under the checkout path they were
    # compiled in; point that path at this copy of the repository.
    local build_root
    build_root=$(cat "$gpu/build-root")
    if [[ ! -e $build_root ]]; then
        mkdir -p "$(dirname "$build_root")" && ln -s "$repo" "$build_root"
    fi
    echo "--- libraries of pipe-stage-train"
    ldd "$bin/pipe-stage-train" | grep -E 'libtorch|libc10|not found'
    if ldd "$bin/pipe-stage-train" | grep -q 'libtorch_cuda.so => /'; then
        row "libtorch_cuda loaded by the worker" ok "$(du -sh "$gpu" | cut -f1) of binaries"
    else
        row "libtorch_cuda loaded by the worker" FAIL "the worker would see no GPU"
    fi
}

cuda_tests() {
    echo "--- 1. pipe-train's CUDA tests"
    local started=$SECONDS output
    output=$(PIPE_TRAIN_WORKER="$bin/pipe-stage-train" timeout 300 \
        "$bin/pipe-train-tests" cuda:: --test-threads=1 --nocapture 2>&1)
    local status=$?
    echo "$output"
    local result
    result=$(grep -E '^test result' <<<"$output" | tail -1)
    if [[ $status == 0 ]] && grep -q "CUDA: on the GPU" <<<"$output"; then
        row "CUDA tests (tests/it/cuda.rs)" ok "${result#test result: } in $((SECONDS - started)) s"
    else
        row "CUDA tests (tests/it/cuda.rs)" FAIL "${result:-exit $status} in $((SECONDS - started)) s"
    fi
}

throughput() {
    echo "--- 2. training throughput, DistilBERT-base size at 512 tokens"
    local model
    model=$(mktemp -d)
    cp "$repo/scripts/gpu/distilbert-base.json" "$model/config.json"
    for precision in ${PRECISIONS:-bf16-mixed 32-true}; do
        for batch in ${BATCHES:-16 32 64}; do
            local output
            output=$(PIPE_BENCH_DEVICE=cuda timeout 120 "$bin/model_throughput" \
                "$model" "$batch" 512 "${ITERS:-20}" train "$precision" 2>&1)
            echo "$output"
            local rate mfu
            rate=$(grep -oE '[0-9.]+ samples/s' <<<"$output" | head -1)
            mfu=$(grep -oE 'MFU [0-9.]+%' <<<"$output" | head -1)
            if [[ -n $rate ]]; then
                row "throughput $precision batch $batch" ok "$rate, $mfu"
            else
                row "throughput $precision batch $batch" FAIL "$(tail -1 <<<"$output")"
            fi
        done
    done
    rm -rf "$model"
}

one_epoch() {
    echo "--- 3. one epoch of train/classifier@1 through pipe (synthetic IMDB)"
    local project started=$SECONDS
    project=$(mktemp -d)
    cp "$repo"/scripts/gpu/{imdb-synthetic.yaml,synthetic_imdb.py,distilbert-base.json} "$project/"
    cp "$repo/stages/tests/fixtures/tokenize/tokenizer.json" "$project/"
    if (cd "$project" && PIPE_GPU_BIN="$bin" timeout 330 "$bin/pipe" run imdb-synthetic.yaml \
            -S "scale=${SCALE:-1.0}"); then
        local summary
        summary=$(cd "$project" && "$bin/pipe" show --json | python3 -c '
import json, sys
run = json.load(sys.stdin)
m = next(s["metrics"] for s in run["stages"] if s["stage"] == "train")
print("%d rows in %.1f s: %.0f samples/s, %.0f tokens/s, MFU %.1f%% (%s), val_acc %.3f; "
      "ms per step: forward %.1f, backward %.1f, optimizer %.1f, other %.1f; peak RSS %.0f MiB" % (
    m["train_rows"], m["train_seconds"], m["throughput.samples_per_s"], m["throughput.tokens_per_s"],
    100 * (m.get("throughput.mfu") or 0), m["throughput.peak_source"], m["val_acc"],
    m["throughput.forward_ms"], m["throughput.backward_ms"], m["throughput.optimizer_ms"],
    m["throughput.other_ms"], (m.get("memory.peak_rss_bytes") or 0) / 2**20))')
        echo "$summary"
        row "one epoch through pipe ($((SECONDS - started)) s in all)" ok "$summary"
    else
        row "one epoch through pipe" FAIL "see the log above"
    fi
    rm -rf "$project"
}

main() {
    local started=$SECONDS
    machine || return $?
    cuda_tests
    throughput
    one_epoch
    echo "--- summary ($((SECONDS - started)) s)"
    printf '%s\n' "${rows[@]}"
    return $failed
}

mkdir -p "$out"
main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
