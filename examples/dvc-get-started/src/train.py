"""A perceptron over the word counts."""

import json
import os
import random

import yaml

params = yaml.safe_load(open("params.yaml"))["train"]
random.seed(params["seed"])
data = json.load(open("data/features/train.json"))
weights = [0.0] * len(data["vocab"])
bias = 0.0
rows = data["rows"]
for epoch in range(params["epochs"]):
    random.shuffle(rows)
    for row in rows:
        score = bias + sum(w * x for w, x in zip(weights, row["x"]))
        error = row["y"] - (1 if score > 0 else 0)
        if error:
            weights = [w + params["lr"] * error * x for w, x in zip(weights, row["x"])]
            bias += params["lr"] * error
with open("model.json", "w") as out:
    json.dump({"vocab": data["vocab"], "weights": weights, "bias": bias}, out)
# DVC's `persist: true` kept this file across runs; pipe starts it afresh.
os.makedirs("logs", exist_ok=True)
with open("logs/history.txt", "a") as log:
    log.write(f"epochs={params['epochs']} lr={params['lr']}\n")
