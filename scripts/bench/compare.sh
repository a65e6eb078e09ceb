#!/usr/bin/env bash
# Benchmark: `pipe compare --last N` over a history of 1,000 runs, N = 10,
# 100 and 1,000. Each run has 8 stages (4 data stages, a 2 x 2 matrix of
# train stages) with ~20 metrics each, key manifests and data outputs, as
# `pipe run` records them. The schema is the engine's own: a real run
# creates the database, then the history is written with SQL into it.
# The cost must be linear in the runs: the report prints time per run.
#
#   scripts/bench/compare.sh            # RUNS=10 hyperfine runs each
#   BEFORE=/path/to/older/pipe scripts/bench/compare.sh
#                                       # the same history, both binaries,
#                                       # side by side in one hyperfine run
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
cargo build --release --quiet --bin pipe --manifest-path "$repo/Cargo.toml"
pipe="$target/release/pipe"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One real run, so that .pipe/runs.db has the schema `pipe run` makes.
printf 'stages:\n  hello:\n    run: echo hi > hi.txt\n    outs: [hi.txt]\n' >"$work/pipe.yaml"
"$pipe" -C "$work" run -q

python3 - "$work/.pipe/runs.db" "${HISTORY:-1000}" <<'PY'
import hashlib, json, random, sqlite3, sys

db = sqlite3.connect(sys.argv[1])
runs = int(sys.argv[2])
rng = random.Random(7)
db.execute("DELETE FROM stage_runs")
db.execute("DELETE FROM runs")


def digest(*parts):
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=32).hexdigest()


DATA_ROLES = json.dumps({"makes_data": True})
TRAIN_ROLES = json.dumps({"seed": "seed", "precision": "precision", "detail_metrics": ["epochs"],
                          "hardware_metrics": ["hardware", "devices"]})


def artifact(*parts):
    return {"kind": "dir", "digest": digest(*parts), "size": 1000, "files": 3}


