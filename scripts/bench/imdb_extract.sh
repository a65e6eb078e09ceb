#!/usr/bin/env bash
# Benchmark: wall time and peak RSS of the `imdb/extract@1` worker on an
# archive of aclImdb_v1.tar.gz's shape (train and test of 12,500 pos and
# 12,500 neg each, 50,000 unsup; synthetic words, review lengths drawn as
# IMDB's are spread, about 1,300 bytes on average; each directory in a
# shuffled order, as the real archive is) with include_unsup, then on the
# bomb of issue 22 (20 reviews of 60 MiB of one letter, about 1.2 MB
# compressed). The datasets of every worker are compared byte for byte.
#
#   scripts/bench/imdb_extract.sh [NAME=WORKER ...]
#
# Without arguments it builds the release worker and measures it alone;
# `before=/tmp/pipe-stage-old after=target/debug/pipe-stage` compares two.
# Env: SKIP_BOMB=1 measures the real shape only.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${PIPE_BENCH_CACHE:-$HOME/.cache/pipe-bench}
mkdir -p "$cache"

workers=("$@")
if [ ${#workers[@]} -eq 0 ]; then
  cargo build --release --quiet -p pipe-stages --manifest-path "$repo/Cargo.toml"
  workers=("release=${CARGO_TARGET_DIR:-$repo/target}/release/pipe-stage")
fi

real=$cache/aclImdb_shape.tar.gz
bomb=$cache/imdb_bomb.tar.gz
python3 - "$real" "$bomb" "${SKIP_BOMB:-0}" <<'PY'
import io, os, random, sys, tarfile

real, bomb, skip_bomb = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
WORDS = ("the movie film story plot actor actress scene director camera music character "
         "ending script time people life world year night house car city friend family war "
         "love money road light water great wonderful superb moving brilliant awful boring "
         "dull clumsy tedious dreadful <br /><br /> \"quoted\" it's").split()

def review(rng):
    words = max(10, min(2500, int(rng.lognormvariate(5.15, 0.75))))
    return " ".join(rng.choice(WORDS) for _ in range(words)).encode()

def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))

if not os.path.exists(real):
    rng = random.Random(22)
    with tarfile.open(real + ".part", "w:gz", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "aclImdb/README", b"Large Movie Review Dataset v1.0\n")
        for split in ("test", "train"):
            for cls, count, ratings in (("neg", 12500, (1, 4)), ("pos", 12500, (7, 10)),
                                        ("unsup", 50000, (0, 0))):
                if split == "test" and cls == "unsup":
                    continue
                ids = list(range(count))
                rng.shuffle(ids)
                for id in ids:
                    rating = rng.randint(*ratings)
                    add(tar, f"aclImdb/{split}/{cls}/{id}_{rating}.txt", review(rng))
    os.rename(real + ".part", real)

class Letters(io.RawIOBase):
    def __init__(self, size):
        self.left = size
    def readable(self):
        return True
    def readinto(self, buffer):
        n = min(len(buffer), self.left)
        buffer[:n] = b"a" * n
        self.left -= n
        return n

if not skip_bomb and not os.path.exists(bomb):
    with tarfile.open(bomb + ".part", "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for id in range(20):
            info = tarfile.TarInfo(f"aclImdb/train/pos/{id}_9.txt")
            info.size = 60 << 20
            info.mode = 0o644
            tar.addfile(info, io.BufferedReader(Letters(info.size), 1 << 20))
    os.rename(bomb + ".part", bomb)
PY

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date)"
archives=(real)
[ "${SKIP_BOMB:-0}" = 1 ] || archives+=(bomb)
for archive in "${archives[@]}"; do
  if [ "$archive" = real ]; then path=$real; else path=$bomb; fi
  echo "== $archive: $(basename "$path"), $(stat -c %s "$path") bytes"
  first=
  for named in "${workers[@]}"; do
    name=${named%%=*}
    worker=${named#*=}
    run=$work/$archive-$name
    mkdir -p "$run"
    printf '{"protocol":1,"stage":"imdb","uses":"imdb/extract","version":1,"params":{"archive":"%s","include_unsup":true},"output_dir":"%s/out","scratch_dir":"%s/scratch","project_root":"%s","devices":[],"threads":1}\n' \
      "$path" "$run" "$run" "$run" >"$run/invocation.json"
    /usr/bin/time -f "%e %M" -o "$run/time" "$worker" run --invocation "$run/invocation.json" >"$run/events"
    tail -n1 "$run/events" | grep -q '"done"' || { echo "$name failed:"; tail -n1 "$run/events"; exit 1; }
    read -r seconds kib <"$run/time"
    echo "$name: ${seconds} s, peak RSS $((kib / 1024)) MiB, dataset $(stat -c %s "$run/out/dataset") bytes"
    if [ -z "$first" ]; then
      first=$run
    else
      cmp -s "$first/out/dataset" "$run/out/dataset" && echo "  same bytes as $(basename "$first")" \
        || { echo "  datasets differ"; exit 1; }
      rm -rf "$run/out"
    fi
  done
  rm -rf "$work/$archive-"*
done
