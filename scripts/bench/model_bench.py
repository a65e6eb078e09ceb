#!/usr/bin/env python3
"""transformers + PyTorch side of train/examples/model_throughput.rs:
the same work at the same shapes, for a like-for-like figure on the same
machine: the forward (fp32, eval, no_grad, no padding), or with `train` a
training step (dropout on, cross-entropy, backward, torch.optim.AdamW at lr
5e-5 with its default weight decay 0.01).

    .venv/bin/python scripts/bench/model_bench.py MODEL_DIR [BATCH SEQ ITERS [train]]
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
    train = sys.argv[5:6] == ["train"]
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    model.train(train)
    torch.manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (batch, seq))
    mask = torch.ones((batch, seq), dtype=torch.int64)
    labels = torch.randint(0, 2, (batch,))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)

    def run():
        if train:
            optimizer.zero_grad()
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            optimizer.step()
        else:
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask)

    for _ in range(2):
        run()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    seconds = time.perf_counter() - start
    samples = batch * iters
    print(
        f"{'train step' if train else 'forward'}: batch {batch} x {seq} tokens, {iters} iterations, {torch.get_num_threads()} threads: "
        f"{seconds / iters:.3f} s/batch, {samples / seconds:.1f} samples/s, {samples * seq / seconds:.0f} tokens/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
