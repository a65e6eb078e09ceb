"""Eager PyTorch + transformers doing the work of the quickstart's train
stage, batch for batch, for scripts/bench/train_roof.sh: MiniLM-L6 from the
model directory with a fresh 2-class head (seed 123), the training batches
and the validation batches of PLAN (`train_roof plan`: the stage's own,
so both sides compute the same padded positions), fp32, dropout on, AdamW
at LR with weight decay 0.01 except biases and LayerNorm weights, linear
decay to 0 over the steps, one epoch; then validation of every val row in
eval mode under `torch.inference_mode()`, and the checkpoint written with
`save_pretrained`. The whole process is the stage: time it from outside.

    python train_stage_eager.py TOKENS MODEL_DIR PLAN LR OUT_DIR

Prints one JSON line: the steps' seconds and model FLOPs (counted as
`SequenceClassifier::train_flops` counts them: the matmuls of forward and
backward as three forwards, padded positions included), validation's
seconds, loss and accuracy.
"""
import json
import sys
import time

import numpy
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup


def read_split(tokens, name):
    tensors = load_file(f"{tokens}/{name}.safetensors")
    return tensors["input_ids"].astype(numpy.int64), tensors["offsets"], tensors["labels"]


def collate(split, rows, pad_id):
    ids, offsets, labels = split
    longest = max(int(offsets[row + 1] - offsets[row]) for row in rows)
    input_ids = numpy.full((len(rows), longest), pad_id, dtype=numpy.int64)
    mask = numpy.zeros((len(rows), longest), dtype=numpy.int64)
    for at, row in enumerate(rows):
        start, end = int(offsets[row]), int(offsets[row + 1])
        input_ids[at, : end - start] = ids[start:end]
        mask[at, : end - start] = 1
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(mask),
        "labels": torch.from_numpy(labels[rows].astype(numpy.int64)),
    }


def train_flops(config, rows, seq):
    hidden, inner, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_position = layers * (4 * hidden * hidden + 2 * hidden * inner + 2 * seq * hidden)
    per_sequence = hidden * hidden + hidden * config.num_labels
    return 3.0 * 2.0 * rows * (seq * per_position + per_sequence)


def main():
    tokens, model_dir, plan_path, lr, out_dir = sys.argv[1:6]
    with open(plan_path) as handle:
        plan = json.load(handle)
    train, val = read_split(tokens, "train"), read_split(tokens, "val")
    torch.manual_seed(123)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    no_decay = ["bias", "LayerNorm.weight"]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=float(lr))
    schedule = get_linear_schedule_with_warmup(optimizer, 0, len(plan["train"]))

    model.train()
    flops = 0.0
    started = time.perf_counter()
    for rows in plan["train"]:
        batch = collate(train, rows, plan["pad_id"])
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        flops += train_flops(model.config, len(rows), batch["input_ids"].shape[1])
    steps_seconds = time.perf_counter() - started

    model.eval()
    started = time.perf_counter()
    correct, loss_sum, count = 0, 0.0, 0
    with torch.inference_mode():
        for rows in plan["val"]:
            batch = collate(val, rows, plan["pad_id"])
            labels = batch.pop("labels")
            logits = model(**batch).logits
            loss_sum += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(-1) == labels).sum().item()
            count += len(rows)
    val_seconds = time.perf_counter() - started

    started = time.perf_counter()
    model.save_pretrained(out_dir)
    save_seconds = time.perf_counter() - started
    print(json.dumps({
        "steps_seconds": round(steps_seconds, 3),
        "steps_flops": flops,
        "flops_per_s": flops / steps_seconds,
        "val_seconds": round(val_seconds, 3),
        "val_loss": loss_sum / count,
        "val_acc": correct / count,
        "save_seconds": round(save_seconds, 3),
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
