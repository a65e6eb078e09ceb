#!/usr/bin/env python3
"""transformers + PyTorch side of scripts/bench/gpu_train.sh on a GPU: the
same training step as train/examples/model_throughput.rs (fresh weights from
CONFIG_DIR/config.json, random ids from 1000 up, no padding mask, dropout on,
cross-entropy, backward, AdamW lr 5e-5 weight decay 0.01) under the same
precision as Lightning's: `bf16-mixed` and `16-mixed` are torch.autocast
(16-mixed with a GradScaler), `32-true` plain fp32. Two warm-up steps, then
ITERS timed between CUDA synchronisations.

    python3 scripts/bench/gpu_train_reference.py CONFIG_DIR BATCH SEQ ITERS PRECISION
"""
import sys
import time

import torch
from transformers import DistilBertConfig, DistilBertForSequenceClassification


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    config_dir, batch, seq, iters, precision = sys.argv[1:]
    batch, seq, iters = int(batch), int(seq), int(iters)
    device = torch.device("cuda")
    torch.manual_seed(0)
    config = DistilBertConfig.from_pretrained(config_dir, num_labels=2)
    model = DistilBertForSequenceClassification(config).to(device)
    model.train()
    ids = torch.randint(1000, config.vocab_size, (batch, seq), device=device)
    labels = torch.randint(0, 2, (batch,), device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    autocast = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "16-mixed" else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast("cuda", dtype=autocast):
                loss = model(input_ids=ids, labels=labels).loss
        else:
            loss = model(input_ids=ids, labels=labels).loss
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    samples = batch * iters
    print(
        f"transformers {precision}: batch {batch} x {seq} tokens, {iters} iterations: "
        f"{seconds / iters:.4f} s/batch, {samples / seconds:.1f} samples/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
