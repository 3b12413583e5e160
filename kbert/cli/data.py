"""`kbert build-vocab`, `create-pretraining-data` and `data-service`: `kbert.data`."""

from __future__ import annotations

import argparse

from kbert import progress
from kbert.cli.common import (
    CliError,
    add_overwrite,
    check_output_dir,
    check_output_file,
    examples,
)


def add_build_vocab(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build-vocab", help="learn a WordPiece vocabulary from text files",
                       epilog=examples(
                           "kbert build-vocab --input corpus/*.txt --vocab-size 30522 "
                           "--output vocab.txt",
                           "kbert build-vocab --input wiki.txt books.txt --vocab-size 8000 "
                           "--cased --output cased-vocab.txt"))
    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="text files")
    p.add_argument("--vocab-size", type=int, required=True, help="vocabulary size (at most)")
    p.add_argument("--output", required=True, help="the vocab.txt to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--cased", action="store_true", help="keep case and accents")
    p.add_argument("--num-unused", type=int, default=99,
                   help="[unusedN] slots after [PAD] (default 99: BERT's ids for the special "
                        "tokens)")
    p.add_argument("--input-format", default="auto", choices=("auto", "documents", "sentences"),
                   help="documents: one per file, blank line between paragraphs; sentences: one "
                        "a line, blank line between documents; auto: decided per file")
    p.set_defaults(func=run_build_vocab)


def run_build_vocab(args: argparse.Namespace) -> None:
    from kbert.data.sentences import read_documents
    from kbert.data.vocab import build_vocab
    from kbert.network.config import write_vocab
    check_output_file(args.output, args.overwrite)
    sentences = (s for document in read_documents(args.input, args.input_format)
                 for s in document)
    with progress.bar(sentences, desc="build-vocab: counting words", unit="sentence") as read:
        vocab = build_vocab(read, args.vocab_size, lower_case=not args.cased,
                            num_unused=args.num_unused)
    write_vocab(vocab, args.output)                 # atomically, with the user's modes
    print(f"wrote {args.output}: {len(vocab)} tokens (--vocab-size {args.vocab_size} is the most)")


def add_create_pretraining_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("create-pretraining-data",
                       help="text files → masked LM / next sentence TFRecord shards",
                       epilog=examples(
                           "kbert create-pretraining-data --input corpus/*.txt --vocab vocab.txt "
                           "--output shards/",
                           "kbert create-pretraining-data --input corpus/*.txt --vocab vocab.txt "
                           "--output shards-512/ --max-seq-length 512 "
                           "--max-predictions-per-seq 80 --dupe-factor 5 --whole-word-mask"))
    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="text files")
    p.add_argument("--vocab", required=True, help="vocab.txt")
    p.add_argument("--output", required=True, help="directory for the shards")
    p.add_argument("--max-seq-length", type=int, default=128, help="tokens per example")
    p.add_argument("--max-predictions-per-seq", type=int, default=20,
                   help="masked positions per example, at most")
    p.add_argument("--masked-lm-prob", type=float, default=0.15,
                   help="fraction of the tokens masked")
    p.add_argument("--short-seq-prob", type=float, default=0.1,
                   help="fraction of examples made shorter than --max-seq-length")
    p.add_argument("--dupe-factor", type=int, default=10,
                   help="passes over the input, each with different masks")
    p.add_argument("--whole-word-mask", action="store_true",
                   help="mask every WordPiece of a chosen word together")
    p.add_argument("--seed", type=int, default=12345, help="random seed")
    p.add_argument("--workers", type=int, default=None,
                   help="processes (default: every usable CPU); the output is the same for any")
    p.add_argument("--cased", action="store_true", help="the vocabulary is cased")
    p.add_argument("--input-format", default="auto", choices=("auto", "documents", "sentences"),
                   help="documents: one per file, blank line between paragraphs; sentences: one "
                        "a line, blank line between documents; auto: decided per file")
    p.add_argument("--block-size", type=int, default=20000,
                   help="sentences held in memory at once (random next segments come from the "
                        "same block)")
    add_overwrite(p, "pretraining data")
    p.set_defaults(func=run_create_pretraining_data)


def run_create_pretraining_data(args: argparse.Namespace) -> None:
    from kbert.data import pretraining
    check_output_dir(args.output, "pretraining_data", args.overwrite)
    options = pretraining.Options(
        args.max_seq_length, args.max_predictions_per_seq, args.masked_lm_prob,
        args.short_seq_prob, args.dupe_factor, args.whole_word_mask, args.seed)
    totals = pretraining.create_pretraining_data(
        args.input, args.vocab, args.output, options, lower_case=not args.cased,
        workers=args.workers, input_format=args.input_format, block_size=args.block_size,
        overwrite=args.overwrite)
    for line in pretraining.summary(totals):
        print(line)


def add_data_service(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data-service", help="run a tf.data service dispatcher or worker that "
                                            "prepares `pretrain --text` batches on other hosts",
                       epilog=examples(
                           "kbert data-service dispatcher --port 5050 --work-dir "
                           "/shared/dispatcher",
                           "kbert data-service worker --dispatcher hostA:5050 --port 5051 "
                           "--worker-address hostB:5051",
                           "kbert pretrain --text /shared/corpus/*.txt --data-service "
                           "grpc://hostA:5050 --config mini --vocab vocab.txt --output ckpt/"))
    p.add_argument("role", choices=("dispatcher", "worker"), help="dispatcher or worker")
    p.add_argument("--port", type=int, default=None,
                   help="port to serve on (default: dispatcher 5050, worker 5051)")
    p.add_argument("--dispatcher", metavar="HOST:PORT",
                   help="worker (needed, no default): the dispatcher's address")
    p.add_argument("--worker-address", metavar="HOST:PORT",
                   help="worker: the address trainers reach it at (default localhost:PORT; "
                        "on a cluster this host's name and the port)")
    p.add_argument("--work-dir", help="dispatcher: a shared directory for its journal, so a "
                                      "restarted dispatcher resumes its jobs (default: none, "
                                      "no journal)")
    p.set_defaults(func=run_data_service)


def run_data_service(args: argparse.Namespace) -> None:
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