manifests = {}
stage_rows = []
run_rows = []
start = 1_750_000_000_000
for run in range(1, runs + 1):
    seed = run % 3
    params = {
        "seed": seed,
        "train": {"lr": rng.choice([1e-5, 2e-5, 5e-5]), "epochs": rng.choice([1, 2, 3]),
                  "batch_size": 32, "max_length": 256},
        "data": {"url": "https://example.invalid/imdb.tar.gz", "val": 2500},
        "model": "distilbert-base-uncased",
    }
    pipeline = ["imdb", "quickstart", "speed-study"][run % 3]
    run_rows.append((run, pipeline, start + run * 60_000, start + run * 60_000 + 50_000,
                     "succeeded", digest("commit", run // 10)[:40], 0,
                     json.dumps(["pipe", "run"]), json.dumps(params), 1, "[]"))
    data = [
        ("download", "data/download@1", {"bytes": 84125825, "seconds": 3.2, "bytes_per_second": 2.6e7}, 0),
        ("extract", "imdb/extract@1", {"rows": 50000, "train.neg": 12500, "train.pos": 12500,
                                       "test.neg": 12500, "test.pos": 12500, "invalid_utf8_files": 0,
                                       "ignored_files": 0}, 0),
        ("split", "data/split@1", {"rows": 25000, "unused": 0, "train.rows": 22500, "val.rows": 2500,
                                   "train.labels.0": 11250, "train.labels.1": 11250,
                                   "val.labels.0": 1250, "val.labels.1": 1250}, seed),
        ("tokenize", "text/tokenize@1", {f"{split}.{name}": rng.randint(1, 10**6)
                                         for split in ("train", "val", "test")
                                         for name in ("rows", "tokens", "length_p50", "length_p95",
                                                      "truncated", "unknown_tokens")}, seed),
    ]
    for order, (stage, uses, metrics, salt) in enumerate(data):
        key = digest(stage, salt)
        manifests[key] = json.dumps({"uses": uses, "with": {"seed": seed}, "params": {}})
        outputs = {f".pipe/out/{pipeline}/{stage}": artifact(stage, salt)}
        # As `pipe run` records a stage: its identity in its own columns.
        stage_rows.append((run, stage, key, "restored", 10, json.dumps(outputs), json.dumps(metrics),
                           stage, "[]", uses, DATA_ROLES, json.dumps({"seed": seed}), order))
    for precision in ("32-true", "bf16-mixed"):
        for strategy in ("single", "ddp"):
            name = f"train@precision={precision},strategy={strategy}"
            key = digest(run, name)
            manifests[key] = json.dumps({"uses": "train/classifier@1",
                                         "with": {"seed": seed, "precision": precision}})
            metrics = {
                "best_epoch": 1, "val_acc": 0.85 + rng.random() / 20, "val_loss": 0.3 + rng.random() / 10,
                "epochs_run": 2, "stopped_early": False, "train_rows": 22500, "optimizer_steps": 1400,
                "precision": precision, "skipped_steps": 0, "strategy": strategy,
                "devices": 1 if strategy == "single" else 2, "peak_rss_mb": 3000 + rng.random() * 500,
                "samples_per_s": 200 + rng.random() * 100, "seconds": 100 + rng.random() * 50,
                "hardware.cpu": "AMD EPYC 9654", "hardware.gpu": "NVIDIA H200",
                "hardware.libtorch": "2.5.1", "epochs.0.train_loss": 0.5, "epochs.0.val_acc": 0.8,
                "epochs.1.train_loss": 0.3, "epochs.1.val_acc": 0.86,
            }
            combination = json.dumps([["precision", precision], ["strategy", strategy]])
            values = json.dumps({"seed": seed, "precision": precision})
            stage_rows.append((run, name, key, "ran", 100_000, json.dumps({}), json.dumps(metrics),
                               "train", combination, "train/classifier@1", TRAIN_ROLES, values,
                               len(stage_rows) % 8))

db.executemany("INSERT INTO runs (id, pipeline, started_ms, ended_ms, status, git_commit, git_dirty,"
               " argv, params, pid, overrides) VALUES (?,?,?,?,?,?,?,?,?,?,?)", run_rows)
db.executemany("INSERT INTO stage_runs (run_id, stage, key, status, duration_ms, outputs, metrics,"
               " base_name, combination, uses, roles, role_values, position)"
               " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", stage_rows)
db.executemany("INSERT OR IGNORE INTO manifests (key, manifest) VALUES (?, ?)", manifests.items())
db.commit()
print(f"history: {runs} runs, {len(stage_rows)} stage records, {len(manifests)} manifests",
      file=sys.stderr)
PY

echo "pipe $("$pipe" --version | cut -d' ' -f2); $(nproc) cores; $(date -u +%Y-%m-%d)"
commands=()
for last in 10 100 1000; do
  commands+=(-n "after $last" "$pipe -C $work compare --last $last")
  if [[ -n "${BEFORE:-}" ]]; then
    commands+=(-n "before $last" "$BEFORE -C $work compare --last $last")
  fi
done
hyperfine --warmup 2 --runs "${RUNS:-10}" --export-json "$work/result.json" --output=null "${commands[@]}"
python3 - "$work/result.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
medians = {}
for r in results:
    side, runs = r["command"].split()
    runs = int(runs)
    medians[(side, runs)] = r["median"]
    print(f"{side:6s} compare --last {runs:<5d} median {r['median'] * 1000:8.1f} ms"
          f"   {r['median'] * 1e6 / runs:8.1f} us/run")
print(f"ratio 1000/10: {medians[('after', 1000)] / medians[('after', 10)]:.1f}x for 100x the runs")
for runs in (10, 100, 1000):
    if ("before", runs) in medians:
        print(f"--last {runs}: after/before {medians[('after', runs)] / medians[('before', runs)]:.2f}")
PY
