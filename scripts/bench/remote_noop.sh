#!/usr/bin/env bash
# Benchmark: what a remote cache adds to a no-op rerun when every result is
# already local (the goal is nothing). A 100-stage command pipeline
# (gen_pipelines.py), run once with no remote, then `pipe run -q` timed by
# one hyperfine invocation in three settings, side by side:
#   local        no remote configured
#   remote-up    PIPE_REMOTE at a live S3 server on 127.0.0.1 (s3s-fs)
#   remote-ro    the live server, read-only (PIPE_REMOTE_READ_ONLY=1): the
#                remote configured, nothing written (no run record pushed)
#   remote-down  PIPE_REMOTE at a port nothing listens on
# Then, with strace when it is installed, how many connect() calls one
# no-op run makes to the remote's port in each remote setting, and how many
# run records the live bucket received during the benchmark.
#
#   scripts/bench/remote_noop.sh [STAGES]    # default 100; RUNS=20 timed runs each
#
# Needs s3s-fs (scripts/install-s3.sh) and hyperfine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
stages=${1:-100}
target=${CARGO_TARGET_DIR:-$repo/target}
command -v hyperfine >/dev/null || apt-get install -y -qq hyperfine >/dev/null
s3s_fs=${S3S_FS:-${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs}
[ -x "$s3s_fs" ] || { echo "s3s-fs not found: run scripts/install-s3.sh" >&2; exit 1; }
cargo build --release --quiet --bin pipe --manifest-path "$repo/Cargo.toml"
pipe="$target/release/pipe"

work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
bucket=pipe-bench
up_port=$(free_port)
down_port=$(free_port)
mkdir -p "$work/s3/$bucket"
"$s3s_fs" --host 127.0.0.1 --port "$up_port" --access-key bench-access --secret-key bench-secret-0123456789 \
  "$work/s3" >"$work/s3s-fs.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$up_port") 2>/dev/null && break
  sleep 0.05
done
export AWS_ACCESS_KEY_ID=bench-access AWS_SECRET_ACCESS_KEY=bench-secret-0123456789 AWS_REGION=us-east-1
unset PIPE_REMOTE PIPE_REMOTE_ENDPOINT PIPE_REMOTE_READ_ONLY PIPE_REMOTE_CONCURRENCY RUST_BACKTRACE
up="PIPE_REMOTE=s3://$bucket/noop PIPE_REMOTE_ENDPOINT=http://127.0.0.1:$up_port"
ro="$up PIPE_REMOTE_READ_ONLY=1"
down="PIPE_REMOTE=s3://$bucket/noop PIPE_REMOTE_ENDPOINT=http://127.0.0.1:$down_port"
ro_port=$up_port

python3 "$repo/scripts/bench/gen_pipelines.py" --stages "$stages" --out "$work/project"
cd "$work/project"
git init -q && git add -A && git -c user.name=b -c user.email=b@example.invalid commit -qm init
# The first run fills the local cache, with no remote: every timed run is a no-op.
"$pipe" run -q -j 2
echo "--- one no-op run with each remote, its stderr:"
for setting in up ro down; do
  status=0
  said=$(env ${!setting} "$pipe" run -q 2>&1) || status=$?
  echo "remote-$setting: exit status $status"
  [ -z "$said" ] || printf '%s\n' "$said" | sed 's/^/  /'
done
records_before=$(find "$work/s3/$bucket" -path '*/runs/*' -name '*.json' | wc -l)

echo "pipe $("$pipe" --version | cut -d' ' -f2), s3s-fs $("$s3s_fs" --version 2>/dev/null | head -1 || echo '?'); $stages stages; $(nproc) cores; $(date -u +%FT%TZ)"
runs=${RUNS:-20}
hyperfine --warmup 3 --runs "$runs" --export-json "$work/result.json" \
  -n local "$pipe run -q" \
  -n remote-up "$up $pipe run -q" \
  -n remote-ro "$ro $pipe run -q" \
  -n remote-down "$down $pipe run -q"
python3 - "$work/result.json" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
base = results["local"]["median"]
for name, result in results.items():
    print(f"{name:12s} median {result['median']*1000:8.1f} ms   {result['median']/base:5.2f}x local")
PY
records_after=$(find "$work/s3/$bucket" -path '*/runs/*' -name '*.json' | wc -l)
echo "run records the live remote received during the timed runs: $((records_after - records_before)) (for $((runs + 3)) no-op runs)"

if command -v strace >/dev/null; then
  for setting in up ro down; do
    port_var=${setting}_port
    env ${!setting} strace -f -qq -e trace=connect -o "$work/strace.$setting" "$pipe" run -q 2>/dev/null || true
    calls=$(grep -c "sin_port=htons(${!port_var})" "$work/strace.$setting" || true)
    echo "connect() calls to the remote's port in one no-op run, remote-$setting: $calls"
  done
fi
