#!/usr/bin/env bash
# Benchmark: push and pull throughput of a 1 GiB cache against a real S3
# server on 127.0.0.1 (s3s-fs), side by side with the same bytes moved by a
# plain client, the AWS CLI (`aws s3 cp --recursive`).
#
# The 1 GiB: one command stage writing 16 files of 64 MiB of random bytes
# into a directory output, run once with no remote (so the stage's own time
# is not in any figure). Then, ROUNDS times, alternating pipe and aws, each
# against its own empty prefix:
#   push       `pipe cache push` of that run          vs  aws s3 cp --recursive DIR s3://...
#   pull-run   `pipe run` in a copy of the project     vs  aws s3 cp --recursive s3://... DIR
#              with an empty .pipe/: the stage restored from the remote
#              (objects into the local cache, checked against their digests,
#              then the 1 GiB put in the workspace)
#   pull-cache `pipe cache pull 1` in another fresh project, after
#              `pipe cache pull` brought the run records (objects into the
#              local cache only; run #1 is the first record imported)
#   restore    then `pipe run --remote off` there: the restore from the
#              local cache alone (no aws twin), what pull-run adds to
#              pull-cache
# Medians, MB/s (10^6 bytes) and pipe/aws ratios are printed at the end, for
# each concurrency in CONCURRENCIES (PIPE_REMOTE_CONCURRENCY for pipe, the
# CLI's max_concurrent_requests for aws; default "8 16").
#
#   scripts/bench/remote_transfer.sh          # ROUNDS=3 CONCURRENCIES="8 16"
#   PIPE_BIN=/tmp/pipe-before scripts/bench/remote_transfer.sh
#                                             # that binary, not a fresh build
#                                             # (a before/after pair, alternated)
#
# Needs s3s-fs (scripts/install-s3.sh), python3 with venv (the AWS CLI is
# installed into AWS_BENCH_VENV, default ~/.cache/pipe-bench/awscli), and
# about 6 GiB of free disk under TMPDIR; everything is removed at the end.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
rounds=${ROUNDS:-3}
concurrencies=${CONCURRENCIES:-8 16}
s3s_fs=${S3S_FS:-${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs}
[ -x "$s3s_fs" ] || { echo "s3s-fs not found: run scripts/install-s3.sh" >&2; exit 1; }
venv=${AWS_BENCH_VENV:-$HOME/.cache/pipe-bench/awscli}
if [ ! -x "$venv/bin/aws" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q awscli
fi
aws="$venv/bin/aws"
if [ -n "${PIPE_BIN:-}" ]; then
  pipe=$PIPE_BIN
else
  cargo build --release --quiet --bin pipe --manifest-path "$repo/Cargo.toml"
  pipe="$target/release/pipe"
fi

work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

bucket=pipe-bench
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/s3/$bucket"
"$s3s_fs" --host 127.0.0.1 --port "$port" --access-key bench-access --secret-key bench-secret-0123456789 \
  "$work/s3" >"$work/s3s-fs.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.05
done
endpoint=http://127.0.0.1:$port
export AWS_ACCESS_KEY_ID=bench-access AWS_SECRET_ACCESS_KEY=bench-secret-0123456789 AWS_REGION=us-east-1
export AWS_CONFIG_FILE=$work/aws-config AWS_SHARED_CREDENTIALS_FILE=$work/aws-credentials
export PIPE_REMOTE_ENDPOINT=$endpoint
unset PIPE_REMOTE PIPE_REMOTE_READ_ONLY PIPE_REMOTE_CONCURRENCY
"$aws" configure set default.s3.addressing_style path
"$aws" configure set default.region us-east-1

# The pipeline: one stage, 16 x 64 MiB of random bytes in a directory.
mkdir -p "$work/template"
cat >"$work/template/pipe.yaml" <<'YAML'
name: transfer
stages:
  make:
    run: bash make_data.sh
    deps: [make_data.sh]
    outs: [data]
YAML
cat >"$work/template/make_data.sh" <<'SH'
set -e
mkdir -p data
for i in 01 02 03 04 05 06 07 08 09 10 11 12 13 14 15 16; do
  head -c 64M /dev/urandom >data/part$i.bin
done
SH
cp -r "$work/template" "$work/src"
(cd "$work/src" && "$pipe" run -q)
bytes=$(du -sb --apparent-size "$work/src/data" | cut -f1)

results=$work/results.tsv
: >"$results"
# timed NAME CONCURRENCY ROUND DIR COMMAND...: runs COMMAND in DIR, records its wall time.
timed() {
  local name=$1 concurrency=$2 round=$3 dir=$4
  shift 4
  local start=$EPOCHREALTIME
  (cd "$dir" && "$@") >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; echo "$name failed" >&2; exit 1; }
  local seconds
  seconds=$(awk -v start="$start" -v end="$EPOCHREALTIME" 'BEGIN { printf "%.3f", end - start }')
  printf '%s\t%s\t%s\t%s\n' "$name" "$concurrency" "$round" "$seconds" >>"$results"
  printf '  %-18s c=%-3s round %s: %7.2f s   %s\n' "$name" "$concurrency" "$round" "$seconds" \
    "$(grep -E '^(s3|remote)' "$work/last.log" | tail -1)"
}
fresh_project() { rm -rf "$1" && cp -r "$work/template" "$1"; }

echo "pipe $("$pipe" --version | cut -d' ' -f2), $("$aws" --version 2>&1 | cut -d' ' -f1-2), s3s-fs; $bytes bytes in 16 files; $(nproc) cores; $(date -u +%FT%TZ)"
for concurrency in $concurrencies; do
  "$aws" configure set default.s3.max_concurrent_requests "$concurrency"
  for round in $(seq "$rounds"); do
    prefix=c$concurrency-r$round
    remote=s3://$bucket/pipe-$prefix
    timed push-pipe "$concurrency" "$round" "$work/src" \
      env PIPE_REMOTE="$remote" PIPE_REMOTE_CONCURRENCY="$concurrency" "$pipe" cache push
    timed push-aws "$concurrency" "$round" "$work/src" \
      "$aws" --endpoint-url "$endpoint" s3 cp --recursive --only-show-errors data "s3://$bucket/aws-$prefix/"

    fresh_project "$work/dst"
    timed pull-run-pipe "$concurrency" "$round" "$work/dst" \
      env PIPE_REMOTE="$remote" PIPE_REMOTE_CONCURRENCY="$concurrency" "$pipe" run
    grep -q 'restored\|pulled' "$work/last.log" || { cat "$work/last.log"; echo "the stage was not restored from the remote" >&2; exit 1; }
    if [ "$round" = 1 ]; then
      # The stage writes random bytes: identical files mean nothing ran.
      diff -r "$work/src/data" "$work/dst/data" >/dev/null || { echo "pulled data differ from the pushed data" >&2; exit 1; }
    fi
    rm -rf "$work/dst"
    rm -rf "$work/down"
    timed pull-aws "$concurrency" "$round" "$work" \
      "$aws" --endpoint-url "$endpoint" s3 cp --recursive --only-show-errors "s3://$bucket/aws-$prefix/" down
    rm -rf "$work/down"

    fresh_project "$work/dst2"
    (cd "$work/dst2" && PIPE_REMOTE="$remote" "$pipe" cache pull >/dev/null 2>&1)
    timed pull-cache-pipe "$concurrency" "$round" "$work/dst2" \
      env PIPE_REMOTE="$remote" PIPE_REMOTE_CONCURRENCY="$concurrency" "$pipe" cache pull 1
    # What `pipe run` adds after the objects are local: the restore alone.
    timed restore-local-pipe "$concurrency" "$round" "$work/dst2" "$pipe" run --remote off
    grep -q 'restored' "$work/last.log" || { cat "$work/last.log"; echo "the stage was not restored from the local cache" >&2; exit 1; }
    rm -rf "$work/dst2" "$work/s3/$bucket/pipe-$prefix" "$work/s3/$bucket/aws-$prefix"
  done
done

python3 - "$results" "$bytes" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, concurrency, _, seconds = line.split("\t")
    times[(name, concurrency)].append(float(seconds))
size = int(sys.argv[2])
medians = {key: statistics.median(values) for key, values in times.items()}
print(f"\n{'':24s}{'median':>9s}{'MB/s':>8s}   runs (s)")
for (name, concurrency), median in sorted(medians.items(), key=lambda item: (int(item[0][1]), item[0][0])):
    runs = " ".join(f"{v:.2f}" for v in times[(name, concurrency)])
    print(f"{name:18s} c={concurrency:<3s}{median:8.2f}s{size / median / 1e6:8.0f}   {runs}")
print()
for concurrency in sorted({c for _, c in medians}, key=int):
    m = lambda name: medians[(name, concurrency)]
    print(f"c={concurrency}: push pipe/aws {m('push-pipe') / m('push-aws'):.2f}x, "
          f"pull (pipe run) pipe/aws {m('pull-run-pipe') / m('pull-aws'):.2f}x, "
          f"pull (pipe cache pull) pipe/aws {m('pull-cache-pipe') / m('pull-aws'):.2f}x  (time ratios: below 1 is pipe faster)")
PY
