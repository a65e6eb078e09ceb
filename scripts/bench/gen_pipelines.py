"""Writes the same command pipeline as pipe.yaml, dvc.yaml and a Snakefile.

The shape: `layers` x `width` stages; stage (l, w) reads one input file and
the output of stage (l-1, w) and (l-1, (w+1) % width), and writes one file.
Every tool does the same work: `cat` of its inputs into its output.
"""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--stages", type=int, default=100)
parser.add_argument("--width", type=int, default=10)
parser.add_argument("--out", required=True)
# Each pipe stage also writes a metrics file (`metrics:`), which a cached
# result holds as an object and a no-op reads back to record its figures.
parser.add_argument("--metrics", action="store_true")
args = parser.parse_args()

width = args.width
layers = args.stages // width
os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
os.makedirs(os.path.join(args.out, "outs"), exist_ok=True)
for w in range(width):
    with open(os.path.join(args.out, "inputs", f"in{w}.txt"), "w") as handle:
        handle.write(f"input {w}\n" * 100)


def name(layer, column):
    return f"s{layer}_{column}"


def deps_of(layer, column):
    deps = [f"inputs/in{column}.txt"]
    if layer > 0:
        deps += [f"outs/{name(layer - 1, column)}.txt", f"outs/{name(layer - 1, (column + 1) % width)}.txt"]
    return deps


pipe = ["name: bench", "stages:"]
dvc = ["stages:"]
snake = ["rule all:", "    input:"]
for layer in range(layers):
    for column in range(width):
        stage = name(layer, column)
        deps = deps_of(layer, column)
        out = f"outs/{stage}.txt"
        command = f"cat {' '.join(deps)} > {out}"
        pipe += [f"  {stage}:", f"    run: {command}", f"    deps: [{', '.join(deps)}]", f"    outs: [{out}]"]
        if args.metrics:
            metric = f"outs/{stage}.json"
            pipe[-3] = f"    run: {command} && echo '{{\"column\":{column}}}' > {metric}"
            pipe.append(f"    metrics: [{metric}]")
        dvc += [f"  {stage}:", f"    cmd: {command}", "    deps:"] + [f"    - {d}" for d in deps] + ["    outs:", f"    - {out}"]
        snake += []
for column in range(width):
    snake.append(f"        \"outs/{name(layers - 1, column)}.txt\",")
for layer in range(layers):
    for column in range(width):
        stage = name(layer, column)
        deps = deps_of(layer, column)
        snake += [
            f"rule {stage}:",
            f"    input: {', '.join(repr(d) for d in deps)}",
            f"    output: 'outs/{stage}.txt'",
            "    shell: 'cat {input} > {output}'",
        ]

for filename, lines in (("pipe.yaml", pipe), ("dvc.yaml", dvc), ("Snakefile", snake)):
    with open(os.path.join(args.out, filename), "w") as handle:
        handle.write("\n".join(lines) + "\n")
