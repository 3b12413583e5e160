"""What each precision and runtime costs in accuracy, against kbert's float32 Keras path.

    python benchmarks/precision_accuracy.py [--work DIR] [--quick] [--tasks sst2 squad conll2003]
        [--rows keras:float32 keras:bfloat16 openvino:float32 openvino:int8 onnx:float32 ...]

For every (runtime, dtype) row, the same fine-tuned checkpoints scored by `kbert evaluate
--runtime R --dtype D` (the task's official metric on the same features and batches):

- SST-2 dev accuracy (GLUE's dev.tsv, 872 sentences);
- SQuAD v1.1 F1 on the 6 held-out articles of the shared part-a (`data_splits.split_squad`),
  with the shipped `minilm-l6-squad` (trained on the other 18);
- CoNLL-2003 entity F1 on valid.txt (3,250 sentences);
- `fill_mask` top-1 agreement with float32 on 1,000 corpus sentences (wikitext-2 articles), one
  whole word masked each, with the shipped `minilm-l6-mlm-nsp`;
- `embed` cosine against float32 (worst and mean) of the shipped `minilm-l6-v2` on 500 SQuAD
  questions and 500 paragraphs (up to 256 tokens).

The SST-2 and CoNLL checkpoints are the shipped `minilm-l6-sst2` and `minilm-l6-conll2003`
(WORK, default ~/.cache/kbert/accuracy, holds the SQuAD split and the quick runs' files). The
tolerances the table is read against: within 0.3 of
float32 (bfloat16) and 1.0 (int8) on the task metrics, top-1 agreement >= 95%, embed cosine >=
0.999 (bfloat16) and >= 0.99 (int8); a row outside them is marked.

A bfloat16 row runs where the CPU has AMX or avx512_bf16; elsewhere Keras bfloat16 still runs
(TensorFlow emulates the products: same numbers, slower) and is marked "emulated"; OpenVINO and
ONNX Runtime refuse it (their one-line reason is printed). int8 is offered only where it pays
(`kbert.hardware.int8_pays`: int8 dot products, no native bfloat16); elsewhere its rows are
measured anyway, marked "accuracy only". `--quick`: 200 SQuAD questions, 300
SST-2 sentences, 500 CoNLL sentences, 200 masked sentences, 200 texts to embed.
"""

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import data_splits  # noqa: E402

ROWS = ["keras:float32", "keras:bfloat16", "openvino:float32", "openvino:bfloat16",
        "openvino:int8", "onnx:float32", "onnx:int8"]
TOLERANCE = {"float32": 0.3, "bfloat16": 0.3, "int8": 1.0}     # task metric points
MIN_COSINE = {"float32": 0.999, "bfloat16": 0.999, "int8": 0.99}
TASKS = {"sst2": "accuracy", "squad": "f1", "conll2003": "f1"}    # task: its metric
DEV = {"sst2": "glue/SST-2/dev.tsv", "conll2003": "conll2003/valid.txt"}


def shipped(task):
    """The shipped checkpoint fine-tuned for `task` (benchmarks/shipped_models.py's)."""
    return os.path.join(REPO, "saved_models", f"minilm-l6-{task}")


def _head(path, n):
    """The first n lines of a TSV after its header, in a temporary copy."""
    with open(path) as f:
        lines = f.readlines()
    tmp = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
    tmp.writelines(lines[:n + 1])
    tmp.close()
    return tmp.name


def _conll_head(path, n):
    """The first n sentences of a CoNLL file, in a temporary copy."""
    with open(path) as f:
        blocks = f.read().split("\n\n")
    tmp = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    tmp.write("\n\n".join(blocks[:n + 1]) + "\n")
    tmp.close()
    return tmp.name


def _squad_head(path, n):
    """The first n questions of a SQuAD file, in a temporary copy."""
    with open(path) as f:
        squad = json.load(f)
    left = n
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = paragraph["qas"][:max(left, 0)]
            left -= len(paragraph["qas"])
    tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(squad, tmp)
    tmp.close()
    return tmp.name


def masked_sentences(n, vocab, seed=0):
    """n corpus sentences (8-40 words) from the wikitext-2 articles, one whole word that is
    in the vocabulary replaced by [MASK] in each."""
    folder = os.path.join(DATA, "corpus", "wikitext2")
    sentences = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            for paragraph in f:
                for s in re.split(r"(?<=[.!?])\s+", paragraph.strip()):
                    if 8 <= len(s.split()) <= 40:
                        sentences.append(s)
    rng = random.Random(seed)
    rng.shuffle(sentences)
    out = []
    for s in sentences:
        words = s.split()
        spots = [i for i, w in enumerate(words) if w.isalpha() and w.lower() in vocab]
        if spots:
            words[rng.choice(spots)] = "[MASK]"
            out.append(" ".join(words))
        if len(out) == n:
            break
    return out


