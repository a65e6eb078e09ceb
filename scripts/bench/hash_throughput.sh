#!/usr/bin/env bash
# Benchmark (c): first hash of 1 GiB of mixed-size files by pipe (a stage
# that depends on the directory, `pipe status`) against b3sum on the same
# files, then a second `pipe status` that must rehash nothing.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
command -v hyperfine >/dev/null || apt-get install -y -qq hyperfine >/dev/null
command -v b3sum >/dev/null || apt-get install -y -qq b3sum >/dev/null
cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
pipe="$repo/target/release/pipe"
work=${PIPE_BENCH_DIR:-$(mktemp -d)}
trap 'rm -rf "$work"' EXIT

python3 - "$work/data" <<'PY'
import os, sys
root = sys.argv[1]
# 1 GiB: 2 x 256 MiB, 88 x 4 MiB, 2048 x 64 KiB, 8192 x 4 KiB
plan = [(2, 256 << 20), (88, 4 << 20), (2048, 64 << 10), (8192, 4 << 10)]
total = 0
for count, size in plan:
    d = os.path.join(root, f"size-{size}")
    os.makedirs(d, exist_ok=True)
    for i in range(count):
        with open(os.path.join(d, f"{i:05d}.bin"), "wb") as f:
            f.write(os.urandom(size))
        total += size
print(f"{total / (1 << 30):.2f} GiB in {sum(c for c, _ in plan)} files")
PY
cat >"$work/pipe.yaml" <<'YAML'
stages:
  consume:
    run: du -s data > usage.txt
    deps: [data]
    outs: [usage.txt]
YAML
bytes=$(du -sb "$work/data" | cut -f1)
# Warm the page cache so both sides read from memory.
cat $(find "$work/data" -type f) >/dev/null

echo "pipe $("$pipe" --version | cut -d' ' -f2), $(b3sum --version); $(nproc) cores; $bytes bytes"
# Each pipe run starts from an empty stat cache, so it hashes everything.
hyperfine --warmup 1 --runs "${RUNS:-5}" --export-json "$work/result.json" \
  -n "b3sum" "find $work/data -type f -print0 | xargs -0 b3sum --num-threads $(nproc) >/dev/null" \
  -n "pipe first hash" --prepare "rm -rf $work/.pipe" "$pipe -C $work status"
python3 - "$work/result.json" "$bytes" <<'PY'
import json, sys
results = {r["command"]: r["median"] for r in json.load(open(sys.argv[1]))["results"]}
size = int(sys.argv[2])
for name, median in results.items():
    print(f"{name:16s} median {median:6.3f} s  {size / median / (1 << 30):5.2f} GiB/s")
print(f"pipe / b3sum throughput: {results['b3sum'] / results['pipe first hash']:.2f}")
PY
# Second run: the stat cache answers every file; PIPE_LOG=info reports the count.
"$pipe" -C "$work" status >/dev/null
sleep 3  # past the racy-timestamp window of the stat cache
"$pipe" -C "$work" status >/dev/null
PIPE_LOG=pipe_engine=info "$pipe" -C "$work" status 2>&1 >/dev/null | grep -i "files hashed" || true
hyperfine --warmup 1 --runs "${RUNS:-5}" -n "pipe second status (no rehash)" "$pipe -C $work status"
