#!/usr/bin/env python3
"""Driver of scripts/bench/tokenize_throughput.sh (run it through that script).

  corpus CSV_BZ2 COPIES OUT_DIR
      writes OUT_DIR/data.jsonl: the Rotten Tomatoes snippets (fresh 1,
      rotten 0, plot 2), COPIES times over, and OUT_DIR/tiny.jsonl (one row)
  compare WORKER TOKENIZER DATA_DIR MAX_LENGTH RUNS THREADS...
      tokens/s of Python `tokenizers` encode_batch against the `pipe-stage`
      worker, on the same texts, for each thread count; then the worker's
      start-up time. Runs alternate between the two so that noise on the
      shared machine hits both alike.
"""

import bz2
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LABELS = {"rotten": 0, "fresh": 1, "plot": 2}
STARTUP_RUNS = 20


def corpus(csv_bz2, copies, out_dir):
    with bz2.open(csv_bz2, "rt", encoding="utf-8") as f:
        rows = [(row["text"], LABELS[row["category"]]) for row in csv.DictReader(f)]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "data.jsonl"), "w", encoding="utf-8") as out:
        for _ in range(copies):
            for text, label in rows:
                out.write(json.dumps({"text": text, "label": label}, ensure_ascii=False) + "\n")
    with open(os.path.join(out_dir, "tiny.jsonl"), "w", encoding="utf-8") as out:
        out.write(json.dumps({"text": "A tiny dataset.", "label": 1}) + "\n")
    print(f"{len(rows) * copies} texts ({len(rows)} snippets x {copies})")


def python_encode(tokenizer_file, texts, max_length, threads):
    """Seconds for one encode_batch over all texts, in a fresh interpreter so
    that RAYON_NUM_THREADS takes effect; texts are read before the clock starts."""
    code = f"""
import json, sys, time
from tokenizers import Tokenizer
texts = [json.loads(line)["text"] for line in open({texts!r}, encoding="utf-8")]
tokenizer = Tokenizer.from_file({tokenizer_file!r})
tokenizer.no_padding()
tokenizer.no_truncation()
tokenizer.enable_truncation({max_length})
start = time.perf_counter()
encodings = tokenizer.encode_batch(texts)
elapsed = time.perf_counter() - start
print(elapsed, sum(len(e.ids) for e in encodings))
"""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    seconds, tokens = out.stdout.split()
    return float(seconds), int(tokens)


def invocation(work, dataset, tokenizer_file, max_length, threads, name):
    out_dir = os.path.join(work, name)
    subprocess.run(["rm", "-rf", out_dir], check=True)
    path = os.path.join(work, f"{name}.invocation.json")
    with open(path, "w") as f:
        json.dump(
            {
                "protocol": 1,
                "stage": "tokenize",
                "uses": "text/tokenize",
                "version": 1,
                "params": {"dataset": dataset, "tokenizer": tokenizer_file, "max_length": max_length},
                "output_dir": out_dir,
                "scratch_dir": os.path.join(work, "scratch"),
                "project_root": work,
                "seed": None,
                "devices": [],
                "threads": threads,
            },
            f,
        )
    return path, out_dir


def worker_run(worker, work, dataset, tokenizer_file, max_length, threads):
    """Wall-clock seconds of the whole worker process: start-up, reading the
    JSONL, tokenizing, writing the safetensors."""
    path, out_dir = invocation(work, dataset, tokenizer_file, max_length, threads, "out")
    start = time.perf_counter()
    done = subprocess.run([worker, "run", "--invocation", path], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"pipe-stage failed:\n{done.stdout}\n{done.stderr}")
    with open(os.path.join(out_dir, "metrics.json")) as f:
        tokens = json.load(f)["data"]["tokens"]
    return elapsed, tokens


def startup(worker, work, tiny, tokenizer_file, max_length):
    """Median seconds from spawn to the first event line, and to exit."""
    first, total = [], []
    for _ in range(STARTUP_RUNS):
        path, _ = invocation(work, tiny, tokenizer_file, max_length, 1, "tiny")
        start = time.perf_counter()
        child = subprocess.Popen([worker, "run", "--invocation", path], stdout=subprocess.PIPE)
        child.stdout.readline()
        first.append(time.perf_counter() - start)
        child.stdout.read()
        if child.wait() != 0:
            sys.exit("pipe-stage failed on the tiny dataset")
        total.append(time.perf_counter() - start)
    return statistics.median(first), statistics.median(total)


def compare(worker, tokenizer_file, data_dir, max_length, runs, thread_counts):
    data = os.path.join(data_dir, "data.jsonl")
    work = tempfile.mkdtemp(prefix="pipe-tokenize-bench-")
    import tokenizers

    texts = sum(1 for _ in open(data, encoding="utf-8"))
    print(f"Python tokenizers {tokenizers.__version__}; {texts} texts; max_length {max_length}; {runs} runs each")
    print()
    print("| threads | Python encode_batch | pipe-stage run (whole process) | pipe vs Python |")
    print("|---|---|---|---|")
    for threads in thread_counts:
        python_times, worker_times = [], []
        python_tokens = worker_tokens = None
        for _ in range(runs):
            seconds, python_tokens = python_encode(tokenizer_file, data, max_length, threads)
            python_times.append(seconds)
            seconds, worker_tokens = worker_run(worker, work, data, tokenizer_file, max_length, threads)
            worker_times.append(seconds)
        if python_tokens != worker_tokens:
            sys.exit(f"token counts differ: Python {python_tokens}, pipe-stage {worker_tokens}")
        py, pipe = statistics.median(python_times), statistics.median(worker_times)
        print(
            f"| {threads} | {py:.3f} s, {python_tokens / py / 1e6:.2f} M tokens/s "
            f"| {pipe:.3f} s, {worker_tokens / pipe / 1e6:.2f} M tokens/s | {py / pipe:.2f}x |"
        )
    print(f"\n{worker_tokens} tokens per run")
    first, total = startup(worker, work, os.path.join(data_dir, "tiny.jsonl"), tokenizer_file, max_length)
    print(
        f"start-up (one-row dataset, median of {STARTUP_RUNS}): "
        f"first event after {first * 1000:.1f} ms, exit after {total * 1000:.1f} ms"
    )
    subprocess.run(["rm", "-rf", work], check=True)


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "corpus":
        corpus(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) >= 8 and sys.argv[1] == "compare":
        worker, tokenizer_file, data_dir, max_length, runs = sys.argv[2:7]
        compare(worker, tokenizer_file, data_dir, int(max_length), int(runs), [int(t) for t in sys.argv[7:]])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
