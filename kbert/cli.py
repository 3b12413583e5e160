"""The `kbert` command: parses arguments and calls the library. No logic of its own.

Each subcommand is one `_add_<name>` function (its arguments) and one `_run_<name>` function
(the call into kbert). Any error the library raises for bad input becomes one line on stderr,
`kbert COMMAND: error: ...`, and exit status 2 (`main`, the one place that does it); `--debug`
or `KBERT_DEBUG=1` shows the traceback instead.
"""

import argparse
import os
import pickle
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


class CliError(Exception):
    """A bad input the user can fix; printed as one line."""


# The parser imports nothing heavy: `kbert --help`, every subcommand's `--help` and argument
# errors answer without TensorFlow or Keras (seconds and ~1 GB). Each `_run_*` imports what it
# calls. The task names are therefore spelled out here; a test checks them against the registry
# (`kbert.finetune.tasks.TASKS`).
TASK_NAMES = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "squad",
              "squad2", "conll2003", "swag", "classify", "regress", "tag", "qa")


def positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


# --- convert -------------------------------------------------------------------------------------
def _add_convert(sub):
    p = sub.add_parser("convert", help="import weights from another library into a checkpoint, "
                                       "or export a checkpoint to another library's layout")
    direction = p.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from", dest="source", metavar="FORMAT",
                           help="import SRC from: hf, google, model-garden or keras-hub")
    direction.add_argument("--to", dest="target", metavar="FORMAT",
                           help="export the kbert checkpoint SRC to: hf or keras-hub")
    p.add_argument("src", help="the source checkpoint (directory, file or TF checkpoint prefix)")
    p.add_argument("--output", required=True, help="the directory to write")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"),
                   help="storage dtype of the written weights (import only)")
    p.set_defaults(func=_run_convert)


def _run_convert(args):
    import warnings

    from kbert import convert
    _check_output_dir(args.output)
    if args.target:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            convert.export(args.target, args.src, args.output)
        for w in caught:  # the converters' own notes (lossy mappings, dropped heads)
            if "kbert" in w.filename:
                print(f"kbert convert: warning: {w.message}", file=sys.stderr)
        print(f"wrote {args.output} ({args.target})")
        return
    ckpt = convert.convert(args.source, args.src, args.output, dtype=args.dtype)
    print(f"wrote {args.output}: {ckpt.summary()}")


# --- build-vocab ---------------------------------------------------------------------------------
def _add_build_vocab(sub):
    p = sub.add_parser("build-vocab", help="learn a WordPiece vocabulary from text files")
    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="text files")
    p.add_argument("--vocab-size", type=int, required=True, help="vocabulary size (at most)")
    p.add_argument("--output", required=True, help="the vocab.txt to write")
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--num-unused", type=int, default=99,
                   help="[unusedN] slots after [PAD] (99: BERT's ids for the special tokens)")
    p.add_argument("--input-format", default="auto", choices=("auto", "documents", "sentences"),
                   help="documents: one per file, blank line between paragraphs; sentences: one "
                        "a line, blank line between documents; auto: decided per file")
    p.set_defaults(func=_run_build_vocab)


