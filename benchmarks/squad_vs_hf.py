"""SQuAD v1.1 fine-tuning per epoch, kbert (JAX, PyTorch) vs HF's BertForQuestionAnswering.

Same data, same starting weights, same hyper-parameters, each engine in its own process:
the 18 training articles of `dev-v1.1-part-a.json` (every fourth article held out, as the
README's results), windows of 384 tokens with stride 128 made once by kbert's feature code,
AdamW (lr 1e-4, β 0.9/0.999, ε 1e-6, decay 0.01 except LayerNorm and biases), 10% warmup then
linear decay, gradient norm clipped to 1.0, batch 32, a fresh span head on the same encoder.
On a GPU every engine trains in bfloat16 (kbert `mixed_bfloat16`, HF `torch.autocast`).

- kbert: the task model, optimizer and length-bucketed batches of `kbert finetune squad`
  (each batch padded to its own longest row, widths in steps of 16), `model.fit`, XLA on JAX,
  `jit_compile="auto"` on PyTorch (torch.compile on CUDA). The batches come from a
  `keras.utils.PyDataset` (`kbert.tasks.batching.Batches`, what `kbert finetune` feeds on
  JAX and PyTorch), so nothing here needs TensorFlow.
- HF: the plain PyTorch loop of `run_qa.py` (random batches padded to 384, its default
  `pad_to_max_length`; `hf-longest` pads each batch to its longest row instead), fused AdamW,
  `get_linear_schedule_with_warmup`.

Both score the 6 held-out articles with kbert's post-processing and the official v1.1 metric,
from the same windows. Epoch times are wall seconds of training only (compilation included
in the first epoch: each new batch width compiles once); the speed-up uses the last epoch.

    # where TensorFlow is (tokenizing needs TensorFlow Text): the split and windows as arrays
    python benchmarks/squad_vs_hf.py prepare --init saved_models/minilm-l6-mlm-nsp \\
        --output /tmp/squad-bundle
    # anywhere, e.g. a GPU machine with JAX and PyTorch but no TensorFlow
    python benchmarks/squad_vs_hf.py run --bundle /tmp/squad-bundle \\
        --init saved_models/minilm-l6-mlm-nsp --epochs 2
"""

import argparse
import gzip
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]
from finetune_vs_hf import hf_optimizer  # noqa: E402  (run_glue.py's AdamW and schedule)

from kbert.models.task_models import task_model  # noqa: E402

ENGINES = {"kbert-jax": "jax", "kbert-torch": "torch", "hf": None, "hf-longest": None}
TRAIN_KEYS = ("input_ids", "segment_ids", "input_mask", "start_positions", "end_positions")


