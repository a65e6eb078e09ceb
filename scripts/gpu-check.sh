#!/usr/bin/env bash
# The GPU check: what a machine with NVIDIA GPUs, torch 2.11 for its
# python3 and no registry runs with the binaries scripts/gpu-prepare.sh
# built on a CPU machine (.gpu/). It is made for a short lease (one
# command of at most 10 minutes): a 30-second probe first, then steps that
# each have a time limit of their own, 540 s in all, each printing its
# figures as soon as it has them.
#
#   step                                                   limit (s)
#   0. probe: the carried binaries complete, the driver,       30
#      CUDA in the machine's torch 2.11, glibc and GLIBCXX
#      against what the binaries need; exits 2 with the
#      reason when the machine cannot run the rest
#   1. tests/it/cuda.rs on the GPU: a GPU run against the      90
#      CPU run (format, weights), every precision, the loss
#      scaler's forced overflow
#   2. pipe-train's unit tests c10d::tests (Gloo, the          30
#      store, a rank that leaves) on this machine
#   3. NCCL of one rank: every collective on the GPU           30
#   4. ddp, deepspeed_stage_2, fsdp_shard_grad_op and fsdp    80
#      on 2 Gloo ranks of the one GPU (NCCL refuses two
#      ranks of one device); fsdp again with bf16
#      communication and with prefetch off, each writing
#      its checkpoint unit by unit
#   5. the same over NCCL between 2 GPUs (only with 2 GPUs    80
#      or more; else "skipped: 1 GPU")
#   6. training throughput of a DistilBERT-base-sized          80
#      classifier at 512 tokens, bf16-mixed and 32-true,
#      without a mask and with the stage's padding mask
#      (samples/s, MFU); configurations that no longer fit
#      the step's time are skipped, and say so
#   7. one epoch of the real train/classifier@1 stage         140
#      through `pipe` on a synthetic IMDB-sized dataset       (and what
#      (scripts/gpu/imdb-synthetic.yaml)                       the others left)
#
# It ends with one summary table; every row is also printed the moment it
# is known. Output goes to stdout and, with OUT set, to $OUT/gpu-check.log.
# Exit status 0 when every step passed (or was skipped for want of a second
# GPU), 1 when one failed, 2 when the probe found the machine unable to run
# the check. Run it from anywhere: it finds the checkout beside itself and
# tells the tests to read their fixtures there (PIPE_CHECKOUT).
# Env: BUDGET_S (540), SCALE (1.0, the epoch's dataset), PRECISIONS,
# BATCHES, ITERS (step 6), GPU_DIR (.gpu).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
gpu=${GPU_DIR:-$repo/.gpu}
bin=$gpu/bin
out=${OUT:-/tmp}
log=$out/gpu-check.log
budget=${BUDGET_S:-540}
rows=()
failed=0
gpu_count=0
started_all=$SECONDS
deadline=$((SECONDS + budget))

# A row of the summary: printed at once, and again in the table at the end.
row() {
    local line
    line=$(printf '%-46s %-5s %s' "$1" "$2" "$3")
    rows+=("$line")
    echo "=> $line"
    [[ $2 == ok || $2 == skip ]] || failed=1
}

# Seconds a step may take: its own limit, never past the deadline.
limit() {
    local left=$((deadline - SECONDS))
    ((left < $1)) && echo "$left" || echo "$1"
}

# `run_limited SECONDS FILE COMMAND...`: runs COMMAND under a time limit
# (TERM, then KILL 5 s later, to its whole process group), its output
# shown as it comes and kept in FILE; returns its status (124 on timeout).
run_limited() {
    local seconds=$1 file=$2
    shift 2
    if ((seconds < 10)); then
        echo "no time left for: $*" | tee "$file"
        return 124
    fi
    timeout -k 5 $((seconds - 5)) "$@" 2>&1 | tee "$file"
    return "${PIPESTATUS[0]}"
}

manifest() { sed -n "s/^$1=//p" "$gpu/manifest" 2>/dev/null | head -1; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
# Whether version $1 is at least $2 (sort -V).
at_least() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1) == "$2" ]]; }
refuse() { echo "probe: $*"; echo "the machine cannot run the GPU check: $*" >&2; return 2; }

