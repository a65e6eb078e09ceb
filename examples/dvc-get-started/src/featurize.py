"""Counts the most frequent words of the training set in every row."""

import csv
import json
import os

import yaml

params = yaml.safe_load(open("params.yaml"))["featurize"]
stop = set(open("data/stopwords.txt").read().split())


def words(text):
    return [word for word in text.lower().split() if word not in stop]


def read(name):
    with open(f"data/prepared/{name}.csv", newline="") as source:
        return list(csv.DictReader(source))


counts = {}
for row in read("train"):
    for word in words(row["text"]):
        counts[word] = counts.get(word, 0) + 1
vocab = sorted(counts, key=lambda word: (-counts[word], word))[: params["max_features"]]
os.makedirs("data/features", exist_ok=True)
for name in ("train", "test"):
    rows = [
        {"x": [words(row["text"]).count(word) for word in vocab], "y": int(row["label"])}
        for row in read(name)
    ]
    with open(f"data/features/{name}.json", "w") as out:
        json.dump({"vocab": vocab, "rows": rows}, out)