def _check_output_dir(path):
    """An --output that names a directory to write: refused up front if it cannot be one."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise CliError(f"--output {path} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"--output {path}: cannot create it in {parent} (not a writable "
                       "directory)")


def _check_output_file(path):
    """An --output that names a file to write: refused up front if it cannot be one."""
    if os.path.isdir(path):
        raise CliError(f"--output {path} is a directory; give the file to write")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CliError(f"--output {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise CliError(f"--output {path}: the directory {parent} is not writable")


def _run_build_vocab(args):
    from kbert import tokenizer
    from kbert.data.sentences import read_documents
    _check_output_file(args.output)
    sentences = (s for document in read_documents(args.input, args.input_format)
                 for s in document)
    vocab = tokenizer.build_vocab(sentences, args.vocab_size, lower_case=not args.cased,
                                  num_unused=args.num_unused)
    tokenizer.write_vocab(vocab, args.output)
    print(f"wrote {args.output}: {len(vocab)} tokens (--vocab-size {args.vocab_size} is the most)")


# --- create-pretraining-data ---------------------------------------------------------------------
def _add_create_pretraining_data(sub):
    p = sub.add_parser("create-pretraining-data",
                       help="text files → masked LM / next sentence TFRecord shards")
    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="text files")
    p.add_argument("--vocab", required=True, help="vocab.txt")
    p.add_argument("--output", required=True, help="directory for the shards")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--max-predictions-per-seq", type=int, default=20)
    p.add_argument("--masked-lm-prob", type=float, default=0.15)
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--dupe-factor", type=int, default=10)
    p.add_argument("--whole-word-mask", action="store_true")
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--workers", type=int, default=None,
                   help="processes (default: every usable CPU); the output is the same for any")
    p.add_argument("--cased", action="store_true", help="the vocabulary is cased")
    p.add_argument("--input-format", default="auto", choices=("auto", "documents", "sentences"),
                   help="documents: one per file, blank line between paragraphs; sentences: one "
                        "a line, blank line between documents; auto: decided per file")
    p.add_argument("--block-size", type=int, default=20000,
                   help="sentences held in memory at once (random next segments come from the "
                        "same block)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the shards in a non-empty --output (refused otherwise)")
    p.set_defaults(func=_run_create_pretraining_data)


def _run_create_pretraining_data(args):
    from kbert.data import pretraining
    _check_output_dir(args.output)
    options = pretraining.Options(
        args.max_seq_length, args.max_predictions_per_seq, args.masked_lm_prob,
        args.short_seq_prob, args.dupe_factor, args.whole_word_mask, args.seed)
    totals = pretraining.create_pretraining_data(
        args.input, args.vocab, args.output, options, lower_case=not args.cased,
        workers=args.workers, input_format=args.input_format, block_size=args.block_size,
        overwrite=args.overwrite)
    for line in pretraining.summary(totals):
        print(line)


# --- pretrain ------------------------------------------------------------------------------------
def _add_pretrain(sub):
    p = sub.add_parser("pretrain", help="masked LM + next sentence pretraining with model.fit")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", nargs="+", metavar="DIR",
                        help="TFRecord shard directory (two for the 128-then-512 two-phase "
                             "schedule)")
    source.add_argument("--text", nargs="+", metavar="FILE",
                        help="text files, read, packed and masked anew each epoch in tf.data "
                             "(no shards)")
    p.add_argument("--text-mode", default="nsp", choices=("nsp", "full_sentences"),
                   help="--text: BERT's sentence pairs with NSP, or RoBERTa's FULL-SENTENCES "
                        "packing without NSP")
    p.add_argument("--data-service", metavar="ADDRESS",
                   help="--text: a tf.data service dispatcher (grpc://host:port) whose workers "
                        "prepare the batches (kbert data-service)")
    p.add_argument("--config", help="tiny, mini, small, medium, base, large or a config.json "
                                    "(default: base, or the --init checkpoint's)")
    p.add_argument("--init", help="checkpoint to continue from (missing MLM/NSP heads are new)")
    p.add_argument("--vocab", help="vocab.txt for a model trained from scratch")
    p.add_argument("--output", required=True, help="the checkpoint directory to write")
    p.add_argument("--batch-size", type=int, default=32, help="global batch per update")
    p.add_argument("--steps", type=int, default=1000, help="optimizer updates")
    p.add_argument("--phase-steps", type=int, nargs="+", help="updates per --data phase")
    p.add_argument("--warmup-steps", type=int, help="default: 1%% of --steps")
    p.add_argument("--learning-rate", type=float, default=1e-4, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-seq-length", type=int,
                   help="check the shards have this length (--text: the length, default 128)")
    p.add_argument("--max-predictions-per-seq", type=int,
                   help="check the shards have this P (--text: P, default 20)")
    p.add_argument("--optimizer", default="adamw", choices=("adamw", "lamb"))
    p.add_argument("--mixed-precision", choices=("mixed_bfloat16", "mixed_float16"))
    p.add_argument("--jit-compile", choices=("auto", "on", "off"), default="auto",
                   help="compile the train step: XLA on TensorFlow and JAX, torch.compile on "
                        "PyTorch (auto: on a GPU, and always on JAX)")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="updates between backups")
    p.add_argument("--accumulate", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--dynamic-masking", action="store_true", help="new masks for every batch")
    p.add_argument("--objective", default="mlm_nsp", choices=("mlm_nsp", "mlm", "ltr"),
                   help="mlm_nsp (the paper's), mlm (no NSP) or ltr (left-to-right LM on a "
                        "causal encoder): the section 5.1 ablations")
    p.add_argument("--strategy", default="auto",
                   choices=("auto", "default", "mirrored", "multi-worker", "tpu", "data-parallel"))
    p.add_argument("--tpu", help="TPU name or address for the cluster resolver")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shuffle-buffer", type=int, default=10000,
                   help="examples shuffled together (records of the shards, or --text rows)")
    p.add_argument("--log-dir", help="TensorBoard log directory")
    p.add_argument("--save-dtype", default="float32", choices=("float32", "float16"))
    p.set_defaults(func=_run_pretrain)


def _run_pretrain(args):
    from kbert import training
    _check_output_dir(args.output)
    jit = {"auto": "auto", "on": True, "off": False}[args.jit_compile]
    result = training.pretrain(
        args.data, args.output, text=args.text, text_mode=args.text_mode,
        data_service=args.data_service, config=args.config, init=args.init, vocab=args.vocab,
        batch_size=args.batch_size, steps=args.steps, warmup_steps=args.warmup_steps,
        learning_rate=args.learning_rate, max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, optimizer=args.optimizer,
        weight_decay=args.weight_decay, mixed_precision=args.mixed_precision, jit_compile=jit,
        checkpoint_every=args.checkpoint_every, accumulate=args.accumulate,
        dynamic_masking=args.dynamic_masking, phase_steps=args.phase_steps, seed=args.seed,
        strategy=args.strategy, tpu=args.tpu, log_dir=args.log_dir, save_dtype=args.save_dtype,
        shuffle_buffer=args.shuffle_buffer, verbose=2, objective=args.objective)
    if result.interrupted:
        raise KeyboardInterrupt
    print(f"wrote {result.output}: {result.steps} steps in {result.wall_seconds:.0f}s")


# --- data-service --------------------------------------------------------------------------------
def _add_data_service(sub):
    p = sub.add_parser("data-service", help="run a tf.data service dispatcher or worker that "
                                            "prepares `pretrain --text` batches on other hosts")
    p.add_argument("role", choices=("dispatcher", "worker"))
    p.add_argument("--port", type=int, default=None,
                   help="port to serve on (default: dispatcher 5050, worker 5051)")
    p.add_argument("--dispatcher", metavar="HOST:PORT", help="worker: the dispatcher's address")
    p.add_argument("--worker-address", metavar="HOST:PORT",
                   help="worker: the address trainers reach it at (default localhost:PORT; "
                        "on a cluster this host's name and the port)")
    p.add_argument("--work-dir", help="dispatcher: a shared directory for its journal, so a "
                                      "restarted dispatcher resumes its jobs")
    p.set_defaults(func=_run_data_service)


def _run_data_service(args):
    from kbert.data import text
    if args.role == "worker" and not args.dispatcher:
        raise CliError("a worker needs --dispatcher HOST:PORT")
    if args.role == "dispatcher":
        port = 5050 if args.port is None else args.port
        server = text.serve_dispatcher(port, args.work_dir)
    else:
        port = 5051 if args.port is None else args.port
        server = text.serve_worker(args.dispatcher, port, args.worker_address)
    print(f"kbert data-service: {args.role} serving on port {port} (Ctrl-C stops it)", flush=True)
    server.join()


# --- finetune / evaluate -------------------------------------------------------------------------
def _add_columns(p):
    """The own-data tasks' column options (classify, regress, tag)."""
    p.add_argument("--text-column", help="classify/regress: the text column (default text); "
                                         "tag JSONL: the tokens key (default tokens)")
    p.add_argument("--text-pair-column", help="classify/regress: the second text's column")
    p.add_argument("--label-column", help="classify/regress: the label column (default label); "
                                          "tag JSONL: the tags key (default tags)")


