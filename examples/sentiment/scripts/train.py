"""Naive Bayes: log-probabilities per n-gram and label, with additive smoothing."""
import argparse
import json
import math

parser = argparse.ArgumentParser()
parser.add_argument("--unigrams", required=True)
parser.add_argument("--bigrams", required=True)
parser.add_argument("--smoothing", type=float, required=True)
parser.add_argument("--model", required=True)
args = parser.parse_args()

model = {"priors": {}, "tables": []}
for path in (args.unigrams, args.bigrams):
    with open(path) as handle:
        features = json.load(handle)
    vocabulary = set(features["counts"]["0"]) | set(features["counts"]["1"])
    table = {"n": features["n"], "logp": {}, "unknown": {}}
    for label in ("0", "1"):
        counts = features["counts"][label]
        total = sum(counts.values()) + args.smoothing * (len(vocabulary) + 1)
        table["logp"][label] = {g: math.log((counts.get(g, 0) + args.smoothing) / total) for g in vocabulary}
        table["unknown"][label] = math.log(args.smoothing / total)
    model["tables"].append(table)
    documents = features["documents"]
    all_documents = sum(documents.values())
    model["priors"] = {label: math.log(documents[label] / all_documents) for label in ("0", "1")}

with open(args.model, "w") as handle:
    json.dump(model, handle, sort_keys=True)