# --- prepare (needs TensorFlow Text) ------------------------------------------------------------
def prepare(args):
    from kbert.network.config import read_vocab
    from kbert.tasks import squad
    from kbert.tokenizer import Tokenizer

    train_json, held_json = squad.split_by_article(args.squad, 4)
    train = squad.examples_from_json(train_json, "train")
    held = squad.examples_from_json(held_json, "held-out")
    if args.max_train_questions:
        train.examples = train.examples[:args.max_train_questions]
    if args.max_heldout_questions:
        kept = held.examples[:args.max_heldout_questions]
        held = squad.examples_from_json(_only(held_json, {e.qas_id for e in kept}), "held-out")
    with open(os.path.join(args.init, "config.json"), encoding="utf-8") as f:
        lower = json.load(f).get("do_lower_case", True)
    tokenizer = Tokenizer(read_vocab(os.path.join(args.init, "vocab.txt")), lower_case=lower)
    t = squad.encode_squad(tokenizer, train.examples, True, args.max_seq_length)
    h = squad.encode_squad(tokenizer, held.examples, False, args.max_seq_length)
    os.makedirs(args.output, exist_ok=True)
    np.savez_compressed(os.path.join(args.output, "train.npz"),
                        **{k: t.features[k].astype("int32") for k in TRAIN_KEYS})
    with gzip.open(os.path.join(args.output, "heldout.pkl.gz"), "wb") as f:
        pickle.dump((held, h), f)
    lengths = t.features["input_mask"].sum(1)
    meta = dict(train_questions=len(train.examples), train_windows=len(lengths),
                heldout_questions=len(held.examples), heldout_windows=len(h.example_index),
                max_seq_length=args.max_seq_length, heldout=[a["title"] for a in held.dataset],
                windows_at_full_length=float(np.mean(lengths == args.max_seq_length)))
    with open(os.path.join(args.output, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


def _only(squad_json, ids):
    data = [{**a, "paragraphs": [{**p, "qas": [q for q in p["qas"] if q["id"] in ids]}
                                 for p in a["paragraphs"]]} for a in squad_json["data"]]
    return {"version": squad_json.get("version", "1.1"), "data": data}


def _load_bundle(bundle):
    with np.load(os.path.join(bundle, "train.npz")) as z:
        train = {k: z[k] for k in TRAIN_KEYS}
    with gzip.open(os.path.join(bundle, "heldout.pkl.gz"), "rb") as f:
        held, held_features = pickle.load(f)
    return train, held, held_features


def _score(held, held_features, start_logits, end_logits):
    from kbert.tasks import metrics, squad_postprocess
    result = squad_postprocess.postprocess(held.examples, held_features, start_logits, end_logits)
    return metrics.squad_v1_1(held.dataset, result.predictions)


def _gpu():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


# --- the engines (each in its own process) ------------------------------------------------------
def engine_kbert(args):
    import keras

    from kbert import checkpoint
    from kbert.models.optimization import create_optimizer
    from kbert.tasks import batching
    from kbert.training.finetuning import PAD_TO_MULTIPLE, predict

    if _gpu():
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(args.seed)
    train, held, held_features = _load_bundle(args.bundle)
    ckpt = checkpoint.load(args.init)
    ckpt.heads = {"span": checkpoint.make_head("span", ckpt.backbone, {"version": "1.1"})}
    model = task_model(ckpt, "span")
    features = {k: train[k] for k in ("input_ids", "segment_ids", "input_mask")}
    labels = {"start_logits": train["start_positions"], "end_logits": train["end_positions"]}

    data = batching.Batches({**features, **labels}, args.batch_size, list(labels),
                            shuffle=True, seed=args.seed, multiple=PAD_TO_MULTIPLE)
    steps_per_epoch = len(data)
    steps = steps_per_epoch * args.epochs
    model.compile(optimizer=create_optimizer("adamw", args.learning_rate, steps,
                                             int(round(0.1 * steps)), 0.01),
                  jit_compile=args.jit_compile)
    epochs = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            _wait(model)
            epochs.append(time.perf_counter() - self.started)

    model.fit(data, epochs=args.epochs, shuffle=False, verbose=0, callbacks=[Timer()])
    outputs = predict(model, held_features.features, 64, sequence_output=True)
    scores = _score(held, held_features, outputs["start_logits"], outputs["end_logits"])
    return dict(epoch_seconds=epochs, steps_per_epoch=steps_per_epoch, **scores)


def _wait(model):
    """Blocks until the device finished the queued steps (async dispatch on GPU)."""
    import keras
    value = model.trainable_variables[0].value
    if keras.backend.backend() == "jax":
        value.block_until_ready()
    elif keras.backend.backend() == "torch" and value.is_cuda:
        import torch
        torch.cuda.synchronize()


def _hf_model(init, tmp):
    """kbert's starting checkpoint as a transformers BertModel directory (same weights)."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    from kbert import checkpoint
    from kbert.convert.hf import export_hf
    ckpt = checkpoint.load(init)
    ckpt.heads, ckpt.head_options = {}, {}
    return export_hf(ckpt, os.path.join(tmp, "hf"))


def engine_hf(args, longest):
    import torch
    import transformers

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train, held, held_features = _load_bundle(args.bundle)
    with tempfile.TemporaryDirectory() as tmp:
        model = transformers.BertForQuestionAnswering.from_pretrained(_hf_model(args.init, tmp))
    model.to(device)
    n = len(train["input_ids"])
    steps_per_epoch = math.ceil(n / args.batch_size)
    optimizer, scheduler = hf_optimizer(model, args.learning_rate, steps_per_epoch * args.epochs,
                                        fused=device == "cuda")
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
    lengths = train["input_mask"].sum(1)

    def batch(index):
        """The rows `index` of every training array, padded to 384 or to their longest row."""
        width = int(lengths[index].max()) if longest else train["input_ids"].shape[1]
        rows = [train[k][index] for k in TRAIN_KEYS]
        return [torch.as_tensor(r[:, :width] if r.ndim == 2 else r, dtype=torch.long,
                                device=device) for r in rows]

    rng = np.random.default_rng(args.seed)
    epochs = []
    model.train()
    for _ in range(args.epochs):
        started = time.perf_counter()
        order = rng.permutation(n)
        for i in range(0, n, args.batch_size):
            ids, segments, mask, start, end = batch(order[i:i + args.batch_size])
            with autocast:
                loss = model(input_ids=ids, token_type_ids=segments, attention_mask=mask,
                             start_positions=start, end_positions=end).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        epochs.append(time.perf_counter() - started)
    model.eval()
    f = held_features.features
    width = f["input_ids"].shape[1]
    start_logits, end_logits = (np.zeros((len(f["input_ids"]), width), "float32")
                                for _ in range(2))
    held_lengths = f["input_mask"].sum(1)
    with torch.no_grad(), autocast:
        for i in range(0, len(held_lengths), 64):
            index = np.arange(i, min(i + 64, len(held_lengths)))
            w = int(held_lengths[index].max())
            ids, segments, mask = (torch.as_tensor(f[k][index][:, :w], dtype=torch.long,
                                                   device=device)
                                   for k in ("input_ids", "segment_ids", "input_mask"))
            out = model(input_ids=ids, token_type_ids=segments, attention_mask=mask)
            start_logits[index, :w] = out.start_logits.float().cpu().numpy()
            end_logits[index, :w] = out.end_logits.float().cpu().numpy()
    scores = _score(held, held_features, start_logits, end_logits)
    return dict(epoch_seconds=epochs, steps_per_epoch=steps_per_epoch, **scores)


# --- run: every engine in its own process, one table -------------------------------------------
def run(args):
    with open(os.path.join(args.bundle, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    rows = {}
    for name in args.engines:
        env = dict(os.environ, KERAS_BACKEND=ENGINES[name] or "torch")
        cmd = [sys.executable, os.path.abspath(__file__), "_engine", name, "--bundle",
               args.bundle, "--init", args.init, "--epochs", str(args.epochs), "--batch-size",
               str(args.batch_size), "--learning-rate", str(args.learning_rate), "--seed",
               str(args.seed), "--jit-compile", args.jit_compile]
        started = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode:
            print(f"{name}: failed\n{done.stderr[-3000:]}", flush=True)
            continue
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        rows[name]["process_seconds"] = time.perf_counter() - started
        print(f"{name}: {json.dumps(rows[name])}", flush=True)
    device = "GPU (bfloat16)" if _gpu() else "CPU (float32)"
    print(f"\nSQuAD v1.1, {meta['train_questions']} training questions "
          f"({meta['train_windows']} windows, {100 * meta['windows_at_full_length']:.0f}% at "
          f"full length {meta['max_seq_length']}), {args.epochs} epoch(s), batch "
          f"{args.batch_size}, lr {args.learning_rate}; held out: {meta['heldout_questions']} "
          f"questions; {device}")
    reference = rows.get("hf")
    print(f"{'engine':14s} {'EM':>6s} {'F1':>6s} {'s/epoch (each)':>22s} "
          f"{'x HF (last epoch)':>18s}")
    for name, r in rows.items():
        each = " / ".join(f"{s:.1f}" for s in r["epoch_seconds"])
        ratio = (f"{reference['epoch_seconds'][-1] / r['epoch_seconds'][-1]:.2f}x"
                 if reference else "-")
        print(f"{name:14s} {r['exact_match']:6.2f} {r['f1']:6.2f} {each:>22s} {ratio:>18s}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(meta=meta, device=device, rows=rows), f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="the split and the windows as arrays (needs TensorFlow)")
    p.add_argument("--squad", default=os.path.join(ROOT, "..", "shared", "data", "squad",
                                                   "dev-v1.1-part-a.json"))
    p.add_argument("--init", default=os.path.join(ROOT, "saved_models", "minilm-l6-mlm-nsp"),
                   help="a kbert checkpoint (its vocabulary tokenizes)")
    p.add_argument("--output", required=True)
    p.add_argument("--max-seq-length", type=int, default=384)
    p.add_argument("--max-train-questions", type=int, help="the first N only (quick runs)")
    p.add_argument("--max-heldout-questions", type=int)
    for name in ("run", "_engine"):
        r = sub.add_parser(name)
        if name == "_engine":
            r.add_argument("engine", choices=sorted(ENGINES))
        r.add_argument("--bundle", required=True, help="prepare's output folder")
        r.add_argument("--init", default=os.path.join(ROOT, "saved_models", "minilm-l6-mlm-nsp"))
        r.add_argument("--epochs", type=int, default=2)
        r.add_argument("--batch-size", type=int, default=32)
        r.add_argument("--learning-rate", type=float, default=1e-4)
        r.add_argument("--seed", type=int, default=0)
        r.add_argument("--jit-compile", default="auto", help="kbert's: auto, true or false")
        if name == "run":
            r.add_argument("--engines", nargs="+", choices=sorted(ENGINES),
                           default=["hf", "hf-longest", "kbert-jax", "kbert-torch"])
            r.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    if args.command == "prepare":
        prepare(args)
    elif args.command == "run":
        run(args)
    else:
        args.jit_compile = {"true": True, "false": False}.get(args.jit_compile.lower(), "auto")
        result = (engine_hf(args, longest=args.engine == "hf-longest")
                  if args.engine.startswith("hf") else engine_kbert(args))
        print(json.dumps(result))


if __name__ == "__main__":
    main()
