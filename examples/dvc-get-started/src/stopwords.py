"""Writes the stop words featurize leaves out (a frozen stage in DVC)."""

import os

os.makedirs("data", exist_ok=True)
with open("data/stopwords.txt", "w") as out:
    out.write("\n".join(["a", "and", "it", "the", "very", "was"]) + "\n")
