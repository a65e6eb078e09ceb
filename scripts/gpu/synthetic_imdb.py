#!/usr/bin/env python3
"""A synthetic dataset of IMDB's size and shape for the GPU check: the
35,000 / 5,000 / 10,000 rows of pipelines/imdb.yaml's split, review
lengths drawn as IMDB's are spread (median about 170 words, a long tail:
about one review in seven longer than 512 tokens), labels that depend on
the words so that training has something to learn.

    synthetic_imdb.py OUT_DIR [SCALE]

Writes OUT_DIR/{train,val,test}.jsonl ({"text", "label"}); SCALE (default
1.0) shrinks every split alike.
"""
import json
import random
import sys
from pathlib import Path

NEUTRAL = ("the movie film story plot actor actress scene director camera music "
           "character ending script time people life world year night house car "
           "city friend family war love money road light water").split()
GOOD = "great wonderful superb moving brilliant charming".split()
BAD = "awful boring dull clumsy tedious dreadful".split()


def review(rng, label):
    words = max(10, min(1400, int(rng.lognormvariate(5.15, 0.6))))
    marked = GOOD if label == 1 else BAD
    return " ".join(rng.choice(marked) if rng.random() < 0.05 else rng.choice(NEUTRAL)
                    for _ in range(words))


def main():
    out = Path(sys.argv[1])
    scale = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2026)
    for split, rows in (("train", 35000), ("val", 5000), ("test", 10000)):
        with open(out / f"{split}.jsonl", "w") as file:
            for _ in range(max(2, int(rows * scale))):
                label = rng.randrange(2)
                file.write(json.dumps({"text": review(rng, label), "label": label}) + "\n")


if __name__ == "__main__":
    main()
