"""Splits data/data.csv into data/prepared/{train,test}.csv."""

import csv
import os
import random

import yaml

params = yaml.safe_load(open("params.yaml"))["prepare"]
random.seed(params["seed"])
with open("data/data.csv", newline="") as source:
    rows = list(csv.DictReader(source))
random.shuffle(rows)
n_test = int(len(rows) * params["split"])
os.makedirs("data/prepared", exist_ok=True)
for name, part in (("test", rows[:n_test]), ("train", rows[n_test:])):
    with open(f"data/prepared/{name}.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(part)
print("prepared", len(rows) - n_test, "training rows and", n_test, "test rows")
