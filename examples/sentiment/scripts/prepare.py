"""Writes a seeded, labelled corpus of short reviews as train.tsv and test.tsv."""
import argparse
import os
import random

POSITIVE = "great wonderful moving brilliant funny charming superb clever delightful warm".split()
NEGATIVE = "dull boring clumsy awful tedious flat lifeless silly weak predictable".split()
NEUTRAL = "film plot actor story scene director script music ending cast movie".split()

parser = argparse.ArgumentParser()
parser.add_argument("--rows", type=int, required=True)
parser.add_argument("--test-fraction", type=float, required=True)
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

rng = random.Random(args.seed)
rows = []
for _ in range(args.rows):
    label = rng.randrange(2)
    own, other = (POSITIVE, NEGATIVE) if label else (NEGATIVE, POSITIVE)
    words = [rng.choice(NEUTRAL) for _ in range(rng.randint(4, 9))]
    words += [rng.choice(own) for _ in range(rng.randint(1, 3))]
    # Some noise, so the task is not trivially separable.
    words += [rng.choice(other) for _ in range(rng.randint(0, 2))]
    rng.shuffle(words)
    rows.append((label, " ".join(words)))

cut = int(len(rows) * (1 - args.test_fraction))
os.makedirs(args.out, exist_ok=True)
for name, part in (("train.tsv", rows[:cut]), ("test.tsv", rows[cut:])):
    with open(os.path.join(args.out, name), "w") as handle:
        for label, text in part:
            handle.write(f"{label}\t{text}\n")