def texts_to_embed(n, squad_file):
    with open(squad_file) as f:
        paragraphs = [p for a in json.load(f)["data"] for p in a["paragraphs"]]
    questions = [q["question"] for p in paragraphs for q in p["qas"]]
    return questions[:n // 2] + [p["context"] for p in paragraphs][:n - n // 2]


def _cosine(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def measure_row(runtime, dtype, files, inputs, reference):
    """The row's scores: task metrics through `finetune.evaluate(runtime=, dtype=)`, fill_mask
    and embed through `kbert.load(runtime=, dtype=)`."""
    import kbert
    from kbert import finetune
    row = {}
    for task, key in TASKS.items():
        if task in files:
            ckpt, data = files[task]
            row[task] = finetune.evaluate(task, ckpt, data, dtype=dtype, runtime=runtime)[key]
    mlm = kbert.load(files["mlm"], dtype=dtype, runtime=runtime)
    top1 = [masks[0][0]["token"] for masks in mlm.fill_mask(inputs["masked"], top_k=1)]
    vectors = kbert.load(files["encoder"], dtype=dtype, runtime=runtime).embed(inputs["texts"])
    if reference is None:
        row.update(top1=top1, vectors=vectors, agreement=100.0, cos_min=1.0, cos_mean=1.0)
    else:
        cos = _cosine(vectors, reference["vectors"])
        row.update(agreement=100.0 * np.mean([a == b for a, b in zip(top1, reference["top1"])]),
                   cos_min=float(cos.min()), cos_mean=float(cos.mean()))
    return row


def _mark(row, reference, dtype):
    bad = [task for task in TASKS if task in row
           and abs(row[task] - reference[task]) > TOLERANCE[dtype]]
    if row["agreement"] < 95:
        bad.append("fill_mask")
    if row["cos_min"] < MIN_COSINE[dtype]:
        bad.append("embed")
    return "ok" if not bad else "outside: " + ", ".join(bad)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache",
                                                       "kbert", "accuracy"))
    parser.add_argument("--rows", nargs="+", default=ROWS, help="runtime:dtype pairs")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS),
                        help="task metrics to score (SST-2 and CoNLL fine-tune a checkpoint "
                             "under --work first, ~1 h on 2 cores)")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)

    from kbert import hardware
    from kbert.runtime import RuntimeOptionError, resolve
    print(hardware.describe(), flush=True)
    n = {"squad": 200, "sst2": 300, "conll": 500, "mask": 200, "embed": 200} if args.quick \
        else {"squad": None, "sst2": None, "conll": None, "mask": 1000, "embed": 1000}
    _, heldout, _ = data_splits.split_squad(os.path.join(DATA, "squad", "dev-v1.1-part-a.json"),
                                         args.work)
    sst2_dev = os.path.join(DATA, DEV["sst2"])
    conll_dev = os.path.join(DATA, DEV["conll2003"])
    files = {
        "mlm": os.path.join(REPO, "saved_models", "minilm-l6-mlm-nsp"),
        "encoder": os.path.join(REPO, "saved_models", "minilm-l6-v2"),
    }
    if "sst2" in args.tasks:
        files["sst2"] = (shipped("sst2"),
                         _head(sst2_dev, n["sst2"]) if n["sst2"] else sst2_dev)
    if "conll2003" in args.tasks:
        files["conll2003"] = (shipped("conll2003"),
                              _conll_head(conll_dev, n["conll"]) if n["conll"] else conll_dev)
    if "squad" in args.tasks:
        files["squad"] = (shipped("squad"),
                          _squad_head(heldout, n["squad"]) if n["squad"] else heldout)
    with open(os.path.join(files["mlm"], "vocab.txt")) as f:
        vocab = {line.strip() for line in f}
    inputs = {"masked": masked_sentences(n["mask"], vocab),
              "texts": texts_to_embed(n["embed"], heldout)}
    scored = {"sst2": f"SST-2 dev {n['sst2'] or 'all'}",
              "squad": f"SQuAD held-out questions {n['squad'] or 'all'}",
              "conll2003": f"CoNLL valid sentences {n['conll'] or 'all'}"}
    print(f"inputs: {', '.join(scored[t] for t in TASKS if t in args.tasks)}, "
          f"{len(inputs['masked'])} masked sentences, {len(inputs['texts'])} texts to embed\n",
          flush=True)

    reference, table = None, []
    fast_bf16, fast_int8 = hardware.has_fast_bfloat16(), hardware.int8_pays()
    if not fast_int8:      # int8 is refused on this CPU (not faster); its accuracy still counts
        hardware.int8_pays = lambda: True
    for pair in ["keras:float32"] + [r for r in args.rows if r != "keras:float32"]:
        runtime, dtype = pair.split(":")
        try:
            resolve(runtime, dtype)
        except RuntimeOptionError as e:
            table.append((pair, None, f"skipped: {e}"))
            continue
        started = time.perf_counter()
        row = measure_row(runtime, dtype, files, inputs, reference)
        note = "reference" if reference is None else _mark(row, reference, dtype)
        if dtype == "bfloat16" and not fast_bf16:
            note += " (emulated: no bf16 matmul on this CPU)"
        if dtype == "int8" and not fast_int8:
            note += " (accuracy only: int8 does not pay on this CPU, so not offered)"
        reference = reference or row
        table.append((pair, row, note))
        print(f"{pair}: {time.perf_counter() - started:.0f} s", flush=True)

    print("\n| runtime | dtype | SST-2 acc | SQuAD F1 | CoNLL F1 | fill_mask top-1 agree "
          "| embed cos min / mean | |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for pair, row, note in table:
        runtime, dtype = pair.split(":")
        if row is None:
            print(f"| {runtime} | {dtype} | | | | | | {note} |")
            continue
        scores = " | ".join(f"{row[t]:.2f}" if t in row else "" for t in TASKS)
        print(f"| {runtime} | {dtype} | {scores} | {row['agreement']:.1f}% | "
              f"{row['cos_min']:.5f} / {row['cos_mean']:.5f} | {note} |")


if __name__ == "__main__":
    main()
