"""The first rows of a split, to read."""

import csv
import os
import sys

split, count = sys.argv[1], int(sys.argv[2])
with open(f"data/prepared/{split}.csv", newline="") as source:
    rows = list(csv.DictReader(source))[:count]
os.makedirs("summaries", exist_ok=True)
with open(f"summaries/{split}.txt", "w") as out:
    for row in rows:
        out.write(f"{row['label']}\t{row['text']}\n")
