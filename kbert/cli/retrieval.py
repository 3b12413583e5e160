"""`kbert index build|add|search` and `kbert evaluate retrieve|rerank`: `kbert.retrieval`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kbert import outputs
from kbert.cli.common import (
    CliError,
    add_overwrite,
    check_output_dir,
    examples,
    positive_int,
)
from kbert.cli.export import DTYPE_NAMES, RUNTIME_NAMES
from kbert.wording import plural

if TYPE_CHECKING:   # type-only: the pipeline needs Keras
    from kbert.pipeline import Bert

RETRIEVAL_TASKS = ("retrieve", "rerank", "open-qa")   # `kbert evaluate` (kbert.retrieval)
TRAINING_TASKS = ("retrieve", "rerank")      # `kbert finetune` (kbert.training.retrievers)


def add_hybrid(p: argparse.ArgumentParser, default: str | None, help: str) -> None:
    """--hybrid [{on,off}], one form in every command: BM25 fused with the dense scores. A bare
    `--hybrid` is on (`common.Parser` reads `--hybrid FILE` as the bare option, then the file).
    """
    p.add_argument("--hybrid", nargs="?", const="on", choices=("on", "off"), default=default,
                   help=help + "; a bare --hybrid is on")


def add_index(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="build a search index of passages with a sentence encoder, "
                                     "add to it, or search it",
                       epilog=examples(
                           "kbert index build notes/*.txt faq.csv --text-column body "
                           "--model minilm-l6-v2 --output my-index",
                           "kbert index add my-index more.jsonl --text-column body",
                           "kbert index search my-index \"how do I reset my password?\""))
    which = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = which.add_parser("build", help="embed text, JSONL or CSV files into an index directory",
                         epilog=examples(
                             "kbert index build notes/*.txt faq.csv --text-column body "
                             "--model minilm-l6-v2 --output my-index",
                             "kbert index build corpus.jsonl --model minilm-l6-v2 --output "
                             "big-index --approximate --hybrid on --runtime onnx"))
    b.add_argument("files", nargs="+", metavar="FILE",
                   help="plain text (one text a file), .jsonl or .csv/.tsv (--text-column)")
    b.add_argument("--model", required=True, help="the sentence encoder (e.g. minilm-l6-v2)")
    b.add_argument("--output", required=True, help="the index directory to write")
    add_overwrite(b, "an index")
    add_hybrid(b, "off", "on: search fuses BM25 with the dense scores unless told otherwise "
                         "(index search --hybrid off)")
    b.add_argument("--approximate", action="store_true",
                   help="an approximate HNSW index (faiss) for collections beyond ~100k passages")
    a = which.add_parser("add", help="add files to an existing index (same encoder)",
                         epilog=examples("kbert index add my-index more.jsonl --text-column body",
                                         "kbert index add my-index new-notes/*.txt"))
    a.add_argument("index", metavar="DIR", help="the index directory")
    a.add_argument("files", nargs="+", metavar="FILE", help="as for build")
    for q in (b, a):
        q.add_argument("--text-column", help="JSONL key or CSV column of the text (default text)")
        q.add_argument("--batch-size", type=positive_int, default=16, help="texts per batch")
    s = which.add_parser("search", help="the best passages for a query",
                         epilog=examples(
                             "kbert index search my-index \"how do I reset my password?\"",
                             "kbert index search my-index \"reset password\" \"change email\" "
                             "--top-k 3 --hybrid off --json"))
    s.add_argument("index", metavar="DIR", help="the index directory")
    s.add_argument("query", nargs="+", help="one or more queries")
    s.add_argument("--top-k", type=positive_int, default=10, help="hits per query")
    s.add_argument("--model", help="the encoder (default: the one the index was built with)")
    add_hybrid(s, None, "fuse BM25 with the dense scores (default: as the index was built, "
                        "index build --hybrid)")
    s.add_argument("--json", action="store_true", help="print the hits as one JSON list")
    for q in (b, a, s):
        q.add_argument("--runtime", choices=RUNTIME_NAMES,
                       help="how the encoder runs (kbert.load's runtime): keras (default; "
                            "add and search: the runtime that built the index), its openvino / "
                            "onnx graphs, made on first use (onnx: the fastest float32 "
                            "indexing on a CPU, and a search in under a second without "
                            "TensorFlow), or auto (the fastest here)")
        q.add_argument("--dtype", choices=DTYPE_NAMES,
                       help="the encoder's precision (default float32; auto: bfloat16 where the "
                            "CPU has AMX or AVX-512 BF16)")
    p.set_defaults(func=run_index)


def add_retrieval_evaluate(p: argparse.ArgumentParser) -> None:
    """`kbert evaluate retrieve|rerank`'s options."""
    add_hybrid(p, "off", "retrieve, open-qa: BM25 fused with the dense scores")
    p.add_argument("--candidates", type=positive_int, default=20,
                   help="rerank: BM25's top N per query, reordered (default 20)")
    p.add_argument("--max-queries", type=positive_int,
                   help="rerank: the first N queries only (default: all)")
    p.add_argument("--fuse", action="store_true",
                   help="rerank: order by the reranker's log-odds fused with BM25's scores")
    p.add_argument("--retriever", help="open-qa (needed, no default): the sentence encoder "
                                       "that indexes every paragraph of --data (--model is the "
                                       "reader)")
    p.add_argument("--reranker", help="open-qa: a cross-encoder reordering the first "
                                      "--candidates hits (default: none)")
    p.add_argument("--passages", type=positive_int, default=5,
                   help="open-qa: passages the reader reads per question (default 5)")