def _task_options(args):
    return {"text_column": args.text_column, "text_pair_column": args.text_pair_column,
            "label_column": args.label_column}


def _add_finetune(sub):
    p = sub.add_parser("finetune", help="fine-tune a checkpoint on a GLUE, SQuAD, CoNLL-2003 or "
                                        "SWAG task, or on your own CSV/TSV/JSONL, CoNLL or SQuAD "
                                        "file (classify, regress, tag, qa), keeping the best dev "
                                        "epoch")
    p.add_argument("task", metavar="TASK", choices=TASK_NAMES, help=" ".join(TASK_NAMES))
    p.add_argument("--init", required=True, help="the checkpoint to start from")
    p.add_argument("--train", required=True, help="the training file")
    p.add_argument("--dev", required=True, help="the dev file scored after each epoch")
    p.add_argument("--output", required=True, help="the checkpoint directory to write")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--learning-rate", type=float, default=3e-5, help="peak learning rate")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--warmup", type=float, default=0.1, help="fraction of updates warming up")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-seq-length", type=int, help="default 128 (SQuAD 384)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tune-null-threshold", action="store_true",
                   help="squad2: store the null-score threshold with the best dev F1")
    p.add_argument("--max-train-examples", type=int, help="train on the first N examples only")
    p.add_argument("--no-bucketing", dest="bucketing", action="store_false",
                   help="shuffle freely instead of grouping similar lengths into a batch "
                        "(each batch is still padded to its longest row)")
    p.add_argument("--jit-compile", choices=("auto", "on", "off"), default="auto",
                   help="compile the train step: XLA on TensorFlow and JAX, torch.compile on "
                        "PyTorch (auto: XLA on a TensorFlow GPU and on JAX; PyTorch eager)")
    p.add_argument("--save-dtype", default="float32", choices=("float32", "float16"))
    _add_columns(p)
    p.set_defaults(func=_run_finetune)


