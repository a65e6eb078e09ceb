#!/usr/bin/env bash
# A long history, as a team's CI builds one: how `pipe runs`, `pipe show`
# by each kind of reference, and a pull of run records cost as the history
# grows. 20 real runs are made, then copied (new uids, later start times,
# a name on every 100th, a tag on every 50th) to HISTORY runs in runs.db;
# each command is timed ROUNDS times, interleaved, against `pipe --version`
# (the process's own start: the floor). Then PULLED records are pushed to
# a file:// remote and taken in by a fresh project with `pipe cache pull`.
# Usage: scripts/bench/runs_history.sh [PIPE]   (default target/release/pipe)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
pipe=$(realpath "${1:-$repo/target/release/pipe}")
history=${HISTORY:-10000}
pulled=${PULLED:-1000}
rounds=${ROUNDS:-11}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

project() { # DIR REMOTE
  mkdir -p "$1"
  cat > "$1/pipe.yaml" <<YAML
cache:
  remote: file://$work/$2
params:
  n: 1
key_metrics: [train.accuracy]
stages:
  train:
    run: >-
      printf '{"accuracy": 0.%s}' \${params.n} > metrics.json;
      echo \${params.n} > model.txt
    outs: [model.txt]
    metrics: [metrics.json]
YAML
}

# Copies the runs of DB until it holds TOTAL, each copy a run of its own.
grow() { # DB TOTAL
  python3 - "$1" "$2" <<'PY'
import sqlite3, sys, os, json
db = sqlite3.connect(sys.argv[1])
total = int(sys.argv[2])
cols = [r[1] for r in db.execute("PRAGMA table_info(runs)") if r[1] != "id"]
stage_cols = [r[1] for r in db.execute("PRAGMA table_info(stage_runs)") if r[1] != "run_id"]
base = db.execute(f"SELECT id, {', '.join(cols)} FROM runs ORDER BY id").fetchall()
have = len(base)
start = max(row[1 + cols.index("started_ms")] for row in base)
i = 0
while have < total:
    src = base[i % len(base)]
    values = dict(zip(cols, src[1:]))
    values["uid"] = os.urandom(10).hex()
    values["started_ms"] = start + 1000 * (i + 1)
    values["ended_ms"] = values["started_ms"] + 50
    values["name"] = f"exp{i}" if i % 100 == 0 else None
    values["tags"] = json.dumps(["weekly"]) if i % 50 == 0 else None
    values["labels_ms"] = values["started_ms"] if values["name"] or values["tags"] else None
    cur = db.execute(
        f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [values[c] for c in cols],
    )
    new_id = cur.lastrowid
    db.execute(
        f"INSERT INTO stage_runs (run_id, {', '.join(stage_cols)}) "
        f"SELECT ?, {', '.join(stage_cols)} FROM stage_runs WHERE run_id = ?",
        (new_id, src[0]),
    )
    have += 1
    i += 1
db.commit()
PY
}

# Median wall time of ROUNDS runs of each command, interleaved, in ms.
time_all() { # DIR LABEL=COMMAND...
  local dir=$1; shift
  python3 - "$dir" "$rounds" "$@" <<'PY'
import subprocess, sys, time, statistics, shlex
dir, rounds = sys.argv[1], int(sys.argv[2])
cases = [arg.split("=", 1) for arg in sys.argv[3:]]
times = {label: [] for label, _ in cases}
for _ in range(rounds):
    for label, command in cases:
        t = time.perf_counter()
        subprocess.run(shlex.split(command), cwd=dir, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times[label].append((time.perf_counter() - t) * 1000)
floor = statistics.median(times[cases[0][0]])
for label, _ in cases:
    m = statistics.median(times[label])
    print(f"  {label:<34} {m:8.1f} ms   {m / floor:5.1f}x the floor")
PY
}

a=$work/a
project "$a" remote-a
cd "$a"
for n in $(seq 1 20); do "$pipe" run -q -S "n=$n"; done
"$pipe" tag 3 best >/dev/null
echo "pipe runs and show over 20 runs (median of $rounds):"
time_all "$a" "pipe --version (floor)=$pipe --version" "pipe runs=$pipe runs" \
  "pipe show last=$pipe show last"
grow "$a/.pipe/runs.db" "$history"
some=$((history * 9 / 10))
uid=$("$pipe" show "$some" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["uid"][:8])')
echo "over $history runs (median of $rounds):"
time_all "$a" "pipe --version (floor)=$pipe --version" "pipe runs=$pipe runs" \
  "pipe runs -n 200=$pipe runs -n 200" "pipe show last~100=$pipe show last~100" \
  "pipe show UID-PREFIX=$pipe show $uid" "pipe show NAME (exp100)=$pipe show exp100" \
  "pipe show TAG (weekly)=$pipe show weekly" "pipe show $some=$pipe show $some"

b=$work/b
project "$b" remote-b
cd "$b"
for n in $(seq 1 20); do "$pipe" run -q -S "n=$n"; done
grow "$b/.pipe/runs.db" "$pulled"
t0=$(date +%s%N)
"$pipe" cache push --all -q 2>/dev/null || "$pipe" cache push --all >/dev/null 2>&1
t1=$(date +%s%N)
c=$work/c
project "$c" remote-b
cd "$c"
t2=$(date +%s%N)
"$pipe" cache pull 2>&1 | tail -1
t3=$(date +%s%N)
"$pipe" cache pull >/dev/null 2>&1
t4=$(date +%s%N)
echo "push of $pulled run records: $(( (t1 - t0) / 1000000 )) ms"
echo "pull of $pulled run records into a fresh project: $(( (t3 - t2) / 1000000 )) ms ($(( (t3 - t2) / 1000 / pulled )) us a record)"
echo "pull again, nothing new: $(( (t4 - t3) / 1000000 )) ms"

# The peer, where it is installed (scripts/bench/sweep_vs_dvc_queue.sh
# makes the venv): 20 DVC experiments of the same stage, `dvc exp show`
# against `pipe runs` over 20 runs, interleaved.
venv="${PIPE_BENCH_VENV:-$HOME/.cache/pipe-bench/venv}"
if [ -x "$venv/bin/dvc" ]; then
  d=$work/dvc
  mkdir -p "$d" && cd "$d"
  git init -q && git config user.email b@e && git config user.name bench
  printf 'n: 1\n' > params.yaml
  cat > train.py <<'PY'
import json, yaml
n = yaml.safe_load(open("params.yaml"))["n"]
json.dump({"accuracy": n / 100}, open("metrics.json", "w"))
open("model.txt", "w").write(str(n))
PY
  cat > dvc.yaml <<'YAML'
stages:
  train:
    cmd: python train.py
    deps: [train.py]
    params: [n]
    outs: [model.txt]
    metrics:
      - metrics.json: {cache: false}
YAML
  PATH="$venv/bin:$PATH" dvc init -q && git add -A && git commit -qm init
  for n in $(seq 1 20); do PATH="$venv/bin:$PATH" dvc exp run -q -S "n=$n" >/dev/null 2>&1; done
  echo "20 experiments: dvc exp show against pipe runs (median of $rounds):"
  PATH="$venv/bin:$PATH" time_all "$d" "pipe --version (floor)=$pipe --version" \
    "pipe runs (20 runs)=$pipe -C $a runs -n 20" \
    "dvc exp show (20 exps)=$venv/bin/dvc exp show --no-pager" \
    "dvc exp show --json=$venv/bin/dvc exp show --json"
fi