def add_retrieval_training(p: argparse.ArgumentParser) -> None:
    """`kbert finetune retrieve|rerank`'s options."""
    g = p.add_argument_group("retrieve, rerank (JSONL/CSV/TSV rows with named columns, or "
                             "SQuAD JSON)")
    g.add_argument("--query-column", default="query", help="default query")
    g.add_argument("--positive-column", default="positive", help="default positive")
    g.add_argument("--negative-column",
                   help="hard negatives (a text, or a JSONL list of texts), if the file has "
                        "them (default: none)")
    g.add_argument("--mine-negatives", type=positive_int, metavar="N",
                   help="add N hard negatives per query: the best-ranked training passages "
                        "that are not its positive (default: none mined)")
    g.add_argument("--mine-with", choices=("bm25", "encoder"), default="bm25",
                   help="rank passages for mining with BM25 (default) or the --init encoder")
    g.add_argument("--temperature", type=float, default=0.05,
                   help="retrieve: the in-batch softmax's temperature (default 0.05)")
    g.add_argument("--candidates", type=positive_int, default=20,
                   help="rerank dev scoring: BM25's top N per query, reordered (default 20)")


def run_retrieval_training(args: argparse.Namespace) -> None:
    import json

    from kbert.training import retrievers as training
    check_output_dir(args.output, "checkpoint", args.overwrite)
    common = dict(overwrite=args.overwrite, epochs=1 if args.epochs is None else args.epochs,
                  batch_size=args.batch_size,
                  learning_rate=args.learning_rate or 2e-5, warmup=args.warmup,
                  max_seq_length=args.max_seq_length, seed=args.seed,
                  mine_negatives_count=args.mine_negatives or 0, mine_with=args.mine_with,
                  save_dtype=args.save_dtype, mixed_precision=args.mixed_precision,
                  log_dir=args.log_dir, query_column=args.query_column,
                  positive_column=args.positive_column, negative_column=args.negative_column)
    if args.task == "retrieve":
        result = training.train_retriever(args.init, args.train, args.output, args.dev,
                                          temperature=args.temperature, **common)
    else:
        result = training.train_reranker(args.init, args.train, args.output, args.dev,
                                         candidates=args.candidates, **common)
    print(f"wrote {result.output}: best epoch {result.best_epoch} of {len(result.history)} "
          f"({result.train_rows} training rows, {result.train_seconds:.0f}s training)")
    print(json.dumps(result.best_scores))


def load_model(args: argparse.Namespace, name: str) -> Bert:
    """`kbert.load(name)` with the command's --runtime and --dtype, where given."""
    from kbert.pipeline import load
    options = runtime_options(args)
    return load(name, dtype=options.get("dtype"), runtime=options.get("runtime"))


def runtime_options(args: argparse.Namespace) -> dict[str, str]:
    """The --runtime and --dtype given ("float32", `kbert evaluate`'s default, is left to
    `kbert.load`: an export directory's default is the dtype it was exported in)."""
    options = {}
    if getattr(args, "runtime", None):
        options["runtime"] = args.runtime
    if getattr(args, "dtype", None) not in (None, "float32"):
        options["dtype"] = args.dtype
    return options