def _run_finetune(args):
    import json

    from kbert import finetune
    result = finetune.finetune(
        args.task, args.init, args.train, args.dev, args.output, epochs=args.epochs,
        learning_rate=args.learning_rate, batch_size=args.batch_size, warmup=args.warmup,
        max_seq_length=args.max_seq_length, seed=args.seed, weight_decay=args.weight_decay,
        tune_null_threshold=args.tune_null_threshold,
        jit_compile={"auto": "auto", "on": True, "off": False}[args.jit_compile],
        save_dtype=args.save_dtype, max_train_examples=args.max_train_examples,
        bucketing=args.bucketing, task_options=_task_options(args))
    print(f"wrote {result.output}: best epoch {result.best_epoch} of {args.epochs} "
          f"({result.train_examples} training examples, {result.wall_seconds:.0f}s)")
    print(json.dumps(result.best_scores))


def _add_evaluate(sub):
    p = sub.add_parser("evaluate", help="score a fine-tuned checkpoint on a task's file (prints "
                                        "one JSON object)")
    p.add_argument("task", metavar="TASK", choices=TASK_NAMES + RETRIEVAL_TASKS,
                   help=" ".join(TASK_NAMES + RETRIEVAL_TASKS))
    p.add_argument("--model", required=True, help="the fine-tuned checkpoint")
    p.add_argument("--data", required=True, help="the file to score")
    _add_retrieval_evaluate(p)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-seq-length", type=int, help="default 128 (SQuAD 384)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                   help="the encoder's precision (default float32; auto: bfloat16 where the "
                        "CPU has AMX or AVX-512 BF16; int8 on --runtime openvino|onnx); the "
                        "heads stay float32")
    p.add_argument("--runtime", choices=RUNTIME_NAMES,
                   help="score what kbert.load(..., runtime=) serves: keras (default), or the "
                        "exported openvino / onnx graphs")
    _add_columns(p)
    p.set_defaults(func=_run_evaluate)


def _run_evaluate(args):
    if args.task in RETRIEVAL_TASKS:
        return _run_retrieval_evaluate(args)
    import json

    from kbert import finetune
    scores = finetune.evaluate(args.task, args.model, args.data, batch_size=args.batch_size,
                               max_seq_length=args.max_seq_length,
                               task_options=_task_options(args), dtype=args.dtype,
                               runtime=args.runtime)
    print(json.dumps(scores))


# --- index (retrieval) ---------------------------------------------------------------------------
RETRIEVAL_TASKS = ("retrieve", "rerank")     # `kbert evaluate` only (kbert.retrieval.metrics)


