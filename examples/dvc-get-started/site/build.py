"""A page with the metrics (run in site/, DVC's `wdir`)."""

import json
import sys

metrics = json.load(open(sys.argv[1]))
cells = "".join(f"<tr><td>{name}</td><td>{value}</td></tr>" for name, value in metrics.items())
with open(sys.argv[2], "w") as out:
    out.write(f"<!doctype html><title>metrics</title><table>{cells}</table>\n")