def run_index(args: argparse.Namespace) -> None:
    import warnings

    from kbert.retrieval import Index
    from kbert.retrieval.passages import read_texts
    if args.action == "search":
        index = Index.load(args.index)
        model = (load_model(args, args.model) if args.model
                 else index.load_encoder(**runtime_options(args)))
        hybrid = None if args.hybrid is None else args.hybrid == "on"    # None: the index's
        hits = index.search(args.query, model, top_k=args.top_k, hybrid=hybrid)
        print_hits(args.query, hits, args.json)
        return
    if args.action == "build":
        check_output_dir(args.output, "index", args.overwrite)
    texts, meta = read_texts(args.files, args.text_column)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)    # the index's notes, printed below
        if args.action == "build":
            model = load_model(args, args.model)
            index = Index.build(model, texts, metadata=meta, batch_size=args.batch_size,
                                approximate=args.approximate, hybrid=args.hybrid == "on")
            path = index.save(args.output, overwrite=args.overwrite)
        else:
            # Locked from reading to writing: a second `index add` waits, then adds to what
            # the first wrote (both land).
            if not os.path.isdir(args.index):
                Index.load(args.index)                   # its one-line error
            with outputs.locked(args.index, wait=True, on_wait=_waiting):
                index = Index.load(args.index)
                model = index.load_encoder(**runtime_options(args))
                before = len(index)
                index.add(model, texts, metadata=meta, batch_size=args.batch_size)
                path = index.save(args.index)
            print(f"added {plural(len(index) - before, 'passage')} from "
                  f"{plural(len(texts), 'text')}")
    for note in index.notes:
        print(f"kbert index: note: {note}")
    kind = "approximate (HNSW)" if index.approximate else "exact"
    print(f"wrote {path}: {plural(len(index), 'passage')} from {plural(index.sources, 'text')}, "
          f"encoder "
          f"{index.encoder['name']}, {kind}{', hybrid' if index.hybrid else ''}")


def _waiting(line: str) -> None:
    print(f"kbert index: {line}", file=sys.stderr, flush=True)


def print_hits(queries: Sequence[str], hits: list[list[dict[str, Any]]],
               as_json: bool) -> None:
    import json
    if as_json:
        print(json.dumps(hits if len(queries) > 1 else hits[0], ensure_ascii=False))
        return
    for query, row in zip(queries, hits):
        if len(queries) > 1:
            print(f"# {query}")
        for rank, hit in enumerate(row, 1):
            where = hit.get("file", f"text {hit['source']}") + (
                f":{hit['line']}" if "line" in hit else "")
            text = " ".join(hit["text"].split())
            print(f"{rank:3d}  {hit['score']:.4f}  {where}  "
                  f"{text[:120] + '...' if len(text) > 120 else text}")


def run_retrieval_evaluate(args: argparse.Namespace) -> None:
    import json

    from kbert.retrieval import metrics
    if args.task == "open-qa":
        return run_open_qa(args)
    model = load_model(args, args.model)
    if args.task == "retrieve":      # evaluate's --batch-size defaults to 64: 16 suits indexing
        scores = metrics.evaluate_retrieve(model, args.data, hybrid=args.hybrid == "on",
                                           batch_size=min(args.batch_size, 16))
    else:
        scores = metrics.evaluate_rerank(model, args.data, candidates=args.candidates,
                                         batch_size=args.batch_size,
                                         max_queries=args.max_queries, fuse=args.fuse)
    print(json.dumps(scores))


def run_open_qa(args: argparse.Namespace) -> None:
    import json

    from kbert.retrieval.open_qa import evaluate_open_qa
    if not args.retriever:
        raise CliError("open-qa needs --retriever (the sentence encoder that finds passages)")
    if not args.data.endswith(".json"):
        raise CliError(f"--data {args.data}: open-qa reads SQuAD JSON (.json)")
    reader = load_model(args, args.model)
    encoder = load_model(args, args.retriever)
    reranker = load_model(args, args.reranker) if args.reranker else None
    scores = evaluate_open_qa(reader, args.data, encoder, reranker, passages=args.passages,
                              candidates=args.candidates, hybrid=args.hybrid == "on",
                              batch_size=min(args.batch_size, 32))
    print(json.dumps(scores))