def _add_index(sub):
    p = sub.add_parser("index", help="build a search index of passages with a sentence encoder, "
                                     "add to it, or search it")
    which = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = which.add_parser("build", help="embed text, JSONL or CSV files into an index directory")
    b.add_argument("files", nargs="+", metavar="FILE",
                   help="plain text (one text a file), .jsonl or .csv/.tsv (--text-column)")
    b.add_argument("--model", required=True, help="the sentence encoder (e.g. minilm-l6-v2)")
    b.add_argument("--output", required=True, help="the index directory to write")
    b.add_argument("--hybrid", action="store_true",
                   help="search fuses BM25 with the dense scores by default")
    b.add_argument("--approximate", action="store_true",
                   help="an approximate HNSW index (faiss) for collections beyond ~100k passages")
    a = which.add_parser("add", help="add files to an existing index (same encoder)")
    a.add_argument("index", metavar="DIR", help="the index directory")
    a.add_argument("files", nargs="+", metavar="FILE", help="as for build")
    for q in (b, a):
        q.add_argument("--text-column", help="JSONL key or CSV column of the text (default text)")
        q.add_argument("--batch-size", type=positive_int, default=16)
    s = which.add_parser("search", help="the best passages for a query")
    s.add_argument("index", metavar="DIR", help="the index directory")
    s.add_argument("query", nargs="+", help="one or more queries")
    s.add_argument("--top-k", type=positive_int, default=10)
    s.add_argument("--model", help="the encoder (default: the one the index was built with)")
    s.add_argument("--hybrid", choices=("on", "off"),
                   help="fuse BM25 with the dense scores (default: the index's option)")
    s.add_argument("--json", action="store_true", help="print the hits as one JSON list")
    p.set_defaults(func=_run_index)


def _add_retrieval_evaluate(p):
    """`kbert evaluate retrieve|rerank`'s options."""
    p.add_argument("--hybrid", action="store_true", help="retrieve: BM25 + dense, fused")
    p.add_argument("--candidates", type=positive_int, default=20,
                   help="rerank: BM25's top N per query, reordered (default 20)")
    p.add_argument("--max-queries", type=positive_int, help="rerank: the first N queries only")


def _load_model(args, name):
    import kbert
    dtype = getattr(args, "dtype", None)          # where `kbert evaluate` takes --dtype
    return kbert.load(name, **({"dtype": dtype} if dtype not in (None, "float32") else {}))


def _run_index(args):
    import warnings

    from kbert.retrieval import Index
    from kbert.retrieval.passages import read_texts
    if args.action == "search":
        index = Index.load(args.index)
        model = _load_model(args, args.model) if args.model else index.load_encoder()
        hybrid = None if args.hybrid is None else args.hybrid == "on"
        hits = index.search(args.query, model, top_k=args.top_k, hybrid=hybrid)
        _print_hits(args.query, hits, args.json)
        return
    if args.action == "build":
        _check_output_dir(args.output)
    texts, meta = read_texts(args.files, args.text_column)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)    # the index's notes, printed below
        if args.action == "build":
            model = _load_model(args, args.model)
            index = Index.build(model, texts, metadata=meta, batch_size=args.batch_size,
                                approximate=args.approximate, hybrid=args.hybrid)
            path = index.save(args.output)
        else:
            index = Index.load(args.index)
            model = index.load_encoder()
            before = len(index)
            index.add(model, texts, metadata=meta, batch_size=args.batch_size)
            path = index.save(args.index)
            print(f"added {len(index) - before} passages from {len(texts)} texts")
    for note in index.notes:
        print(f"kbert index: note: {note}")
    kind = "approximate (HNSW)" if index.approximate else "exact"
    print(f"wrote {path}: {len(index)} passages from {index.sources} texts, encoder "
          f"{index.encoder['name']}, {kind}{', hybrid' if index.hybrid else ''}")


def _print_hits(queries, hits, as_json):
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


def _run_retrieval_evaluate(args):
    import json

    from kbert.retrieval import metrics
    model = _load_model(args, args.model)
    if args.task == "retrieve":      # evaluate's --batch-size defaults to 64: 16 suits indexing
        scores = metrics.evaluate_retrieve(model, args.data, hybrid=args.hybrid,
                                           batch_size=min(args.batch_size, 16))
    else:
        scores = metrics.evaluate_rerank(model, args.data, candidates=args.candidates,
                                         batch_size=args.batch_size,
                                         max_queries=args.max_queries)
    print(json.dumps(scores))


# --- export --------------------------------------------------------------------------------------
EXPORT_FORMATS = ("saved_model", "onnx", "openvino")
DTYPE_NAMES = ("auto", "float32", "bfloat16", "int8")   # kbert.runtime.DTYPES (a test checks)
RUNTIME_NAMES = ("keras", "openvino", "onnx")            # kbert.runtime.RUNTIMES (a test checks)


