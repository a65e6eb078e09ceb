"""A plain PyTorch + transformers training script doing the quickstart's
training work: MiniLM-L6 + a classification head, the first N training rows
of a seeded shuffle, batch 32 with per-batch padding, AdamW (weight decay
0.01, no decay on biases and LayerNorm), linear decay, one epoch, then the
test split. Reads the JSONL splits and the model directory that the
quickstart pipeline wrote, so both sides see the same data.

    python train_quickstart_reference.py SPLIT_DIR MODEL_DIR ROWS LR
"""
import json
import random
import sys
import time

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, get_linear_schedule_with_warmup

split_dir, model_dir, rows, lr = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
torch.manual_seed(123)
random.seed(123)


def read(name):
    with open(f"{split_dir}/{name}.jsonl") as handle:
        return [json.loads(line) for line in handle if line.strip()]


train = read("train")
random.shuffle(train)
train = train[:rows]
test = read("test")
tokenizer = AutoTokenizer.from_pretrained(model_dir)
tokenizer.model_max_length = 128
model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
collate = DataCollatorWithPadding(tokenizer)


def batches(records, size, shuffle):
    order = list(range(len(records)))
    if shuffle:
        random.shuffle(order)
    for start in range(0, len(order), size):
        chunk = [records[i] for i in order[start:start + size]]
        encoded = [dict(tokenizer(r["text"], truncation=True, max_length=128), labels=r["label"]) for r in chunk]
        yield collate(encoded)


no_decay = ["bias", "LayerNorm.weight"]
groups = [
    {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(groups, lr=lr)
steps = (len(train) + 31) // 32
schedule = get_linear_schedule_with_warmup(optimizer, 0, steps)

model.train()
started = time.perf_counter()
for batch in batches(train, 32, shuffle=True):
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
train_seconds = time.perf_counter() - started

model.eval()
started = time.perf_counter()
correct = 0
with torch.no_grad():
    for batch in batches(test, 64, shuffle=False):
        labels = batch.pop("labels")
        correct += (model(**batch).logits.argmax(-1) == labels).sum().item()
eval_seconds = time.perf_counter() - started
print(json.dumps({"train_seconds": round(train_seconds, 1), "eval_seconds": round(eval_seconds, 1),
                  "test_accuracy": round(correct / len(test), 4), "threads": torch.get_num_threads()}))
