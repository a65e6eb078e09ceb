#!/usr/bin/env python3
"""transformers + PyTorch side of stages/examples/model_forward_throughput.rs:
the same forward (fp32, eval, no_grad, full attention mask) at the same
shapes, for a like-for-like figure on the same machine.

    .venv/bin/python scripts/bench/model_forward_bench.py MODEL_DIR [BATCH SEQ ITERS]
"""
import sys
import time

import torch
from transformers import BertForSequenceClassification


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir = sys.argv[1]
    batch, seq, iters = (int(value) for value in (sys.argv[2:5] + ["32", "64", "10"][len(sys.argv[2:5]) :]))
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=2).eval()
    torch.manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (batch, seq))
    mask = torch.ones((batch, seq), dtype=torch.int64)
    with torch.no_grad():
        for _ in range(2):
            model(input_ids=ids, attention_mask=mask)
        start = time.perf_counter()
        for _ in range(iters):
            model(input_ids=ids, attention_mask=mask)
        seconds = time.perf_counter() - start
    samples = batch * iters
    print(
        f"batch {batch} x {seq} tokens, {iters} iterations, {torch.get_num_threads()} threads: "
        f"{seconds / iters:.3f} s/batch, {samples / seconds:.1f} samples/s, {samples * seq / seconds:.0f} tokens/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