def _add_export(sub):
    p = sub.add_parser("export", help="write a TF Serving SavedModel (raw-string signatures), "
                                      "or the model's passes as ONNX / OpenVINO graphs")
    p.add_argument("checkpoint", metavar="CKPT", help="the checkpoint directory")
    p.add_argument("--output", required=True,
                   help="SavedModel: model base directory, writes OUTPUT/VERSION/; onnx and "
                        "openvino: the export directory (kbert.load(OUTPUT) runs it)")
    p.add_argument("--format", default="saved_model", choices=EXPORT_FORMATS,
                   help="saved_model (TF Serving, default), onnx or openvino")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                   help="precision: float32 (default), bfloat16 (SavedModel, OpenVINO), int8 "
                        "(ONNX, OpenVINO), auto (bfloat16 where the CPU runs it natively)")
    p.add_argument("--version", type=positive_int, default=1,
                   help="version sub-directory (default 1, SavedModel only)")
    p.add_argument("--signatures", nargs="+", metavar="NAME",
                   help="string signatures to write (default: all the heads allow)")
    p.add_argument("--top-k", type=positive_int, default=5,
                   help="fillers per mask / answers per question")
    p.add_argument("--max-masks", type=positive_int, default=5, help="[MASK]s answered per text")
    p.set_defaults(func=_run_export)


def _run_export(args):
    if args.format != "saved_model":
        from kbert.runtime import graphs
        path = graphs.export(args.checkpoint, args.output, fmt=args.format, dtype=args.dtype)
        manifest = graphs.read_manifest(path)
        print(f"wrote {path}: {args.format} {manifest['dtype']}, passes "
              f"{', '.join(manifest['kinds'])}")
        return
    from kbert import serving
    options = serving.ExportOptions(top_k=args.top_k, max_masks=args.max_masks)
    path = serving.export(args.checkpoint, args.output, version=args.version,
                         signatures=args.signatures, options=options, dtype=args.dtype)
    print(f"wrote {path}: signatures {', '.join(serving.list_signatures(path))}")


# --- app -----------------------------------------------------------------------------------------
def _app_server():
    """The playground's launcher (`app/`, installed beside kbert); None where it is absent.

    Imported on use: the playground needs gradio, which the rest of the CLI does not."""
    try:
        from app import server
    except ModuleNotFoundError as e:
        if e.name not in ("app", "app.server", "gradio"):
            raise
        return None
    return server


def _add_app(sub):
    p = sub.add_parser("app", help="serve the Gradio playground (127.0.0.1:7860 by default)")
    server = _app_server()
    if server is not None:
        server.add_arguments(p)
    p.set_defaults(func=_run_app)


def _run_app(args):
    server = _app_server()
    if server is None:
        raise CliError("the playground needs gradio: pip install 'kbert[app]'")
    server.serve(args.model, args.models_dir, args.host, args.port, args.share, args.concurrency,
                 args.preload, runtime=args.runtime, dtype=args.dtype)


# --- experiments ---------------------------------------------------------------------------------
def _add_experiments(sub):
    p = sub.add_parser("experiments", help="re-run the paper's ablations (Table 5 + RoBERTa's "
                                           "NSP finding; Table 7 feature-based NER), resumable")
    which = p.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    a = which.add_parser("ablations", help="pretraining variants x SST-2, MRPC, SQuAD v1.1")
    a.add_argument("--output", help="results folder (re-run to resume)")
    a.add_argument("--quick", action="store_true", help="tiny model, a few steps (CPU, minutes)")
    a.add_argument("--variants", nargs="+", help="bert no_nsp ltr roberta (default: all)")
    a.add_argument("--tasks", nargs="+", help="sst2 mrpc squad (default: all)")
    a.add_argument("--seeds", type=int, help="fine-tuning seeds per cell (default 3; quick 1)")
    a.add_argument("--steps", type=int, help="pretraining updates (default 10000; quick 4)")
    a.add_argument("--data", help="the shared data folder (corpus/, glue/, squad/)")
    a.add_argument("--vocab", help="vocab.txt (default: the shipped MiniLM checkpoint's)")
    a.add_argument("--export", metavar="DIR",
                   help="only write what a machine without TensorFlow needs to run the plan "
                        "(token ids, held-out features, encoded tasks) into DIR")
    a.add_argument("--arrays", metavar="DIR",
                   help="run from a folder --export wrote (no TensorFlow needed)")
    a.add_argument("--work", help="data and checkpoints (default: OUTPUT/work)")
    a.add_argument("--mixed-precision", choices=("mixed_bfloat16", "mixed_float16"),
                   help="pretrain and fine-tune in it (a GPU)")
    a.set_defaults(func=_run_ablations)
    f = which.add_parser("features", help="feature-based NER on CoNLL-2003 from a frozen "
                                          "encoder's layers (Table 7)")
    f.add_argument("--output", required=True, help="results folder (re-run to resume)")
    f.add_argument("--model", default="minilm-l6-mlm-nsp", help="the frozen encoder")
    f.add_argument("--train", required=True, help="CoNLL-2003 train.txt")
    f.add_argument("--dev", required=True, help="CoNLL-2003 valid.txt")
    f.add_argument("--epochs", type=int, default=3, help="tagger epochs")
    f.add_argument("--seeds", type=int, default=1, help="tagger seeds per row")
    f.add_argument("--max-train-sentences", type=int, help="use the first N training sentences")
    f.add_argument("--max-dev-sentences", type=int, help="use the first N dev sentences")
    f.set_defaults(func=_run_features)