probe() {
    echo "--- 0. probe (30 s at most)"
    date -u
    local started=$SECONDS
    # The carried files: all there, the size recorded by gpu-prepare.sh.
    [[ -f $gpu/manifest ]] || { refuse "no $gpu/manifest: run scripts/gpu-prepare.sh and carry .gpu"; return 2; }
    local file
    for file in pipe pipe-stage pipe-stage-train model_throughput fresh_model pipe-train-tests pipe-train-lib-tests; do
        [[ -x $bin/$file ]] || { refuse "$bin/$file is missing: carry the whole .gpu"; return 2; }
    done
    local bytes recorded tree limit_bytes
    bytes=$(find "$bin" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
    recorded=$(manifest bin_bytes)
    tree=$(manifest tree_bytes)
    limit_bytes=$(manifest carry_limit_bytes)
    echo "carried: $(mib "$bytes") of binaries (gpu-prepare measured $(mib "${recorded:-0}")), $(mib "${tree:-0}") of working tree; limit $(mib "${limit_bytes:-67108864}")"
    echo "built from $(manifest commit) in $(manifest build_root) at $(manifest built)"
    [[ $bytes == "$recorded" ]] || { refuse "the binaries are $bytes bytes here, $recorded where they were built: a partial copy"; return 2; }
    ((bytes + ${tree:-0} <= ${limit_bytes:-67108864})) || { refuse "$(mib $((bytes + tree))) is over the carry limit"; return 2; }

    # The GPUs and the driver (CUDA 13, as in torch 2.11's cu130 wheels,
    # needs R580 or newer).
    local gpus driver
    gpus=$(timeout 5 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) || {
        refuse "nvidia-smi failed: no NVIDIA GPU or driver here"; return 2; }
    echo "$gpus"
    gpu_count=$(grep -c . <<<"$gpus")
    driver=$(head -1 <<<"$gpus" | awk -F', ' '{print $NF}')
    echo "GPUs: $gpu_count, driver $driver, cores: $(nproc)"
    at_least "$driver" 580 || { refuse "driver $driver: CUDA 13 needs R580 or newer"; return 2; }

    # The machine's torch: the binaries were linked against torch 2.11.0.
    # Importing torch reads about 2 GB of libraries: a few seconds warm,
    # more from a cold disk.
    local info version lib status
    info=$(timeout 25 python3 -c 'import os, torch
print(torch.__version__); print(os.path.join(os.path.dirname(torch.__file__), "lib"))
print(torch.version.cuda); print(torch.cuda.is_available()); print(torch.cuda.device_count())')
    status=$?
    if [[ $status == 124 ]]; then
        refuse "python3 took more than 25 s to import torch: a disk too slow for a short lease"; return 2
    elif [[ $status != 0 ]]; then
        refuse "python3 cannot import torch (exit $status): install torch==2.11.0"; return 2
    fi
    version=$(sed -n 1p <<<"$info")
    lib=$(sed -n 2p <<<"$info")
    echo "torch $version (CUDA $(sed -n 3p <<<"$info"), available: $(sed -n 4p <<<"$info"), $(sed -n 5p <<<"$info") devices) in $lib"
    case $version in
        2.11.*) ;;
        *) refuse "torch $version: the binaries were built against torch 2.11.0 and need exactly it"; return 2 ;;
    esac
    [[ $(sed -n 4p <<<"$info") == True ]] || { refuse "torch sees no CUDA device"; return 2; }
    # The binaries' RUNPATH names the build machine's .venv; this torch
    # comes first.
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

    # glibc, libstdc++: the newest symbol versions the binaries need
    # (recorded by gpu-prepare.sh with objdump -T) against the machine's.
    local glibc need_glibc libstdcxx glibcxx need_glibcxx cxxabi need_cxxabi
    glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    [[ -n $glibc ]] || glibc=$(ldd --version | head -1 | grep -oE '[0-9]+\.[0-9]+$')
    need_glibc=$(manifest glibc)
    libstdcxx=$(ldd "$bin/pipe-stage-train" | awk '/libstdc\+\+/ {print $3; exit}')
    glibcxx=$(grep -aoE 'GLIBCXX_[0-9]+(\.[0-9]+)*' "$libstdcxx" 2>/dev/null | sed 's/^GLIBCXX_//' | sort -uV | tail -1)
    cxxabi=$(grep -aoE 'CXXABI_[0-9]+(\.[0-9]+)*' "$libstdcxx" 2>/dev/null | sed 's/^CXXABI_//' | sort -uV | tail -1)
    need_glibcxx=$(manifest glibcxx)
    need_cxxabi=$(manifest cxxabi)
    echo "glibc $glibc (need $need_glibc); $libstdcxx: GLIBCXX $glibcxx (need $need_glibcxx), CXXABI $cxxabi (need $need_cxxabi)"
    at_least "$glibc" "$need_glibc" || { refuse "glibc $glibc: the binaries need $need_glibc"; return 2; }
    [[ -n $glibcxx ]] || { refuse "no libstdc++.so.6 found for the worker"; return 2; }
    at_least "$glibcxx" "$need_glibcxx" || { refuse "GLIBCXX $glibcxx in $libstdcxx: the binaries need $need_glibcxx"; return 2; }
    at_least "$cxxabi" "$need_cxxabi" || { refuse "CXXABI $cxxabi in $libstdcxx: the binaries need $need_cxxabi"; return 2; }

    # Every carried binary finds every library, and the worker loads
    # libtorch_cuda (else it would see no GPU).
    local missing
    for file in "$bin"/*; do
        missing=$(ldd "$file" 2>&1 | grep -E 'not found|version .* not found')
        [[ -z $missing ]] || { refuse "$(basename "$file"): $missing"; return 2; }
    done
    ldd "$bin/pipe-stage-train" | grep -E 'libtorch|libc10'
    ldd "$bin/pipe-stage-train" | grep -q 'libtorch_cuda.so => /' || {
        refuse "the worker does not load libtorch_cuda: it would see no GPU"; return 2; }
    row "0. probe ($((SECONDS - started)) s)" ok \
        "$gpu_count GPU, driver $driver, torch $version, glibc $glibc, GLIBCXX $glibcxx, $(mib "$bytes") carried"
}

# `tests NAME SECONDS BINARY ARGS...`: a test binary's run as one row.
tests() {
    local name=$1 seconds started=$SECONDS file status result
    seconds=$(limit "$2")
    local binary=$3
    shift 3
    file=$(mktemp)
    # As cargo runs them: from the crate's directory, with the carried
    # worker, the fixtures of this copy of the checkout.
    (cd "$repo/train" && PIPE_TRAIN_WORKER="$bin/pipe-stage-train" PIPE_CHECKOUT="$repo" \
        run_limited "$seconds" "$file" "$binary" "$@")
    status=$?
    result=$(grep -E '^test result' "$file" | tail -1)
    result=${result#test result: }
    if [[ $status == 0 ]] && grep -q "no CUDA device: checking" "$file"; then
        # The probe saw CUDA in torch; a test that found none in libtorch
        # checked only its no-GPU half.
        row "$name" FAIL "${result%%;*}, but libtorch saw no CUDA device: the no-GPU half only"
    elif [[ $status == 0 ]]; then
        row "$name" ok "${result%%;*} in $((SECONDS - started)) s$(skipped "$file")"
    elif [[ $status == 124 || $status == 137 ]]; then
        row "$name" FAIL "timed out after $seconds s"
    else
        row "$name" FAIL "${result:-exit $status} in $((SECONDS - started)) s"
    fi
    rm -f "$file"
}

# Why a test skipped, for the table.
skipped() {
    if grep -q "^skipped:" "$1"; then
        echo ", $(grep -m1 '^skipped:' "$1")"
    fi
}

cuda_tests() {
    echo "--- 1. pipe-train's CUDA tests (limit $(limit 90) s)"
    tests "1. CUDA tests (tests/it/cuda.rs)" 90 "$bin/pipe-train-tests" cuda:: \
        --skip cuda::nccl --skip cuda::gloo --test-threads=1 --nocapture
}

c10d_tests() {
    echo "--- 2. pipe-train's unit tests c10d::tests (limit $(limit 30) s)"
    tests "2. c10d unit tests (Gloo, store)" 30 "$bin/pipe-train-lib-tests" c10d::tests
}

nccl_one() {
    echo "--- 3. NCCL of one rank (limit $(limit 30) s)"
    tests "3. NCCL of one rank, every collective" 30 "$bin/pipe-train-tests" \
        cuda::nccl_of_one_rank --test-threads=1 --nocapture
}

gloo_two_on_one() {
    echo "--- 4. 2 Gloo ranks on the one GPU (limit $(limit 80) s)"
    tests "4. ddp + sharded + fsdp bf16/prefetch, 2 Gloo ranks on 1 GPU" 80 "$bin/pipe-train-tests" \
        cuda::gloo_ --test-threads=1 --nocapture
}

nccl_two() {
    echo "--- 5. NCCL between 2 GPUs"
    if ((gpu_count < 2)); then
        echo "skipped: $gpu_count GPU"
        row "5. ddp + sharded + fsdp bf16/prefetch, NCCL on 2 GPUs" skip "skipped: $gpu_count GPU"
        return
    fi
    tests "5. ddp + sharded + fsdp bf16/prefetch, NCCL on 2 GPUs" 80 "$bin/pipe-train-tests" \
        cuda::nccl_ddp --test-threads=1 --nocapture
}

throughput() {
    local step_end=$((SECONDS + $(limit 80)))
    echo "--- 6. training throughput, DistilBERT-base size at 512 tokens (limit $(limit 80) s)"
    local model
    model=$(mktemp -d)
    cp "$repo/scripts/gpu/distilbert-base.json" "$model/config.json"
    local precision batch file status seconds variant
    for precision in ${PRECISIONS:-bf16-mixed 32-true}; do
        for batch in ${BATCHES:-16 32 64}; do
            # A run may take 40 s (32-true at batch 64: about 0.3 s a step,
            # 24 steps a variant), never past the step's end.
            seconds=$((step_end - SECONDS))
            ((seconds > 40)) && seconds=40
            if ((seconds < 15)); then
                row "6. throughput $precision batch $batch" skip "skipped: the step's 80 s are spent"
                continue
            fi
            file=$(mktemp)
            PIPE_BENCH_DEVICE=cuda run_limited "$seconds" "$file" "$bin/model_throughput" \
                "$model" "$batch" 512 "${ITERS:-10}" train "$precision"
            status=$?
            for variant in "no mask" "padding mask"; do
                local rate mfu
                rate=$(grep -F ", $variant:" "$file" | grep -oE '[0-9.]+ samples/s' | head -1)
                mfu=$(grep -F "$variant: model FLOPs" "$file" | grep -oE 'MFU [0-9.]+%' | head -1)
                if [[ -n $rate ]]; then
                    row "6. throughput $precision b$batch, $variant" ok "$rate, $mfu"
                elif [[ $status == 124 || $status == 137 ]]; then
                    row "6. throughput $precision b$batch, $variant" FAIL "timed out after $seconds s"
                else
                    row "6. throughput $precision b$batch, $variant" FAIL "$(tail -1 "$file")"
                fi
            done
            rm -f "$file"
        done
    done
    rm -rf "$model"
}

one_epoch() {
    # The last step: its own 140 s and whatever the others left, less 10 s
    # for the summary.
    local seconds=$((deadline - SECONDS - 10))
    echo "--- 7. one epoch of train/classifier@1 through pipe, synthetic IMDB (limit $seconds s)"
    local project file started=$SECONDS
    project=$(mktemp -d)
    file=$(mktemp)
    cp "$repo"/scripts/gpu/{imdb-synthetic.yaml,synthetic_imdb.py,distilbert-base.json} "$project/"
    cp "$repo/stages/tests/fixtures/tokenize/tokenizer.json" "$project/"
    if (cd "$project" && PIPE_GPU_BIN="$bin" run_limited "$seconds" "$file" "$bin/pipe" run \
            imdb-synthetic.yaml -S "scale=${SCALE:-1.0}"); then
        local summary warnings
        summary=$(cd "$project" && timeout 20 "$bin/pipe" show --json | python3 -c '
import json, sys
run = json.load(sys.stdin)
m = next(s["metrics"] for s in run["stages"] if s["stage"] == "train")
print("%d rows in %.1f s: %.0f samples/s, %.0f tokens/s, MFU %.1f%% (%s), val_acc %.3f; "
      "ms per step: forward %.1f, backward %.1f, optimizer %.1f, other %.1f; peak RSS %.0f MiB" % (
    m["train_rows"], m["train_seconds"], m["throughput.samples_per_s"], m["throughput.tokens_per_s"],
    100 * (m.get("throughput.mfu") or 0), m["throughput.peak_source"], m["val_acc"],
    m["throughput.forward_ms"], m["throughput.backward_ms"], m["throughput.optimizer_ms"],
    m["throughput.other_ms"], (m.get("memory.peak_rss_bytes") or 0) / 2**20))')
        # libtorch's deprecation warnings in the stage logs (pin_memory's
        # device argument printed two a batch).
        warnings=$(grep -rho "is deprecated" "$project/.pipe/logs" 2>/dev/null | wc -l)
        row "7. one epoch through pipe ($((SECONDS - started)) s in all)" ok \
            "${summary:-no metrics read}; deprecation warnings: $warnings"
    else
        row "7. one epoch through pipe" FAIL "after $((SECONDS - started)) s of $seconds; see the log above"
    fi
    rm -rf "$project" "$file"
}

main() {
    echo "GPU check: $budget s in all; checkout $repo"
    probe || return 2
    cuda_tests
    c10d_tests
    nccl_one
    gloo_two_on_one
    nccl_two
    throughput
    one_epoch
    echo "--- summary ($((SECONDS - started_all)) s of $budget)"
    printf '%s\n' "${rows[@]}"
    return $failed
}

mkdir -p "$out"
main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
