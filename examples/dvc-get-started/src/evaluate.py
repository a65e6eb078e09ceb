"""Accuracy, and the ROC and precision-recall curves, on the test set."""

import csv
import json
import os

model = json.load(open("model.json"))
test = json.load(open("data/features/test.json"))
scored = [
    (model["bias"] + sum(w * x for w, x in zip(model["weights"], row["x"])), row["y"])
    for row in test["rows"]
]
accuracy = sum((score > 0) == bool(label) for score, label in scored) / len(scored)
positives = sum(label for _, label in scored) or 1
negatives = (len(scored) - sum(label for _, label in scored)) or 1
os.makedirs("eval/plots", exist_ok=True)
roc, prc = [], []
for threshold in sorted({score for score, _ in scored}, reverse=True):
    tp = sum(1 for score, label in scored if score >= threshold and label)
    fp = sum(1 for score, label in scored if score >= threshold and not label)
    roc.append([round(fp / negatives, 4), round(tp / positives, 4), round(threshold, 4)])
    prc.append({"recall": round(tp / positives, 4), "precision": round(tp / (tp + fp), 4)})
with open("eval/plots/roc.csv", "w", newline="") as out:
    writer = csv.writer(out)
    writer.writerow(["fpr", "tpr", "threshold"])
    writer.writerows(roc)
with open("eval/plots/prc.json", "w") as out:
    json.dump({"prc": prc}, out)
with open("eval/metrics.json", "w") as out:
    json.dump({"accuracy": round(accuracy, 4), "test_rows": len(scored)}, out, indent=2)
print("accuracy", round(accuracy, 4))