def _run_ablations(args):
    from kbert.experiments import ablations
    if args.export and args.arrays:
        raise CliError("--export writes the folder that --arrays reads: give one of them")
    if args.export:
        size = ablations.export(args.export, quick=args.quick, variants=args.variants,
                                tasks=args.tasks, seeds=args.seeds, steps=args.steps,
                                mixed_precision=args.mixed_precision, shared=args.data,
                                vocab=args.vocab)
        print(f"wrote {args.export} ({size / 2 ** 20:.1f} MiB); run it where TensorFlow is not "
              f"with: kbert experiments ablations --output RESULTS --arrays {args.export}")
        return
    if not args.output:
        raise CliError("--output (the results folder) is required")
    fixed = (args.quick, args.seeds, args.steps, args.mixed_precision, args.data, args.vocab)
    if args.arrays and any(v not in (None, False) for v in fixed):
        raise CliError("--arrays runs the plan --export fixed: give --quick, --seeds, --steps, "
                       "--mixed-precision, --data and --vocab to --export")
    ablations.run(args.output, quick=args.quick, variants=args.variants, tasks=args.tasks,
                  seeds=args.seeds, steps=args.steps, mixed_precision=args.mixed_precision,
                  shared=args.data, vocab=args.vocab, arrays=args.arrays, work=args.work)
    print(f"wrote {os.path.join(args.output, 'ablations.md')}")


def _run_features(args):
    from kbert.experiments import features
    features.run(args.output, args.model, args.train, args.dev,
                 max_train_sentences=args.max_train_sentences,
                 max_valid_sentences=args.max_dev_sentences, epochs=args.epochs,
                 seeds=tuple(range(args.seeds)))
    print(f"wrote {os.path.join(args.output, 'feature_ner.md')}")


# -------------------------------------------------------------------------------------------------
def build_parser():
    parser = argparse.ArgumentParser(prog="kbert", description="BERT in Keras 3")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error (also: KBERT_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_convert, _add_build_vocab, _add_create_pretraining_data, _add_pretrain,
                _add_data_service, _add_finetune, _add_evaluate, _add_export, _add_app,
                _add_experiments, _add_index):
        add(sub)
    for command in sub.choices.values():       # `kbert COMMAND ... --debug` works too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=argparse.SUPPRESS)
    return parser


def expected_errors():
    """The error types that mean bad input (or an unusable environment), not a bug in kbert.

    TensorFlow's `OpError`s (e.g. `PermissionDeniedError` writing a file, `InvalidArgumentError`
    on a malformed record) count when TensorFlow is already loaded: looked up, not imported, so
    commands that do not need TensorFlow stay fast and work without it.
    """
    errors = (CliError, ValueError, OSError, KeyError, UnicodeError, pickle.UnpicklingError)
    tf = sys.modules.get("tensorflow")
    op_error = getattr(getattr(tf, "errors", None), "OpError", None)
    return errors + (op_error,) if isinstance(op_error, type) else errors


def error_line(error):
    """The first line of an error's message (its type name when it has none)."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    if isinstance(error, OSError) and error.filename and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    text = text.strip()
    return text.splitlines()[0] if text else type(error).__name__


def main(argv=None):
    """Runs one command. Bad input: `kbert COMMAND: error: ...` on stderr and exit status 2
    (as argparse does for bad arguments); the traceback only with --debug or KBERT_DEBUG=1."""
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("KBERT_DEBUG", "") not in ("", "0")
    try:
        args.func(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"kbert {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug or not isinstance(e, expected_errors()):
            raise
        print(f"kbert {args.command}: error: {error_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
