"""Counts n-grams per label in the training split."""
import argparse
import collections
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--n", type=int, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

counts = {"0": collections.Counter(), "1": collections.Counter()}
documents = collections.Counter()
with open(os.path.join(args.data, "train.tsv")) as handle:
    for line in handle:
        label, text = line.rstrip("\n").split("\t")
        words = text.split()
        grams = [" ".join(words[i : i + args.n]) for i in range(len(words) - args.n + 1)]
        counts[label].update(grams)
        documents[label] += 1

with open(args.out, "w") as handle:
    json.dump({"n": args.n, "documents": documents, "counts": counts}, handle, sort_keys=True)
