"""How many rows of a split each word of the vocabulary appears in."""

import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("split")
parser.add_argument("--digits", type=int, default=2)
args = parser.parse_args()
data = json.load(open(f"data/features/{args.split}.json"))
rows = data["rows"]
share = {
    word: round(sum(1 for row in rows if row["x"][i]) / len(rows), args.digits)
    for i, word in enumerate(data["vocab"])
}
os.makedirs("reports", exist_ok=True)
with open(f"reports/{args.split}.json", "w") as out:
    json.dump({"rows": len(rows), "share": share}, out, indent=2)
