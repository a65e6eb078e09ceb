"""Accuracy, precision, recall and F1 of the model on the test split."""
import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("--model", required=True)
parser.add_argument("--data", required=True)
parser.add_argument("--metrics", required=True)
args = parser.parse_args()

with open(args.model) as handle:
    model = json.load(handle)

def predict(words):
    scores = {}
    for label in ("0", "1"):
        score = model["priors"][label]
        for table in model["tables"]:
            n = table["n"]
            for i in range(len(words) - n + 1):
                gram = " ".join(words[i : i + n])
                score += table["logp"][label].get(gram, table["unknown"][label])
        scores[label] = score
    return max(scores, key=scores.get)

matrix = {("0", "0"): 0, ("0", "1"): 0, ("1", "0"): 0, ("1", "1"): 0}
with open(os.path.join(args.data, "test.tsv")) as handle:
    for line in handle:
        label, text = line.rstrip("\n").split("\t")
        matrix[(label, predict(text.split()))] += 1

total = sum(matrix.values())
tp, fp, fn = matrix[("1", "1")], matrix[("0", "1")], matrix[("1", "0")]
precision = tp / (tp + fp) if tp + fp else 0.0
recall = tp / (tp + fn) if tp + fn else 0.0
metrics = {
    "test": {
        "accuracy": round((matrix[("0", "0")] + tp) / total, 4),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(2 * precision * recall / (precision + recall), 4) if precision + recall else 0.0,
        "rows": total,
    }
}
with open(args.metrics, "w") as handle:
    json.dump(metrics, handle, indent=2, sort_keys=True)
